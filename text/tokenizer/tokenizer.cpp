// tokenizer: encoding, decoding and the vocab accessors (construction is in vocab_loader.cpp).
#include "tandem/tokenizer.hpp"

#include "tandem/error.hpp"
#include "tokenizer_impl.hpp"
#include "utf8.hpp"

namespace tandem {

void tokenizer::impl::check_id(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= texts.size()) {
    throw error("tokenizer: token id " + std::to_string(id) + " is outside the vocab [0, " +
                std::to_string(texts.size()) + ")");
  }
}

void tokenizer::impl::encode_plain(std::string_view text, std::vector<std::string_view>& pieces,
                                   std::vector<int32_t>& out) const {
  if (text.empty()) return;
  pieces.clear();
  pre.split(text, pieces);
  for (std::string_view piece : pieces) bpe.encode(piece, out);
}

std::vector<int32_t> tokenizer::encode(std::string_view text, bool parse_special) const {
  if (size_t bad = detail::find_invalid_utf8(text); bad != std::string_view::npos) {
    throw error("tokenizer: text is not valid UTF-8 at byte " + std::to_string(bad));
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  std::vector<std::string_view> pieces;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto hit = parse_special ? impl_->specials.find(text, pos)
                                   : detail::special_matcher::hit{text.size(), 0, -1};
    impl_->encode_plain(text.substr(pos, hit.pos - pos), pieces, out);
    if (hit.length == 0) break;
    out.push_back(hit.id);
    pos = hit.pos + hit.length;
  }
  return out;
}

std::string tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string raw;
  for (int32_t id : ids) {
    impl_->check_id(id);
    if (skip_special && impl_->types[id] == token_type::control) continue;
    raw += impl_->bytes[id];
  }
  std::string out;
  out.reserve(raw.size());
  detail::append_utf8_lossy(raw, out, /*final=*/true);
  return out;
}

std::string tokenizer::token_bytes(int32_t id) const {
  impl_->check_id(id);
  return impl_->bytes[id];
}

const std::string& tokenizer::token_text(int32_t id) const {
  impl_->check_id(id);
  return impl_->texts[id];
}

std::optional<int32_t> tokenizer::find(std::string_view token_text) const {
  auto it = impl_->by_text.find(token_text);
  if (it == impl_->by_text.end()) return std::nullopt;
  return it->second;
}

int32_t tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->texts.size()); }
int32_t tokenizer::bos() const { return impl_->bos; }
int32_t tokenizer::eos() const { return impl_->eos; }
int32_t tokenizer::unk() const { return impl_->unk; }
int32_t tokenizer::pad() const { return impl_->pad; }
bool tokenizer::add_bos() const { return impl_->add_bos; }
const std::string& tokenizer::pre() const { return impl_->pre_name; }

token_type tokenizer::type(int32_t id) const {
  impl_->check_id(id);
  return impl_->types[id];
}

bool tokenizer::is_special(int32_t id) const {
  const token_type t = type(id);
  return t == token_type::control || t == token_type::user_defined;
}

bool tokenizer::is_control(int32_t id) const { return type(id) == token_type::control; }

bool tokenizer::is_end_of_generation(int32_t id) const {
  impl_->check_id(id);
  return impl_->is_end_of_generation[id];
}

const std::vector<int32_t>& tokenizer::end_of_generation_ids() const {
  return impl_->end_of_generation;
}

}  // namespace tandem
