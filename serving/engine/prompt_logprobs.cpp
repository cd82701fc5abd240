// The forward pass of a step in which some request wants its prompt rows: every row's
// logits come back to the host, prompt rows become prompt_token_logprob events, and the
// sampled rows are drawn on the host with the reference sampler (the backend's sampler
// only sees one row per sequence).
#include "prompt_logprobs.hpp"

#include "engine_impl.hpp"
#include "grammar_sampling.hpp"
#include "grammar_sequence.hpp"
#include "logit_processing.hpp"
#include "tandem/model.hpp"
#include "tandem_ref/sampling.hpp"

namespace tandem {

bool engine::impl::computes_prompt_rows(const std::vector<sequence*>& scheduled) const {
  for (const sequence* s : scheduled)
    if (s->req.prompt_logprobs >= 0 && s->computed + 1 < s->prompt_len) return true;
  return false;
}

std::vector<int32_t> engine::impl::sample_all_rows(const std::vector<sequence*>& scheduled,
                                                   const std::vector<int64_t>& counts,
                                                   const std::vector<sampling_params>& params,
                                                   std::vector<token_event>& events) {
  const std::vector<float> logits = p.model->logits_to_host();  // [tokens of the plan, vocab]
  const int vocab = static_cast<int>(p.model->info().vocab);
  auto row = [&](int64_t r) { return logits.data() + static_cast<size_t>(r) * static_cast<size_t>(vocab); };
  std::vector<int32_t> ids;
  int64_t offset = 0;  // first row of scheduled[i]
  for (size_t i = 0; i < scheduled.size(); ++i) {
    sequence& s = *scheduled[i];
    if (s.req.prompt_logprobs >= 0) {
      // Row r predicts the token at position computed + r + 1; only prompt tokens count.
      token_event ev;
      ev.request_id = s.id;
      for (int64_t r = 0; r < counts[i] && s.computed + r + 1 < s.prompt_len; ++r) {
        prompt_token_logprob lp;
        lp.position = s.computed + r + 1;
        fill_logprobs(row(offset + r), vocab, s.tokens[static_cast<size_t>(lp.position)], s.req.prompt_logprobs, lp);
        ev.prompt_logprobs.push_back(std::move(lp));
      }
      if (!ev.prompt_logprobs.empty()) emit(s, std::move(ev));
    }
    offset += counts[i];
    if (s.computed + counts[i] != static_cast<int64_t>(s.tokens.size())) continue;  // not sampled this step
    const size_t j = ids.size();
    const float* last = row(offset - 1);
    std::span<const int32_t> out(s.tokens.data() + s.prompt_len, s.tokens.size() - static_cast<size_t>(s.prompt_len));
    ids.push_back(s.req.grammar ? sample_with_grammar(last, vocab, s.req, params[j], out, *grammar_of(s))
                                : sample_with_penalties(last, vocab, s.req, params[j], out));
    if (s.req.logprobs >= 0) fill_logprobs(last, vocab, ids[j], s.req.logprobs, events[j]);
  }
  return ids;
}

}  // namespace tandem
