#pragma once
// How rank 0 drives the other ranks: each engine step's plan and forward options are
// broadcast before rank 0 runs its own share of the forward; between steps, a heartbeat
// tells idle workers rank 0 is alive; on shutdown, a stop.
//
//   rank 0:  auto m = broadcasting_model::wrap(std::move(model), comm, heartbeat);  // the engine's model
//   others:  run_worker_loop(model, comm);                                         // until stop
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tandem/model.hpp"
#include "tandem/transport.hpp"

namespace tandem {

enum class rank_message_kind : uint8_t { step = 1, heartbeat = 2, stop = 3 };

struct rank_message {
  rank_message_kind kind = rank_message_kind::step;
  forward_options options;
  step_plan plan;
};

std::vector<uint8_t> encode(const rank_message& m);
// tandem::error on malformed bytes.
rank_message decode_rank_message(std::span<const uint8_t> bytes);

// Rank 0's model: forward() broadcasts the step, then computes rank 0's share (whose
// collectives meet the workers'). A transport failure (a worker died or stalled) fails that
// forward and every later one with the same message, so in-flight and later requests end
// with an error instead of waiting. Every other call goes to the wrapped model.
class broadcasting_model final : public model {
 public:
  broadcasting_model(std::unique_ptr<model> inner, transport& comm, std::chrono::milliseconds heartbeat);
  ~broadcasting_model() override;  // tells the workers to stop (when they still listen)

  const model_info& info() const override { return inner_->info(); }
  std::vector<backend_op> required_ops() const override { return inner_->required_ops(); }
  kv_spec kv_needs() const override { return inner_->kv_needs(); }
  void allocate_kv(int64_t kv_pages, int page_size) override { inner_->allocate_kv(kv_pages, page_size); }
  void set_kv_type(dtype t) override { inner_->set_kv_type(t); }
  void forward(const step_plan& plan, const forward_options& opt = {}) override;
  std::vector<int32_t> sample(const std::vector<sampling_params>& params) override { return inner_->sample(params); }
  std::vector<float> logits_to_host() const override { return inner_->logits_to_host(); }
  int64_t logit_rows() const override { return inner_->logit_rows(); }
  tensor_view hidden_states(int i = -1) const override { return inner_->hidden_states(i); }

  // Why the ranks are lost; nullopt while they are fine. Any thread.
  std::optional<std::string> failure() const;

 private:
  void send_locked(const rank_message& m);  // mu_ held; records a failure and rethrows
  void heartbeat_loop();

  std::unique_ptr<model> inner_;
  transport& comm_;
  std::chrono::milliseconds heartbeat_;
  mutable std::mutex mu_;            // one collective sequence at a time
  std::condition_variable wake_;
  std::chrono::steady_clock::time_point last_sent_;
  std::optional<std::string> failure_;
  bool stopping_ = false;
  std::thread heartbeat_thread_;
};

// A worker's loop: receive, forward, until rank 0 says stop (returns) or goes away
// (plugin_error from the transport).
void run_worker_loop(model& m, transport& comm);

}  // namespace tandem
