#pragma once
// api_error: a request the server refuses, with the HTTP status and OpenAI's error body
// {"error": {"message", "type", "param", "code"}}.
#include <string>

#include "tandem/error.hpp"

namespace tandem::http {

class api_error : public error {
 public:
  api_error(int status, std::string message, std::string param = {});
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  // OpenAI's type for the status: invalid_request_error, not_found_error, ...
  const char* type() const;
  // The JSON body (param null when empty, code the status number as vLLM and llama.cpp do).
  std::string body() const;

 private:
  int status_;
  std::string param_;
};

// Shorthands for the common cases.
api_error bad_request(std::string message, std::string param = {});
api_error not_found(std::string message);

// The JSON error body for any status and message.
std::string error_body(int status, const std::string& message, const std::string& param = {});

}  // namespace tandem::http
