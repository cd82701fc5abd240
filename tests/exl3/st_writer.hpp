#pragma once
// Test helper: safetensors bytes and EXL3 model directories built in memory / a temp dir.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace exl3_test {

struct st_tensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

inline std::string shape_json(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

// Header padded with spaces to 8 bytes, tensors back to back in the given order.
inline std::vector<std::byte> st_bytes(const std::vector<st_tensor>& ts, const std::string& meta = "") {
  std::string h = "{";
  if (!meta.empty()) h += "\"__metadata__\":" + meta + ",";
  size_t off = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    h += (i ? "," : "") + std::string("\"") + ts[i].name + "\":{\"dtype\":\"" + ts[i].dtype +
         "\",\"shape\":" + shape_json(ts[i].shape) + ",\"data_offsets\":[" + std::to_string(off) + "," +
         std::to_string(off + ts[i].bytes.size()) + "]}";
    off += ts[i].bytes.size();
  }
  h += "}";
  while (h.size() % 8) h += ' ';
  std::vector<std::byte> out(8 + h.size() + off);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = std::byte((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, h.data(), h.size());
  size_t p = 8 + h.size();
  for (const auto& t : ts) {
    if (!t.bytes.empty()) std::memcpy(out.data() + p, t.bytes.data(), t.bytes.size());
    p += t.bytes.size();
  }
  return out;
}

inline void write_file(const std::filesystem::path& p, const void* data, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}
inline void write_text(const std::filesystem::path& p, const std::string& s) { write_file(p, s.data(), s.size()); }

// A fresh empty directory under the system temp dir.
inline std::filesystem::path temp_dir(const std::string& tag) {
  auto d = std::filesystem::temp_directory_path() /
           ("tandem_exl3_" + tag + "_" + std::to_string(std::random_device{}()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace exl3_test
