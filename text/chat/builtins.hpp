#pragma once
// The built-in behaviour the interpreter dispatches to: Python operators, jinja2's
// attribute / item access rules (with the immutable sandbox's refusals), str / dict /
// list methods, filters, tests, tojson and the globals Hugging Face provides.
#include <optional>
#include <string>

#include "value.hpp"

namespace tandem::chat_detail {

class interpreter;

// Limits shared by the interpreter and the builtins.
constexpr int64_t max_range = 100000;  // jinja2.sandbox.MAX_RANGE

// operators.cpp
value binary_op(const std::string& op, const value& a, const value& b);
value negate(const value& v, bool minus);
bool contains(const value& container, const value& item);

// access.cpp: `obj.name` tries an attribute (method) first, then an item; `obj[key]` the
// reverse. A miss gives an undefined value carrying jinja2's message.
value get_attr(const value& obj, const std::string& name);
value get_item(const value& obj, const value& key);
value slice(const value& obj, const value& start, const value& stop, const value& step);
// The items a for loop or a filter walks: list items, dict keys, string characters;
// undefined iterates as empty; anything else throws.
value_list iterate(const value& v);

// methods.cpp: a bound method of a str, dict or list, or undefined.
std::optional<value> string_method(const value& s, const std::string& name);
std::optional<value> dict_method(const value& d, const std::string& name);
std::optional<value> list_method(const value& l, const std::string& name);
std::string str_strip(const std::string& s, bool left, bool right, const value& chars);

// filters.cpp / predicates.cpp
bool is_filter(const std::string& name);
value apply_filter(const std::string& name, const value& input, const call_args& args);
bool is_test(const std::string& name);
bool apply_test(const std::string& name, const value& v, const call_args& args);

// json.cpp: Python's json.dumps(x, ensure_ascii, indent, separators, sort_keys).
struct json_options {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // the per-level indent string; none = one line
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};
std::string to_json(const value& v, const json_options& opt);
json_options json_options_from(const call_args& args, size_t first_positional);

// globals.cpp. Namespaces are the only mutable values, so every reference cycle runs
// through one; `namespaces` records them so that the renderer can break the cycles.
using namespace_registry = std::vector<std::weak_ptr<dict_data>>;
void install_globals(dict_data& root, std::shared_ptr<namespace_registry> namespaces);

}  // namespace tandem::chat_detail
