#pragma once
// admission: requests that can never run, refused at once with 400 and both numbers —
// before this they waited for the scheduler to give up (a 500 after 25-36 s) or got a
// 429 that retrying could never cure. A 5xx is for server faults; these are the client's.
//   - a sequence (prompt + max_tokens) larger than the whole KV pool;
//   - more sequences in one request (prompts x n) than the server ever keeps pending.
// A request without max_tokens is capped to what the pool can hold (finish_reason length),
// as it is capped to the context length.
#include <cstddef>

#include "completion_job.hpp"
#include "completion_source.hpp"

namespace tandem::http {

// Throws api_error 400 naming the limit and the request's size; may set spec.gen.max_tokens.
void check_admissible(const completion_source& src, job_spec& spec, size_t max_pending);

}  // namespace tandem::http
