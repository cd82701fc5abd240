// The tensor-info section of a GGUF file: names, dims (innermost first on disk), types
// and data offsets, each checked before anything depends on it.
#include <algorithm>
#include <limits>
#include <unordered_set>

#include "gguf_sections.hpp"
#include "gguf_types.hpp"

namespace tandem::gguf {
namespace {

constexpr uint32_t max_dims = 4;  // GGML_MAX_DIMS

std::string describe(const std::string& tensor) { return "tensor '" + tensor + "'"; }

// numpy-order shape from ne[] (innermost first). The element count must fit in int64
// even when some dimension is 0, so that no consumer can overflow on rows * cols.
std::vector<int64_t> read_shape(byte_reader& r, const std::string& tensor) {
  const auto n_dims = r.read<uint32_t>("dimension count of " + describe(tensor));
  if (n_dims > max_dims) {
    r.fail(describe(tensor) + " has " + std::to_string(n_dims) + " dimensions; GGUF allows at most 4");
  }
  std::vector<int64_t> shape(n_dims);
  int64_t extent = 1;  // product of max(ne, 1)
  for (uint32_t d = 0; d < n_dims; ++d) {
    const auto ne = r.read<uint64_t>("dimension of " + describe(tensor));
    if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(extent, std::max<int64_t>(static_cast<int64_t>(ne), 1), &extent)) {
      r.fail(describe(tensor) + " has a dimension of " + std::to_string(ne) +
             " that makes its element count overflow");
    }
    shape[n_dims - 1 - d] = static_cast<int64_t>(ne);
  }
  return shape;
}

dtype check_type(byte_reader& r, uint32_t id, const std::string& tensor) {
  if (auto t = to_dtype(id)) return *t;
  if (ggml_type_name(id) == "unknown") {
    r.fail(describe(tensor) + " has unknown GGML type id " + std::to_string(id));
  }
  r.fail(describe(tensor) + " has type " + std::string(ggml_type_name(id)) +
         ", which tandem does not support (supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0)");
}

// Bytes of the tensor's data; the row length must hold whole blocks.
uint64_t data_bytes(byte_reader& r, const tensor_info& t) {
  const auto tr = traits(t.type);
  const int64_t row = t.shape.empty() ? 1 : t.shape.back();
  if (row % tr.block_elems != 0) {
    r.fail(describe(t.name) + " of type " + std::string(name(t.type)) + " has rows of " +
           std::to_string(row) + " elements, not a multiple of the block size " +
           std::to_string(tr.block_elems));
  }
  int64_t numel = 1;
  for (int64_t d : t.shape) numel *= d;  // cannot overflow: checked in read_shape
  int64_t bytes = 0;
  if (__builtin_mul_overflow(numel / tr.block_elems, tr.block_bytes, &bytes)) {
    r.fail(describe(t.name) + " is too large: its byte size overflows");
  }
  return static_cast<uint64_t>(bytes);
}

}  // namespace

std::vector<tensor_record> read_tensor_table(byte_reader& r, uint64_t count) {
  std::vector<tensor_record> out;
  out.reserve(count);  // bounded by the caller against the file size
  std::unordered_set<std::string> seen;
  for (uint64_t i = 0; i < count; ++i) {
    tensor_record rec{};
    rec.info.name = r.read_string("name of tensor " + std::to_string(i));
    if (!seen.insert(rec.info.name).second) r.fail(describe(rec.info.name) + " appears twice");
    rec.info.shape = read_shape(r, rec.info.name);
    rec.info.type = check_type(r, r.read<uint32_t>("type of " + describe(rec.info.name)), rec.info.name);
    rec.offset = r.read<uint64_t>("data offset of " + describe(rec.info.name));
    rec.info.nbytes = data_bytes(r, rec.info);
    out.push_back(std::move(rec));
  }
  return out;
}

}  // namespace tandem::gguf
