#include "tp_shard.hpp"

#include <cstring>
#include <string>

#include "tandem/error.hpp"

namespace tandem {
namespace {

void require_matrix(const tensor_info& t) {
  if (t.shape.size() != 2) throw model_error("model", "tensor " + t.name + " is not a matrix: it cannot be split");
  if (t.type == dtype::opaque)  // EXL3 trellises, say: their weight format's encoding, not rows of bytes
    throw model_error("model", "tensor " + t.name + " is " + t.type_name() +
                                   ": opaque weights cannot be split for tensor parallel yet");
}

// Bytes of `elems` elements of a row of `type` (elems a multiple of its block).
size_t span_bytes(dtype type, int64_t elems) {
  return static_cast<size_t>(elems / traits(type).block_elems * traits(type).block_bytes);
}

}  // namespace

const tensor_info& shard_store::keep(const tensor_info& t, std::vector<int64_t> shape, std::vector<uint8_t> bytes,
                                     const char* how, int64_t begin, int64_t count) {
  tensor_info s;
  s.name = t.name + "[" + how + " " + std::to_string(begin) + ":" + std::to_string(begin + count) + "]";
  s.type = t.type;
  s.shape = std::move(shape);
  s.nbytes = bytes.size();
  s.data = bytes_.emplace_back(std::move(bytes)).data();
  return infos_.emplace_back(std::move(s));
}

const tensor_info& shard_store::rows(const tensor_info& t, int64_t begin, int64_t count) {
  require_matrix(t);
  if (begin < 0 || count < 1 || begin + count > t.shape[0])
    throw model_error("model", "tensor " + t.name + ": rows " + std::to_string(begin) + "+" + std::to_string(count) +
                                   " are outside its " + std::to_string(t.shape[0]));
  const size_t row = span_bytes(t.type, t.shape[1]);
  const auto* src = static_cast<const uint8_t*>(t.data) + static_cast<size_t>(begin) * row;
  return keep(t, {count, t.shape[1]}, std::vector<uint8_t>(src, src + static_cast<size_t>(count) * row), "rows", begin,
              count);
}

const tensor_info& shard_store::cols(const tensor_info& t, int64_t begin, int64_t count) {
  require_matrix(t);
  const int64_t block = traits(t.type).block_elems;
  if (begin < 0 || count < 1 || begin + count > t.shape[1])
    throw model_error("model", "tensor " + t.name + ": columns " + std::to_string(begin) + "+" +
                                   std::to_string(count) + " are outside its " + std::to_string(t.shape[1]));
  if (begin % block != 0 || count % block != 0)
    throw model_error("model", "tensor " + t.name + " (" + std::string(traits(t.type).name) + ", blocks of " +
                                   std::to_string(block) + ") cannot be cut at columns " + std::to_string(begin) +
                                   "+" + std::to_string(count) + " for tensor parallel");
  const size_t row = span_bytes(t.type, t.shape[1]), off = span_bytes(t.type, begin), len = span_bytes(t.type, count);
  std::vector<uint8_t> out(static_cast<size_t>(t.shape[0]) * len);
  const auto* src = static_cast<const uint8_t*>(t.data);
  for (int64_t r = 0; r < t.shape[0]; ++r)
    std::memcpy(out.data() + static_cast<size_t>(r) * len, src + static_cast<size_t>(r) * row + off, len);
  return keep(t, {t.shape[0], count}, std::move(out), "cols", begin, count);
}

}  // namespace tandem
