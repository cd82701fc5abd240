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

}  // namespace tandem
