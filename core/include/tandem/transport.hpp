#pragma once
// transport: collectives and point-to-point between the ranks of one pipeline.
//
//   auto t = host.create<transport>("transport.local", cfg);
//   t->broadcast(plan_bytes, 0);     // rank 0's step plan reaches every rank
//   t->all_reduce_sum(partial);      // tensor-parallel partial sums
//
// All calls are collective unless noted: every rank calls them in the same order.
//
// What a transport serves is declared in its plugin schema, so `tandem validate` checks a
// topology without making one (see transport_keys below):
//   world_size  integer; its [min, max] are the world sizes the transport serves. The host
//               sets it to topology.ranks. A transport without the key serves one rank.
//   rank        integer; the host sets it to the rank being started (0 for `tandem serve`,
//               R for `tandem worker --rank R`).
//   devices     string with one choice, its default: the devices whose memory the
//               collectives take, comma-separated ("cpu", "cpu,cuda"). The runtime refuses a
//               backend on another device.
// A failed collective (a rank died, or stalled past the transport's timeout) throws
// plugin_error; it never blocks forever.
#include <cstdint>
#include <vector>

#include "tandem/export.hpp"
#include "tandem/plugin_abi.hpp"
#include "tandem/tensor_view.hpp"

namespace tandem {

namespace transport_keys {
inline constexpr const char* world_size = "world_size";
inline constexpr const char* rank = "rank";
inline constexpr const char* devices = "devices";
}  // namespace transport_keys

class TANDEM_API transport : public plugin_object {
 public:
  ~transport() override;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // bytes on `root` are copied to every rank (resized there).
  virtual void broadcast(std::vector<uint8_t>& bytes, int root) = 0;
  // inout = sum over ranks of inout (f32; a transport may take f16/bf16 too).
  virtual void all_reduce_sum(tensor_view inout) = 0;
  // out = concatenation over ranks of in along dim 0.  out: [world * n, ...]
  virtual void all_gather(tensor_view in, tensor_view out) = 0;
  // Point-to-point (not collective).
  virtual void send(tensor_view t, int peer) = 0;
  virtual void recv(tensor_view t, int peer) = 0;
  virtual void barrier() = 0;
};

}  // namespace tandem
