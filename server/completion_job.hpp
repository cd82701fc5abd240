#pragma once
// completion_job: one chat or completion request in flight — its engine requests (n per
// prompt), the text each turns into (detokenized, stop strings held back), and the answer
// it writes: one JSON response or an SSE stream.
//
// Threads: token events arrive on the source's generation thread and are posted, with the
// time they arrived, to the connection's strand; everything else runs on that strand.
#include <boost/asio/any_io_executor.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "logprobs_json.hpp"
#include "request.hpp"
#include "response_sink.hpp"
#include "server_context.hpp"
#include "stop_matcher.hpp"
#include "tool_parser.hpp"

namespace tandem::http {

using clock = std::chrono::steady_clock;

struct job_spec {
  bool chat = true;
  std::string route;                          // for the access log
  gen_params gen;
  std::vector<std::vector<int32_t>> prompts;  // validated token ids
  tool_request tools;                         // chat: the output is parsed for calls when active
  tool_format tool_fmt = tool_format::hermes;  // ... in this format
  bool echo = false;                          // completions: the prompt opens the text
  std::vector<std::string> prompt_texts;      // with echo, per prompt
};

class completion_job : public std::enable_shared_from_this<completion_job> {
 public:
  completion_job(server_context& ctx, std::shared_ptr<response_sink> sink, boost::asio::any_io_executor strand,
                 job_spec spec, clock::time_point arrival);
  ~completion_job();

  // Submits the engine requests (call on the strand, once).
  void start();
  // The client disconnected: cancel what still runs (on the strand).
  void client_gone();
  // Shutdown: cancel what still runs (any thread).
  void cancel_all();
  bool answered() const { return answered_.load(); }

 private:
  struct choice;
  void on_event(size_t c, token_event ev, clock::time_point at);
  void on_token(choice& c, const token_event& ev, clock::time_point at);
  void on_end(choice& c, const token_event& ev);
  void feed(choice& c, const std::string& text);
  void release(choice& c, std::string text);
  void finish_choice(choice& c, const char* reason);
  void fail(const std::string& message, int status = 0);  // 0: 400 when it names the prompt, else 500
  void on_prompt_logprobs(choice& c, const token_event& ev);
  void echo_prompt(choice& c);
  void pass_text(choice& c, std::string text);
  void take_tool_output(choice& c, tool_call_parser::output out);
  bool end_tool_calls(choice& c, bool cut_by_length);
  void send_tool_call(choice& c, size_t k, bool first, std::string_view arguments);
  void maybe_complete();
  boost::json::object chunk_base() const;
  boost::json::object choice_json(choice& c, std::string text, const char* reason, bool full);
  boost::json::value message_content(const choice& c, std::string text) const;
  void send_roles();
  std::string full_response();
  boost::json::object usage() const;
  void log_access(int status) const;

  server_context& ctx_;
  std::shared_ptr<response_sink> sink_;
  boost::asio::any_io_executor strand_;
  job_spec spec_;
  clock::time_point arrival_, first_token_{};
  std::string id_, fingerprint_;
  std::string chunk_head_;  // text deltas' opening bytes (stream_chunk.hpp), made on first use
  int64_t created_;
  std::vector<std::unique_ptr<choice>> choices_;
  std::shared_ptr<job_registry> registry_;
  uint64_t registry_key_ = 0;
  std::atomic<bool> answered_{false};  // read by shutdown from another thread
  bool aborted_ = false;
};

// One sampled answer: an engine request and the text it has produced.
struct completion_job::choice {
  size_t index = 0;
  size_t prompt = 0;
  uint64_t engine_id = 0;
  std::unique_ptr<text_decoder> dec;
  stop_matcher stops;
  std::string text;                   // released so far (non-streaming: the answer)
  std::vector<logprob_entry> lps;     // not yet written (streaming) or all (non-streaming)
  size_t lp_offset = 0;               // text offset of lps.front() (completions' text_offset)
  int64_t tokens = 0;
  clock::time_point last_token{};
  const char* reason = nullptr;       // set when the choice is done
  bool engine_done = false;
  bool sent_role = false;
  // Tool calling (chat with tools): the parser between the released text and the answer,
  // and the calls found so far (streaming: sent as they complete).
  std::unique_ptr<tool_call_parser> tools;
  struct call {
    std::string id;
    parsed_tool_call fn;
    bool complete = false;  // its end arrived (until then a stream has sent only part of it)
  };
  std::vector<call> calls;
  // Echo (completions): each prompt position's logprob, position 0 unknown, and whether the
  // prompt text has been put in front of the answer yet.
  std::vector<logprob_entry> prompt_lps;
  bool echoed = false;
};

}  // namespace tandem::http
