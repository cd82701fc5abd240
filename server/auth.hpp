#pragma once
// auth: who may call the server — Bearer API keys (server_options::api_key) and CORS for
// browsers (server_options::cors_origins).
//
// Keys: with an api_key set, every /v1/* request needs "Authorization: Bearer <key>"
// (compared in constant time) or gets 401 in OpenAI's error shape; /health, /metrics,
// /version, /tokenize, ... stay open unless auth_all. CORS: a request whose Origin is
// allowed gets Access-Control-Allow-Origin on its answer; an OPTIONS preflight from such
// an origin is answered 204 with the allowed methods and headers, before any key check
// (browsers send no credentials on a preflight).
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/server.hpp"

namespace tandem::http {

using header_list = std::vector<std::pair<std::string, std::string>>;

struct access_reply {
  int status = 0;
  std::string body;
  header_list headers;
};

struct request_meta {
  std::string_view authorization;  // the Authorization header ("" when absent)
  std::string_view origin;         // the Origin header ("" when absent)
};

// The answer that ends the exchange before routing (401, a 204 preflight), or nullopt.
std::optional<access_reply> check_access(const server_options& opt, std::string_view method, std::string_view path,
                                         const request_meta& meta);
// Headers every answer to `origin` carries (none when CORS is off or the origin is not allowed).
header_list cors_headers(const server_options& opt, std::string_view origin);

}  // namespace tandem::http
