#include "admission.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "api_error.hpp"

namespace tandem::http {

void check_admissible(const completion_source& src, job_spec& spec, size_t max_pending) {
  const size_t sequences = spec.prompts.size() * static_cast<size_t>(std::max(spec.gen.n, 1));
  if (sequences > max_pending)
    throw bad_request(fmt::format("this request asks for {} sequences ({} prompts x n = {}), but the server keeps at "
                                  "most {} pending (--max-pending); split it into smaller requests",
                                  sequences, spec.prompts.size(), spec.gen.n, max_pending),
                      spec.prompts.size() > 1 ? "prompt" : "n");
  const int64_t pool = src.kv_pool_tokens();
  if (pool <= 0) return;  // unknown: the context-length check is all there is
  size_t longest = 0;
  for (const auto& p : spec.prompts) longest = std::max(longest, p.size());
  const auto prompt = static_cast<int64_t>(longest);
  const int64_t completion = spec.gen.max_tokens.value_or(1);
  if (prompt + completion > pool)
    throw bad_request(fmt::format("the KV cache holds {} tokens, but this request needs {} ({} in the prompt, {} for "
                                  "the completion) and can never be scheduled; reduce the prompt or max_tokens",
                                  pool, prompt + completion, prompt, completion),
                      spec.gen.max_tokens ? "max_tokens" : (spec.chat ? "messages" : "prompt"));
  if (!spec.gen.max_tokens && pool < src.max_model_len()) spec.gen.max_tokens = pool - prompt;
}

}  // namespace tandem::http
