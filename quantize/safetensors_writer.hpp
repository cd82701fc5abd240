#pragma once
// A minimal safetensors writer: an 8-byte little-endian header length, a JSON header
// ({name: {dtype, shape, data_offsets}}, "__metadata__": {"format": "pt"}) padded with spaces
// so the data starts 8-byte aligned, then the tensors back to back (largest element size
// first, so every tensor starts aligned to its own element size, with no gaps — safetensors
// readers reject holes).
//
//   tandem::quantize::safetensors_file f;
//   f.add("model.norm.weight", "F16", {576}, bytes);
//   f.write("out/model.safetensors");          // throws tandem::error on I/O failure
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace tandem::quantize {

struct st_tensor {
  std::string dtype;             // "F16", "F32", "I16", "I32", "BF16", ...
  std::vector<int64_t> shape;    // {} for a 0-d tensor
  std::vector<uint8_t> data;
};

class safetensors_file {
 public:
  // Throws tandem::error for a duplicate name, an unknown dtype or a size that does not
  // match the shape.
  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
           std::vector<uint8_t> data);
  // The header's shape/dtype/size summary of one tensor (quantization_config.json uses it).
  const std::map<std::string, st_tensor>& tensors() const { return tensors_; }
  size_t data_bytes() const;
  void write(const std::filesystem::path& path) const;

 private:
  std::map<std::string, st_tensor> tensors_;
};

size_t dtype_size(const std::string& dtype);  // 0 if unknown

}  // namespace tandem::quantize
