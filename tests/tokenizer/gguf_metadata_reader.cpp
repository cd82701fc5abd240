#include "gguf_metadata_reader.hpp"

#include <cstring>
#include <fstream>

#include "tandem/error.hpp"

namespace tandem::test {
namespace {

enum gguf_type : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, str = 8,
  array = 9, u64 = 10, i64 = 11, f64 = 12,
};

class reader {
 public:
  explicit reader(const std::filesystem::path& path) : path_(path.string()), in_(path, std::ios::binary) {
    if (!in_) throw model_error(path_, "cannot open");
    in_.seekg(0, std::ios::end);
    size_ = static_cast<uint64_t>(in_.tellg());
    in_.seekg(0);
  }

  template <class T>
  T scalar() {
    T v{};
    bytes(&v, sizeof v);
    return v;
  }
  std::string string() {
    const auto n = scalar<uint64_t>();
    if (n > size_) fail("string length " + std::to_string(n) + " runs past the end");
    std::string s(n, '\0');
    bytes(s.data(), n);
    return s;
  }
  [[noreturn]] void fail(const std::string& what) const { throw model_error(path_, what); }

 private:
  void bytes(void* dst, size_t n) {
    if (!in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n))) fail("truncated");
  }
  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0;
};

// Integer-like scalar of GGUF type `t` widened to int64 (u64 values above INT64_MAX fail).
int64_t read_integer(reader& r, uint32_t t) {
  switch (t) {
    case u8: return r.scalar<uint8_t>();
    case i8: return r.scalar<int8_t>();
    case u16: return r.scalar<uint16_t>();
    case i16: return r.scalar<int16_t>();
    case u32: return r.scalar<uint32_t>();
    case i32: return r.scalar<int32_t>();
    case i64: return r.scalar<int64_t>();
    case boolean: return r.scalar<uint8_t>() != 0;
    case u64: {
      const auto v = r.scalar<uint64_t>();
      if (v > static_cast<uint64_t>(INT64_MAX)) r.fail("u64 array value out of range");
      return static_cast<int64_t>(v);
    }
    default: r.fail("type " + std::to_string(t) + " is not an integer");
  }
}

meta_value read_array(reader& r) {
  const auto t = r.scalar<uint32_t>();
  const auto n = r.scalar<uint64_t>();
  if (n > (1ull << 32)) r.fail("array of " + std::to_string(n) + " elements");
  if (t == str) {
    std::vector<std::string> v(n);
    for (auto& s : v) s = r.string();
    return v;
  }
  if (t == f32 || t == f64) {
    std::vector<double> v(n);
    for (auto& d : v) d = t == f32 ? r.scalar<float>() : r.scalar<double>();
    return v;
  }
  std::vector<int64_t> v(n);
  for (auto& i : v) i = read_integer(r, t);
  return v;
}

meta_value read_value(reader& r, uint32_t t) {
  switch (t) {
    case u8: case u16: case u32: return static_cast<uint64_t>(read_integer(r, t));
    case u64: return r.scalar<uint64_t>();
    case i8: case i16: case i32: case i64: return read_integer(r, t);
    case f32: return static_cast<double>(r.scalar<float>());
    case f64: return r.scalar<double>();
    case boolean: return r.scalar<uint8_t>() != 0;
    case str: return r.string();
    case array: return read_array(r);
    default: r.fail("unknown metadata type " + std::to_string(t));
  }
}

}  // namespace

model_metadata read_gguf_metadata(const std::filesystem::path& path) {
  reader r(path);
  char magic[4];
  for (char& c : magic) c = r.scalar<char>();
  if (std::memcmp(magic, "GGUF", 4) != 0) r.fail("not a GGUF file");
  const auto version = r.scalar<uint32_t>();
  if (version < 2 || version > 3) r.fail("GGUF version " + std::to_string(version));
  r.scalar<uint64_t>();  // tensor count: not needed here
  const auto n_kv = r.scalar<uint64_t>();
  model_metadata meta;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.string();
    const auto t = r.scalar<uint32_t>();
    meta.set(std::move(key), read_value(r, t));
  }
  return meta;
}

}  // namespace tandem::test
