#include "completion_job.hpp"

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <random>

#include "api_error.hpp"
#include "fingerprint.hpp"
#include "sse.hpp"
#include "stream_chunk.hpp"
#include "tandem/logger.hpp"

namespace tandem::http {
namespace {

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

double seconds(clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

completion_job::completion_job(server_context& ctx, std::shared_ptr<response_sink> sink,
                               boost::asio::any_io_executor strand, job_spec spec, clock::time_point arrival)
    : ctx_(ctx), sink_(std::move(sink)), strand_(std::move(strand)), spec_(std::move(spec)), arrival_(arrival),
      id_(random_id(spec_.chat ? "chatcmpl-" : "cmpl-")),
      fingerprint_(system_fingerprint(*ctx.source)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()) {}

completion_job::~completion_job() {
  if (registry_key_) registry_->remove(registry_key_);
}

void completion_job::start() {
  registry_ = ctx_.jobs;
  registry_key_ = registry_->add(weak_from_this());
  const auto& g = spec_.gen;
  uint64_t seed = g.sampling.seed;
  if (!g.has_seed) seed = std::random_device{}() | (static_cast<uint64_t>(std::random_device{}()) << 32);
  for (size_t p = 0; p < spec_.prompts.size(); ++p)
    for (int i = 0; i < g.n; ++i) {
      auto c = std::make_unique<choice>();
      c->index = choices_.size();
      c->prompt = p;
      // Tool-call markers may be special tokens (GLM's are): keep them in the text.
      c->dec = ctx_.source->decoder(!spec_.tools.parse_output());
      c->stops = stop_matcher(g.stop);
      if (spec_.tools.parse_output()) c->tools = std::make_unique<tool_call_parser>(spec_.tool_fmt, spec_.tools);
      if (spec_.echo && g.logprobs >= 0) {
        c->prompt_lps.resize(spec_.prompts[p].size());
        for (size_t i = 0; i < c->prompt_lps.size(); ++i) c->prompt_lps[i] = {spec_.prompts[p][i], 0, {}, i > 0};
      }
      choices_.push_back(std::move(c));
    }
  for (auto& cp : choices_) {
    choice& c = *cp;
    generation_request r;
    r.prompt = spec_.prompts[c.prompt];
    r.sampling = g.sampling;
    r.sampling.seed = seed + c.index;  // n > 1: distinct, yet reproducible samples
    r.max_new_tokens = g.max_tokens.value_or(ctx_.source->max_model_len() - static_cast<int64_t>(r.prompt.size()));
    // max_tokens 0 (echo only): the engine always samples one token; it is dropped.
    if (r.max_new_tokens == 0) r.max_new_tokens = 1;
    r.ignore_eos = g.ignore_eos;
    r.stop_token_ids = g.stop_token_ids;
    r.logprobs = g.logprobs;
    r.presence_penalty = g.presence_penalty;
    r.frequency_penalty = g.frequency_penalty;
    r.logit_bias = g.logit_bias;
    r.grammar = g.grammar;  // response_format's, or the tool calls' (job_builder)
    if (spec_.echo && g.logprobs >= 0) r.prompt_logprobs = g.logprobs;
    r.session = g.user;  // the OpenAI `user` keys session retention of the prefix cache
    // Runs on the generation thread: only hand the event over.
    r.on_event = [self = shared_from_this(), idx = c.index](const token_event& ev) {
      boost::asio::post(self->strand_, [self, idx, ev, at = clock::now()] { self->on_event(idx, ev, at); });
    };
    ++ctx_.in_flight;
    c.engine_id = ctx_.source->submit(std::move(r));
  }
  // After submitting, so in_flight counts the requests before the client sees a byte.
  if (spec_.gen.stream) {
    sink_->begin_stream();
    if (spec_.chat) send_roles();
  }
}

// Chat streams open with a role-only delta per choice, as OpenAI's and vLLM's do.
void completion_job::send_roles() {
  for (auto& c : choices_) {
    boost::json::object chunk = chunk_base();
    boost::json::array arr;
    arr.push_back(choice_json(*c, {}, nullptr, false));
    chunk["choices"] = std::move(arr);
    sink_->stream(sse_event(boost::json::serialize(chunk)));
  }
}

void completion_job::on_event(size_t idx, token_event ev, clock::time_point at) {
  choice& c = *choices_[idx];
  if (!ev.prompt_logprobs.empty()) on_prompt_logprobs(c, ev);
  if (ev.token >= 0 && !c.reason) on_token(c, ev, at);
  if (ev.finished != finish_reason::none) on_end(c, ev);
  maybe_complete();
}

void completion_job::on_token(choice& c, const token_event& ev, clock::time_point at) {
  if (c.tokens == 0) {
    ctx_.metrics.add_prompt_tokens(spec_.prompts[c.prompt].size());
    if (ev.queued_s >= 0) ctx_.metrics.observe_queue(ev.queued_s);
    if (ev.cls != request_class::unknown)
      ctx_.metrics.observe_class(ev.cls == request_class::warm ? "warm" : "cold", seconds(at - arrival_),
                                 ev.queued_s);
    if (first_token_ == clock::time_point{}) {
      first_token_ = at;
      ctx_.metrics.observe_ttft(seconds(at - arrival_));
    }
  }
  const double inter_token = c.tokens > 0 ? seconds(at - c.last_token) : -1;
  c.last_token = at;
  echo_prompt(c);
  if (spec_.gen.max_tokens == 0) return;  // echo only: the one sampled token is not part of the answer
  ++c.tokens;
  ctx_.metrics.add_generated_token(inter_token);  // one lock per token, not two
  // An end-of-generation or stop token finishes the choice; its text is not part of it.
  if (ev.finished == finish_reason::stop) return;
  if (spec_.gen.logprobs >= 0) {
    auto tops = ev.top_logprobs;
    if (tops.size() > static_cast<size_t>(spec_.gen.logprobs)) tops.resize(static_cast<size_t>(spec_.gen.logprobs));
    c.lps.push_back({ev.token, ev.logprob, std::move(tops)});
  }
  feed(c, c.dec->push(ev.token));
}

void completion_job::feed(choice& c, const std::string& text) {
  auto r = c.stops.push(text);
  pass_text(c, std::move(r.text));
  if (r.stopped && !c.reason) {
    if (end_tool_calls(c, false) && !c.reason) finish_choice(c, c.calls.empty() ? "stop" : "tool_calls");
    ctx_.source->cancel(c.engine_id);  // a stop string: the engine need not go on
  }
}

void completion_job::on_end(choice& c, const token_event& ev) {
  if (c.engine_done) return;
  c.engine_done = true;
  --ctx_.in_flight;
  if (!c.reason) {
    switch (ev.finished) {
      case finish_reason::stop:
      case finish_reason::length: {
        echo_prompt(c);
        feed(c, c.dec->flush());
        if (!c.reason) {
          pass_text(c, c.stops.finish().text);
          if (end_tool_calls(c, ev.finished == finish_reason::length) && !c.reason)
            finish_choice(c, !c.calls.empty() ? "tool_calls" : ev.finished == finish_reason::stop ? "stop" : "length");
        }
        break;
      }
      case finish_reason::error:
        fail(ev.error.empty() ? "the engine failed the request" : ev.error);
        break;
      default:
        finish_choice(c, "abort");
        break;
    }
  }
  ctx_.metrics.count_finished(aborted_ ? "abort" : c.reason ? c.reason : "error");
}

void completion_job::release(choice& c, std::string text) {
  if (!spec_.gen.stream) {
    c.text += text;
    return;
  }
  if (text.empty() && c.lps.empty()) return;
  if (c.lps.empty() && (!spec_.chat || c.sent_role)) {
    // A plain text delta (choice_json would have nothing to update): the same bytes
    // without building the DOM (stream_chunk.hpp).
    if (chunk_head_.empty()) chunk_head_ = chunk_head(chunk_base());
    if (!answered_) sink_->stream(text_delta_event(chunk_head_, c.index, spec_.chat, text));
    return;
  }
  boost::json::object chunk = chunk_base();
  boost::json::array arr;
  arr.push_back(choice_json(c, std::move(text), nullptr, false));
  chunk["choices"] = std::move(arr);
  if (!answered_) sink_->stream(sse_event(boost::json::serialize(chunk)));
}

void completion_job::finish_choice(choice& c, const char* reason) {
  c.reason = reason;
  if (!spec_.gen.stream || answered_) return;
  boost::json::object chunk = chunk_base();
  boost::json::array arr;
  arr.push_back(choice_json(c, {}, reason, false));
  chunk["choices"] = std::move(arr);
  sink_->stream(sse_event(boost::json::serialize(chunk)));
}

void completion_job::fail(const std::string& message, int status) {
  // The engine rejects what cannot fit (prompt too long for the KV pool, ...) as an error
  // that names the prompt: the client's fault. Anything else is a server fault.
  if (status == 0) status = message.find("prompt") != std::string::npos ? 400 : 500;
  for (auto& c : choices_)
    if (!c->reason) {
      c->reason = "error";
      if (!c->engine_done) ctx_.source->cancel(c->engine_id);
    }
  if (answered_) return;
  answered_ = true;
  if (spec_.gen.stream) {
    sink_->stream(sse_event(error_body(status, message)));
    sink_->stream(sse_done());
    sink_->end_stream();
  } else {
    sink_->send_json(status, error_body(status, message));
  }
  log_access(status);
}

void completion_job::maybe_complete() {
  if (answered_) return;
  for (const auto& c : choices_)
    if (!c->reason) return;
  answered_ = true;
  if (aborted_) {
    log_access(499);  // nginx's "client closed request": nothing more can be written
    return;
  }
  if (spec_.gen.stream) {
    if (spec_.gen.include_usage) {
      boost::json::object chunk = chunk_base();
      chunk["choices"] = boost::json::array();
      chunk["usage"] = usage();
      sink_->stream(sse_event(boost::json::serialize(chunk)));
    }
    sink_->stream(sse_done());
    sink_->end_stream();
  } else {
    sink_->send_json(200, full_response());
  }
  log_access(200);
}

void completion_job::client_gone() {
  aborted_ = true;
  for (auto& c : choices_)
    if (!c->engine_done) ctx_.source->cancel(c->engine_id);
}

void completion_job::cancel_all() {
  boost::asio::post(strand_, [self = shared_from_this()] {
    for (auto& c : self->choices_)
      if (!c->engine_done) self->ctx_.source->cancel(c->engine_id);
  });
}

}  // namespace tandem::http
