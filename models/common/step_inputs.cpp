#include "step_inputs.hpp"

#include <algorithm>
#include <string>

#include "tandem/error.hpp"

namespace tandem {

step_inputs make_step_inputs(const step_plan& plan, int page, int64_t vocab, bool all_logits, int64_t min_pages,
                             int64_t table_seqs) {
  step_inputs in;
  const int64_t n_seqs = static_cast<int64_t>(plan.seqs.size());
  in.max_pages = std::max<int64_t>(1, min_pages);
  for (const auto& s : plan.seqs) in.max_pages = std::max<int64_t>(in.max_pages, s.pages.size());
  in.table.assign(std::max(n_seqs, table_seqs) * in.max_pages, 0);
  for (int64_t i = 0; i < n_seqs; ++i) {
    const step_seq& s = plan.seqs[i];
    const int64_t end = s.start_pos + static_cast<int64_t>(s.tokens.size());
    if (s.tokens.empty() || s.start_pos < 0 || end > static_cast<int64_t>(s.pages.size()) * page)
      throw request_error(s.request_id, "step plan: tokens do not fit the sequence's pages");
    if (s.sample && (s.logit_rows < 1 || s.logit_rows > static_cast<int64_t>(s.tokens.size())))
      throw request_error(s.request_id, "step plan: " + std::to_string(s.logit_rows) + " logits rows for " +
                                            std::to_string(s.tokens.size()) + " tokens");
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      const int64_t p = s.start_pos + static_cast<int64_t>(t);
      if (s.tokens[t] < 0 || s.tokens[t] >= vocab)
        throw request_error(s.request_id, "token id " + std::to_string(s.tokens[t]) + " out of range");
      if (all_logits) in.rows.push_back(static_cast<int32_t>(in.ids.size()));
      in.ids.push_back(s.tokens[t]);
      in.pos.push_back(static_cast<int32_t>(p));
      in.slots.push_back(s.pages[p / page] * page + static_cast<int32_t>(p % page));
    }
    if (s.sample && !all_logits)  // the last logit_rows tokens (a verified draft's rows)
      for (int32_t r = s.logit_rows; r >= 1; --r) in.rows.push_back(static_cast<int32_t>(in.ids.size()) - r);
    in.qstart.push_back(static_cast<int32_t>(in.ids.size()));
    in.lens.push_back(static_cast<int32_t>(end));
    std::copy(s.pages.begin(), s.pages.end(), in.table.begin() + i * in.max_pages);
  }
  return in;
}

int64_t recorded_batch_size(int64_t n) {
  for (int64_t b : {1, 2, 4, 8, 12, 16, 24, 32, 48, 64})
    if (b >= n) return b;
  return 0;
}

void pad_step_inputs(step_inputs& in, int64_t padded, int32_t pad_page, int page_size) {
  for (auto i = static_cast<int64_t>(in.lens.size()); i < padded; ++i) {
    in.rows.push_back(static_cast<int32_t>(in.ids.size()));
    in.ids.push_back(0);
    in.pos.push_back(0);
    in.slots.push_back(pad_page * page_size);
    in.qstart.push_back(static_cast<int32_t>(in.ids.size()));
    in.lens.push_back(1);
    in.table[i * in.max_pages] = pad_page;
  }
}

}  // namespace tandem
