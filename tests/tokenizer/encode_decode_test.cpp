#define BOOST_TEST_MODULE tokenizer_encode_decode
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <vector>

#include "byte_level.hpp"
#include "synthetic_vocab.hpp"
#include "tandem/error.hpp"
#include "tandem/stream_decoder.hpp"
#include "tandem/tokenizer.hpp"

using tandem::tokenizer;
using tandem::test::synthetic_vocab;
using ids = std::vector<int32_t>;

namespace {

const std::string fffd = "\xEF\xBF\xBD";

// "Ġ" is the byte-level symbol of a space.
const std::vector<std::string> merges = {
    "b c", "a b", "a a", "h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "\xC4\xA0w o"};

struct fixture {
  synthetic_vocab v = synthetic_vocab::make(merges);
  tokenizer tok = tokenizer::from_metadata(v.metadata());
  int32_t id(const std::string& t) const { return v.id(t); }
  int32_t byte(unsigned char b) const;
};

int32_t fixture::byte(unsigned char b) const {
  return v.id(tandem::detail::byte_alphabet::get().symbol(b));
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(encode_decode, fixture)

BOOST_AUTO_TEST_CASE(merges_apply_by_rank_not_position) {
  // "b c" outranks "a b": abc -> a + bc, even though "a b" is leftmost.
  BOOST_TEST(tok.encode("abc") == (ids{id("a"), id("bc")}));
  BOOST_TEST(tok.encode("ab") == (ids{id("ab")}));
  // Equal ranks go leftmost first: aaa -> aa + a.
  BOOST_TEST(tok.encode("aaa") == (ids{id("aa"), id("a")}));
  BOOST_TEST(tok.encode("hello") == (ids{id("hello")}));
  BOOST_TEST(tok.encode("hello wo") == (ids{id("hello"), id("\xC4\xA0wo")}));
}

BOOST_AUTO_TEST_CASE(special_tokens_are_cut_out_first) {
  BOOST_TEST(tok.encode("<|im_start|>hello<|im_end|>") == (ids{1, id("hello"), 2}));
  BOOST_TEST(tok.encode("<|im_start|>hello<|im_end|>", false).size() > 3u);
  BOOST_TEST(tok.decode(tok.encode("<|im_start|>hello<|im_end|>", false)) == "<|im_start|>hello<|im_end|>");
  const ids near = tok.encode("<|im_start");
  BOOST_TEST(std::count(near.begin(), near.end(), 1) == 0);
  BOOST_TEST(tok.encode("<x>y") == (ids{4}));             // leftmost-longest
  BOOST_TEST(tok.encode("<x>z") == (ids{3, id("z")}));
  BOOST_TEST(tok.encode("").empty());
}

BOOST_AUTO_TEST_CASE(decode_and_specials) {
  const ids x = tok.encode("<|im_start|>hello wo<|im_end|>");
  BOOST_TEST(tok.decode(x) == "<|im_start|>hello wo<|im_end|>");
  BOOST_TEST(tok.decode(x, true) == "hello wo");
  BOOST_TEST(tok.decode(ids{4}, true) == "<x>y");  // user-defined tokens are kept
  BOOST_TEST(tok.is_special(3));
  BOOST_TEST(tok.is_special(4));
  BOOST_TEST(!tok.is_control(4));
  BOOST_TEST(!tok.is_special(id("a")));
  BOOST_TEST(tok.token_bytes(id("\xC4\xA0wo")) == " wo");
  BOOST_TEST(tok.token_text(id("\xC4\xA0wo")) == "\xC4\xA0wo");
  BOOST_TEST(!tok.find("nope").has_value());
}

BOOST_AUTO_TEST_CASE(end_of_generation_and_ids) {
  BOOST_TEST(tok.bos() == 1);
  BOOST_TEST(tok.eos() == 2);
  BOOST_TEST(tok.unk() == -1);
  BOOST_TEST(!tok.add_bos());
  BOOST_TEST(tok.pre() == "smollm");
  BOOST_TEST(tok.is_end_of_generation(2));   // eos, <|im_end|>
  BOOST_TEST(tok.is_end_of_generation(0));   // <|endoftext|>
  BOOST_TEST(!tok.is_end_of_generation(1));
  BOOST_TEST(!tok.is_end_of_generation(id("a")));
  BOOST_TEST(tok.end_of_generation_ids().size() == 2u);
}

BOOST_AUTO_TEST_CASE(bad_ids_and_bad_text_throw) {
  BOOST_CHECK_THROW(tok.decode(ids{-1}), tandem::error);
  BOOST_CHECK_THROW(tok.decode(ids{tok.vocab_size()}), tandem::error);
  BOOST_CHECK_THROW(tok.token_bytes(tok.vocab_size()), tandem::error);
  BOOST_CHECK_THROW(tok.encode("ab\xC3"), tandem::error);
  BOOST_CHECK_THROW(tok.encode("\xED\xA0\x80"), tandem::error);
}

BOOST_AUTO_TEST_CASE(decode_makes_invalid_bytes_replacement_chars) {
  BOOST_TEST(tok.decode(ids{byte(0xF0), byte(0x9F)}) == fffd);
  BOOST_TEST(tok.decode(ids{byte(0xF0), byte(0x9F), byte(0x98), byte(0x80)}) == "\xF0\x9F\x98\x80");
  BOOST_TEST(tok.decode(ids{byte(0xFF), byte('a')}) == fffd + "a");
}

BOOST_AUTO_TEST_CASE(stream_decoder_holds_back_split_characters) {
  tandem::stream_decoder dec(tok);
  BOOST_TEST(dec.push(byte('a')) == "a");
  BOOST_TEST(dec.push(byte(0xF0)) == "");
  BOOST_TEST(dec.push(byte(0x9F)) == "");
  BOOST_TEST(dec.push(byte(0x98)) == "");
  BOOST_TEST(dec.pending() == 3u);
  BOOST_TEST(dec.push(byte(0x80)) == "\xF0\x9F\x98\x80");
  BOOST_TEST(dec.pending() == 0u);
  BOOST_TEST(dec.push(byte(0xE2)) == "");
  BOOST_TEST(dec.push(byte('b')) == fffd + "b");  // E2 can no longer complete: emitted now
  BOOST_TEST(dec.push(byte(0xFF)) == fffd);
  BOOST_TEST(dec.push(byte(0xC3)) == "");
  BOOST_TEST(dec.flush() == fffd);
  BOOST_TEST(dec.flush() == "");
  BOOST_CHECK_THROW(dec.push(-5), tandem::error);
}

BOOST_AUTO_TEST_CASE(stream_decoder_skips_control_tokens) {
  tandem::stream_decoder dec(tok, true);
  BOOST_TEST(dec.push(1) == "");
  BOOST_TEST(dec.push(id("hello")) == "hello");
  BOOST_TEST(dec.push(4) == "<x>y");
  BOOST_TEST(dec.push(2) == "");
  tandem::stream_decoder raw(tok);
  BOOST_TEST(raw.push(1) == "<|im_start|>");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(bytes_missing_from_the_vocab_are_dropped) {
  // As `tokenizers` does for a BPE without unk token; neighbours still merge.
  const auto v = synthetic_vocab::make({"a b"}, {0x04});
  const tokenizer tok = tokenizer::from_metadata(v.metadata());
  BOOST_TEST(tok.encode("a\x04" "b") == (ids{v.id("a"), v.id("b")}));
  BOOST_TEST(tok.encode("!\x04" "b").size() == 2u);
  BOOST_TEST(tok.encode("\x04").empty());
}

BOOST_AUTO_TEST_CASE(gpt2_pre_tokenizer_keeps_digit_runs) {
  const auto v = synthetic_vocab::make({"1 2", "\xC4\xA0 12"});
  const tokenizer smollm = tokenizer::from_metadata(v.metadata("smollm"));
  const tokenizer gpt2 = tokenizer::from_metadata(v.metadata("gpt2"));
  BOOST_TEST(smollm.encode(" 12") == (ids{v.id("\xC4\xA0"), v.id("1"), v.id("2")}));
  BOOST_TEST(gpt2.encode(" 12") == (ids{v.id("\xC4\xA0" "12")}));
}
