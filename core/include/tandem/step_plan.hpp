#pragma once
// The step plan: what one engine step computes. Rank 0 makes it from the scheduler's
// decision; on several ranks it is serialized and broadcast over the transport so every
// rank runs the same forward pass.
#include <cstdint>
#include <span>
#include <vector>

#include "tandem/export.hpp"
#include "tandem/sampling_params.hpp"

namespace tandem {

struct step_seq {
  uint64_t request_id = 0;
  int64_t start_pos = 0;            // position of tokens[0] in the sequence
  std::vector<int32_t> tokens;      // tokens to compute this step
  std::vector<int32_t> pages;       // the sequence's whole page table after this step
  bool sample = false;              // sample a token after the last one
  sampling_params sampling;
  // With `sample`: how many of the last tokens get a logits row, each sampled (1 = only the
  // last; 1 + k when the tail is a k-token draft that this forward verifies). Last, so an
  // aggregate initializer {id, pos, tokens, pages, sample, sampling} keeps its meaning.
  int32_t logit_rows = 1;
};

struct step_plan {
  uint64_t step = 0;
  std::vector<step_seq> seqs;

  int64_t n_tokens() const {
    int64_t n = 0;
    for (const auto& s : seqs) n += static_cast<int64_t>(s.tokens.size());
    return n;
  }
};

// Byte encoding for the transport (little-endian, versioned). decode throws tandem::error
// on malformed input.
TANDEM_API std::vector<uint8_t> encode(const step_plan& plan);
TANDEM_API step_plan decode_step_plan(std::span<const uint8_t> bytes);

}  // namespace tandem
