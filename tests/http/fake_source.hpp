#pragma once
// fake_source: a scripted completion source for the HTTP-layer tests only. Tokens are
// bytes (id = byte value), 256 is end-of-generation; every request "generates" the reply
// text byte by byte, one token per tick, then 256. Honors max_new_tokens, cancel,
// stop_token_ids and logprobs, from its own generation thread like the real engine.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "completion_source.hpp"

namespace tandem::test {

class byte_decoder final : public text_decoder {
 public:
  std::string push(int32_t id) override { return id < 256 ? std::string(1, static_cast<char>(id)) : std::string(); }
  std::string flush() override { return {}; }
};

class fake_source final : public completion_source {
 public:
  static constexpr int32_t eos = 256;

  explicit fake_source(std::string reply, std::chrono::milliseconds tick = std::chrono::milliseconds(1))
      : reply_(std::move(reply)), tick_(tick), thread_([this] { loop(); }) {}
  ~fake_source() override { shutdown(); }

  int64_t pool_tokens_ = 0;  // what kv_pool_tokens() reports (0 = unknown)

  source_state state() const override { return state_; }
  void set_state(source_state s) { state_ = s; }
  const std::string& model_name() const override { return model_; }
  int64_t max_model_len() const override { return max_len_; }
  int64_t kv_pool_tokens() const override { return pool_tokens_; }
  int32_t vocab_size() const override { return 257; }
  std::vector<int32_t> encode(std::string_view text) const override { return {text.begin(), text.end()}; }
  // The "template": with renders_tools, the tools JSON first; then each message's content
  // (and its tool calls' JSON).
  std::vector<int32_t> chat_tokens(std::span<const chat_message> messages, const std::string& tools_json) const override {
    std::vector<int32_t> ids(tools_json.begin(), tools_json.end());
    for (const auto& m : messages) {
      if (m.role == "tool" && m.tool_call_id.empty()) throw error("a tool message needs tool_call_id");
      ids.insert(ids.end(), m.content.begin(), m.content.end());
      ids.insert(ids.end(), m.tool_calls_json.begin(), m.tool_calls_json.end());
    }
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) s += byte_decoder().push(id);
    return s;
  }
  std::string token_bytes(int32_t id) const override { return byte_decoder().push(id); }
  std::unique_ptr<text_decoder> decoder(bool) const override { return std::make_unique<byte_decoder>(); }
  bool template_renders_tools() const override { return renders_tools_; }
  std::string chat_template_source() const override { return template_source_; }
  std::atomic<bool> renders_tools_{true};
  std::atomic<int64_t> max_len_{64};
  std::string template_source_;  // set before the server starts

  uint64_t submit(generation_request r) override {
    std::lock_guard l(mu_);
    const uint64_t id = next_++;
    last_ = r;
    last_.on_event = nullptr;
    queue_.push_back({id, std::move(r), 0});
    ++submitted_;
    cv_.notify_one();
    return id;
  }
  void cancel(uint64_t id) override {
    std::lock_guard l(mu_);
    cancels_.push_back(id);
    ++cancelled_;
    cv_.notify_one();
  }
  source_stats stats() const override {
    std::lock_guard l(mu_);
    return {queue_.size(), 0, 0, 0.5};
  }
  void shutdown() override {
    stop_ = true;
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
    std::lock_guard l(mu_);
    queue_.clear();
  }

  std::atomic<int> submitted_{0}, cancelled_{0};
  // The last request submitted (without its callback), for tests to inspect.
  generation_request last_submitted() const {
    std::lock_guard l(mu_);
    return last_;
  }

 private:
  struct live {
    uint64_t id;
    generation_request req;
    int64_t produced;
  };

  // One tick: every live request advances one token (as one engine step would).
  void loop() {
    while (!stop_) {
      std::vector<live> work;
      std::vector<uint64_t> cancels;
      {
        std::unique_lock l(mu_);
        cv_.wait_for(l, tick_, [this] { return stop_ || !queue_.empty() || !cancels_.empty(); });
        work.swap(queue_);
        cancels.swap(cancels_);
      }
      std::vector<live> keep;
      for (auto& w : work) {
        if (std::find(cancels.begin(), cancels.end(), w.id) != cancels.end()) {
          w.req.on_event({w.id, -1, finish_reason::cancelled, {}});
          continue;
        }
        if (advance(w)) keep.push_back(std::move(w));
      }
      std::this_thread::sleep_for(tick_);
      std::lock_guard l(mu_);
      for (auto& k : keep) queue_.push_back(std::move(k));
    }
  }

  bool advance(live& w) {
    const auto pos = static_cast<size_t>(w.produced);
    if (pos == 0 && w.req.prompt_logprobs >= 0 && w.req.prompt.size() > 1) {
      // Prompt position i (i >= 1) gets logprob -i/4, top alternatives 'a', 'b', ...
      token_event pe{w.id, -1, finish_reason::none, {}};
      for (size_t i = 1; i < w.req.prompt.size(); ++i) {
        prompt_token_logprob lp{static_cast<int64_t>(i), -0.25f * static_cast<float>(i), {}};
        for (int k = 0; k < w.req.prompt_logprobs; ++k) lp.top.push_back({'a' + k, -1.0f - k});
        pe.prompt_logprobs.push_back(std::move(lp));
      }
      w.req.on_event(pe);
    }
    const int32_t tok = pos < reply_.size() ? static_cast<unsigned char>(reply_[pos]) : eos;
    ++w.produced;
    token_event ev{w.id, tok, finish_reason::none, {}};
    const auto& stops = w.req.stop_token_ids;
    if ((tok == eos && !w.req.ignore_eos) || std::find(stops.begin(), stops.end(), tok) != stops.end())
      ev.finished = finish_reason::stop;
    else if (w.produced >= w.req.max_new_tokens)
      ev.finished = finish_reason::length;
    if (w.req.logprobs >= 0) {
      ev.logprob = -0.25f;
      for (int k = 0; k < w.req.logprobs; ++k) ev.top_logprobs.push_back({'a' + k, -1.0f - k});
    }
    if (pos == 0) ev.queued_s = 0.001;
    w.req.on_event(ev);
    return ev.finished == finish_reason::none;
  }

  std::string reply_, model_ = "fake-model";
  std::chrono::milliseconds tick_;
  std::atomic<source_state> state_{source_state::ready};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<live> queue_;
  std::vector<uint64_t> cancels_;
  uint64_t next_ = 1;
  generation_request last_;
  std::thread thread_;
};

}  // namespace tandem::test
