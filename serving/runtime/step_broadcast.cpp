#include "step_broadcast.hpp"

#include <cstring>

#include "tandem/error.hpp"
#include "tandem/logger.hpp"

namespace tandem {
namespace {

constexpr uint8_t message_version = 1;

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t get_u32(std::span<const uint8_t> b, size_t& at) {
  if (at + 4 > b.size()) throw error("rank message: truncated");
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{b[at + i]} << (8 * i);
  at += 4;
  return v;
}

}  // namespace

// version | kind | all_logits | n taps (u32) | taps (i32 each) | step plan (step_plan.hpp)
std::vector<uint8_t> encode(const rank_message& m) {
  std::vector<uint8_t> out{message_version, static_cast<uint8_t>(m.kind), uint8_t{m.options.all_logits}};
  put_u32(out, static_cast<uint32_t>(m.options.hidden_layers.size()));
  for (int l : m.options.hidden_layers) put_u32(out, static_cast<uint32_t>(l));
  if (m.kind == rank_message_kind::step) {
    const std::vector<uint8_t> plan = encode(m.plan);
    out.insert(out.end(), plan.begin(), plan.end());
  }
  return out;
}

rank_message decode_rank_message(std::span<const uint8_t> b) {
  if (b.size() < 3) throw error("rank message: truncated");
  if (b[0] != message_version)
    throw error("rank message: version " + std::to_string(b[0]) + ", this rank speaks " + std::to_string(message_version));
  rank_message m;
  if (b[1] < 1 || b[1] > 3) throw error("rank message: unknown kind " + std::to_string(b[1]));
  m.kind = static_cast<rank_message_kind>(b[1]);
  m.options.all_logits = b[2] != 0;
  size_t at = 3;
  const uint32_t taps = get_u32(b, at);
  if (taps > 4096) throw error("rank message: " + std::to_string(taps) + " hidden-state taps");
  for (uint32_t i = 0; i < taps; ++i) m.options.hidden_layers.push_back(static_cast<int32_t>(get_u32(b, at)));
  if (m.kind == rank_message_kind::step) m.plan = decode_step_plan(b.subspan(at));
  else if (at != b.size()) throw error("rank message: trailing bytes");
  return m;
}

broadcasting_model::broadcasting_model(std::unique_ptr<model> inner, transport& comm, std::chrono::milliseconds heartbeat)
    : inner_(std::move(inner)), comm_(comm), heartbeat_(heartbeat), last_sent_(std::chrono::steady_clock::now()) {
  heartbeat_thread_ = std::thread([this] { heartbeat_loop(); });
}

broadcasting_model::~broadcasting_model() {
  std::unique_lock l(mu_);
  stopping_ = true;
  wake_.notify_all();
  if (!failure_) {
    try {
      send_locked({.kind = rank_message_kind::stop});
    } catch (const std::exception&) {
      // The workers are gone already; there is no one left to stop.
    }
  }
  l.unlock();
  heartbeat_thread_.join();
}

void broadcasting_model::send_locked(const rank_message& m) {
  if (failure_) throw error(*failure_);
  std::vector<uint8_t> bytes = encode(m);
  try {
    comm_.broadcast(bytes, 0);
  } catch (const std::exception& e) {
    failure_ = std::string("the ranks are lost: ") + e.what();
    throw error(*failure_);
  }
  last_sent_ = std::chrono::steady_clock::now();
}

void broadcasting_model::forward(const step_plan& plan, const forward_options& opt) {
  std::lock_guard l(mu_);
  send_locked({.kind = rank_message_kind::step, .options = opt, .plan = plan});
  try {
    inner_->forward(plan, opt);
  } catch (const plugin_error& e) {  // a collective inside the forward failed
    failure_ = std::string("the ranks are lost: ") + e.what();
    throw error(*failure_);
  }
}

std::optional<std::string> broadcasting_model::failure() const {
  std::lock_guard l(mu_);
  return failure_;
}

// Idle workers wait in a broadcast with the transport's timeout: a heartbeat before it runs
// out keeps them waiting, and notices a worker that died while nothing ran.
void broadcasting_model::heartbeat_loop() {
  std::unique_lock l(mu_);
  while (!stopping_ && !failure_) {
    wake_.wait_until(l, last_sent_ + heartbeat_);
    if (stopping_ || failure_) break;
    if (std::chrono::steady_clock::now() < last_sent_ + heartbeat_) continue;
    try {
      send_locked({.kind = rank_message_kind::heartbeat});
    } catch (const std::exception& e) {
      default_logger().error(e.what());
    }
  }
}

void run_worker_loop(model& m, transport& comm) {
  for (;;) {
    std::vector<uint8_t> bytes;
    comm.broadcast(bytes, 0);
    rank_message msg = decode_rank_message(bytes);
    switch (msg.kind) {
      case rank_message_kind::heartbeat: continue;
      case rank_message_kind::stop: return;
      case rank_message_kind::step:
        try {
          m.forward(msg.plan, msg.options);
        } catch (const plugin_error&) {
          throw;  // the transport: rank 0 or a peer is gone
        } catch (const std::exception& e) {
          // A plan the model refuses fails on rank 0 too, before any collective (the same
          // checks on the same plan): the step's requests end there; this rank goes on.
          default_logger().warn(std::string("worker: step refused: ") + e.what());
        }
        break;
    }
  }
}

}  // namespace tandem
