#include "api_error.hpp"

#include <boost/json.hpp>

namespace tandem::http {
namespace {

const char* type_for(int status) {
  switch (status) {
    case 400: case 413: case 415: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 405: return "method_not_allowed_error";
    case 429: return "rate_limit_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

api_error::api_error(int status, std::string message, std::string param)
    : error(std::move(message)), status_(status), param_(std::move(param)) {}

const char* api_error::type() const { return type_for(status_); }

std::string api_error::body() const { return error_body(status_, what(), param_); }

api_error bad_request(std::string message, std::string param) {
  return api_error(400, std::move(message), std::move(param));
}

api_error not_found(std::string message) { return api_error(404, std::move(message)); }

std::string error_body(int status, const std::string& message, const std::string& param) {
  boost::json::object e;
  e["message"] = message;
  e["type"] = type_for(status);
  if (param.empty()) e["param"] = nullptr;
  else e["param"] = param;
  e["code"] = status;
  boost::json::object root;
  root["error"] = std::move(e);
  return boost::json::serialize(root);
}

}  // namespace tandem::http
