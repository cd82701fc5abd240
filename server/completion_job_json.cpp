// The JSON a completion_job writes: chunks, the full response, usage, the access log line.
#include <fmt/format.h>

#include "completion_job.hpp"
#include "tandem/logger.hpp"

namespace tandem::http {

boost::json::object completion_job::chunk_base() const {
  boost::json::object o;
  o["id"] = id_;
  o["object"] = spec_.chat ? "chat.completion.chunk" : "text_completion";
  o["created"] = created_;
  o["model"] = ctx_.source->model_name();
  o["system_fingerprint"] = fingerprint_;
  if (spec_.gen.include_usage) o["usage"] = nullptr;
  return o;
}

// One element of "choices". Streaming chat chunks carry a delta (the role on the first
// one only); completions and full responses carry the text.
boost::json::object completion_job::choice_json(choice& c, std::string text, const char* reason, bool full) {
  boost::json::object o;
  o["index"] = c.index;
  if (spec_.chat) {
    boost::json::object msg;
    if (full) {
      msg["role"] = "assistant";
      msg["content"] = message_content(c, std::move(text));
      if (!c.calls.empty()) {
        boost::json::array calls;
        for (const auto& call : c.calls) {
          boost::json::object fn;
          fn["name"] = call.fn.name;
          fn["arguments"] = call.fn.arguments;
          boost::json::object tc;
          tc["id"] = call.id;
          tc["type"] = "function";
          tc["function"] = std::move(fn);
          calls.push_back(std::move(tc));
        }
        msg["tool_calls"] = std::move(calls);
      }
    } else {
      if (!c.sent_role) {
        msg["role"] = "assistant";
        c.sent_role = true;
      }
      if (!text.empty() || !reason) msg["content"] = std::move(text);
    }
    o[full ? "message" : "delta"] = std::move(msg);
  } else {
    o["text"] = std::move(text);
  }
  if (c.lps.empty() && !(full && spec_.gen.logprobs >= 0)) {
    o["logprobs"] = nullptr;
  } else {
    o["logprobs"] = spec_.chat ? chat_logprobs(c.lps, *ctx_.source)
                               : completion_logprobs(c.lps, *ctx_.source, c.lp_offset);
    c.lp_offset = c.text.size();
    c.lps.clear();
  }
  if (reason) o["finish_reason"] = reason;
  else o["finish_reason"] = nullptr;
  return o;
}

// A message that called tools has content only when the model also wrote something.
boost::json::value completion_job::message_content(const choice& c, std::string text) const {
  if (!c.calls.empty() && text.find_first_not_of(" \t\r\n") == std::string::npos) return nullptr;
  return boost::json::string(std::move(text));
}

boost::json::object completion_job::usage() const {
  int64_t prompt = 0, generated = 0;
  for (const auto& p : spec_.prompts) prompt += static_cast<int64_t>(p.size());
  for (const auto& c : choices_) generated += c->tokens;
  boost::json::object u;
  u["prompt_tokens"] = prompt;
  u["completion_tokens"] = generated;
  u["total_tokens"] = prompt + generated;
  return u;
}

std::string completion_job::full_response() {
  boost::json::object o;
  o["id"] = id_;
  o["object"] = spec_.chat ? "chat.completion" : "text_completion";
  o["created"] = created_;
  o["model"] = ctx_.source->model_name();
  o["system_fingerprint"] = fingerprint_;
  boost::json::array arr;
  for (auto& c : choices_) arr.push_back(choice_json(*c, c->text, c->reason, true));
  o["choices"] = std::move(arr);
  o["usage"] = usage();
  return boost::json::serialize(o);
}

void completion_job::log_access(int status) const {
  int64_t prompt = 0, generated = 0;
  for (const auto& p : spec_.prompts) prompt += static_cast<int64_t>(p.size());
  for (const auto& c : choices_) generated += c->tokens;
  const auto now = clock::now();
  const double ttft = first_token_ == clock::time_point{} ? -1 : std::chrono::duration<double>(first_token_ - arrival_).count();
  const double dur = std::chrono::duration<double>(now - arrival_).count();
  if (status == 200) ctx_.metrics.observe_e2e(dur);
  ctx_.metrics.count_http(status);
  default_logger().info(fmt::format("{} POST {} {} in={} out={} ttft={:.3f}s dur={:.3f}s{}", id_, spec_.route, status,
                                    prompt, generated, ttft, dur, spec_.gen.stream ? " stream" : ""));
}

}  // namespace tandem::http
