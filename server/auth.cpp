#include "auth.hpp"

#include <algorithm>

#include "api_error.hpp"

namespace tandem::http {
namespace {

bool protected_path(const server_options& opt, std::string_view path) {
  return opt.auth_all || path == "/v1" || path.rfind("/v1/", 0) == 0;
}

// Constant time in the key's length: a timing probe learns nothing about a prefix.
bool same_key(std::string_view given, std::string_view key) {
  unsigned diff = given.size() == key.size() ? 0u : 1u;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(key[i]) ^ static_cast<unsigned char>(i < given.size() ? given[i] : 0);
  return diff == 0;
}

std::optional<std::string> allowed_origin(const server_options& opt, std::string_view origin) {
  if (origin.empty() || opt.cors_origins.empty()) return std::nullopt;
  for (const auto& o : opt.cors_origins) {
    if (o == "*") return std::string("*");
    if (o == origin) return std::string(origin);
  }
  return std::nullopt;
}

}  // namespace

header_list cors_headers(const server_options& opt, std::string_view origin) {
  header_list h;
  if (auto o = allowed_origin(opt, origin)) {
    h.emplace_back("Access-Control-Allow-Origin", *o);
    if (*o != "*") h.emplace_back("Vary", "Origin");
  }
  return h;
}

std::optional<access_reply> check_access(const server_options& opt, std::string_view method, std::string_view path,
                                         const request_meta& meta) {
  if (method == "OPTIONS" && allowed_origin(opt, meta.origin)) {
    access_reply r{204, {}, cors_headers(opt, meta.origin)};
    r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    r.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
    r.headers.emplace_back("Access-Control-Max-Age", "600");
    return r;
  }
  if (opt.api_key.empty() || !protected_path(opt, path)) return std::nullopt;
  constexpr std::string_view scheme = "Bearer ";
  const std::string_view auth = meta.authorization;
  if (auth.size() > scheme.size() && std::equal(scheme.begin(), scheme.end(), auth.begin(), [](char a, char b) {
        return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
      }) && same_key(auth.substr(scheme.size()), opt.api_key))
    return std::nullopt;
  access_reply r{401,
                 error_body(401, auth.empty() ? "You didn't provide an API key: send it as 'Authorization: Bearer <key>'"
                                              : "Incorrect API key provided"),
                 cors_headers(opt, meta.origin)};
  r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

}  // namespace tandem::http
