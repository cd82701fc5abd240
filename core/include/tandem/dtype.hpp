#pragma once
// Element types of tensors that cross plugin seams.
//
// Float and integer types hold one element each. Block-quantized types (GGML layout)
// pack `block_elems` elements into `block_bytes` bytes along the innermost dimension.
// An opaque tensor's encoding belongs to its weight format (see opaque_tag below).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace tandem {

enum class dtype : uint8_t {
  f32, f16, bf16, i32, i64, u8,
  q4_0, q4_1, q8_0,  // GGML block formats, 32 elements per block
  opaque,            // encoded by the weight format: `data` points at its descriptor (opaque_tag)
  fp8_e4m3,          // OCP FP8 E4M3 (max 448, no infinities): a KV cache element type
};

struct dtype_traits {
  std::string_view name;
  int64_t block_elems;  // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
};

constexpr dtype_traits traits(dtype t) {
  switch (t) {
    case dtype::f32:  return {"f32", 1, 4};
    case dtype::f16:  return {"f16", 1, 2};
    case dtype::bf16: return {"bf16", 1, 2};
    case dtype::i32:  return {"i32", 1, 4};
    case dtype::i64:  return {"i64", 1, 8};
    case dtype::u8:   return {"u8", 1, 1};
    case dtype::q4_0: return {"q4_0", 32, 18};
    case dtype::q4_1: return {"q4_1", 32, 20};
    case dtype::q8_0: return {"q8_0", 32, 34};
    case dtype::opaque: return {"opaque", 1, 0};  // no byte layout: see row_bytes
    case dtype::fp8_e4m3: return {"fp8_e4m3", 1, 1};
  }
  return {"?", 1, 1};
}

constexpr std::string_view name(dtype t) { return traits(t).name; }
constexpr bool is_quantized(dtype t) { return t == dtype::opaque || traits(t).block_elems > 1; }

// Bytes of one row of `n` elements; nullopt when n is not a multiple of the block size
// or the size does not fit in int64, and always for opaque (its rows are not byte ranges).
constexpr std::optional<int64_t> row_bytes(dtype t, int64_t n) {
  if (t == dtype::opaque) return std::nullopt;
  auto tr = traits(t);
  if (n < 0 || n % tr.block_elems != 0) return std::nullopt;
  if (n / tr.block_elems > INT64_MAX / tr.block_bytes) return std::nullopt;  // would overflow
  return n / tr.block_elems * tr.block_bytes;
}

// dtype::opaque: the tensor's encoding is private to the weight format that made it and
// to the kernels that read it. `data` points at a descriptor the weight format owns
// (`nbytes` is the descriptor's size, not the weights'); `shape` is the logical shape. The
// descriptor starts with a uint32 tag naming the format, by convention four ASCII
// characters (fourcc). Whoever knows a format checks the tag (and size) before casting:
//
//   if (opaque_tag(t.type, t.data, t.nbytes) == my_format::tag) { ... }

// A format tag from four characters: fourcc("ABCD") is 'A' | 'B' << 8 | 'C' << 16 | 'D' << 24.
constexpr uint32_t fourcc(const char (&s)[5]) {
  return static_cast<uint32_t>(static_cast<uint8_t>(s[0])) | static_cast<uint32_t>(static_cast<uint8_t>(s[1])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(s[2])) << 16 | static_cast<uint32_t>(static_cast<uint8_t>(s[3])) << 24;
}

// The format tag of an opaque tensor's descriptor; 0 when the type is not opaque or the
// data cannot hold a tag.
inline uint32_t opaque_tag(dtype t, const void* data, size_t nbytes) {
  if (t != dtype::opaque || data == nullptr || nbytes < sizeof(uint32_t)) return 0;
  uint32_t tag;
  std::memcpy(&tag, data, sizeof tag);
  return tag;
}

// The type to show for a tensor: name(t), or for an opaque tensor whose tag is four
// printable characters those characters ("opaque" otherwise).
inline std::string type_name(dtype t, const void* data, size_t nbytes) {
  const uint32_t tag = opaque_tag(t, data, nbytes);
  std::string s(4, ' ');
  for (int i = 0; i < 4; ++i) {
    const auto c = static_cast<char>(tag >> (8 * i) & 0xff);
    if (c < 0x21 || c > 0x7e) return std::string(name(t));
    s[static_cast<size_t>(i)] = c;
  }
  return s;
}

}  // namespace tandem
