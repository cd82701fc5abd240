// The global functions a chat template can call: jinja2's range / namespace / dict
// (range capped like the sandbox's), and Hugging Face's raise_exception and strftime_now.
#include <ctime>

#include "builtins.hpp"

namespace tandem::chat_detail {
namespace {

int64_t int_arg(const value& v) {
  if (v.type() != kind::integer && v.type() != kind::boolean) {
    require_defined(v);
    fail("'" + v.type_name() + "' object cannot be interpreted as an integer");
  }
  return v.as_int();
}

value range_fn(const call_args& a) {
  if (a.positional.empty() || a.positional.size() > 3) fail("range expected 1 to 3 arguments");
  int64_t start = 0, stop, step = 1;
  if (a.positional.size() == 1) {
    stop = int_arg(a.positional[0]);
  } else {
    start = int_arg(a.positional[0]);
    stop = int_arg(a.positional[1]);
    if (a.positional.size() == 3) step = int_arg(a.positional[2]);
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  __int128 astep = step > 0 ? step : -static_cast<__int128>(step);
  __int128 n = span <= 0 ? 0 : (span + astep - 1) / astep;
  if (n > max_range)
    fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(max_range) + ").");
  value_list out;
  for (int64_t i = 0, x = start; i < static_cast<int64_t>(n); ++i, x += step) out.push_back(value::integer(x));
  return value::list(std::move(out));
}

std::shared_ptr<dict_data> dict_from_args(const call_args& a) {
  auto d = std::make_shared<dict_data>();
  for (const auto& p : a.positional) {
    if (!p.is_dict()) fail("dict arguments must be mappings");
    for (const auto& [k, v] : p.as_dict().entries) d->set(k, v);
  }
  for (const auto& [k, v] : a.keyword) d->set(value::string(k), v);
  return d;
}

value strftime_now(const call_args& a) {
  value fmt = a.get(0, "format");
  if (!fmt.is_string()) fail("strftime_now() argument must be str");
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[512];
  size_t n = fmt.as_string().empty() ? 0 : std::strftime(buf, sizeof buf, fmt.as_string().c_str(), &tm);
  if (n == 0 && !fmt.as_string().empty()) fail("strftime_now: format gives an empty or too long result");
  return value::string(std::string(buf, n));
}

}  // namespace

void install_globals(dict_data& root, std::shared_ptr<namespace_registry> namespaces) {
  root.set(value::string("range"), value::function("range", range_fn));
  root.set(value::string("namespace"), value::function("namespace", [namespaces](const call_args& a) {
             auto d = dict_from_args(a);
             d->is_namespace = true;
             namespaces->push_back(d);
             return value::dict(std::move(d));
           }));
  root.set(value::string("dict"), value::function("dict", [](const call_args& a) { return value::dict(dict_from_args(a)); }));
  root.set(value::string("raise_exception"), value::function("raise_exception", [](const call_args& a) -> value {
             throw chat_template_error::raised(to_str(a.get(0, "message")));
           }));
  root.set(value::string("strftime_now"), value::function("strftime_now", strftime_now));
}

}  // namespace tandem::chat_detail
