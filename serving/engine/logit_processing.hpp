#pragma once
// Per-request logit work done on the host: OpenAI presence/frequency penalties, logit_bias
// and logprobs. Requests that ask for none of them never copy logits off the device.
#include <cstdint>
#include <span>
#include <vector>

#include "tandem/engine.hpp"

namespace tandem {

// True when the token must be drawn on the host from edited logits.
inline bool has_penalties(const generation_request& r) {
  return r.presence_penalty != 0 || r.frequency_penalty != 0 || !r.logit_bias.empty();
}
// Grammar-constrained requests are masked and drawn on the host too (grammar_sampling.hpp).
inline bool needs_host_logits(const generation_request& r) {
  return has_penalties(r) || r.logprobs >= 0 || r.grammar != nullptr;
}

// logit[t] -= presence * (count_t > 0) + frequency * count_t over the generated tokens,
// logit[t] += bias_t for every logit_bias entry, then draws with the reference sampler
// (same seed semantics as the backend's). Bias entries outside [0, vocab) are skipped: the
// server has already rejected them.
// The penalties and biases alone, in place on a row of the vocabulary's width.
void apply_penalties(std::vector<float>& row, const generation_request& r, std::span<const int32_t> generated);
int32_t sample_with_penalties(const float* logits, int vocab, const generation_request& r,
                              const sampling_params& p, std::span<const int32_t> generated);

// Log-probability of `token` and the `top` most likely tokens under the model's raw
// distribution (log-softmax of the logits), best first.
void fill_logprobs(const float* logits, int vocab, int32_t token, int top, token_event& ev);
// The same for one prompt position.
void fill_logprobs(const float* logits, int vocab, int32_t token, int top, prompt_token_logprob& out);

}  // namespace tandem
