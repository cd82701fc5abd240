#include "json_value.hpp"

#include <boost/json.hpp>

namespace tandem::chat_detail {
namespace {

value convert(const boost::json::value& j, int depth) {
  if (depth > 200) throw chat_template_error("JSON data nested too deeply");
  switch (j.kind()) {
    case boost::json::kind::null: return value::none();
    case boost::json::kind::bool_: return value::boolean(j.get_bool());
    case boost::json::kind::int64: return value::integer(j.get_int64());
    case boost::json::kind::uint64:
      // Python ints are unbounded; beyond int64 the float is the closest we hold.
      if (j.get_uint64() > static_cast<uint64_t>(INT64_MAX)) return value::floating(static_cast<double>(j.get_uint64()));
      return value::integer(static_cast<int64_t>(j.get_uint64()));
    case boost::json::kind::double_: return value::floating(j.get_double());
    case boost::json::kind::string: return value::string(std::string(j.get_string()));
    case boost::json::kind::array: {
      value_list items;
      for (const auto& e : j.get_array()) items.push_back(convert(e, depth + 1));
      return value::list(std::move(items));
    }
    case boost::json::kind::object: {
      auto d = std::make_shared<dict_data>();
      for (const auto& [k, v] : j.get_object()) d->set(value::string(std::string(k)), convert(v, depth + 1));
      return value::dict(std::move(d));
    }
  }
  return value::none();
}

}  // namespace

value from_json(std::string_view text) {
  boost::system::error_code ec;
  const boost::json::value j = boost::json::parse(text, ec);
  if (ec) throw chat_template_error("invalid JSON data for the template: " + ec.message());
  return convert(j, 0);
}

}  // namespace tandem::chat_detail
