#pragma once
// transport: collectives and point-to-point between the ranks of one pipeline.
//
//   auto t = host.create<transport>("transport.local", cfg);
//   t->broadcast(plan_bytes, 0);     // rank 0's step plan reaches every rank
//   t->all_reduce_sum(partial);      // tensor-parallel partial sums
//   t->all_to_all(tokens, to_each, received, from_each);   // expert dispatch / combine
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
#include <span>
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
  // Rows (dim 0) of `in` to every rank and back, as expert dispatch / combine moves tokens:
  // the first send_rows[0] rows of in go to rank 0, the next send_rows[1] to rank 1, ...;
  // out receives recv_rows[0] rows from rank 0, then recv_rows[1] from rank 1, ... Both
  // spans have world_size() entries; recv_rows[r] must be rank r's send_rows[this rank]
  // (exchange the counts first, with all_to_all of one i32 per rank). in and out are
  // contiguous, of one type, with equal row shapes (dims 1..).
  virtual void all_to_all(tensor_view in, std::span<const int64_t> send_rows, tensor_view out,
                          std::span<const int64_t> recv_rows) = 0;
  // Equal parts: in and out are [world * n, ...]; part r of in goes to rank r, part r of out
  // came from rank r.
  void all_to_all(tensor_view in, tensor_view out);
  // Point-to-point (not collective).
  virtual void send(tensor_view t, int peer) = 0;
  virtual void recv(tensor_view t, int peer) = 0;
  virtual void barrier() = 0;

  // Orders the collectives on device tensors with the work already enqueued on
  // `native_stream` (a backend's native_stream(): its kernels first, then the collective);
  // null: the transport's own order. A transport of host memory has nothing to order.
  virtual void bind_stream(void* native_stream) { (void)native_stream; }
  // True for a world of one whose collectives are identities (transport.local): a model
  // need not call them. A one-rank transport that runs them (transport.nccl on one GPU)
  // says false, and the model takes the same split path as on several ranks.
  virtual bool identity() const { return false; }
};

// For transports: checks all_to_all's arguments (the rules above, on `rank` of a world of
// `world`: its own part must keep its size) and returns the bytes of one row; plugin_error
// naming `plugin` on a violation.
TANDEM_API size_t all_to_all_row_bytes(const char* plugin, int rank, int world, const tensor_view& in,
                                       std::span<const int64_t> send_rows, const tensor_view& out,
                                       std::span<const int64_t> recv_rows);

}  // namespace tandem
