// Speculative decoding in the engine (issue 16): drafts go into the step plan behind each
// decoding sequence's last token, one forward pass computes a logits row for every one of
// them, and verification keeps the longest prefix of the draft the target agrees with plus
// the target's own next token.
//
// Verification is lossless at every temperature. Row r of a sequence is sampled exactly as
// plain decoding samples generated token number g + r (the backend's sampler or the host's
// logit processing, the same sampling settings, the same (seed, step) draw), and the draft
// token d_r is accepted iff that sample equals it. For the deterministic drafters here the
// draft distribution q is a point mass on d_r, and this is rejection sampling: it accepts
// d_r with probability p(d_r) = min(1, p(d_r) / q(d_r)), and a rejected draft leaves a
// sample of p conditioned on "not d_r", which is norm(max(0, p - q)). Since the draw is the
// one plain decoding would make at that step, a speculative run emits the very tokens a
// plain run emits (up to floating-point differences between batched and single-token
// logits), not only the same distribution.
#include <algorithm>
#include <limits>
#include <fmt/format.h>

#include "engine_impl.hpp"
#include "grammar_sampling.hpp"
#include "grammar_sequence.hpp"
#include "logit_processing.hpp"
#include "tandem/drafter.hpp"
#include "tandem/error.hpp"
#include "tandem/logger.hpp"
#include "tandem/model.hpp"

namespace tandem {

namespace {

constexpr double spec_log_interval_s = 10;  // vLLM logs its spec-decode metrics as often

}  // namespace

std::vector<std::vector<int32_t>> engine::impl::propose_drafts(const std::vector<sequence*>& scheduled,
                                                               const std::vector<int64_t>& counts,
                                                               int64_t draft_budget) {
  std::vector<std::vector<int32_t>> drafts(scheduled.size());
  drafter* d = p.drafter;
  step_eligible = step_asked = 0;
  if (!d) return drafts;
  const draft_limits lim = d->limits();
  if (lim.max_draft <= 0) return drafts;
  if (lim.disable_above_batch > 0 && static_cast<int64_t>(scheduled.size()) > lim.disable_above_batch) return drafts;
  const int64_t vocab = p.model->info().vocab;
  // Only a decoding sequence drafts: one uncomputed token (its last sampled one) and this
  // step computes it. A sequence still prefilling (or recomputing after preemption) does not.
  const auto may_draft = [&](size_t i) { return scheduled[i]->req.sampling.speculative && decodes(*scheduled[i], counts[i]); };
  int64_t rows = 0, samplers = 0;
  int eligible = 0;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    rows += counts[i];
    if (scheduled[i]->computed + counts[i] == static_cast<int64_t>(scheduled[i]->tokens.size())) ++samplers;
    eligible += may_draft(i) ? 1 : 0;
  }
  drafting.begin_step(rows, samplers, eligible);  // spec_control.hpp
  step_eligible = eligible;
  // Drafts count against the step's token budget: what the scheduler's items left.
  int64_t budget_left = draft_budget < 0 ? std::numeric_limits<int64_t>::max() : draft_budget;
  // A batched drafter (draft_limits::batched) gets the step's drafting sequences together in
  // one propose_batch (a network drafts them in one pass); any other, each as it is chosen.
  // Either way each one's room is what it would be with the drafts before it already back at
  // their real lengths: `waiting` counts those not yet back at their most (k tokens, and the
  // pages k tokens would take).
  std::vector<draft_request> reqs;
  std::vector<size_t> owners;  // reqs[j] drafts for scheduled[owners[j]]
  int64_t waiting_tokens = 0, waiting_pages = 0;
  const auto propose_waiting = [&] {
    if (reqs.empty()) return;
    const double asked = now();
    std::vector<std::vector<int32_t>> out = d->propose_batch(reqs);
    st.spec_propose_seconds += now() - asked;
    if (out.size() != reqs.size())
      throw error(fmt::format("the drafter returned {} drafts for {} sequences", out.size(), reqs.size()));
    for (size_t j = 0; j < reqs.size(); ++j) {
      sequence& s = *scheduled[owners[j]];
      std::vector<int32_t>& draft = out[j];
      const int k = reqs[j].ctx.max_draft;
      if (static_cast<int64_t>(draft.size()) > k)
        throw error(fmt::format("the drafter proposed {} tokens, at most {} were asked for", draft.size(), k));
      for (int32_t t : draft)
        if (t < 0 || t >= vocab) throw error(fmt::format("the drafter proposed token id {}, outside the vocabulary", t));
      if (!draft.empty() && !pool.grow(s.kv.pages, s.computed + 1 + static_cast<int64_t>(draft.size())))
        throw error("speculative decoding: the KV pool could not hold a draft it had room for");
      if (lim.batched) drafting.shortened(s.draft, k, static_cast<int>(draft.size()));
      else drafting.planned(s.draft, static_cast<int>(draft.size()));
      budget_left -= static_cast<int64_t>(draft.size());
      drafts[owners[j]] = std::move(draft);
    }
    reqs.clear();
    owners.clear();
    waiting_tokens = waiting_pages = 0;
  };
  for (size_t i = 0; i < scheduled.size(); ++i) {
    sequence& s = *scheduled[i];
    const auto len = static_cast<int64_t>(s.tokens.size());
    if (!may_draft(i)) continue;
    // Every emitted token counts against max_new_tokens and the context: the accepted draft
    // plus the target's own token must fit both. The draft's KV slots come from the pages the
    // sequence holds and free pages only: a draft never evicts a cached prefix (the cache
    // must end up as a run without drafts leaves it) nor preempts anyone.
    const int64_t held_slots = static_cast<int64_t>(s.kv.pages.size()) * pool.page_size() - (s.computed + 1);
    const int64_t own_room = std::min<int64_t>({lim.max_draft, s.req.max_new_tokens - s.generated - 1,
                                                p.max_model_len - len - 1});
    const auto room_after = [&](int64_t tokens_taken, int64_t pages_taken) {
      const int64_t slots = held_slots + (pool.free_pages() - pages_taken) * pool.page_size();
      return std::max<int64_t>(0, std::min<int64_t>({own_room, budget_left - tokens_taken, slots}));
    };
    // When the waiting drafts' real lengths could change this sequence's room, they are
    // drafted first: the room (and the adaptive choice made from it) stays exactly what
    // asking one sequence at a time gives.
    if (room_after(waiting_tokens, waiting_pages) != room_after(0, 0)) propose_waiting();
    const int k = drafting.choose(s.draft, static_cast<int>(room_after(0, 0)));
    if (k <= 0) continue;
    step_asked += k;
    draft_context ctx;
    ctx.tokens = s.tokens;
    ctx.prompt_len = s.prompt_len;
    ctx.max_draft = k;
    reqs.push_back({s.id, ctx});
    owners.push_back(i);
    waiting_tokens += k;
    waiting_pages += std::max<int64_t>(0, pool.pages_for(s.computed + 1 + k) - static_cast<int64_t>(s.kv.pages.size()));
    // The adaptive choices after this one count it at k tokens (shortened() corrects the step
    // when it comes back shorter).
    if (lim.batched) drafting.planned(s.draft, k);
    else propose_waiting();
  }
  propose_waiting();
  return drafts;
}

std::vector<engine::impl::verdict> engine::impl::verify(const std::vector<sequence*>& samplers,
                                                        const std::vector<const std::vector<int32_t>*>& drafts,
                                                        const std::vector<sampling_params>& params,
                                                        const std::vector<int32_t>& ids) {
  std::vector<verdict> out(samplers.size());
  const bool host = std::any_of(samplers.begin(), samplers.end(), [](sequence* s) { return needs_host_logits(s->req); });
  const std::vector<float> logits = host ? p.model->logits_to_host() : std::vector<float>{};
  const auto vocab = static_cast<size_t>(p.model->info().vocab);
  size_t row = 0;  // first logits row of samplers[j]
  for (size_t j = 0; j < samplers.size(); ++j) {
    sequence& s = *samplers[j];
    const std::vector<int32_t>& draft = *drafts[j];
    verdict& v = out[j];
    v.proposed = static_cast<int>(draft.size());
    // The generated tokens as row r sees them: the output so far plus the draft before r
    // (penalties count them).
    std::vector<int32_t> context;
    if (has_penalties(s.req)) context.assign(s.tokens.begin() + s.prompt_len, s.tokens.end());
    for (size_t r = 0; r <= draft.size(); ++r) {
      const float* lr = host ? logits.data() + (row + r) * vocab : nullptr;
      int32_t tok = ids[row + r];
      // Under a grammar, row r is masked by the matcher's state after the draft tokens before
      // it (each one accepted only because it was sampled): drafts are checked, never trusted.
      if (s.req.grammar) tok = sample_with_grammar(lr, static_cast<int>(vocab), s.req, params[row + r], context, *grammar_of(s));
      else if (has_penalties(s.req)) tok = sample_with_penalties(lr, static_cast<int>(vocab), s.req, params[row + r], context);
      token_event ev;
      if (s.req.logprobs >= 0) fill_logprobs(lr, static_cast<int>(vocab), tok, s.req.logprobs, ev);
      v.tokens.push_back(tok);
      v.events.push_back(std::move(ev));
      if (r == draft.size() || tok != draft[r]) break;  // the rest of the draft is rejected
      ++v.accepted;
      context.push_back(tok);
      // A drafted end token the grammar accepted ended it: no row after it can be masked.
      if (s.req.grammar && grammar_of(s)->terminated()) break;
    }
    row += draft.size() + 1;
  }
  return out;
}

void engine::impl::keep_accepted(sequence& s, int64_t accepted_kept) {
  // The KV of the kept draft tokens is valid; the slots of rejected ones are given back
  // (their pages hold no full page of accepted tokens, so nothing of them was published).
  s.computed += accepted_kept;
  const auto keep = static_cast<size_t>(pool.pages_for(s.computed));
  if (s.kv.pages.size() > keep) {
    std::vector<int32_t> tail(s.kv.pages.begin() + static_cast<std::ptrdiff_t>(keep), s.kv.pages.end());
    s.kv.pages.resize(keep);
    pool.release(tail);
  }
  cache.publish(s.kv, s.tokens, s.computed);
}

void engine::impl::note_verdict(sequence& s, const verdict& v) {
  if (v.proposed == 0) return;
  p.drafter->accepted(s.id, v.proposed, v.accepted);
  drafting.observe(s.draft, v.proposed, v.accepted);
  ++st.spec_drafts;
  st.spec_draft_tokens += static_cast<uint64_t>(v.proposed);
  st.spec_accepted_tokens += static_cast<uint64_t>(v.accepted);
  if (st.spec_accepted_per_pos.size() < static_cast<size_t>(v.proposed)) st.spec_accepted_per_pos.resize(v.proposed);
  for (int r = 0; r < v.accepted; ++r) ++st.spec_accepted_per_pos[static_cast<size_t>(r)];
}

void engine::impl::release_draft_state(const sequence& s) {
  if (!p.drafter) return;
  const auto n = static_cast<size_t>(s.prompt_len);
  p.drafter->release(s.id, std::span<const int32_t>(s.tokens).subspan(std::min(n, s.tokens.size())));
}

void engine::impl::observe_committed(const step_plan& plan, const std::vector<sequence*>& scheduled,
                                     const std::vector<int64_t>& start, const std::vector<int64_t>& committed) {
  std::vector<tensor_view> all(draft_taps.size()), taps(draft_taps.size());
  for (size_t t = 0; t < draft_taps.size(); ++t) all[t] = p.model->hidden_states(static_cast<int>(t));
  int64_t row = 0;  // the sequence's first row of the step (plan order: each one's tokens, then its draft)
  for (size_t i = 0; i < scheduled.size(); ++i) {
    const int64_t rows = static_cast<int64_t>(plan.seqs[i].tokens.size());
    if (!scheduled[i]->done && committed[i] > 0) {
      for (size_t t = 0; t < all.size(); ++t) {
        tensor_view v = all[t];
        v.data = static_cast<char*>(v.data) + row * v.strides[0] * static_cast<int64_t>(traits(v.type).block_bytes);
        v.shape[0] = committed[i];
        taps[t] = v;
      }
      const double t = now();
      p.drafter->observe(scheduled[i]->id, start[i], taps);
      st.spec_observe_seconds += now() - t;
    }
    row += rows;
  }
}

// Percent of the engine's step time (since `before`) spent in the drafter's calls.
static double drafter_share(const engine_stats& now, const engine_stats& before) {
  const double steps = now.step_seconds - before.step_seconds;
  const double drafter = now.spec_propose_seconds - before.spec_propose_seconds + now.spec_observe_seconds -
                         before.spec_observe_seconds;
  return steps > 0 ? 100.0 * drafter / steps : 0.0;
}

// vLLM's periodic spec-decode line: mean acceptance length = 1 + accepted / drafts over the
// interval (the target's own token counts), draft acceptance rate, and per position.
void engine::impl::log_speculation() {
  if (!p.drafter) return;
  const double t = now();
  if (t - spec_logged_s < spec_log_interval_s || st.spec_drafts == spec_logged.spec_drafts) return;
  const auto drafts = static_cast<double>(st.spec_drafts - spec_logged.spec_drafts);
  const uint64_t proposed = st.spec_draft_tokens - spec_logged.spec_draft_tokens;
  const uint64_t accepted = st.spec_accepted_tokens - spec_logged.spec_accepted_tokens;
  std::string per_pos;
  for (size_t r = 0; r < st.spec_accepted_per_pos.size(); ++r) {
    const uint64_t before = r < spec_logged.spec_accepted_per_pos.size() ? spec_logged.spec_accepted_per_pos[r] : 0;
    per_pos += fmt::format("{}{:.3f}", r ? ", " : "", static_cast<double>(st.spec_accepted_per_pos[r] - before) / drafts);
  }
  default_logger().info(fmt::format(
      "speculative decoding: mean acceptance length {:.2f}, accepted {} of {} draft tokens ({:.1f}%), "
      "per-position acceptance rate [{}], drafter {:.0f}% of step time",
      1.0 + static_cast<double>(accepted) / drafts, accepted, proposed,
      proposed ? 100.0 * static_cast<double>(accepted) / static_cast<double>(proposed) : 0.0, per_pos,
      drafter_share(st, spec_logged)));
  spec_logged_s = t;
  spec_logged.spec_drafts = st.spec_drafts;
  spec_logged.spec_draft_tokens = st.spec_draft_tokens;
  spec_logged.spec_accepted_tokens = st.spec_accepted_tokens;
  spec_logged.spec_accepted_per_pos = st.spec_accepted_per_pos;
  spec_logged.step_seconds = st.step_seconds;
  spec_logged.spec_propose_seconds = st.spec_propose_seconds;
  spec_logged.spec_observe_seconds = st.spec_observe_seconds;
}

}  // namespace tandem
