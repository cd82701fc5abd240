#pragma once
// Test helper: builds GGUF files in memory, so tests can make valid files and then break
// them in exactly one place. Records where every length/count field lands, for fuzzing.
//
//   gguf_writer w;
//   w.kv_string("general.architecture", "llama");
//   w.tensor("w", 3 /*Q4_1*/, {64, 2}, bytes);   // ne[] innermost first, as on disk
//   std::vector<std::byte> file = w.build();
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::test {

class byte_sink {
 public:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  // A u64 length or count; remembers its offset.
  void put_len(uint64_t n) {
    len_offsets_.push_back(bytes_.size());
    put(n);
  }
  void put_string(std::string_view s) {
    put_len(s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    bytes_.insert(bytes_.end(), p, p + s.size());
  }
  void put_raw(const std::vector<std::byte>& b) { bytes_.insert(bytes_.end(), b.begin(), b.end()); }
  void pad_to(uint64_t align) {
    while (bytes_.size() % align != 0) bytes_.push_back(std::byte{0});
  }
  std::vector<std::byte>& bytes() { return bytes_; }
  std::vector<size_t>& len_offsets() { return len_offsets_; }

 private:
  std::vector<std::byte> bytes_;
  std::vector<size_t> len_offsets_;
};

class gguf_writer {
 public:
  enum vt : uint32_t { u8 = 0, i8, u16, i16, u32, i32, f32, boolean, string, array, u64, i64, f64 };

  uint32_t version = 3;
  uint64_t alignment = 32;  // also set general.alignment yourself when not 32

  template <class T>
  void kv(std::string_view key, vt type, T value) {
    kvs_.put_string(key);
    kvs_.put(static_cast<uint32_t>(type));
    kvs_.put(value);
    ++n_kv_;
  }
  void kv_string(std::string_view key, std::string_view value) {
    kvs_.put_string(key);
    kvs_.put(static_cast<uint32_t>(string));
    kvs_.put_string(value);
    ++n_kv_;
  }
  template <class T>
  void kv_array(std::string_view key, vt elem, const std::vector<T>& items) {
    array_header(key, elem, items.size());
    for (const T& v : items) kvs_.put(v);
  }
  void kv_strings(std::string_view key, const std::vector<std::string>& items) {
    array_header(key, string, items.size());
    for (const auto& s : items) kvs_.put_string(s);
  }

  // `ne` innermost first; `offset` < 0 means "next aligned slot".
  void tensor(std::string_view name, uint32_t ggml_type, std::vector<uint64_t> ne,
              std::vector<std::byte> data, int64_t offset = -1) {
    tensors_.push_back({std::string(name), ggml_type, std::move(ne), std::move(data), offset});
  }

  std::vector<std::byte> build() {
    byte_sink out;
    out.put(uint32_t{0x46554747});  // "GGUF"
    out.put(version);
    out.put_len(tensors_.size());
    out.put_len(n_kv_);
    const size_t kv_start = out.bytes().size();
    out.put_raw(kvs_.bytes());
    for (size_t o : kvs_.len_offsets()) out.len_offsets().push_back(kv_start + o);
    uint64_t next = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors_) {
      const uint64_t off = t.offset >= 0 ? static_cast<uint64_t>(t.offset) : next;
      offsets.push_back(off);
      next = (off + t.data.size() + alignment - 1) / alignment * alignment;
      out.put_string(t.name);
      out.put(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) out.put(d);
      out.put(t.ggml_type);
      out.put(off);
    }
    out.pad_to(alignment);
    const size_t data_start = out.bytes().size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].data.empty() || offsets[i] > (uint64_t{1} << 30)) continue;  // nothing, or an absurd offset
      const size_t end = data_start + offsets[i] + tensors_[i].data.size();
      if (out.bytes().size() < end) out.bytes().resize(end);
      std::memcpy(out.bytes().data() + data_start + offsets[i], tensors_[i].data.data(),
                  tensors_[i].data.size());
    }
    len_offsets_ = out.len_offsets();
    return std::move(out.bytes());
  }

  // Offsets of every u64 length/count field of the last build().
  const std::vector<size_t>& length_fields() const { return len_offsets_; }

 private:
  struct tensor_spec {
    std::string name;
    uint32_t ggml_type;
    std::vector<uint64_t> ne;
    std::vector<std::byte> data;
    int64_t offset;
  };

  void array_header(std::string_view key, vt elem, uint64_t n) {
    kvs_.put_string(key);
    kvs_.put(static_cast<uint32_t>(array));
    kvs_.put(static_cast<uint32_t>(elem));
    kvs_.put_len(n);
    ++n_kv_;
  }

  byte_sink kvs_;
  uint64_t n_kv_ = 0;
  std::vector<tensor_spec> tensors_;
  std::vector<size_t> len_offsets_;
};

// Raw bytes of a vector of trivially copyable values.
template <class T>
std::vector<std::byte> as_bytes(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace tandem::test
