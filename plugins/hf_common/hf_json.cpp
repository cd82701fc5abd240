#include "hf_json.hpp"

#include <fstream>
#include <iterator>

#include <boost/json.hpp>

#include "tandem/error.hpp"

namespace tandem::hf {
namespace json = boost::json;

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw model_error(file.string(), "cannot open");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw model_error(file.string(), "cannot read");
  return text;
}

json::value read_json(const std::filesystem::path& file) {
  const std::string text = read_text(file);
  json::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) throw model_error(file.string(), "is not valid JSON: " + ec.message());
  if (!v.is_object()) throw model_error(file.string(), "is not a JSON object");
  return v;
}

namespace {
std::optional<int64_t> as_id(const json::value& v) {
  if (v.is_int64() && v.get_int64() >= 0) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() < (uint64_t(1) << 62)) return static_cast<int64_t>(v.get_uint64());
  return std::nullopt;
}
}  // namespace

std::optional<int64_t> json_token_id(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v ? as_id(*v) : std::nullopt;
}

std::vector<int64_t> json_token_ids(const json::object& o, std::string_view key, const std::string& file) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return {};
  auto bad = [&]() -> model_error {
    return model_error(file, std::string(key) + " is " + json::serialize(*v) +
                                 ", not a token id or a list of token ids");
  };
  if (auto id = as_id(*v)) return {*id};
  if (!v->is_array()) throw bad();
  std::vector<int64_t> out;
  for (const auto& e : v->as_array()) {
    auto id = as_id(e);
    if (!id) throw bad();
    out.push_back(*id);
  }
  return out;
}

}  // namespace tandem::hf
