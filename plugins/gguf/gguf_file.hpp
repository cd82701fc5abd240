#pragma once
// A parsed GGUF (v2/v3, little-endian) file: metadata, tensor table, tensor data.
//
//   auto f = tandem::gguf::gguf_file::open("model.gguf");    // model_error on a bad file
//   auto layers = f.metadata().get_int("llama.block_count");
//   const tandem::tensor_info* t = f.find("blk.0.attn_q.weight");  // shape {576, 576}
//
// Every structural fact is checked when the file is opened: counts and lengths against
// the bytes that are left, dimension products against overflow, type ids, alignment and
// bounds of every tensor, duplicate keys and names. A bad file gives tandem::model_error
// naming the file and the problem; nothing is allocated beyond what the file can hold.
//
// Tensor shapes are numpy order (GGUF stores ne[] innermost first; they are reversed).
// Supported tensor types: F32, F16, BF16, Q4_0, Q4_1, Q8_0; any other type fails open().
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tandem/weight_format.hpp"

namespace tandem::gguf {

// GGUF metadata value types (the on-disk ids).
enum class value_type : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
std::string_view name(value_type t);

// Name of a GGML tensor type id ("Q4_K"), or "unknown" for ids GGML never used.
std::string_view ggml_type_name(uint32_t id);

// One metadata entry as stored, in file order (model_metadata itself is sorted by key).
struct kv_entry {
  std::string key;
  value_type type;
  value_type elem_type;  // for arrays; equals `type` otherwise
  uint64_t count;        // array length; 1 otherwise
};

// How open() gets the bytes: map the file, or read it into memory.
enum class load_mode : uint8_t { mmap, read };

class gguf_file {
 public:
  // Opens and validates `path`. Tensor data stays valid for the object's lifetime.
  static gguf_file open(const std::filesystem::path& path, load_mode mode = load_mode::mmap);
  // Parses bytes the caller keeps alive for the object's lifetime (tests, fuzzing);
  // `label` names the source in errors.
  static gguf_file parse(std::span<const std::byte> bytes, std::string label);

  gguf_file(gguf_file&&) noexcept;
  gguf_file& operator=(gguf_file&&) noexcept;
  ~gguf_file();

  const std::string& label() const { return label_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section
  uint64_t file_size() const { return bytes_.size(); }

  const model_metadata& metadata() const { return meta_; }
  std::span<const kv_entry> kvs() const { return kvs_; }
  std::span<const tensor_info> tensors() const { return tensors_; }
  const tensor_info* find(std::string_view name) const;
  // Offset of a tensor's data from data_offset(), as the file's tensor table states it.
  uint64_t offset_of(const tensor_info& t) const;

 private:
  struct storage;
  gguf_file() = default;
  void parse_all();

  std::unique_ptr<storage> storage_;  // owns mapped or read bytes; null for parse()
  std::span<const std::byte> bytes_;
  std::string label_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  model_metadata meta_;
  std::vector<kv_entry> kvs_;
  std::vector<tensor_info> tensors_;
  std::unordered_map<std::string_view, size_t> index_;  // views into tensors_[i].name
};

}  // namespace tandem::gguf
