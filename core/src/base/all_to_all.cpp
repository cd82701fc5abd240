// transport::all_to_all's argument rules, shared by every transport, and its equal-parts form.
#include <numeric>
#include <string>

#include "tandem/error.hpp"
#include "tandem/transport.hpp"

namespace tandem {

size_t all_to_all_row_bytes(const char* plugin, int rank, int world, const tensor_view& in, std::span<const int64_t> send_rows,
                            const tensor_view& out, std::span<const int64_t> recv_rows) {
  auto fail = [&](const std::string& why) { throw plugin_error(plugin, "all_to_all: " + why); };
  if (static_cast<int>(send_rows.size()) != world || static_cast<int>(recv_rows.size()) != world)
    fail("send_rows and recv_rows need one count per rank (" + std::to_string(world) + ")");
  if (in.type != out.type) fail("in and out differ in type");
  if (in.ndim < 1 || out.ndim < 1 || in.ndim != out.ndim) fail("in and out need the same number of dimensions");
  if (!in.is_contiguous() || !out.is_contiguous()) fail("in and out must be contiguous");
  int64_t row = 1;
  for (int d = 1; d < in.ndim; ++d) {
    if (in.shape[d] != out.shape[d]) fail("in and out rows differ in shape");
    row *= in.shape[d];
  }
  for (int r = 0; r < world; ++r)
    if (send_rows[r] < 0 || recv_rows[r] < 0) fail("a negative row count");
  if (send_rows[rank] != recv_rows[rank])
    fail("rank " + std::to_string(rank) + " sends itself " + std::to_string(send_rows[rank]) + " rows but receives " +
         std::to_string(recv_rows[rank]));
  if (std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0}) != in.shape[0])
    fail("send_rows add up to other than in's " + std::to_string(in.shape[0]) + " rows");
  if (std::accumulate(recv_rows.begin(), recv_rows.end(), int64_t{0}) != out.shape[0])
    fail("recv_rows add up to other than out's " + std::to_string(out.shape[0]) + " rows");
  const dtype_traits t = traits(in.type);
  if (row % t.block_elems != 0) fail("a row is not whole blocks of " + std::string(t.name));
  return static_cast<size_t>(row / t.block_elems * t.block_bytes);
}

void transport::all_to_all(tensor_view in, tensor_view out) {
  const int world = world_size();
  if (in.ndim < 1 || in.shape[0] % world != 0 || out.ndim < 1 || out.shape[0] != in.shape[0])
    throw plugin_error("transport", "all_to_all: in and out need the same rows, a multiple of the world size (" +
                                        std::to_string(world) + ")");
  const std::vector<int64_t> parts(static_cast<size_t>(world), in.shape[0] / world);
  all_to_all(in, parts, out, parts);
}

}  // namespace tandem
