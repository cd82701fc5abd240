#pragma once
// Byte-level BPE merging for one pre-token: start from one symbol per byte, then merge the
// adjacent pair of lowest rank (leftmost on ties) until no ranked pair is left -- the order
// Hugging Face `tokenizers` uses, so ids agree even where merge orders could differ.
#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem::detail {

class bpe_merger {
 public:
  struct merge {
    int32_t rank;
    int32_t result;  // id of the merged token
  };

  // byte_ids[b]: id of the vocab symbol for byte b, or -1 when the vocab lacks it (the byte
  // is then dropped). merges: keyed by pair_key(left, right).
  bpe_merger(std::array<int32_t, 256> byte_ids, std::unordered_map<uint64_t, merge> merges);

  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  // Appends the ids of the pre-token `raw` (raw bytes) to `out`.
  void encode(std::string_view raw, std::vector<int32_t>& out) const;

 private:
  struct symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct candidate {
    int32_t rank;
    int32_t pos;  // index of the left symbol
    int32_t result;
  };

  const merge* find(int32_t left, int32_t right) const;
  void push_candidate(const std::vector<symbol>& syms, int32_t left,
                      std::vector<candidate>& heap) const;

  std::array<int32_t, 256> byte_ids_;
  std::unordered_map<uint64_t, merge> merges_;
};

}  // namespace tandem::detail
