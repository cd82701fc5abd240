#pragma once
// Internal: the on-disk type ids of GGUF values and GGML tensors, and how they map to
// tandem's types.
#include <cstdint>
#include <optional>

#include "gguf_file.hpp"
#include "tandem/dtype.hpp"

namespace tandem::gguf {

// Bytes of a fixed-size value type; 0 for string and array; nullopt for unknown ids.
std::optional<uint64_t> fixed_size(uint32_t value_type_id);

// The dtype of a GGML tensor type id, or nullopt when tandem does not support it.
std::optional<dtype> to_dtype(uint32_t ggml_type_id);

// The GGML type id of a dtype that GGUF can store (f32, f16, bf16, q4_0, q4_1, q8_0).
std::optional<uint32_t> to_ggml_type(dtype t);

}  // namespace tandem::gguf
