#pragma once
// The index arrays of one step plan, as every paged-attention model uploads them: token
// ids, positions, KV slots, the flattened batch's query starts and context lengths, the
// page table, and which rows get logits.
#include <cstdint>
#include <vector>

#include "tandem/step_plan.hpp"

namespace tandem {

struct step_inputs {
  std::vector<int32_t> ids, pos, slots, qstart{0}, lens, rows;
  std::vector<int32_t> table;  // [table_seqs, max_pages]
  int64_t max_pages = 1;
};

// request_error when a sequence's tokens do not fit its pages or a token id is outside
// [0, vocab). rows: every token's when all_logits, else the last logit_rows tokens of each
// sequence with `sample` set. The table has room for max(plan's sequences, table_seqs) rows and at
// least min_pages columns (padding rows a caller appends fill the rest).
step_inputs make_step_inputs(const step_plan& plan, int page_size, int64_t vocab, bool all_logits,
                             int64_t min_pages = 1, int64_t table_seqs = 0);

// Recorded decode steps (CUDA graphs) come in a few batch sizes: the smallest of
// 1, 2, 4, 8, 12, 16, 24, 32, 48, 64 that holds n sequences, 0 above 64 (run eagerly).
int64_t recorded_batch_size(int64_t n);

// Appends padding sequences to `in` until it has `padded` sequences: each one token 0 at
// position 0 of `pad_page` (a page no sequence owns), with its own logits row.
void pad_step_inputs(step_inputs& in, int64_t padded, int32_t pad_page, int page_size);

}  // namespace tandem
