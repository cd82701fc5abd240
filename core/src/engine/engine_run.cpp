// One engine step's forward pass: build the step plan, run the model, sample, publish the
// pages that became full, emit token events, retire finished requests.
#include <algorithm>

#include "engine_impl.hpp"
#include "tandem/model.hpp"
#include "logit_processing.hpp"
#include "tandem/step_plan.hpp"
#include "tandem/transport.hpp"

namespace tandem {

bool engine::impl::is_stop(const sequence& s, int32_t tok) const {
  const auto& extra = s.req.stop_token_ids;
  if (std::find(extra.begin(), extra.end(), tok) != extra.end()) return true;
  if (s.req.ignore_eos) return false;
  const auto& eog = p.end_of_generation;
  return std::find(eog.begin(), eog.end(), tok) != eog.end();
}

// A finished request gives its pages back; under session retention a conversation's
// chain is protected for a while so its next turn finds it.
void engine::impl::retire(sequence& s) {
  double until = 0;
  if (p.cache.retention == retention_policy::session && !s.req.session.empty()) until = now() + p.cache.retention_s;
  cache.release(s.kv, until);
  s.done = true;
}

void engine::impl::run(std::vector<sequence*>& scheduled, const std::vector<int64_t>& counts) {
  step_plan plan;
  plan.step = ++step_no;
  std::vector<sampling_params> params;
  std::vector<sequence*> samplers;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    sequence& s = *scheduled[i];
    step_seq q;
    q.request_id = s.id;
    q.start_pos = s.computed;
    q.tokens.assign(s.tokens.begin() + s.computed, s.tokens.begin() + s.computed + counts[i]);
    q.pages = s.kv.pages;
    q.sample = s.computed + counts[i] == static_cast<int64_t>(s.tokens.size());
    q.sampling = s.req.sampling;
    q.sampling.step = static_cast<uint64_t>(s.generated);
    if (q.sample) {
      params.push_back(q.sampling);
      samplers.push_back(&s);
    }
    plan.seqs.push_back(std::move(q));
  }
  if (p.comm && p.comm->world_size() > 1) {
    std::vector<uint8_t> bytes = encode(plan);
    p.comm->broadcast(bytes, 0);
  }
  const bool prompt_rows = computes_prompt_rows(scheduled);  // every row's logits (prompt_logprobs.cpp)
  p.model->forward(plan, forward_options{.all_logits = prompt_rows, .hidden_layers = {}});
  std::vector<token_event> events(samplers.size());
  std::vector<int32_t> ids = prompt_rows ? sample_all_rows(scheduled, counts, params, events) : p.model->sample(params);
  if (!prompt_rows && std::any_of(samplers.begin(), samplers.end(), [](sequence* s) { return needs_host_logits(s->req); })) {
    const std::vector<float> logits = p.model->logits_to_host();
    const int vocab = static_cast<int>(p.model->info().vocab);
    for (size_t j = 0; j < samplers.size(); ++j) {
      const sequence& s = *samplers[j];
      if (!needs_host_logits(s.req)) continue;
      const float* row = logits.data() + j * static_cast<size_t>(vocab);
      std::span<const int32_t> out(s.tokens.data() + s.prompt_len, s.tokens.size() - s.prompt_len);
      if (has_penalties(s.req)) ids[j] = sample_with_penalties(row, vocab, s.req, params[j], out);
      if (s.req.logprobs >= 0) fill_logprobs(row, vocab, ids[j], s.req.logprobs, events[j]);
    }
  }

  for (size_t i = 0; i < scheduled.size(); ++i) {
    sequence& s = *scheduled[i];
    st.prompt_tokens += static_cast<uint64_t>(std::max<int64_t>(0, std::min(s.prompt_len, s.computed + counts[i]) - s.computed));
    s.computed += counts[i];
    cache.publish(s.kv, s.tokens, s.computed);  // full pages, prompt or generated, become shareable
  }
  for (size_t j = 0; j < samplers.size(); ++j) {
    sequence& s = *samplers[j];
    const int32_t tok = ids[j];
    s.tokens.push_back(tok);
    ++s.generated;
    ++st.generated_tokens;
    finish_reason why = finish_reason::none;
    if (is_stop(s, tok)) why = finish_reason::stop;
    else if (s.generated >= s.req.max_new_tokens ||
             static_cast<int64_t>(s.tokens.size()) >= p.max_model_len) why = finish_reason::length;
    events[j].request_id = s.id;
    events[j].token = tok;
    events[j].finished = why;
    emit(s, std::move(events[j]));
    if (why != finish_reason::none) retire(s);
  }
}

}  // namespace tandem
