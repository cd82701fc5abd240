#pragma once
// The tokenizer's vocabulary as structured output's grammar compiler needs it.
#include "tandem/grammar.hpp"
#include "tandem/tokenizer.hpp"

namespace tandem {

// Each token's raw bytes (control tokens empty: they are markup, never JSON text), the
// vocabulary size, and the end-of-generation ids as the grammar's stop tokens.
grammar_vocabulary grammar_vocabulary_of(const tokenizer& tok);

}  // namespace tandem
