#include "job_builder.hpp"

#include <fmt/format.h>

#include "api_error.hpp"
#include "tool_grammar.hpp"
#include "tool_prompt.hpp"

namespace tandem::http {
namespace {

void check_model(const completion_source& src, const gen_params& g) {
  if (!g.model.empty() && g.model != src.model_name())
    throw not_found(fmt::format("The model '{}' does not exist; this server serves '{}'", g.model, src.model_name()));
}

void check_ids(const completion_source& src, const std::vector<int32_t>& ids, const char* param) {
  for (int32_t id : ids)
    if (id < 0 || id >= src.vocab_size())
      throw bad_request(fmt::format("token id {} is outside the vocabulary ({} tokens)", id, src.vocab_size()), param);
}

// `prompt_param`: what the client sent the prompt as ("messages" or "prompt").
void check_length(const completion_source& src, const gen_params& g, size_t prompt_len, const char* prompt_param) {
  const int64_t ctx = src.max_model_len();
  const auto p = static_cast<int64_t>(prompt_len);
  if (p == 0) throw bad_request("the prompt is empty", prompt_param);
  if (p >= ctx)
    throw bad_request(fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} "
                                  "tokens, leaving no room for the completion.", ctx, p), prompt_param);
  if (g.max_tokens && p + *g.max_tokens > ctx)
    throw bad_request(fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                                  "({} in the prompt, {} for the completion). Reduce the prompt or max_tokens.",
                                  ctx, p + *g.max_tokens, p, *g.max_tokens), "max_tokens");
}

// response_format json_object / json_schema: the grammar compiled over the model's vocabulary
// (what xgrammar cannot compile is a 400 naming the schema).
void compile_response_format(const completion_source& src, gen_params& g) {
  if (!g.response_format) return;
  if (g.ignore_eos)
    throw bad_request("'ignore_eos' cannot be combined with 'response_format': the output ends where the grammar does",
                      "ignore_eos");
  const grammar_compiler* gc = src.grammar();
  if (!gc) throw bad_request("this model cannot constrain its output to a grammar", "response_format");
  try {
    g.grammar = gc->compile(*g.response_format);
  } catch (const grammar_error& e) {
    throw bad_request(fmt::format("'response_format.json_schema.schema' is not a schema this server can follow: {}", e.what()),
                      "response_format.json_schema.schema");
  }
}

// The grammar of the tool calls (tool_grammar.hpp): what xgrammar cannot compile is a 400.
std::shared_ptr<const compiled_grammar> compile_tool_grammar(const completion_source& src, const tool_request& t,
                                                             tool_format format) {
  const auto spec = tool_call_grammar(t, format);
  if (!spec) return nullptr;
  const grammar_compiler* gc = src.grammar();
  if (!gc) {
    // A forced call is still checked by the parser (no call is an error); a strict tool's
    // promise cannot be kept.
    if (t.call_required()) return nullptr;
    throw bad_request("this model cannot constrain its output to a grammar, which 'strict' tools need", "tools");
  }
  try {
    return gc->compile(*spec);
  } catch (const grammar_error& e) {
    throw bad_request(fmt::format("a tool's 'parameters' is not a schema this server can follow: {}", e.what()), "tools");
  }
}

job_spec common(const completion_source& src, gen_params g) {
  check_model(src, g);
  check_ids(src, g.stop_token_ids, "stop_token_ids");
  for (const token_bias& b : g.logit_bias)
    if (b.token >= src.vocab_size())
      throw bad_request(fmt::format("'logit_bias' holds token id {}, outside the vocabulary ({} tokens)", b.token,
                                    src.vocab_size()), "logit_bias");
  compile_response_format(src, g);
  job_spec s;
  s.gen = std::move(g);
  return s;
}

}  // namespace

job_spec build_chat_job(const completion_source& src, chat_request r, tool_format format) {
  job_spec s = common(src, std::move(r.gen));
  s.tool_fmt = format;
  if (s.gen.grammar && r.tools.parse_output()) {
    if (r.tools.call_required())
      throw bad_request("'response_format' cannot be combined with tool_choice required or a named function: the "
                        "output follows the format, so no call could be made", "response_format");
    if (tool_call_grammar(r.tools, format))
      throw bad_request("'response_format' cannot be combined with 'strict' tools: the output follows one grammar, "
                        "the format's or the calls'", "response_format");
  }
  s.chat = true;
  std::string tools_json = r.tools.tools_json;
  if (r.tools.active() && !src.template_renders_tools()) {
    r.messages = with_tools_in_prompt(std::move(r.messages), tools_json);
    tools_json.clear();
  }
  if (!s.gen.grammar && r.tools.parse_output()) s.gen.grammar = compile_tool_grammar(src, r.tools, format);
  s.tools = std::move(r.tools);
  try {
    s.prompts.push_back(src.chat_tokens(r.messages, tools_json));
  } catch (const error& e) {
    // The template rejected the conversation (e.g. roles out of order): the client's fault.
    throw bad_request(fmt::format("the chat template rejected the messages: {}", e.what()), "messages");
  }
  check_length(src, s.gen, s.prompts.back().size(), "messages");
  return s;
}

job_spec build_completion_job(const completion_source& src, completion_request r) {
  job_spec s = common(src, std::move(r.gen));
  s.chat = false;
  s.echo = r.echo;
  for (auto& p : r.prompts) {
    if (auto* text = std::get_if<std::string>(&p)) {
      if (s.echo) s.prompt_texts.push_back(*text);
      try {
        s.prompts.push_back(src.encode(*text));
      } catch (const error& e) {
        throw bad_request(fmt::format("the prompt cannot be tokenized: {}", e.what()), "prompt");
      }
    } else {
      auto& ids = std::get<std::vector<int32_t>>(p);
      check_ids(src, ids, "prompt");
      if (s.echo) s.prompt_texts.push_back(src.decode(ids));
      s.prompts.push_back(std::move(ids));
    }
    check_length(src, s.gen, s.prompts.back().size(), "prompt");
  }
  return s;
}

}  // namespace tandem::http
