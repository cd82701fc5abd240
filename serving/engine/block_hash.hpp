#pragma once
// Hashing of full KV pages for the prefix cache. A page's key chains its parent's key, its
// token ids and, on the first page only, a per-tenant salt — so two prompts share a page
// only when everything before it is identical too, and tenants with different salts never
// share. xxHash (XXH3-128) is fast; SHA-256 resists deliberate collisions between tenants.
#include <cstdint>
#include <span>
#include <string_view>

#include "tandem/kv_pool.hpp"

namespace tandem {

enum class hash_algo : uint8_t { xxhash, sha256 };

// "xxhash" | "sha256"; throws config_error naming `key` otherwise.
hash_algo parse_hash_algo(std::string_view text, std::string_view key = "engine.prefix_hash");
std::string_view name(hash_algo a);

// Key of a page holding `tokens`, following the page whose key is `parent` (a default
// block_hash for the first page). `salt` is mixed in only when non-empty.
block_hash hash_block(hash_algo algo, const block_hash& parent, std::span<const int32_t> tokens,
                      std::string_view salt);

}  // namespace tandem
