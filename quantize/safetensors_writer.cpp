// See safetensors_writer.hpp.
#include "safetensors_writer.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <fstream>

#include "tandem/error.hpp"

namespace tandem::quantize {

size_t dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL") return 1;
  return 0;
}

void safetensors_file::add(const std::string& name, const std::string& dtype,
                           std::vector<int64_t> shape, std::vector<uint8_t> data) {
  const size_t es = dtype_size(dtype);
  if (!es) throw error("safetensors: unknown dtype '" + dtype + "' for " + name);
  if (name.empty() || name == "__metadata__") throw error("safetensors: bad tensor name '" + name + "'");
  size_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) throw error("safetensors: negative dimension in " + name);
    count *= static_cast<size_t>(d);
  }
  if (count * es != data.size())
    throw error("safetensors: " + name + " has " + std::to_string(data.size()) + " bytes, its shape needs " +
                std::to_string(count * es));
  if (!tensors_.emplace(name, st_tensor{dtype, std::move(shape), std::move(data)}).second)
    throw error("safetensors: duplicate tensor " + name);
}

size_t safetensors_file::data_bytes() const {
  size_t s = 0;
  for (const auto& [n, t] : tensors_) s += t.data.size();
  return s;
}

void safetensors_file::write(const std::filesystem::path& path) const {
  std::vector<const std::pair<const std::string, st_tensor>*> order;
  for (const auto& kv : tensors_) order.push_back(&kv);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return dtype_size(a->second.dtype) > dtype_size(b->second.dtype);
  });
  boost::json::object header;
  header["__metadata__"] = boost::json::object{{"format", "pt"}};
  size_t offset = 0;
  for (auto* kv : order) {
    boost::json::array shape;
    for (int64_t d : kv->second.shape) shape.push_back(d);
    header[kv->first] = boost::json::object{
        {"dtype", kv->second.dtype},
        {"shape", std::move(shape)},
        {"data_offsets", boost::json::array{offset, offset + kv->second.data.size()}}};
    offset += kv->second.data.size();
  }
  std::string text = boost::json::serialize(header);
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw error("safetensors: cannot create " + path.string());
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (auto* kv : order)
    f.write(reinterpret_cast<const char*>(kv->second.data.data()),
            static_cast<std::streamsize>(kv->second.data.size()));
  f.flush();
  if (!f) throw error("safetensors: write to " + path.string() + " failed");
}

}  // namespace tandem::quantize
