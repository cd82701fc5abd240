// grammar_matcher over xgrammar's GrammarMatcher: the mask is filled through a DLTensor
// view of the caller's words (xgrammar's bitmask is int32 words, bit t % 32 of word t / 32).
#include <dlpack/dlpack.h>
#include <fmt/format.h>

#include "grammar_xgrammar.hpp"

namespace tandem {

struct grammar_matcher::impl {
  std::shared_ptr<const compiled_grammar> g;
  xgrammar::GrammarMatcher m;
  explicit impl(std::shared_ptr<const compiled_grammar> cg) : g(std::move(cg)), m(g->xg) {}
};

grammar_matcher::grammar_matcher(std::shared_ptr<const compiled_grammar> g) : impl_(std::make_unique<impl>(std::move(g))) {}
grammar_matcher::~grammar_matcher() = default;
grammar_matcher::grammar_matcher(grammar_matcher&&) noexcept = default;

size_t grammar_matcher::mask_words(int32_t vocab_size) { return static_cast<size_t>(xgrammar::GetBitmaskSize(vocab_size)); }
int32_t grammar_matcher::vocab_size() const { return impl_->g->vocab_size; }

void grammar_matcher::fill_mask(std::span<uint32_t> words) {
  const size_t n = mask_words(impl_->g->vocab_size);
  if (words.size() < n) throw error(fmt::format("a grammar mask needs {} words, got {}", n, words.size()));
  int64_t shape[1] = {static_cast<int64_t>(n)};
  DLTensor t{};
  t.data = words.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  impl_->m.FillNextTokenBitmask(&t, 0);
}

bool grammar_matcher::accept(int32_t token) { return impl_->m.AcceptToken(token); }
bool grammar_matcher::terminated() const { return impl_->m.IsTerminated(); }

}  // namespace tandem
