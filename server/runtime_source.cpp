// runtime_source: the real completion source — a runtime opened from a pipeline on a
// loader thread, then its engine driven by one engine thread.
#include <pthread.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "completion_source.hpp"
#include "event_relay.hpp"
#include "grammar_vocabulary.hpp"
#include "tandem/chat_prompt.hpp"
#include "tandem/logger.hpp"
#include "tandem/pipeline.hpp"
#include "tandem/error.hpp"
#include "tandem/runtime.hpp"
#include "tandem/stream_decoder.hpp"

namespace tandem {
namespace {

class runtime_decoder final : public text_decoder {
 public:
  runtime_decoder(const tokenizer& tok, bool skip_special) : dec_(tok, skip_special) {}
  std::string push(int32_t id) override { return dec_.push(id); }
  std::string flush() override { return dec_.flush(); }

 private:
  stream_decoder dec_;
};

class runtime_source final : public completion_source {
 public:
  runtime_source(std::string pipeline, runtime_options opt, source_options so) : so_(std::move(so)) {
    // A replacement template is parsed here, so a broken one fails before anything loads.
    if (!so_.chat_template.empty()) template_override_ = std::make_unique<chat_template>(so_.chat_template);
    loader_ = std::thread([this, p = std::move(pipeline), o = std::move(opt)] { load(p, o); });
  }
  ~runtime_source() override { shutdown(); }

  source_state state() const override { return state_; }
  std::string failure() const override {
    std::lock_guard l(mu_);
    return failure_;
  }
  std::string unhealthy() const override {
    return state_ == source_state::ready ? rt_->ranks_failure() : std::string();
  }
  std::vector<std::string> summary() const override { return rt_ ? rt_->summary() : std::vector<std::string>{}; }

  const std::string& model_name() const override {
    return so_.served_model_name.empty() ? rt_->model_name() : so_.served_model_name;
  }
  int64_t max_model_len() const override { return rt_->max_model_len(); }
  int64_t kv_pool_tokens() const override { return rt_->kv_pool_tokens(); }
  int32_t vocab_size() const override { return rt_->tok().vocab_size(); }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    if (rt_->tok().add_bos() && rt_->tok().bos() >= 0) ids.push_back(rt_->tok().bos());
    auto body = rt_->tok().encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }
  std::vector<int32_t> chat_tokens(std::span<const chat_message> messages, const std::string& tools_json) const override {
    chat_render_options o = render_options();
    o.tools_json = tools_json;
    std::vector<int32_t> ids;
    if (rt_->tok().add_bos() && rt_->tok().bos() >= 0) ids.push_back(rt_->tok().bos());
    // Message content stays plain text unless the pipeline says otherwise (chat_prompt.hpp).
    const chat_prompt_options p{.parse_special_in_content = rt_->spec().chat.get_bool("parse_special_in_content")};
    const std::vector<int32_t> body = encode_chat_prompt(rt_->tok(), chat(), messages, o, p);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }
  std::string chat_template_source() const override {
    const chat_template* t = template_override_ ? template_override_.get() : rt_->chat();
    return t ? t->source() : std::string();
  }
  bool template_renders_tools() const override { return renders_tools_; }
  std::string decode(std::span<const int32_t> ids) const override { return rt_->tok().decode(ids); }
  std::string token_bytes(int32_t id) const override { return rt_->tok().token_bytes(id); }
  const grammar_compiler* grammar() const override {
    std::call_once(grammar_once_, [this] { grammar_ = std::make_unique<grammar_compiler>(grammar_vocabulary_of(rt_->tok())); });
    return grammar_.get();
  }
  std::unique_ptr<text_decoder> decoder(bool skip_special) const override {
    return std::make_unique<runtime_decoder>(rt_->tok(), skip_special);
  }

  uint64_t submit(generation_request r) override {
    if (r.on_event) r.on_event = relay_.wrap(std::move(r.on_event));  // delivered after the step
    return rt_->eng().submit(std::move(r));
  }
  void cancel(uint64_t id) override { rt_->eng().cancel(id); }
  bool reset_prefix_cache() override {
    if (state_ != source_state::ready) return false;
    rt_->eng().reset_prefix_cache();
    return true;
  }
  source_stats stats() const override {
    std::lock_guard l(mu_);
    return stats_;
  }

  void shutdown() override {
    stopping_ = true;
    if (loader_.joinable()) loader_.join();
    if (engine_thread_.joinable()) engine_thread_.join();
    relay_.stop();  // the events the engine emitted last reach their connections
    if (rt_) {
      // Pending requests hold callbacks bound to the server's sockets: drop them now.
      state_ = source_state::dead;
      std::lock_guard l(mu_);
      failure_ = "shut down";
    }
    rt_.reset();
  }

 private:
  void load(const std::string& pipeline, const runtime_options& opt) {
    try {
      rt_ = runtime::open(pipeline, opt);
    } catch (const std::exception& e) {
      die(e.what());
      return;
    }
    if (stopping_) return;
    renders_tools_ = probe_tools();
    engine_thread_ = std::thread([this] { run_engine(); });
    state_ = source_state::ready;
  }

  // The one thread that steps the engine; token callbacks run here.
  void run_engine() {
    pthread_setname_np(pthread_self(), "tandem-engine");  // top -H, perf and /proc tell the threads apart
    try {
      while (!stopping_) {
        if (!rt_->eng().step()) rt_->eng().wait_for_work(std::chrono::milliseconds(50));
        relay_.flush();  // this step's token events, handed to the I/O side at once
        snapshot();
      }
    } catch (const std::exception& e) {
      die(std::string("engine thread stopped: ") + e.what());
    }
    relay_.flush();
  }

  // engine::stats() reads state only the engine thread may touch, so it is read here.
  void snapshot() {
    const engine_stats s = rt_->eng().stats();
    std::lock_guard l(mu_);
    stats_.running = s.running;
    stats_.waiting = s.waiting;
    stats_.preemptions = s.preemptions;
    stats_.kv_usage = s.kv_pages_total > 0 ? static_cast<double>(s.kv_pages_used) / static_cast<double>(s.kv_pages_total) : 0;
    stats_.kv_cached = s.kv_pages_total > 0 ? static_cast<double>(s.kv_pages_cached) / static_cast<double>(s.kv_pages_total) : 0;
    stats_.prefix_queries = s.prefix_queries;
    stats_.prefix_hits = s.prefix_hits;
    stats_.hold_events = s.hold_events;
    stats_.aging_escapes = s.aging_escapes;
    stats_.capped_steps = s.capped_steps;
    stats_.pages_evicted = s.pages_evicted;
    stats_.spec_drafts = s.spec_drafts;
    stats_.spec_draft_tokens = s.spec_draft_tokens;
    stats_.spec_accepted_tokens = s.spec_accepted_tokens;
    stats_.spec_accepted_per_pos = s.spec_accepted_per_pos;
  }

  const chat_template& chat() const {
    if (template_override_) return *template_override_;
    if (!rt_->chat()) throw model_error(rt_->model_name(), "the model has no chat template");
    return *rt_->chat();
  }

  chat_render_options render_options() const {
    chat_render_options o;
    const tokenizer& t = rt_->tok();
    if (t.bos() >= 0) o.bos_token = t.token_bytes(t.bos());
    if (t.eos() >= 0) o.eos_token = t.token_bytes(t.eos());
    return o;
  }

  // Whether the template puts `tools` into the prompt: render a one-message conversation
  // with a tool of an unlikely name and look for it (llama.cpp detects support the same way).
  bool probe_tools() const {
    constexpr const char* name = "tandem_probe_function_7f3a";
    chat_render_options o = render_options();
    o.tools_json = std::string(R"([{"type":"function","function":{"name":")") + name +
                   R"(","description":"probe","parameters":{"type":"object","properties":{}}}}])";
    const chat_message user{"user", "hello"};
    try {
      return chat().render(std::span(&user, 1), o).find(name) != std::string::npos;
    } catch (const std::exception&) {
      return false;  // no template, or one that rejects the probe: the server writes the tools
    }
  }

  void die(std::string why) {
    default_logger().error(why);
    {
      std::lock_guard l(mu_);
      failure_ = std::move(why);
    }
    state_ = source_state::dead;
  }

  source_options so_;
  std::unique_ptr<chat_template> template_override_;
  bool renders_tools_ = false;  // set before the source is ready
  std::unique_ptr<runtime> rt_;
  std::atomic<source_state> state_{source_state::loading};
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::string failure_;
  source_stats stats_;
  http::event_relay relay_;  // before the threads: they use it
  std::thread loader_, engine_thread_;
  mutable std::once_flag grammar_once_;
  mutable std::unique_ptr<grammar_compiler> grammar_;
};

}  // namespace

std::shared_ptr<completion_source> make_runtime_source(std::string pipeline, runtime_options opt, source_options so) {
  return std::make_shared<runtime_source>(std::move(pipeline), std::move(opt), std::move(so));
}

}  // namespace tandem
