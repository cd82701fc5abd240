#pragma once
// The value type of the template interpreter: Python's data model, reduced to what chat
// templates touch. Strings are UTF-8 and shared (message contents can be large);
// lists and dicts are shared and, as in the jinja2 sandbox, never mutated after creation
// except for namespace attributes.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/chat_template.hpp"

namespace tandem::chat_detail {

class value;
struct call_args;
using value_list = std::vector<value>;
using native_fn = std::function<value(const call_args&)>;

// Insertion-ordered mapping; linear lookup is fine for chat-sized dicts.
struct dict_data {
  std::vector<std::pair<value, value>> entries;
  bool is_namespace = false;
  const value* find(const value& key) const;
  void set(value key, value v);
};

struct callable_data {
  std::string name;
  native_fn fn;
};

enum class kind { undefined, none, boolean, integer, floating, string, list, dict, callable };

class value {
 public:
  value() = default;  // undefined
  static value undefined(std::string hint);
  static value none();
  static value boolean(bool b);
  static value integer(int64_t i);
  static value floating(double d);
  static value string(std::string s);
  static value list(value_list items);
  // A Python tuple: a list that prints as (a, b) and never equals a list.
  static value tuple(value_list items);
  static value dict(std::shared_ptr<dict_data> d);
  static value function(std::string name, native_fn fn);

  kind type() const { return kind_; }
  bool is_undefined() const { return kind_ == kind::undefined; }
  bool is_none() const { return kind_ == kind::none; }
  bool is_string() const { return kind_ == kind::string; }
  bool is_number() const { return kind_ == kind::integer || kind_ == kind::floating || kind_ == kind::boolean; }
  bool is_list() const { return kind_ == kind::list; }
  bool is_tuple() const { return kind_ == kind::list && b_; }
  bool is_dict() const { return kind_ == kind::dict; }
  bool is_namespace() const { return kind_ == kind::dict && dict_->is_namespace; }

  bool as_bool() const { return b_; }
  int64_t as_int() const;  // bool or integer
  double as_double() const;  // bool, integer or float
  const std::string& as_string() const { return *s_; }
  const value_list& as_list() const { return *list_; }
  const dict_data& as_dict() const { return *dict_; }
  dict_data& mutable_dict() const { return *dict_; }
  const callable_data& as_callable() const { return *fn_; }
  // The message an operation on this undefined value reports.
  const std::string& undefined_hint() const;

  bool truthy() const;
  // Python's type name for messages ("str", "int", "dict", ...).
  std::string type_name() const;
  // jinja2's object_type_repr: "dict object", "None", ...
  std::string object_repr() const;

 private:
  kind kind_ = kind::undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const value_list> list_;
  std::shared_ptr<dict_data> dict_;
  std::shared_ptr<const callable_data> fn_;
};

struct call_args {
  value_list positional;
  std::vector<std::pair<std::string, value>> keyword;
  // Argument `index` (or keyword `name`); undefined when absent.
  value get(size_t index, const std::string& name) const;
  bool has(size_t index, const std::string& name) const;
};

// Strings and lists built at run time are bounded so that a hostile template fails with
// an error instead of exhausting memory.
constexpr size_t max_string_bytes = size_t{64} << 20;
constexpr size_t max_list_items = size_t{1} << 20;
void check_string_size(size_t bytes);
void check_list_size(size_t items);

// Python semantics.
bool equals(const value& a, const value& b);
// <0, 0, >0; throws for unorderable types.
int compare(const value& a, const value& b);
std::string to_str(const value& v);   // str(v); undefined -> ""
std::string to_repr(const value& v);  // repr(v)
std::string float_repr(double d);
// Throws the undefined error if v is undefined.
void require_defined(const value& v);
[[noreturn]] void fail(const std::string& message);

}  // namespace tandem::chat_detail
