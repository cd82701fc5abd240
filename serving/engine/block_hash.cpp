#include "block_hash.hpp"

#include <cstring>
#include <memory>
#include <openssl/evp.h>
#include <xxhash.h>

#include "tandem/error.hpp"

namespace tandem {

hash_algo parse_hash_algo(std::string_view text, std::string_view key) {
  if (text == "xxhash") return hash_algo::xxhash;
  if (text == "sha256") return hash_algo::sha256;
  throw config_error(std::string(key), "unknown prefix hash '" + std::string(text) + "' (xxhash | sha256)");
}

std::string_view name(hash_algo a) { return a == hash_algo::sha256 ? "sha256" : "xxhash"; }

namespace {

// A tag byte in front of the salt keeps "no salt" and "empty-looking salt" apart and
// separates the salt from the token bytes.
constexpr uint8_t salt_tag = 0x5a;

block_hash xxhash_block(const block_hash& parent, std::span<const int32_t> tokens, std::string_view salt) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), &XXH3_freeState);
  if (!st || XXH3_128bits_reset(st.get()) != XXH_OK) throw error("prefix cache: xxhash state allocation failed");
  XXH3_128bits_update(st.get(), parent.w.data(), sizeof(parent.w));
  XXH3_128bits_update(st.get(), tokens.data(), tokens.size_bytes());
  if (!salt.empty()) {
    XXH3_128bits_update(st.get(), &salt_tag, 1);
    XXH3_128bits_update(st.get(), salt.data(), salt.size());
  }
  const XXH128_hash_t h = XXH3_128bits_digest(st.get());
  block_hash out;
  out.w = {h.low64, h.high64, 0, 0};
  return out;
}

block_hash sha256_block(const block_hash& parent, std::span<const int32_t> tokens, std::string_view salt) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  unsigned char digest[32];
  unsigned int len = 0;
  bool ok = ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1 &&
            EVP_DigestUpdate(ctx.get(), parent.w.data(), sizeof(parent.w)) == 1 &&
            EVP_DigestUpdate(ctx.get(), tokens.data(), tokens.size_bytes()) == 1;
  if (ok && !salt.empty())
    ok = EVP_DigestUpdate(ctx.get(), &salt_tag, 1) == 1 && EVP_DigestUpdate(ctx.get(), salt.data(), salt.size()) == 1;
  if (!ok || EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1 || len != sizeof(digest))
    throw error("prefix cache: SHA-256 failed");
  block_hash out;
  std::memcpy(out.w.data(), digest, sizeof(digest));
  return out;
}

}  // namespace

block_hash hash_block(hash_algo algo, const block_hash& parent, std::span<const int32_t> tokens,
                      std::string_view salt) {
  return algo == hash_algo::sha256 ? sha256_block(parent, tokens, salt) : xxhash_block(parent, tokens, salt);
}

}  // namespace tandem
