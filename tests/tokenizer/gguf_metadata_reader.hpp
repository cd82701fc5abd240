#pragma once
// A metadata-only GGUF reader for the tokenizer tests: reads the key/value section of a
// GGUF v2/v3 file into a model_metadata and stops before the tensor infos. It exists so
// these tests need not wait for the gguf weight-format plugin; they switch to it later.
#include <filesystem>

#include "tandem/weight_format.hpp"

namespace tandem::test {

// Throws model_error naming `path` when the file is missing, truncated or not GGUF.
model_metadata read_gguf_metadata(const std::filesystem::path& path);

}  // namespace tandem::test
