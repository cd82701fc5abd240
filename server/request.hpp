#pragma once
// Typed API requests, parsed and validated from JSON (OpenAI field names and ranges, plus
// vLLM's extensions top_k, min_p, stop_token_ids, ignore_eos). A field outside an
// endpoint's known set is a 400 naming it: nothing a client sends is silently ignored.
#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tandem/chat_template.hpp"
#include "tandem/grammar.hpp"
#include "tandem/sampling_params.hpp"
#include "tools.hpp"

namespace tandem::http {

inline constexpr int max_top_logprobs = 20;  // vLLM's default max_logprobs
inline constexpr int max_n = 16;
inline constexpr int64_t completions_default_max_tokens = 16;  // OpenAI's and vLLM's default

// What every generation request shares.
struct gen_params {
  std::string model;                 // empty = the served model
  std::optional<int64_t> max_tokens; // absent = up to the context (chat); 0 only with echo
  sampling_params sampling;
  bool has_seed = false;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  int32_t logprobs = -1;             // -1 none; k >= 0: chosen token plus k alternatives
  float presence_penalty = 0, frequency_penalty = 0;
  bool ignore_eos = false;
  std::string user;
  std::vector<token_bias> logit_bias;  // ids checked against the vocabulary by job_builder
  std::optional<grammar_spec> response_format;       // chat: json_object / json_schema
  std::shared_ptr<const compiled_grammar> grammar;   // its compiled grammar (job_builder)
};

struct chat_request {
  gen_params gen;
  std::vector<chat_message> messages;
  tool_request tools;
};

using prompt_input = std::variant<std::string, std::vector<int32_t>>;

struct completion_request {
  gen_params gen;
  std::vector<prompt_input> prompts;  // one choice set per prompt
  bool echo = false;                  // the prompt opens each choice's text (and logprobs)
};

struct tokenize_request {
  std::optional<std::string> prompt;
  std::vector<chat_message> messages;  // used when prompt is absent
};

// The body as JSON; throws api_error 400 for invalid JSON.
boost::json::value parse_json_body(std::string_view body);

chat_request parse_chat_request(const boost::json::value& body);
completion_request parse_completion_request(const boost::json::value& body);
tokenize_request parse_tokenize_request(const boost::json::value& body);
std::vector<int32_t> parse_detokenize_request(const boost::json::value& body);

}  // namespace tandem::http
