// What a completion_job does beyond plain text: tool calls parsed out of a chat answer
// (tool_parser.hpp) and the echoed prompt of a completion with its logprobs.
#include <fmt/format.h>

#include <random>

#include "completion_job.hpp"
#include "sse.hpp"

namespace tandem::http {
namespace {

std::string call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

}  // namespace

void completion_job::on_prompt_logprobs(choice& c, const token_event& ev) {
  for (const prompt_token_logprob& p : ev.prompt_logprobs) {
    if (p.position <= 0 || static_cast<size_t>(p.position) >= c.prompt_lps.size()) continue;
    logprob_entry& e = c.prompt_lps[static_cast<size_t>(p.position)];
    e.logprob = p.logprob;
    e.top = p.top;
    if (e.top.size() > static_cast<size_t>(spec_.gen.logprobs)) e.top.resize(static_cast<size_t>(spec_.gen.logprobs));
  }
}

// The prompt goes in front of the answer once, before its first generated token (the
// engine reports every prompt row before it samples). Its text is the prompt as sent.
void completion_job::echo_prompt(choice& c) {
  if (!spec_.echo || c.echoed) return;
  c.echoed = true;
  c.lps.insert(c.lps.begin(), c.prompt_lps.begin(), c.prompt_lps.end());
  release(c, spec_.prompt_texts[c.prompt]);
}

// Released text goes to the answer, through the tool-call parser when there is one.
void completion_job::pass_text(choice& c, std::string text) {
  if (!c.tools) {
    release(c, std::move(text));
    return;
  }
  if (text.empty() && c.lps.empty()) return;
  take_tool_output(c, c.tools->push(text));
}

// The parser's pieces in the order the model wrote them: text as content, each call's first
// delta when its function is known, its arguments as they are written, and the call kept
// when it is complete.
void completion_job::take_tool_output(choice& c, tool_call_parser::output out) {
  for (tool_piece& p : out.pieces) {
    if (c.reason) break;  // parallel_tool_calls false: the first call ended the choice
    switch (p.k) {
      case tool_piece::kind::content:
        // Whitespace around calls is layout, not an answer.
        if (c.calls.empty() || !blank(p.text)) release(c, std::move(p.text));
        break;
      case tool_piece::kind::begin:
        c.calls.push_back({call_id(), {std::move(p.text), {}}});
        if (spec_.gen.stream && !answered_) send_tool_call(c, p.index, true, {});
        break;
      case tool_piece::kind::arguments:
        c.calls[p.index].fn.arguments += p.text;
        if (spec_.gen.stream && !answered_) send_tool_call(c, p.index, false, p.text);
        break;
      case tool_piece::kind::end:
        c.calls[p.index].fn = std::move(p.call);
        c.calls[p.index].complete = true;
        // parallel_tool_calls false: the answer is one call, so generation ends with it.
        if (!spec_.tools.parallel) {
          finish_choice(c, "tool_calls");
          if (!c.engine_done) ctx_.source->cancel(c.engine_id);
        }
        break;
    }
  }
  if (!c.lps.empty() && !c.reason) release(c, {});  // logprobs of tokens inside a call
  if (!out.error.empty()) fail("the model produced a malformed tool call (" + out.error + ")", 500);
}

// The end of a choice's text: what the parser held back, and the checks that need the
// whole answer. False when the job failed.
bool completion_job::end_tool_calls(choice& c, bool cut_by_length) {
  if (!c.tools) return true;
  if (cut_by_length && c.tools->in_call()) {
    // max_tokens ended the answer inside a call: finish_reason "length" says it is cut. The
    // unfinished call is not one of the message's tool_calls (a stream has sent its start).
    if (!c.calls.empty() && !c.calls.back().complete) c.calls.pop_back();
    finish_choice(c, "length");
    return true;
  }
  take_tool_output(c, c.tools->finish());
  if (answered_) return false;
  if (spec_.tools.call_required() && c.calls.empty()) {
    fail(fmt::format("tool_choice asked for {} but the model answered without a tool call",
                     spec_.tools.choice == tool_choice_kind::named
                                                      ? "'" + spec_.tools.forced + "'" : std::string("a call")),
         500);
    return false;
  }
  return true;
}

// OpenAI's streaming shape: the first delta of call k carries its index, id, type and name
// with empty arguments; the next ones carry fragments of the arguments.
void completion_job::send_tool_call(choice& c, size_t k, bool first, std::string_view arguments) {
  boost::json::object fn;
  boost::json::object tc;
  tc["index"] = k;
  if (first) {
    tc["id"] = c.calls[k].id;
    tc["type"] = "function";
    fn["name"] = c.calls[k].fn.name;
  }
  fn["arguments"] = arguments;
  tc["function"] = std::move(fn);
  boost::json::object delta;
  if (!c.sent_role) {
    delta["role"] = "assistant";
    c.sent_role = true;
  }
  delta["tool_calls"] = boost::json::array{std::move(tc)};
  boost::json::object ch;
  ch["index"] = c.index;
  ch["delta"] = std::move(delta);
  ch["logprobs"] = nullptr;
  ch["finish_reason"] = nullptr;
  boost::json::object chunk = chunk_base();
  chunk["choices"] = boost::json::array{std::move(ch)};
  sink_->stream(sse_event(boost::json::serialize(chunk)));
}

}  // namespace tandem::http
