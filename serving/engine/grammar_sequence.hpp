#pragma once
// A sequence's grammar state (engine-internal).
#include <memory>

#include "engine_impl.hpp"
#include "tandem/grammar.hpp"

namespace tandem {

// The sequence's matcher, made on first use (the grammar's start state: nothing generated).
inline grammar_matcher* grammar_of(sequence& s) {
  if (!s.matcher) s.matcher = std::make_unique<grammar_matcher>(s.req.grammar);
  return s.matcher.get();
}

}  // namespace tandem
