#pragma once
// transport.nccl: the ranks of one pipeline over NCCL, for GPU ranks. The communicator is
// bootstrapped over Gloo's rendezvous store (plugins/gloo/tcp_store): rank 0 serves it on
// `rendezvous`, makes the ncclUniqueId and puts it there; the other ranks read it. A world of
// one needs no store (the single-H200 case: the same code path on a one-rank communicator).
//
// Collectives take device tensors (backend.cuda's memory) and are enqueued on the bound
// stream (bind_stream: the backend's, so they are ordered with its kernels; else a stream of
// the transport's own). broadcast() of host bytes goes through a device staging buffer.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0) and every call waits for its
// work with `timeout_s`: a peer that dies or stalls makes the call abort the communicator and
// throw plugin_error naming the operation, instead of blocking forever; every later call then
// fails at once with the same reason.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "tandem/config.hpp"
#include "tandem/transport.hpp"

namespace tandem {
namespace gloo_detail {
class tcp_store_server;
}

struct nccl_settings {
  int rank = 0, world_size = 1;
  int device = 0;                               // the CUDA device this rank's GPU is
  std::string rendezvous = "127.0.0.1:29500";  // rank 0's store, HOST:PORT
  std::chrono::milliseconds timeout{30000};

  static nccl_settings from(const config& cfg);
};

class nccl_transport final : public transport {
 public:
  // Makes the communicator with every other rank (blocks until all joined, or the timeout).
  explicit nccl_transport(const nccl_settings& s);
  ~nccl_transport() override;

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

  // Enqueue the collectives on `stream` (a cudaStream_t: backend.cuda's native_stream());
  // null: the transport's own stream.
  void bind_stream(void* stream) override;
  cudaStream_t stream() const { return stream_; }

 private:
  void check(ncclResult_t r, const char* what);  // a call's result; waits out ncclInProgress
  void finish(const char* what);                 // waits for the stream's work, bounded
  [[noreturn]] void abort_with(std::string why);
  void require_usable(const char* what) const;
  void* staging(size_t bytes);                   // device bytes for broadcast()

  int rank_, world_, device_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<gloo_detail::tcp_store_server> store_server_;  // rank 0 of a world > 1
  ncclComm_t comm_ = nullptr;
  cudaStream_t own_stream_ = nullptr, stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  std::optional<std::string> failure_;  // set once the communicator was aborted
};

}  // namespace tandem
