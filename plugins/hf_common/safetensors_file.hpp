#pragma once
// Shared by weights.exl3 and weights.safetensors (plugins/hf_common): read-only safetensors
// files and sharded model directories.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the data; offsets are relative to the data. Everything is validated on open: the
// header bounds, the JSON shape, the dtype names, offsets inside the data, no overlaps,
// and shape × element size = byte span. Every failure is a model_error naming the file.
//
//   tandem::safetensors::model_files m(dir);   // model.safetensors.index.json or model.safetensors
//   const auto* t = m.find("model.norm.weight");  // t->data, t->type, t->shape
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/dtype.hpp"

namespace tandem::safetensors {

enum class st_dtype : uint8_t { f64, f32, f16, bf16, f8_e4m3, f8_e5m2, i64, i32, i16, i8, u64, u32, u16, u8, boolean };

std::optional<st_dtype> parse_dtype(std::string_view name);  // "F16" -> f16
std::string_view dtype_name(st_dtype t);                     // f16 -> "F16"
int dtype_size(st_dtype t);                                  // bytes per element
// The tandem dtype of a safetensors dtype, or nullopt for those tandem does not hold
// (F64, F8_*, I8, I16, U16, U32, U64, BOOL).
std::optional<dtype> tandem_dtype(st_dtype t);

struct tensor_entry {
  std::string name;
  st_dtype type = st_dtype::f32;
  std::vector<int64_t> shape;   // empty = a 0-d scalar
  const std::byte* data = nullptr;  // aligned to the element size
  size_t nbytes = 0;
  std::string file;             // the file it came from, for messages

  int64_t numel() const;
};

class safetensors_file {
 public:
  // Maps `path` read-only and validates it.
  explicit safetensors_file(const std::filesystem::path& path);
  // Validates bytes held in memory (tests; `source` names them in errors).
  safetensors_file(std::vector<std::byte> bytes, std::string source);
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;
  ~safetensors_file();

  const std::vector<tensor_entry>& tensors() const { return tensors_; }  // header order
  const tensor_entry* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& source() const { return source_; }

 private:
  void parse();

  std::string source_;
  std::span<const std::byte> bytes_;
  void* map_ = nullptr;                  // mmap'ed region, or null
  std::vector<std::byte> owned_;         // the in-memory form
  std::vector<std::unique_ptr<std::byte[]>> realigned_;  // copies of misaligned tensors
  std::vector<tensor_entry> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// How the shards of an indexed directory are reconciled with the index's weight_map.
enum class shard_policy : uint8_t {
  // The index decides: a shard's tensors that the index maps elsewhere (or not at all) are
  // skipped (weights.exl3).
  index_decides,
  // Every tensor of every shard is kept; a name in two shards is an error, as is a shard
  // named by the index that does not exist (weights.safetensors).
  strict,
};

// The safetensors of a model directory: the shards named by model.safetensors.index.json
// (its weight_map), or the single model.safetensors. Throws model_error when neither
// exists, a shard is missing, or the index and the shards disagree.
class model_files {
 public:
  explicit model_files(const std::filesystem::path& dir, shard_policy policy = shard_policy::index_decides);

  const tensor_entry* find(std::string_view name) const;
  // Every tensor, shard by shard in file-name order, each in header order.
  const std::vector<const tensor_entry*>& tensors() const { return order_; }

 private:
  void add(const safetensors_file& f, const std::map<std::string, std::string>* weight_map,
           const std::string& shard);

  shard_policy policy_;

  std::vector<std::unique_ptr<safetensors_file>> files_;
  std::map<std::string, const tensor_entry*, std::less<>> by_name_;
  std::vector<const tensor_entry*> order_;
};

}  // namespace tandem::safetensors
