#pragma once
// Sampling under a grammar (engine-internal): the request's penalties and logit_bias as
// logit_processing applies them, then every token the grammar forbids at -inf, then the
// reference sampler's draw, and the drawn token accepted into the sequence's matcher.
#include <cstdint>
#include <span>

#include "tandem/engine.hpp"
#include "tandem/grammar.hpp"

namespace tandem {

// The token and the matcher moved past it. Throws tandem::error when the grammar allows
// no token at all (it cannot happen for a grammar that had not terminated).
int32_t sample_with_grammar(const float* logits, int vocab, const generation_request& r, const sampling_params& p,
                            std::span<const int32_t> generated, grammar_matcher& m);

// The allowed-token bitmask applied to one row: masked logits become -inf.
void apply_grammar_mask(float* row, int vocab, std::span<const uint32_t> words);

}  // namespace tandem
