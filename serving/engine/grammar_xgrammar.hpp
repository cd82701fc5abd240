#pragma once
// What tandem's grammar types hold of xgrammar (engine-internal).
#include <xgrammar/xgrammar.h>

#include "tandem/grammar.hpp"

namespace tandem {

class compiled_grammar {
 public:
  compiled_grammar(xgrammar::CompiledGrammar g, int32_t vocab) : xg(std::move(g)), vocab_size(vocab) {}
  xgrammar::CompiledGrammar xg;
  int32_t vocab_size;
};

}  // namespace tandem
