#pragma once
// job_builder: a parsed request checked against the served model — the model name, the
// prompt tokens (chat template applied), token ids in the vocabulary, and prompt plus
// max_tokens within the context, logit_bias ids in the vocabulary; tools rendered by the
// template or, when it has no place for them, written into the conversation
// (tool_prompt.hpp), and the grammar of forced or strict calls (tool_grammar.hpp). Throws api_error (400, or 404 for an unknown model).
#include "completion_job.hpp"
#include "request.hpp"

namespace tandem::http {

// `format`: the tool-call format the output is parsed in (and forced / strict calls are
// constrained to).
job_spec build_chat_job(const completion_source& src, chat_request r, tool_format format);
job_spec build_completion_job(const completion_source& src, completion_request r);

}  // namespace tandem::http
