#include "gloo_transport.hpp"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <cmath>
#include <cstdio>

#include "tandem/error.hpp"
#include "tcp_store.hpp"

namespace tandem {
namespace {

constexpr const char* plugin = "transport.gloo";

size_t bytes_of(const tensor_view& t) {
  return static_cast<size_t>(t.numel() / traits(t.type).block_elems * traits(t.type).block_bytes);
}

void require_host(const tensor_view& t, const char* what) {
  if (t.dev.kind != device_kind::cpu)
    throw plugin_error(plugin, std::string(what) + ": only host tensors (transport.gloo serves backend.cpu)");
}

}  // namespace

gloo_settings gloo_settings::from(const config& cfg) {
  gloo_settings s;
  s.rank = static_cast<int>(cfg.get_int("rank"));
  s.world_size = static_cast<int>(cfg.get_int("world_size"));
  s.rendezvous = cfg.get_string("rendezvous");
  s.host = cfg.get_string("host");
  s.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::llround(cfg.get_number("timeout_s") * 1000)));
  s.profile = cfg.has("profile") && cfg.get_bool("profile");
  return s;
}

gloo_transport::gloo_transport(const gloo_settings& s) : rank_(s.rank), world_(s.world_size), timeout_(s.timeout) {
  if (s.profile) profile_.emplace();
  if (rank_ < 0 || rank_ >= world_)
    throw plugin_error(plugin, "rank " + std::to_string(rank_) + " is outside a world of " + std::to_string(world_));
  const auto [store_host, port] = gloo_detail::parse_endpoint(s.rendezvous, "rendezvous");
  if (rank_ == 0) store_server_ = std::make_unique<gloo_detail::tcp_store_server>(store_host, port);
  try {
    gloo_detail::tcp_store store(store_host, port, timeout_);
    ::gloo::transport::tcp::attr attr;
    attr.hostname = s.host;
    auto dev = ::gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<::gloo::rendezvous::Context>(rank_, world_);
    ctx->setTimeout(timeout_);
    ctx->connectFullMesh(store, dev);
    ctx_ = std::move(ctx);
  } catch (const ::gloo::Exception& e) {
    throw plugin_error(plugin, "rendezvous of rank " + std::to_string(rank_) + " of " + std::to_string(world_) +
                                   " at " + s.rendezvous + " failed: " + e.what());
  }
}

gloo_transport::~gloo_transport() {
  if (!profile_) return;
  std::string line = "transport.gloo rank " + std::to_string(rank_) + " collectives:";
  for (const auto& [what, t] : *profile_)
    line += " " + what + " " + std::to_string(t.calls) + " calls " + std::to_string(t.seconds) + " s;";
  std::fprintf(stderr, "%s\n", line.c_str());
}

// Gloo reports a closed connection as IoException and a peer that does not answer in time
// as a timeout, from whichever call meets it; both become one plugin_error naming the call.
template <class F>
void gloo_transport::guarded(const char* what, F&& op) {
  try {
    const auto start = std::chrono::steady_clock::now();
    op();
    if (profile_) {
      call_time& t = (*profile_)[what];
      ++t.calls;
      t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  } catch (const ::gloo::Exception& e) {
    throw plugin_error(plugin, std::string(what) + " on rank " + std::to_string(rank_) +
                                   " failed (a rank died or stalled past timeout_s): " + e.what());
  }
}

void gloo_transport::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= world_ || peer == rank_)
    throw plugin_error(plugin, std::string(what) + ": peer " + std::to_string(peer) + " is not another rank of " +
                                   std::to_string(world_));
}

void gloo_transport::broadcast(std::vector<uint8_t>& bytes, int root) {
  if (root < 0 || root >= world_) throw plugin_error(plugin, "broadcast: root " + std::to_string(root) + " is not a rank");
  // The size first, so the receivers can size their buffer.
  uint64_t n = bytes.size();
  guarded("broadcast", [&] {
    ::gloo::BroadcastOptions o(ctx_);
    o.setRoot(root);
    o.setOutput(&n, 1);
    o.setTimeout(timeout_);
    ::gloo::broadcast(o);
  });
  bytes.resize(n);
  if (n == 0) return;
  guarded("broadcast", [&] {
    ::gloo::BroadcastOptions o(ctx_);
    o.setRoot(root);
    o.setOutput(bytes.data(), bytes.size());
    o.setTimeout(timeout_);
    ::gloo::broadcast(o);
  });
}

void gloo_transport::all_reduce_sum(tensor_view inout) {
  require_host(inout, "all_reduce_sum");
  if (inout.type != dtype::f32)
    throw plugin_error(plugin, "all_reduce_sum: f32 tensors only (got " + std::string(traits(inout.type).name) + ")");
  if (!inout.is_contiguous()) throw plugin_error(plugin, "all_reduce_sum: the tensor must be contiguous");
  if (inout.numel() == 0) return;
  float* p = static_cast<float*>(inout.data);
  guarded("all_reduce_sum", [&] {
    ::gloo::AllreduceOptions o(ctx_);
    o.setOutput(p, static_cast<size_t>(inout.numel()));
    o.setReduceFunction(::gloo::AllreduceOptions::Func(
        [](void* c, const void* a, const void* b, size_t n) {
          ::gloo::sum<float>(c, a, b, n);
        }));
    o.setTimeout(timeout_);
    ::gloo::allreduce(o);
  });
}

void gloo_transport::all_gather(tensor_view in, tensor_view out) {
  require_host(in, "all_gather");
  require_host(out, "all_gather");
  if (in.type != out.type) throw plugin_error(plugin, "all_gather: input and output types differ");
  if (!in.is_contiguous() || !out.is_contiguous()) throw plugin_error(plugin, "all_gather: tensors must be contiguous");
  const size_t n = bytes_of(in);
  if (bytes_of(out) != n * static_cast<size_t>(world_))
    throw plugin_error(plugin, "all_gather: the output must hold world_size (" + std::to_string(world_) +
                                   ") inputs");
  guarded("all_gather", [&] {
    ::gloo::AllgatherOptions o(ctx_);
    o.setInput(static_cast<uint8_t*>(in.data), n);
    o.setOutput(static_cast<uint8_t*>(out.data), n * static_cast<size_t>(world_));
    o.setTimeout(timeout_);
    ::gloo::allgather(o);
  });
}

void gloo_transport::all_to_all(tensor_view in, std::span<const int64_t> send_rows, tensor_view out,
                                std::span<const int64_t> recv_rows) {
  require_host(in, "all_to_all");
  require_host(out, "all_to_all");
  const auto row = static_cast<int64_t>(all_to_all_row_bytes(plugin, rank_, world_, in, send_rows, out, recv_rows));
  // Gloo's alltoallv counts elements; here an element is a byte.
  std::vector<int64_t> send_bytes(send_rows.begin(), send_rows.end()), recv_bytes(recv_rows.begin(), recv_rows.end());
  for (int64_t& b : send_bytes) b *= row;
  for (int64_t& b : recv_bytes) b *= row;
  guarded("all_to_all", [&] {
    ::gloo::AlltoallvOptions o(ctx_);
    o.setInput(static_cast<uint8_t*>(in.data), send_bytes);
    o.setOutput(static_cast<uint8_t*>(out.data), recv_bytes);
    o.setTimeout(timeout_);
    ::gloo::alltoallv(o);
  });
}

void gloo_transport::send(tensor_view t, int peer) {
  require_host(t, "send");
  check_peer(peer, "send");
  guarded("send", [&] {
    auto buf = ctx_->createUnboundBuffer(t.data, bytes_of(t));
    buf->send(peer, p2p_tag_);
    buf->waitSend(timeout_);
  });
}

void gloo_transport::recv(tensor_view t, int peer) {
  require_host(t, "recv");
  check_peer(peer, "recv");
  guarded("recv", [&] {
    auto buf = ctx_->createUnboundBuffer(t.data, bytes_of(t));
    buf->recv(peer, p2p_tag_);
    buf->waitRecv(timeout_);
  });
}

void gloo_transport::barrier() {
  guarded("barrier", [&] {
    ::gloo::BarrierOptions o(ctx_);
    o.setTimeout(timeout_);
    ::gloo::barrier(o);
  });
}

}  // namespace tandem
