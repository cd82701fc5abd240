#pragma once
// Walks the syntax tree and writes the output. Scoping follows jinja2: each loop
// iteration and each macro call gets its own scope, `if` does not; `set` writes the
// innermost scope, so only namespace() attributes carry values out of a loop.
// Every statement, loop iteration and macro call is metered so that a hostile template
// ends with an error rather than a hang or a stack overflow.
#include <string>
#include <unordered_map>
#include <vector>

#include "ast.hpp"

namespace tandem::chat_detail {

struct render_limits {
  uint64_t max_steps = 2'000'000;  // statements executed + loop iterations (~100k messages)
  int max_call_depth = 64;         // nested macro calls
  size_t max_output_bytes = size_t{64} << 20;
};

class interpreter {
 public:
  using scope = std::unordered_map<std::string, value>;

  interpreter(const stmt_list& program, scope root, render_limits limits = {});
  std::string run();

 private:
  enum class flow { normal, break_, continue_ };

  const stmt_list& program_;
  std::vector<scope> scopes_;
  render_limits limits_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  std::string* out_ = nullptr;

  void tick();
  // Meters the work behind a built value (copying lists, growing strings), so that
  // quadratic accumulation in a loop also meets the step limit.
  void charge(const value& built);
  void write(const std::string& s);
  flow exec(const stmt_list& body);
  flow exec(const stmt& s);
  flow exec_if(const stmt& s);
  flow exec_for(const stmt& s);
  void exec_set(const stmt& s);
  void exec_macro_def(const stmt& s);
  std::string render_body(const stmt_list& body);
  value call_macro(const stmt& def, const call_args& args);
  void assign(const expr& target, const value& v);
  const value* lookup(const std::string& name) const;

  value eval(const expr& e);
  value eval_node(const expr& e);
  value eval_binary(const expr& e);
  value eval_compare(const expr& e);
  value eval_call(const expr& e);
  value eval_filter(const expr& e);
  value eval_test(const expr& e);
  call_args eval_args(const expr& e, size_t first);
};

}  // namespace tandem::chat_detail
