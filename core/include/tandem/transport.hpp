#pragma once
// transport: collectives and point-to-point between the ranks of one pipeline.
//
//   auto t = host.create<transport>("transport.local", cfg);
//   t->broadcast(plan_bytes, 0);     // rank 0's step plan reaches every rank
//   t->all_reduce_sum(partial);      // tensor-parallel partial sums
//
// All calls are collective unless noted: every rank calls them in the same order.
#include <cstdint>
#include <vector>

#include "tandem/export.hpp"
#include "tandem/plugin_abi.hpp"
#include "tandem/tensor_view.hpp"

namespace tandem {

class TANDEM_API transport : public plugin_object {
 public:
  ~transport() override;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // bytes on `root` are copied to every rank (resized there).
  virtual void broadcast(std::vector<uint8_t>& bytes, int root) = 0;
  // inout = sum over ranks of inout (f32/f16/bf16).
  virtual void all_reduce_sum(tensor_view inout) = 0;
  // out = concatenation over ranks of in along dim 0.  out: [world * n, ...]
  virtual void all_gather(tensor_view in, tensor_view out) = 0;
  // Point-to-point (not collective).
  virtual void send(tensor_view t, int peer) = 0;
  virtual void recv(tensor_view t, int peer) = 0;
  virtual void barrier() = 0;
};

}  // namespace tandem
