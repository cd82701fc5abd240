#include "bpe.hpp"

#include <algorithm>

namespace tandem::detail {
namespace {

// Min-heap order on (rank, position): std::push_heap keeps the "largest" on top.
struct later {
  template <class C>
  bool operator()(const C& a, const C& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

bpe_merger::bpe_merger(std::array<int32_t, 256> byte_ids,
                       std::unordered_map<uint64_t, merge> merges)
    : byte_ids_(byte_ids), merges_(std::move(merges)) {}

const bpe_merger::merge* bpe_merger::find(int32_t left, int32_t right) const {
  auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void bpe_merger::push_candidate(const std::vector<symbol>& syms, int32_t left,
                                std::vector<candidate>& heap) const {
  if (left < 0 || syms[left].next < 0) return;
  if (const merge* m = find(syms[left].id, syms[syms[left].next].id)) {
    heap.push_back({m->rank, left, m->result});
    std::push_heap(heap.begin(), heap.end(), later{});
  }
}

void bpe_merger::encode(std::string_view raw, std::vector<int32_t>& out) const {
  std::vector<symbol> syms;
  syms.reserve(raw.size());
  for (char c : raw) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0) continue;  // byte missing from the vocab: dropped, as HF does without unk
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, -1});
    if (n > 0) syms[n - 1].next = n;
  }
  if (syms.size() > 1) {
    std::vector<candidate> heap;
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push_candidate(syms, i, heap);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later{});
      const candidate top = heap.back();
      heap.pop_back();
      symbol& left = syms[top.pos];
      if (left.id < 0 || left.next < 0) continue;  // merged away meanwhile
      const merge* m = find(left.id, syms[left.next].id);
      if (!m || m->rank != top.rank) continue;  // the pair changed since it was queued
      symbol& right = syms[left.next];
      left.id = top.result;
      left.next = right.next;
      if (right.next >= 0) syms[right.next].prev = top.pos;
      right.id = -1;
      push_candidate(syms, left.prev, heap);
      push_candidate(syms, top.pos, heap);
    }
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace tandem::detail
