#include "local_transport.hpp"

#include <cstring>
#include <string>

#include "tandem/error.hpp"

namespace tandem {
namespace {

void check_rank(int r, const char* what) {
  if (r != 0) throw plugin_error("transport.local", std::string(what) + ": rank " + std::to_string(r) +
                                                         " does not exist in a world of one");
}

int64_t bytes_of(const tensor_view& t) {
  return t.numel() / traits(t.type).block_elems * traits(t.type).block_bytes;
}

}  // namespace

void local_transport::broadcast(std::vector<uint8_t>&, int root) { check_rank(root, "broadcast"); }

void local_transport::all_reduce_sum(tensor_view) {}

void local_transport::all_gather(tensor_view in, tensor_view out) {
  if (bytes_of(in) != bytes_of(out) || in.type != out.type)
    throw plugin_error("transport.local", "all_gather: output must match the input in a world of one");
  if (in.dev.kind != device_kind::cpu || out.dev.kind != device_kind::cpu)
    throw plugin_error("transport.local", "all_gather: only host tensors");
  if (in.data != out.data) std::memmove(out.data, in.data, static_cast<size_t>(bytes_of(in)));
}

void local_transport::all_to_all(tensor_view in, std::span<const int64_t> send_rows, tensor_view out,
                                 std::span<const int64_t> recv_rows) {
  all_to_all_row_bytes("transport.local", 0, 1, in, send_rows, out, recv_rows);
  if (in.dev.kind != device_kind::cpu || out.dev.kind != device_kind::cpu)
    throw plugin_error("transport.local", "all_to_all: only host tensors");
  if (in.data != out.data) std::memmove(out.data, in.data, static_cast<size_t>(bytes_of(in)));
}

void local_transport::send(tensor_view, int peer) { check_rank(peer == 0 ? 1 : peer, "send"); }
void local_transport::recv(tensor_view, int peer) { check_rank(peer == 0 ? 1 : peer, "recv"); }

}  // namespace tandem
