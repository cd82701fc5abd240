#pragma once
// Prompt logprobs (OpenAI completions' echo + logprobs, vLLM's prompt_logprobs): the engine
// keeps the logits of every prompt position while such a request prefills and reports
// log p(prompt[i] | prompt[:i]) as it goes. The member functions live in
// prompt_logprobs.cpp; this header holds what engine.cpp needs at admission.
#include <string>

#include "tandem/engine.hpp"

namespace tandem {

// A prompt whose prefix came from the cache would never have its rows computed, so a
// request that wants prompt logprobs gets a cache salt of its own: it shares no pages
// with anyone (only with itself after a preemption, when its rows were already reported).
inline std::string prefill_salt(uint64_t request_id, const generation_request& r) {
  if (r.prompt_logprobs < 0) return r.cache_salt;
  return "prompt-logprobs/" + std::to_string(request_id) + "/" + r.cache_salt;
}

}  // namespace tandem
