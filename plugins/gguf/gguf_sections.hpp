#pragma once
// Internal: readers for the two tables of a GGUF file. Each validates what it reads and
// throws model_error (through the byte_reader) on anything malformed.
#include <cstdint>
#include <vector>

#include "byte_reader.hpp"
#include "gguf_file.hpp"

namespace tandem::gguf {

// Smallest possible encodings, used to reject counts the remaining bytes cannot hold.
inline constexpr uint64_t min_kv_bytes = 8 + 4 + 1;          // key length, type, 1-byte value
inline constexpr uint64_t min_tensor_info_bytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

// Limits far above any real model (vocabularies are < 1M tokens, models < 100k tensors,
// chat templates are kilobytes) that keep a corrupt length in a large file from turning
// into a multi-gigabyte allocation.
inline constexpr uint64_t max_kv_count = uint64_t{1} << 20;
inline constexpr uint64_t max_tensor_count = uint64_t{1} << 22;
inline constexpr uint64_t max_array_items = uint64_t{1} << 26;

// Reads `count` key/value pairs into `meta` (typed) and `kvs` (as stored).
void read_metadata(byte_reader& r, uint64_t count, model_metadata& meta,
                   std::vector<kv_entry>& kvs);

// A tensor as the table states it; `info.data` is filled once the data section is known.
struct tensor_record {
  tensor_info info;
  uint64_t offset;  // from the start of the data section
};

// Reads `count` tensor infos, checking names, dims, types and block sizes.
std::vector<tensor_record> read_tensor_table(byte_reader& r, uint64_t count);

}  // namespace tandem::gguf
