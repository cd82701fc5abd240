// runtime_source: the real completion source — a runtime opened from a pipeline on a
// loader thread, then its engine driven by one engine thread.
#include <atomic>
#include <mutex>
#include <thread>

#include "completion_source.hpp"
#include "tandem/logger.hpp"
#include "tandem/runtime.hpp"
#include "tandem/stream_decoder.hpp"

namespace tandem {
namespace {

class runtime_decoder final : public text_decoder {
 public:
  explicit runtime_decoder(const tokenizer& tok) : dec_(tok, /*skip_special=*/true) {}
  std::string push(int32_t id) override { return dec_.push(id); }
  std::string flush() override { return dec_.flush(); }

 private:
  stream_decoder dec_;
};

class runtime_source final : public completion_source {
 public:
  runtime_source(std::string pipeline, runtime_options opt) {
    loader_ = std::thread([this, p = std::move(pipeline), o = std::move(opt)] { load(p, o); });
  }
  ~runtime_source() override { shutdown(); }

  source_state state() const override { return state_; }
  std::string failure() const override {
    std::lock_guard l(mu_);
    return failure_;
  }
  std::vector<std::string> summary() const override { return rt_ ? rt_->summary() : std::vector<std::string>{}; }

  const std::string& model_name() const override { return rt_->model_name(); }
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
  std::vector<int32_t> chat_tokens(std::span<const chat_message> messages) const override {
    return rt_->tokens_for_chat(messages);
  }
  std::string decode(std::span<const int32_t> ids) const override { return rt_->tok().decode(ids); }
  std::string token_bytes(int32_t id) const override { return rt_->tok().token_bytes(id); }
  std::unique_ptr<text_decoder> decoder() const override { return std::make_unique<runtime_decoder>(rt_->tok()); }

  uint64_t submit(generation_request r) override { return rt_->eng().submit(std::move(r)); }
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
    engine_thread_ = std::thread([this] { run_engine(); });
    state_ = source_state::ready;
  }

  // The one thread that steps the engine; token callbacks run here.
  void run_engine() {
    try {
      while (!stopping_) {
        if (!rt_->eng().step()) rt_->eng().wait_for_work(std::chrono::milliseconds(50));
        snapshot();
      }
    } catch (const std::exception& e) {
      die(std::string("engine thread stopped: ") + e.what());
    }
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
  }

  void die(std::string why) {
    default_logger().error(why);
    {
      std::lock_guard l(mu_);
      failure_ = std::move(why);
    }
    state_ = source_state::dead;
  }

  std::unique_ptr<runtime> rt_;
  std::atomic<source_state> state_{source_state::loading};
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::string failure_;
  source_stats stats_;
  std::thread loader_, engine_thread_;
};

}  // namespace

std::shared_ptr<completion_source> make_runtime_source(std::string pipeline, runtime_options opt) {
  return std::make_shared<runtime_source>(std::move(pipeline), std::move(opt));
}

}  // namespace tandem
