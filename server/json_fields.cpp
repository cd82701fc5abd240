#include "json_fields.hpp"

#include <cmath>
#include <fmt/format.h>

#include "api_error.hpp"

namespace tandem::http {

std::optional<int64_t> as_integer(const boost::json::value& v) {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64()) {
    if (v.get_uint64() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(v.get_uint64());
  }
  if (v.is_double()) {
    const double d = v.get_double();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

json_fields::json_fields(const boost::json::value& v, std::string what)
    : obj_(v.if_object()), prefix_(std::move(what)) {
  if (!obj_) throw bad_request(fmt::format("{} must be a JSON object", prefix_.empty() ? "the body" : prefix_));
}

std::string json_fields::param(std::string_view key) const {
  return prefix_.empty() ? std::string(key) : fmt::format("{}.{}", prefix_, key);
}

const boost::json::value* json_fields::find(std::string_view key) const {
  const boost::json::value* v = obj_->if_contains(key);
  return (v && !v->is_null()) ? v : nullptr;
}

std::optional<double> json_fields::number(std::string_view key, double lo, double hi) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number() || v->is_bool()) throw bad_request(fmt::format("'{}' must be a number", param(key)), param(key));
  const double d = v->to_number<double>();
  if (!(d >= lo && d <= hi))
    throw bad_request(fmt::format("'{}' must be between {} and {}, got {}", param(key), lo, hi, d), param(key));
  return d;
}

std::optional<int64_t> json_fields::integer(std::string_view key, int64_t lo, int64_t hi) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  const auto i = as_integer(*v);
  if (!i) throw bad_request(fmt::format("'{}' must be an integer", param(key)), param(key));
  if (*i < lo || *i > hi)
    throw bad_request(fmt::format("'{}' must be between {} and {}, got {}", param(key), lo, hi, *i), param(key));
  return i;
}

std::optional<bool> json_fields::boolean(std::string_view key) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_bool()) throw bad_request(fmt::format("'{}' must be a boolean", param(key)), param(key));
  return v->get_bool();
}

std::optional<std::string> json_fields::string(std::string_view key) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw bad_request(fmt::format("'{}' must be a string", param(key)), param(key));
  return std::string(v->get_string());
}

std::optional<std::vector<std::string>> json_fields::strings(std::string_view key) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_string()) return std::vector<std::string>{std::string(v->get_string())};
  const auto* arr = v->if_array();
  if (!arr) throw bad_request(fmt::format("'{}' must be a string or a list of strings", param(key)), param(key));
  std::vector<std::string> out;
  for (const auto& e : *arr) {
    if (!e.is_string()) throw bad_request(fmt::format("'{}' must be a string or a list of strings", param(key)), param(key));
    out.emplace_back(e.get_string());
  }
  return out;
}

std::optional<std::vector<int32_t>> json_fields::int_list(std::string_view key, int64_t lo, int64_t hi) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  const auto* arr = v->if_array();
  if (!arr) throw bad_request(fmt::format("'{}' must be a list of integers", param(key)), param(key));
  std::vector<int32_t> out;
  for (const auto& e : *arr) {
    const auto i = as_integer(e);
    if (!i) throw bad_request(fmt::format("'{}' must be a list of integers", param(key)), param(key));
    if (*i < lo || *i > hi)
      throw bad_request(fmt::format("'{}' holds {}, outside [{}, {}]", param(key), *i, lo, hi), param(key));
    out.push_back(static_cast<int32_t>(*i));
  }
  return out;
}

}  // namespace tandem::http
