#include "tandem/config.hpp"

#include <charconv>
#include <cmath>

#include "tandem/error.hpp"

namespace tandem {
namespace {

template <class T>
const T& typed(const std::map<std::string, config_value, std::less<>>& values,
               std::string_view key, std::string_view type_name) {
  auto it = values.find(key);
  if (it == values.end()) throw config_error(std::string(key), "setting is missing");
  const T* v = std::get_if<T>(&it->second);
  if (!v) throw config_error(std::string(key), "setting is not a " + std::string(type_name));
  return *v;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool config::get_bool(std::string_view key) const { return typed<bool>(values_, key, "bool"); }
int64_t config::get_int(std::string_view key) const { return typed<int64_t>(values_, key, "int"); }
const std::string& config::get_string(std::string_view key) const {
  return typed<std::string>(values_, key, "string");
}
double config::get_number(std::string_view key) const {
  auto it = values_.find(key);
  if (it != values_.end())
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return typed<double>(values_, key, "float");
}

std::optional<config_value> parse_config_value(config_type type, std::string_view text) {
  text = trim(text);
  switch (type) {
    case config_type::boolean:
      if (text == "true" || text == "1" || text == "yes" || text == "on") return config_value{true};
      if (text == "false" || text == "0" || text == "no" || text == "off") return config_value{false};
      return std::nullopt;
    case config_type::integer: {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || p != text.data() + text.size() || text.empty()) return std::nullopt;
      return config_value{v};
    }
    case config_type::number: {
      double v = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || p != text.data() + text.size() || text.empty() || !std::isfinite(v))
        return std::nullopt;
      return config_value{v};
    }
    case config_type::string:
      return config_value{std::string(text)};
  }
  return std::nullopt;
}

std::string to_string(const config_value& v) {
  struct visitor {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const {
      char buf[32];
      auto [p, ec] = std::to_chars(buf, buf + sizeof buf, d);
      return std::string(buf, p);
    }
    std::string operator()(const std::string& s) const { return s; }
  };
  return std::visit(visitor{}, v);
}

}  // namespace tandem
