#pragma once
// transport.gloo: the ranks of one pipeline over Gloo's TCP transport (Debian libgloo-dev).
// Rank 0 serves the rendezvous store (tcp_store) on `rendezvous`; every rank connects a full
// mesh of Gloo pairs through it. Collectives take host tensors (backend.cpu's memory).
//
// With `profile`, each collective's calls and wall time (waiting for the slowest rank
// included) are summed and printed at exit: bench/ranks reads them as the collectives' share.
//
// Every collective has `timeout_s`: a peer that dies (its connection closes) or stalls makes
// the call throw plugin_error naming the operation, instead of blocking the caller forever.
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "tandem/config.hpp"
#include "tandem/transport.hpp"

namespace gloo {
class Context;
}

namespace tandem {
namespace gloo_detail {
class tcp_store_server;
}

struct gloo_settings {
  int rank = 0, world_size = 1;
  std::string rendezvous = "127.0.0.1:29500";  // rank 0's store, HOST:PORT
  std::string host = "127.0.0.1";              // address this rank's Gloo pairs listen on
  std::chrono::milliseconds timeout{30000};
  bool profile = false;  // time every collective; the totals go to stderr at exit

  static gloo_settings from(const config& cfg);
};

class gloo_transport final : public transport {
 public:
  // Rendezvous with every other rank (blocks until all have joined, or the timeout).
  explicit gloo_transport(const gloo_settings& s);
  ~gloo_transport() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void broadcast(std::vector<uint8_t>& bytes, int root) override;
  void all_reduce_sum(tensor_view inout) override;
  void all_gather(tensor_view in, tensor_view out) override;
  using transport::all_to_all;
  void all_to_all(tensor_view in, std::span<const int64_t> send_rows, tensor_view out,
                  std::span<const int64_t> recv_rows) override;
  void send(tensor_view t, int peer) override;
  void recv(tensor_view t, int peer) override;
  void barrier() override;

 private:
  template <class F>
  void guarded(const char* what, F&& op);
  void check_peer(int peer, const char* what) const;

  int rank_, world_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<gloo_detail::tcp_store_server> store_server_;  // rank 0 only
  std::shared_ptr<::gloo::Context> ctx_;
  uint32_t p2p_tag_ = 0;
  struct call_time {
    int64_t calls = 0;
    double seconds = 0;
  };
  std::optional<std::map<std::string, call_time>> profile_;  // set when profiling
};

}  // namespace tandem
