// Expressions. Errors raised without a position get the position of the innermost
// expression that failed.
#include "builtins.hpp"
#include "interpreter.hpp"

namespace tandem::chat_detail {

value interpreter::eval(const expr& e) {
  try {
    return eval_node(e);
  } catch (const chat_template_error& err) {
    if (err.line() == 0 && e.line != 0) throw err.located(e.line, e.col);
    throw;
  }
}

value interpreter::eval_node(const expr& e) {
  switch (e.kind) {
    case expr_kind::literal: return e.lit;
    case expr_kind::name: {
      const value* v = lookup(e.name);
      return v ? *v : value::undefined("'" + e.name + "' is undefined");
    }
    case expr_kind::list:
    case expr_kind::tuple: {
      value_list items;
      for (const auto& a : e.args) items.push_back(eval(*a));
      return e.kind == expr_kind::tuple ? value::tuple(std::move(items)) : value::list(std::move(items));
    }
    case expr_kind::dict: {
      auto d = std::make_shared<dict_data>();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        value k = eval(*e.args[i]);
        if (k.is_list() || k.is_dict()) fail("unhashable type: '" + k.type_name() + "'");
        d->set(std::move(k), eval(*e.args[i + 1]));
      }
      return value::dict(std::move(d));
    }
    case expr_kind::attr: {
      value obj = eval(*e.args[0]);
      require_defined(obj);
      return get_attr(obj, e.name);
    }
    case expr_kind::subscript: {
      value obj = eval(*e.args[0]);
      require_defined(obj);
      return get_item(obj, eval(*e.args[1]));
    }
    case expr_kind::slice: {
      value obj = eval(*e.args[0]);
      require_defined(obj);
      auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i]) : value::none(); };
      return slice(obj, part(1), part(2), part(3));
    }
    case expr_kind::call: return eval_call(e);
    case expr_kind::filter: return eval_filter(e);
    case expr_kind::test: return eval_test(e);
    case expr_kind::unary: {
      value v = eval(*e.args[0]);
      if (e.name == "not") return value::boolean(!v.truthy());
      return negate(v, e.name == "-");
    }
    case expr_kind::binary: return eval_binary(e);
    case expr_kind::compare: return eval_compare(e);
    case expr_kind::condexpr: {
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      if (e.args[2]) return eval(*e.args[2]);
      return value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  fail("unknown expression");
}

value interpreter::eval_binary(const expr& e) {
  value l = eval(*e.args[0]);
  if (e.name == "and") return l.truthy() ? eval(*e.args[1]) : l;
  if (e.name == "or") return l.truthy() ? l : eval(*e.args[1]);
  value r = eval(*e.args[1]);
  value out = binary_op(e.name, l, r);
  charge(out);
  return out;
}

value interpreter::eval_compare(const expr& e) {
  value l = eval(*e.args[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    value r = eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") ok = equals(l, r);
    else if (op == "!=") ok = !equals(l, r);
    else if (op == "in") ok = contains(r, l);
    else if (op == "not in") ok = !contains(r, l);
    else {
      require_defined(l);
      require_defined(r);
      int c = compare(l, r);
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return value::boolean(false);
    l = std::move(r);
  }
  return value::boolean(true);
}

call_args interpreter::eval_args(const expr& e, size_t first) {
  call_args a;
  for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, eval(*v));
  return a;
}

value interpreter::eval_call(const expr& e) {
  value fn = eval(*e.args[0]);
  require_defined(fn);
  if (fn.type() != kind::callable) fail("'" + fn.type_name() + "' object is not callable");
  call_args a = eval_args(e, 1);
  value out = fn.as_callable().fn(a);
  charge(out);
  return out;
}

value interpreter::eval_filter(const expr& e) {
  value input = eval(*e.args[0]);
  value out = apply_filter(e.name, input, eval_args(e, 1));
  charge(out);
  return out;
}

value interpreter::eval_test(const expr& e) {
  value v = eval(*e.args[0]);
  bool r = apply_test(e.name, v, eval_args(e, 1));
  return value::boolean(e.negated ? !r : r);
}

}  // namespace tandem::chat_detail
