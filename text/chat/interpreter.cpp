// Statements: output, control flow, assignment, macros.
#include "interpreter.hpp"

#include "builtins.hpp"
#include "parser.hpp"

namespace tandem::chat_detail {

interpreter::interpreter(const stmt_list& program, scope root, render_limits limits)
    : program_(program), limits_(limits) {
  scopes_.push_back(std::move(root));
}

std::string interpreter::run() {
  std::string out;
  out_ = &out;
  exec(program_);
  return out;
}

void interpreter::tick() {
  if (++steps_ > limits_.max_steps)
    fail("template exceeded the step limit (" + std::to_string(limits_.max_steps) + " statements and loop iterations)");
}

void interpreter::charge(const value& built) {
  uint64_t units = built.is_list() ? built.as_list().size() : (built.is_string() ? built.as_string().size() / 256 : 0);
  steps_ += units;
  if (steps_ > limits_.max_steps) tick();
}

void interpreter::write(const std::string& s) {
  if (out_->size() + s.size() > limits_.max_output_bytes)
    fail("template output exceeded " + std::to_string(limits_.max_output_bytes) + " bytes");
  out_->append(s);
}

const value* interpreter::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return &f->second;
  }
  return nullptr;
}

interpreter::flow interpreter::exec(const stmt_list& body) {
  for (const auto& s : body) {
    flow f = exec(*s);
    if (f != flow::normal) return f;
  }
  return flow::normal;
}

interpreter::flow interpreter::exec(const stmt& s) {
  tick();
  try {
    switch (s.kind) {
      case stmt_kind::text: write(s.text); break;
      case stmt_kind::output: write(to_str(eval(*s.expr))); break;
      case stmt_kind::if_: return exec_if(s);
      case stmt_kind::for_: return exec_for(s);
      case stmt_kind::set: assign(*s.target, eval(*s.expr)); break;
      case stmt_kind::set_block: assign(*s.target, value::string(render_body(s.body))); break;
      case stmt_kind::macro: exec_macro_def(s); break;
      case stmt_kind::filter_block: {
        scopes_.push_back({{filter_body_name, value::string(render_body(s.body))}});
        value v = eval(*s.expr);
        scopes_.pop_back();
        write(to_str(v));
        break;
      }
      case stmt_kind::body: return exec(s.body);
      case stmt_kind::break_: return flow::break_;
      case stmt_kind::continue_: return flow::continue_;
    }
  } catch (const chat_template_error& e) {
    if (e.line() == 0 && s.line != 0) throw e.located(s.line, s.col);
    throw;
  }
  return flow::normal;
}

interpreter::flow interpreter::exec_if(const stmt& s) {
  for (const auto& [cond, body] : s.branches)
    if (eval(*cond).truthy()) return exec(body);
  return exec(s.else_body);
}

// The `loop` object of one iteration. Keys are built once: this runs per iteration.
static value make_loop(size_t i, const value_list& items) {
  static const value keys[] = {value::string("index"), value::string("index0"), value::string("revindex"),
                               value::string("revindex0"), value::string("first"), value::string("last"),
                               value::string("length"), value::string("depth"), value::string("depth0"),
                               value::string("previtem"), value::string("nextitem"), value::string("cycle")};
  auto d = std::make_shared<dict_data>();
  size_t n = items.size();
  auto num = [](size_t x) { return value::integer(static_cast<int64_t>(x)); };
  d->entries.reserve(12);
  d->entries.emplace_back(keys[0], num(i + 1));
  d->entries.emplace_back(keys[1], num(i));
  d->entries.emplace_back(keys[2], num(n - i));
  d->entries.emplace_back(keys[3], num(n - i - 1));
  d->entries.emplace_back(keys[4], value::boolean(i == 0));
  d->entries.emplace_back(keys[5], value::boolean(i + 1 == n));
  d->entries.emplace_back(keys[6], num(n));
  d->entries.emplace_back(keys[7], num(1));
  d->entries.emplace_back(keys[8], num(0));
  static const value no_prev = value::undefined("there is no previous item");
  static const value no_next = value::undefined("there is no next item");
  d->entries.emplace_back(keys[9], i > 0 ? items[i - 1] : no_prev);
  d->entries.emplace_back(keys[10], i + 1 < n ? items[i + 1] : no_next);
  d->entries.emplace_back(keys[11], value::function("cycle", [i](const call_args& a) {
                            if (a.positional.empty()) fail("no items for cycling given");
                            return a.positional[i % a.positional.size()];
                          }));
  return value::dict(std::move(d));
}

interpreter::flow interpreter::exec_for(const stmt& s) {
  value_list all = iterate(eval(*s.expr));
  value_list items;
  if (s.condition) {
    for (const auto& item : all) {
      tick();
      scopes_.emplace_back();
      assign(*s.target, item);
      bool keep = eval(*s.condition).truthy();
      scopes_.pop_back();
      if (keep) items.push_back(item);
    }
  } else {
    items = std::move(all);
  }
  if (items.empty()) return exec(s.else_body);
  for (size_t i = 0; i < items.size(); ++i) {
    tick();
    scopes_.emplace_back();
    assign(*s.target, items[i]);
    scopes_.back()["loop"] = make_loop(i, items);
    flow f = exec(s.body);
    scopes_.pop_back();
    if (f == flow::break_) break;
  }
  return flow::normal;
}

void interpreter::assign(const expr& target, const value& v) {
  if (target.kind == expr_kind::name) {
    scopes_.back()[target.name] = v;
  } else if (target.kind == expr_kind::tuple) {
    value_list parts = iterate(v);
    if (parts.size() != target.args.size())
      fail(parts.size() < target.args.size()
               ? "not enough values to unpack (expected " + std::to_string(target.args.size()) + ", got " +
                     std::to_string(parts.size()) + ")"
               : "too many values to unpack (expected " + std::to_string(target.args.size()) + ")");
    for (size_t i = 0; i < parts.size(); ++i) assign(*target.args[i], parts[i]);
  } else {  // ns.attr
    const value* ns = lookup(target.args[0]->name);
    if (!ns || !ns->is_namespace()) fail("cannot assign attribute on non-namespace object");
    ns->mutable_dict().set(value::string(target.name), v);
  }
}

std::string interpreter::render_body(const stmt_list& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  flow f = exec(body);
  out_ = saved;
  if (f != flow::normal) fail("break or continue outside of a loop body");
  return buf;
}

void interpreter::exec_macro_def(const stmt& s) {
  scopes_.back()[s.text] = value::function(s.text, [this, &s](const call_args& a) { return call_macro(s, a); });
}

value interpreter::call_macro(const stmt& def, const call_args& args) {
  if (call_depth_ >= limits_.max_call_depth)
    fail("macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
  if (args.positional.size() > def.params.size())
    fail("macro '" + def.text + "' takes not more than " + std::to_string(def.params.size()) + " argument(s)");
  for (const auto& [k, v] : args.keyword) {
    bool known = false;
    for (const auto& p : def.params) known = known || p == k;
    if (!known) fail("macro '" + def.text + "' has no argument named '" + k + "'");
  }
  // A macro sees the template's top-level names and its own parameters, not the caller's locals.
  std::vector<scope> saved(std::make_move_iterator(scopes_.begin() + 1), std::make_move_iterator(scopes_.end()));
  scopes_.resize(1);
  scopes_.emplace_back();
  ++call_depth_;
  for (size_t i = 0; i < def.params.size(); ++i) {
    value v = args.get(i, def.params[i]);
    if (!args.has(i, def.params[i]))
      v = def.defaults[i] ? eval(*def.defaults[i]) : value::undefined("parameter '" + def.params[i] + "' was not provided");
    scopes_.back()[def.params[i]] = v;
  }
  std::string result = render_body(def.body);
  --call_depth_;
  scopes_.resize(1);
  for (auto& sc : saved) scopes_.push_back(std::move(sc));
  return value::string(std::move(result));
}

}  // namespace tandem::chat_detail
