// jinja2's built-in tests (`x is defined`, `x is string`, ...).
#include <map>

#include "builtins.hpp"

namespace tandem::chat_detail {
namespace {

using test_fn = bool (*)(const value& v, const call_args& a);

bool is_int(const value& v) { return v.type() == kind::integer; }

bool cmp_arg(const value& v, const call_args& a, bool (*pred)(int)) {
  value other = a.get(0, "other");
  require_defined(v);
  require_defined(other);
  return pred(compare(v, other));
}

bool ascii_case(const value& v, bool upper) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (unsigned char c : v.as_string()) {
    if (std::isalpha(c)) {
      cased = true;
      if (upper ? std::islower(c) : std::isupper(c)) return false;
    }
  }
  return cased;
}

const std::map<std::string, test_fn>& registry() {
  static const std::map<std::string, test_fn> tests = {
      {"boolean", [](const value& v, const call_args&) { return v.type() == kind::boolean; }},
      {"callable", [](const value& v, const call_args&) { return v.type() == kind::callable; }},
      {"defined", [](const value& v, const call_args&) { return !v.is_undefined(); }},
      {"undefined", [](const value& v, const call_args&) { return v.is_undefined(); }},
      {"none", [](const value& v, const call_args&) { return v.is_none(); }},
      {"true", [](const value& v, const call_args&) { return v.type() == kind::boolean && v.as_bool(); }},
      {"false", [](const value& v, const call_args&) { return v.type() == kind::boolean && !v.as_bool(); }},
      {"string", [](const value& v, const call_args&) { return v.is_string(); }},
      {"number", [](const value& v, const call_args&) { return v.is_number(); }},
      {"integer", [](const value& v, const call_args&) { return is_int(v); }},
      {"float", [](const value& v, const call_args&) { return v.type() == kind::floating; }},
      {"mapping", [](const value& v, const call_args&) { return v.is_dict() && !v.is_namespace(); }},
      {"sequence", [](const value& v, const call_args&) { return v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace()); }},
      {"iterable", [](const value& v, const call_args&) { return v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace()) || v.is_undefined(); }},
      {"lower", [](const value& v, const call_args&) { return ascii_case(v, false); }},
      {"upper", [](const value& v, const call_args&) { return ascii_case(v, true); }},
      {"even", [](const value& v, const call_args&) { require_defined(v); return v.is_number() && v.as_int() % 2 == 0; }},
      {"odd", [](const value& v, const call_args&) { require_defined(v); return v.is_number() && v.as_int() % 2 != 0; }},
      {"divisibleby", [](const value& v, const call_args& a) {
         value n = a.get(0, "num");
         if (!v.is_number() || !n.is_number() || n.as_int() == 0) fail("divisibleby needs two non-zero integers");
         return v.as_int() % n.as_int() == 0;
       }},
      {"eq", [](const value& v, const call_args& a) { return equals(v, a.get(0, "other")); }},
      {"ne", [](const value& v, const call_args& a) { return !equals(v, a.get(0, "other")); }},
      {"lt", [](const value& v, const call_args& a) { return cmp_arg(v, a, [](int c) { return c < 0; }); }},
      {"le", [](const value& v, const call_args& a) { return cmp_arg(v, a, [](int c) { return c <= 0; }); }},
      {"gt", [](const value& v, const call_args& a) { return cmp_arg(v, a, [](int c) { return c > 0; }); }},
      {"ge", [](const value& v, const call_args& a) { return cmp_arg(v, a, [](int c) { return c >= 0; }); }},
      {"in", [](const value& v, const call_args& a) { return contains(a.get(0, "seq"), v); }},
      {"sameas", [](const value& v, const call_args& a) {
         value o = a.get(0, "other");
         if (v.type() != o.type()) return false;
         if (v.is_none() || v.type() == kind::boolean) return equals(v, o);
         if (v.is_list()) return &v.as_list() == &o.as_list();
         if (v.is_dict()) return &v.as_dict() == &o.as_dict();
         return equals(v, o) && v.is_number();
       }},
  };
  return tests;
}

const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> a = {
      {"==", "eq"}, {"equalto", "eq"}, {"!=", "ne"}, {"<", "lt"}, {"lessthan", "lt"}, {"<=", "le"},
      {">", "gt"}, {"greaterthan", "gt"}, {">=", "ge"}};
  return a;
}

const std::string& canonical(const std::string& name) {
  auto it = aliases().find(name);
  return it == aliases().end() ? name : it->second;
}

}  // namespace

bool is_test(const std::string& name) { return registry().count(canonical(name)) != 0; }

bool apply_test(const std::string& name, const value& v, const call_args& a) {
  auto it = registry().find(canonical(name));
  if (it == registry().end()) fail("no test named '" + name + "'");
  return it->second(v, a);
}

}  // namespace tandem::chat_detail
