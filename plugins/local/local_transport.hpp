#pragma once
// transport.local: a world of one rank. Collectives are identities; point-to-point has
// no peer and is an error.
#include "tandem/transport.hpp"

namespace tandem {

class local_transport final : public transport {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void broadcast(std::vector<uint8_t>& bytes, int root) override;
  void all_reduce_sum(tensor_view inout) override;
  void all_gather(tensor_view in, tensor_view out) override;
  using transport::all_to_all;
  void all_to_all(tensor_view in, std::span<const int64_t> send_rows, tensor_view out,
                  std::span<const int64_t> recv_rows) override;
  void send(tensor_view t, int peer) override;
  void recv(tensor_view t, int peer) override;
  void barrier() override {}
  bool identity() const override { return true; }
};

}  // namespace tandem
