#pragma once
// json_fields: typed reads of a request's JSON object. Absent or null fields give nullopt;
// a present field of the wrong type or out of range throws api_error 400 naming it.
// Unknown fields are never looked at, so they are ignored.
#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::http {

class json_fields {
 public:
  // `what` names the object in messages ("request", "messages[2]").
  json_fields(const boost::json::value& v, std::string what);

  const boost::json::value* find(std::string_view key) const;  // null when absent or null
  std::optional<double> number(std::string_view key, double lo, double hi) const;
  std::optional<int64_t> integer(std::string_view key, int64_t lo, int64_t hi) const;
  std::optional<bool> boolean(std::string_view key) const;
  std::optional<std::string> string(std::string_view key) const;
  // A string or a list of strings.
  std::optional<std::vector<std::string>> strings(std::string_view key) const;
  std::optional<std::vector<int32_t>> int_list(std::string_view key, int64_t lo, int64_t hi) const;

  // The parameter path of `key` for error messages ("messages[2].role").
  std::string param(std::string_view key) const;

 private:
  const boost::json::object* obj_;
  std::string prefix_;
};

// An integral JSON value (int64, uint64, or a double with no fraction); nullopt otherwise.
std::optional<int64_t> as_integer(const boost::json::value& v);

}  // namespace tandem::http
