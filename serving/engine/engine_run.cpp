// One engine step's forward pass: build the step plan, run the model, sample, publish the
// pages that became full, emit token events, retire finished requests.
#include <algorithm>

#include "engine_impl.hpp"
#include "tandem/model.hpp"
#include "logit_processing.hpp"
#include "step_trace.hpp"
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
  release_draft_state(s);
  s.done = true;
}

void engine::impl::run(std::vector<sequence*>& scheduled, const std::vector<int64_t>& counts,
                       int64_t draft_budget) {
  const double started = now();
  step_plan plan;
  plan.step = ++step_no;
  step_record rec;  // step_trace.hpp
  rec.step = plan.step;
  rec.seqs = static_cast<int64_t>(scheduled.size());
  // A decode step: every sequence computes only its last sampled token (and any draft behind
  // it); a prompt chunk or a recomputation makes it another kind of step (step_kind).
  bool decoding = true;
  for (size_t i = 0; i < scheduled.size(); ++i) decoding = decoding && decodes(*scheduled[i], counts[i]);
  // A step that brings every row's logits to the host for prompt logprobs drafts nothing
  // (its rows are one per sampled sequence).
  const bool prompt_rows = computes_prompt_rows(scheduled);  // prompt_logprobs.cpp
  const std::vector<std::vector<int32_t>> drafts =
      prompt_rows ? std::vector<std::vector<int32_t>>(scheduled.size()) : propose_drafts(scheduled, counts, draft_budget);
  double mark = now();
  rec.propose_s = mark - started;
  // Seconds since the last phase ended (and starts the next one).
  const auto lap = [&] {
    const double t = now(), d = t - mark;
    mark = t;
    return d;
  };
  std::vector<sampling_params> params;  // one per logits row, in row order
  std::vector<sequence*> samplers;
  std::vector<size_t> sampler_slot;  // each sampler's index in `scheduled`
  std::vector<const std::vector<int32_t>*> sampler_drafts;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    sequence& s = *scheduled[i];
    step_seq q;
    q.request_id = s.id;
    q.start_pos = s.computed;
    q.tokens.assign(s.tokens.begin() + s.computed, s.tokens.begin() + s.computed + counts[i]);
    q.tokens.insert(q.tokens.end(), drafts[i].begin(), drafts[i].end());
    q.pages = s.kv.pages;
    q.sample = s.computed + counts[i] == static_cast<int64_t>(s.tokens.size());
    q.sampling = s.req.sampling;
    q.sampling.step = static_cast<uint64_t>(s.generated);
    if (q.sample) {
      // Row r is sampled as generated token number `generated + r` would be (speculation.cpp).
      q.logit_rows = 1 + static_cast<int32_t>(drafts[i].size());
      for (int32_t r = 0; r < q.logit_rows; ++r) {
        params.push_back(q.sampling);
        params.back().step += static_cast<uint64_t>(r);
      }
      samplers.push_back(&s);
      sampler_slot.push_back(i);
      sampler_drafts.push_back(&drafts[i]);
    }
    plan.seqs.push_back(std::move(q));
  }
  if (p.comm && p.comm->world_size() > 1) {
    std::vector<uint8_t> bytes = encode(plan);
    p.comm->broadcast(bytes, 0);
  }
  lap();  // building the plan is the rest's
  p.model->forward(plan, forward_options{.all_logits = prompt_rows, .hidden_layers = draft_taps});
  rec.forward_s = lap();
  std::vector<verdict> verdicts;
  if (prompt_rows) {
    std::vector<token_event> events(samplers.size());
    const std::vector<int32_t> ids = sample_all_rows(scheduled, counts, params, events);
    rec.sample_s = lap();
    for (size_t j = 0; j < samplers.size(); ++j) verdicts.push_back({{ids[j]}, {std::move(events[j])}, 0, 0});
  } else {
    const std::vector<int32_t> ids = p.model->sample(params);
    rec.sample_s = lap();
    verdicts = verify(samplers, sampler_drafts, params, ids);
    rec.verify_s = lap();
  }

  // Each sequence's first position this step and the rows it keeps: all of a prompt chunk,
  // a decode row with its accepted drafts (set below; rejected ones are not committed).
  std::vector<int64_t> start(scheduled.size()), committed(scheduled.size());
  for (size_t i = 0; i < scheduled.size(); ++i) {
    sequence& s = *scheduled[i];
    start[i] = s.computed;
    committed[i] = counts[i];
    st.prompt_tokens += static_cast<uint64_t>(std::max<int64_t>(0, std::min(s.prompt_len, s.computed + counts[i]) - s.computed));
    s.computed += counts[i];
    cache.publish(s.kv, s.tokens, s.computed);  // full pages, prompt or generated, become shareable
  }
  for (size_t j = 0; j < samplers.size(); ++j) {
    sequence& s = *samplers[j];
    verdict& v = verdicts[j];
    finish_reason why = finish_reason::none;
    size_t emitted = 0;
    // An end inside an accepted run ends the sequence at that token; the rest is dropped.
    while (emitted < v.tokens.size() && why == finish_reason::none) {
      const int32_t tok = v.tokens[emitted];
      s.tokens.push_back(tok);
      ++s.generated;
      ++st.generated_tokens;
      if (is_stop(s, tok)) why = finish_reason::stop;
      else if (s.generated >= s.req.max_new_tokens ||
               static_cast<int64_t>(s.tokens.size()) >= p.max_model_len) why = finish_reason::length;
      token_event& ev = v.events[emitted++];
      ev.request_id = s.id;
      ev.token = tok;
      ev.finished = why;
      emit(s, std::move(ev));
    }
    keep_accepted(s, static_cast<int64_t>(emitted) - 1);  // every emitted token but the last has its KV
    committed[sampler_slot[j]] += static_cast<int64_t>(emitted) - 1;
    note_verdict(s, v);
    if (why != finish_reason::none) retire(s);
  }
  if (!draft_taps.empty()) {
    lap();
    observe_committed(plan, scheduled, start, committed);
    rec.observe_s = lap();
  }
  rec.took_s = now() - started;
  rec.eligible = prompt_rows ? 0 : step_eligible;
  rec.asked = prompt_rows ? 0 : step_asked;
  rec.rows = plan.n_tokens();
  for (const std::vector<int32_t>& d : drafts) rec.drafted += static_cast<int64_t>(d.size());
  for (const verdict& v : verdicts) rec.accepted += v.accepted;
  rec.kind = !decoding ? step_kind::other : rec.drafted > 0 ? step_kind::draft : step_kind::decode;
  account(rec);
  log_speculation();
}

void engine::impl::account(const step_record& r) {
  add_step(st, r);
  // What the cost model believed when the step was planned, for the trace (only when one is
  // open: three lookups a step that nothing else reads).
  step_record traced = r;
  if (trace.on()) {
    traced.cost_s = drafting.cost().seconds(r.rows);
    traced.cost_base_s = drafting.cost().seconds(r.rows - r.drafted);
    traced.cost_largest = drafting.cost().largest();
  }
  // The adaptive draft length weighs drafts against measured step times (spec_control.hpp),
  // and those are decode steps' with and without drafts: a prompt chunk's rows cost what a
  // prefill does (a 40-row prefill at 3 ms would make 8 verify rows look cheap between it and
  // a one-row decode step).
  if (r.kind != step_kind::other) drafting.record_step(r.rows, r.took_s);
  trace.write(traced);
}

}  // namespace tandem
