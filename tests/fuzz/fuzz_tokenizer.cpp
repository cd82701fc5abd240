// libFuzzer harness: the tokenizer's encode / decode on two vocabularies, the synthetic one
// of tests/tokenizer (every byte has a token, so encoding is lossless) and the tiny GLM
// fixture's tokenizer.json (GLM-4 pre-tokenizer regex, PCRE2). Input: one byte choosing
// the vocabulary and the operation, then the operation's bytes.
//   encode: invalid UTF-8 throws tandem::error; else decode(encode(text)) == text on the
//     synthetic vocab, with and without special tokens, and with literal ranges taken from
//     the input (then no CONTROL token overlaps a range, and no ranges = encode(text));
//   decode: ids taken two bytes each; decode gives valid UTF-8 or throws tandem::error for
//     an id outside the vocab, and stream_decoder's pieces add up to decode().
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "hf_json.hpp"
#include "hf_tokenizer.hpp"
#include "synthetic_vocab.hpp"
#include "tandem/error.hpp"
#include "tandem/stream_decoder.hpp"
#include "tandem/tokenizer.hpp"
#include "utf8.hpp"

using tandem::tokenizer;
using tandem::fuzz::require;

namespace {

tokenizer make_synthetic() {
  const auto v = tandem::test::synthetic_vocab::make({"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "< |", "i m"});
  return tokenizer::from_metadata(v.metadata());
}

tokenizer make_glm() {
  const auto dir = tandem::fuzz::source_root() / "tests/fixtures/glm_moe_dsa/tiny";
  tandem::hf::tokenizer_ids ids;
  ids.vocab_size = *tandem::hf::json_token_id(tandem::hf::read_json(dir / "config.json").as_object(), "vocab_size");
  tandem::model_metadata meta;
  tandem::hf::read_hf_tokenizer(dir, ids, meta);
  return tokenizer::from_metadata(meta, dir.string());
}

// Sorted, disjoint ranges from the front of the input (a count, then two bytes per range),
// clamped to the text that follows them.
std::vector<tokenizer::byte_range> take_ranges(std::string_view& in) {
  const size_t n = tandem::fuzz::take_byte(in) % 8;
  const std::string_view spec = tandem::fuzz::take(in, 2 * n);
  std::vector<tokenizer::byte_range> out;
  size_t at = 0;
  for (size_t i = 0; i + 1 < spec.size(); i += 2) {
    const size_t begin = std::min(in.size(), at + static_cast<uint8_t>(spec[i]) % 32);
    const size_t end = std::min(in.size(), begin + static_cast<uint8_t>(spec[i + 1]) % 64);
    out.push_back({begin, end});
    at = end;
  }
  return out;
}

void check_encode(const tokenizer& tok, bool lossless, std::string_view in) {
  const std::vector<tokenizer::byte_range> ranges = take_ranges(in);
  const std::string text(in);
  const bool valid = tandem::detail::find_invalid_utf8(text) == std::string::npos;
  std::optional<std::vector<int32_t>> plain, literal, no_special;
  try {
    plain = tok.encode(text);
    no_special = tok.encode(text, false);
    literal = tok.encode(text, ranges);
  } catch (const tandem::error&) {
    require(!valid, "encode threw on valid UTF-8");
    return;
  }
  require(valid, "encode accepted invalid UTF-8");
  require(tok.encode(text, std::span<const tokenizer::byte_range>{}) == *plain, "no ranges differs from encode(text)");
  if (lossless) {
    require(tok.decode(*plain) == text, "decode(encode(text)) != text");
    require(tok.decode(*no_special) == text, "decode(encode(text, false)) != text");
    require(tok.decode(*literal) == text, "decode(encode(text, ranges)) != text");
  }
  size_t at = 0;
  for (int32_t id : *literal) {
    const size_t end = at + tok.token_bytes(id).size();
    if (tok.is_control(id))
      for (const auto& r : ranges) {
        const bool overlaps = r.begin < r.end && at < r.end && r.begin < end;  // an empty range holds no byte
        if (overlaps)
          std::fprintf(stderr, "control token %d at [%zu, %zu), range [%zu, %zu)\n", id, at, end, r.begin, r.end);
        require(!overlaps, "a control token overlaps a literal range");
      }
    at = end;
  }
  require(!lossless || at == text.size(), "token bytes do not add up to the text");
  for (int32_t id : *no_special) require(!tok.is_special(id), "encode(text, false) gave a special token");
  if (!tok.find_control_text(text)) {
    for (int32_t id : *plain) require(!tok.is_control(id), "a control token from text without control-token text");
  }
}

void check_decode(const tokenizer& tok, std::string_view in) {
  std::vector<int32_t> ids;
  while (in.size() >= 2) {
    const auto hi = static_cast<uint8_t>(in[0]), lo = static_cast<uint8_t>(in[1]);
    in.remove_prefix(2);
    ids.push_back(static_cast<int32_t>((hi << 8 | lo) % (tok.vocab_size() + 4)) - 2);  // a few out of range
  }
  const bool skip = !in.empty() && (in[0] & 1);
  std::string whole;
  try {
    whole = tok.decode(ids, skip);
  } catch (const tandem::error&) {
    require(std::any_of(ids.begin(), ids.end(), [&](int32_t id) { return id < 0 || id >= tok.vocab_size(); }),
            "decode threw for ids inside the vocab");
    return;
  }
  require(tandem::detail::find_invalid_utf8(whole) == std::string::npos, "decode gave invalid UTF-8");
  tandem::stream_decoder dec(tok, skip);
  std::string streamed;
  for (int32_t id : ids) streamed += dec.push(id);
  streamed += dec.flush();
  require(streamed == whole, "stream_decoder differs from decode");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tokenizer synthetic = make_synthetic();
  static const tokenizer glm = make_glm();
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const uint8_t op = tandem::fuzz::take_byte(in);
  const tokenizer& tok = (op & 1) ? glm : synthetic;
  if (op & 2)
    check_decode(tok, in);
  else
    check_encode(tok, /*lossless=*/!(op & 1), in);
  return 0;
}
