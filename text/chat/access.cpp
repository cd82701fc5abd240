// jinja2's getattr / getitem rules in the immutable sandbox, slicing and iteration.
#include <algorithm>

#include "builtins.hpp"
#include "utf8.hpp"

namespace tandem::chat_detail {
namespace {

value no_attribute(const value& obj, const std::string& name) {
  std::string repr = obj.is_namespace() ? "jinja2.utils.Namespace object" : obj.object_repr();
  return value::undefined("'" + repr + "' has no attribute '" + name + "'");
}

value no_element(const value& obj, const value& key) {
  return value::undefined(obj.object_repr() + " has no element " + to_repr(key));
}

// Python index semantics: negative counts from the end; nullopt when out of range.
std::optional<size_t> resolve_index(int64_t i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  if (i < 0 || static_cast<size_t>(i) >= n) return std::nullopt;
  return static_cast<size_t>(i);
}

std::optional<value> method_of(const value& obj, const std::string& name) {
  switch (obj.type()) {
    case kind::string: return string_method(obj, name);
    case kind::dict: return obj.is_namespace() ? std::nullopt : dict_method(obj, name);
    case kind::list: return list_method(obj, name);
    default: return std::nullopt;
  }
}

}  // namespace

value get_attr(const value& obj, const std::string& name) {
  if (auto m = method_of(obj, name)) return *m;
  if (obj.is_dict())
    if (const value* v = obj.as_dict().find(value::string(name))) return *v;
  return no_attribute(obj, name);
}

value get_item(const value& obj, const value& key) {
  if (obj.is_dict()) {
    if (const value* v = obj.as_dict().find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.type() == kind::integer || key.type() == kind::boolean)) {
    if (obj.is_list()) {
      if (auto i = resolve_index(key.as_int(), obj.as_list().size())) return obj.as_list()[*i];
    } else {
      auto offs = codepoint_offsets(obj.as_string());
      if (auto i = resolve_index(key.as_int(), offs.size() - 1))
        return value::string(obj.as_string().substr(offs[*i], offs[*i + 1] - offs[*i]));
    }
  }
  if (key.is_string()) {
    if (auto m = method_of(obj, key.as_string())) return *m;
    return no_attribute(obj, key.as_string());
  }
  return no_element(obj, key);
}

// Python's slice.indices(): clamps start and stop for the step's direction.
static std::vector<size_t> slice_positions(int64_t n, const value& start, const value& stop, const value& step) {
  auto as_index = [](const value& v, const char* what) {
    if (!(v.type() == kind::integer || v.type() == kind::boolean))
      fail(std::string("slice ") + what + " must be an integer or None, not " + v.type_name());
    return v.as_int();
  };
  int64_t st = step.is_none() ? 1 : as_index(step, "step");
  if (st == 0) fail("slice step cannot be zero");
  auto clamp = [&](const value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t i = as_index(v, "index");
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t b = clamp(start, st > 0 ? 0 : n - 1);
  int64_t e = clamp(stop, st > 0 ? n : -1);
  std::vector<size_t> out;
  for (__int128 i = b; st > 0 ? i < e : i > e; i += st) out.push_back(static_cast<size_t>(i));
  return out;
}

value slice(const value& obj, const value& start, const value& stop, const value& step) {
  if (obj.is_list()) {
    const auto& l = obj.as_list();
    value_list out;
    for (size_t i : slice_positions(static_cast<int64_t>(l.size()), start, stop, step)) out.push_back(l[i]);
    return obj.is_tuple() ? value::tuple(std::move(out)) : value::list(std::move(out));
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    auto offs = codepoint_offsets(s);
    std::string out;
    for (size_t i : slice_positions(static_cast<int64_t>(offs.size() - 1), start, stop, step))
      out.append(s, offs[i], offs[i + 1] - offs[i]);
    return value::string(std::move(out));
  }
  return value::undefined(obj.object_repr() + " has no element slice(" + to_repr(start) + ", " + to_repr(stop) +
                          ", " + to_repr(step) + ")");
}

value_list iterate(const value& v) {
  switch (v.type()) {
    case kind::undefined: return {};
    case kind::list: return v.as_list();
    case kind::string: {
      value_list out;
      auto offs = codepoint_offsets(v.as_string());
      for (size_t i = 0; i + 1 < offs.size(); ++i)
        out.push_back(value::string(v.as_string().substr(offs[i], offs[i + 1] - offs[i])));
      return out;
    }
    case kind::dict: {
      if (v.is_namespace()) fail("'Namespace' object is not iterable");
      value_list out;
      for (const auto& [k, x] : v.as_dict().entries) out.push_back(k);
      return out;
    }
    default: fail("'" + v.type_name() + "' object is not iterable");
  }
}

}  // namespace tandem::chat_detail
