#include "value.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace tandem::chat_detail {

void fail(const std::string& message) { throw chat_template_error(message); }

const value* dict_data::find(const value& key) const {
  for (const auto& [k, v] : entries)
    if (equals(k, key)) return &v;
  return nullptr;
}

void dict_data::set(value key, value v) {
  for (auto& [k, old] : entries) {
    if (equals(k, key)) {
      old = std::move(v);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(v));
}

value value::undefined(std::string hint) {
  value v;
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

value value::none() {
  value v;
  v.kind_ = kind::none;
  return v;
}

value value::boolean(bool b) {
  value v;
  v.kind_ = kind::boolean;
  v.b_ = b;
  return v;
}

value value::integer(int64_t i) {
  value v;
  v.kind_ = kind::integer;
  v.i_ = i;
  return v;
}

value value::floating(double d) {
  value v;
  v.kind_ = kind::floating;
  v.d_ = d;
  return v;
}

value value::string(std::string s) {
  value v;
  v.kind_ = kind::string;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

value value::list(value_list items) {
  value v;
  v.kind_ = kind::list;
  v.list_ = std::make_shared<const value_list>(std::move(items));
  return v;
}

value value::tuple(value_list items) {
  value v = list(std::move(items));
  v.b_ = true;
  return v;
}

value value::dict(std::shared_ptr<dict_data> d) {
  value v;
  v.kind_ = kind::dict;
  v.dict_ = std::move(d);
  return v;
}

value value::function(std::string name, native_fn fn) {
  value v;
  v.kind_ = kind::callable;
  v.fn_ = std::make_shared<const callable_data>(callable_data{std::move(name), std::move(fn)});
  return v;
}

int64_t value::as_int() const { return kind_ == kind::boolean ? int64_t{b_} : i_; }

double value::as_double() const {
  if (kind_ == kind::floating) return d_;
  return static_cast<double>(as_int());
}

bool value::truthy() const {
  switch (kind_) {
    case kind::undefined:
    case kind::none: return false;
    case kind::boolean: return b_;
    case kind::integer: return i_ != 0;
    case kind::floating: return d_ != 0.0;
    case kind::string: return !s_->empty();
    case kind::list: return !list_->empty();
    case kind::dict: return dict_->is_namespace || !dict_->entries.empty();
    case kind::callable: return true;
  }
  return false;
}

std::string value::type_name() const {
  switch (kind_) {
    case kind::undefined: return "Undefined";
    case kind::none: return "NoneType";
    case kind::boolean: return "bool";
    case kind::integer: return "int";
    case kind::floating: return "float";
    case kind::string: return "str";
    case kind::list: return b_ ? "tuple" : "list";
    case kind::dict: return dict_->is_namespace ? "Namespace" : "dict";
    case kind::callable: return "function";
  }
  return "object";
}

std::string value::object_repr() const {
  if (kind_ == kind::none) return "None";
  return type_name() + " object";
}

value call_args::get(size_t index, const std::string& name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  if (index < positional.size()) return positional[index];
  return value();
}

bool call_args::has(size_t index, const std::string& name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return true;
  return index < positional.size();
}

const std::string& value::undefined_hint() const {
  static const std::string generic = "value is undefined";
  return s_ ? *s_ : generic;
}

void check_string_size(size_t bytes) {
  if (bytes > max_string_bytes) fail("string result larger than " + std::to_string(max_string_bytes) + " bytes");
}

void check_list_size(size_t items) {
  if (items > max_list_items) fail("list result longer than " + std::to_string(max_list_items) + " items");
}

void require_defined(const value& v) {
  if (v.is_undefined()) fail(v.undefined_hint());
}

}  // namespace tandem::chat_detail
