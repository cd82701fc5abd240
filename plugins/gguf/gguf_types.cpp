#include "gguf_types.hpp"

#include <array>
#include <string_view>

namespace tandem::gguf {
namespace {

// GGML type ids in file order; empty names are ids GGML removed and never reuses.
constexpr std::array<std::string_view, 42> ggml_names = {
    "F32",    "F16",     "Q4_0",  "Q4_1",    "",       "",       "Q5_0",  "Q5_1",  "Q8_0",
    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",    "Q5_K",   "Q6_K",   "Q8_K",  "IQ2_XXS",
    "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",  "IQ3_S",  "IQ2_S",  "IQ4_XS", "I8",
    "I16",    "I32",     "I64",   "F64",     "IQ1_M",  "BF16",   "",      "",      "",
    "TQ1_0",  "TQ2_0",   "",      "",        "",       "MXFP4",  "NVFP4", "Q1_0",
};

struct supported_type {
  uint32_t id;
  dtype type;
};
constexpr std::array<supported_type, 6> supported = {{
    {0, dtype::f32}, {1, dtype::f16}, {30, dtype::bf16},
    {2, dtype::q4_0}, {3, dtype::q4_1}, {8, dtype::q8_0},
}};

}  // namespace

std::string_view name(value_type t) {
  switch (t) {
    case value_type::u8: return "u8";
    case value_type::i8: return "i8";
    case value_type::u16: return "u16";
    case value_type::i16: return "i16";
    case value_type::u32: return "u32";
    case value_type::i32: return "i32";
    case value_type::f32: return "f32";
    case value_type::boolean: return "bool";
    case value_type::string: return "string";
    case value_type::array: return "array";
    case value_type::u64: return "u64";
    case value_type::i64: return "i64";
    case value_type::f64: return "f64";
  }
  return "unknown";
}

std::string_view ggml_type_name(uint32_t id) {
  if (id < ggml_names.size() && !ggml_names[id].empty()) return ggml_names[id];
  return "unknown";
}

std::optional<uint64_t> fixed_size(uint32_t id) {
  switch (static_cast<value_type>(id)) {
    case value_type::u8:
    case value_type::i8:
    case value_type::boolean: return 1;
    case value_type::u16:
    case value_type::i16: return 2;
    case value_type::u32:
    case value_type::i32:
    case value_type::f32: return 4;
    case value_type::u64:
    case value_type::i64:
    case value_type::f64: return 8;
    case value_type::string:
    case value_type::array: return 0;
  }
  return std::nullopt;
}

std::optional<dtype> to_dtype(uint32_t id) {
  for (const auto& s : supported) {
    if (s.id == id) return s.type;
  }
  return std::nullopt;
}

std::optional<uint32_t> to_ggml_type(dtype t) {
  for (const auto& s : supported) {
    if (s.type == t) return s.id;
  }
  return std::nullopt;
}

}  // namespace tandem::gguf
