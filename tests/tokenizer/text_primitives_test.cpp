#define BOOST_TEST_MODULE tokenizer_text_primitives
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "byte_level.hpp"
#include "pre_tokenizer.hpp"
#include "utf8.hpp"

using namespace tandem::detail;

namespace {

const std::string fffd = "\xEF\xBF\xBD";

std::string lossy(std::string_view in) {
  std::string out;
  append_utf8_lossy(in, out, true);
  return out;
}

std::vector<std::string> split(std::string_view pre, std::string_view text) {
  std::vector<std::string_view> pieces;
  pre_tokenizer::create(pre)->split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

}  // namespace

BOOST_AUTO_TEST_CASE(lossy_utf8_replaces_maximal_subparts) {
  BOOST_TEST(lossy("abc \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") == "abc \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  BOOST_TEST(lossy("\xF0\x9F\x98") == fffd);                  // truncated: one subpart
  BOOST_TEST(lossy("\xF0\x9F\x98" "A") == fffd + "A");
  BOOST_TEST(lossy("\xED\xA0\x80") == fffd + fffd + fffd);    // surrogate: ED alone is the subpart
  BOOST_TEST(lossy("\xC0\xAF") == fffd + fffd);               // overlong lead
  BOOST_TEST(lossy("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);  // above U+10FFFF
  BOOST_TEST(lossy("\xFF" "a\x80") == fffd + "a" + fffd);
}

BOOST_AUTO_TEST_CASE(lossy_utf8_holds_back_only_completable_tails) {
  std::string out;
  BOOST_TEST(append_utf8_lossy("a\xF0\x9F", out, false) == 1u);
  BOOST_TEST(out == "a");
  out.clear();
  BOOST_TEST(append_utf8_lossy("a\xF0\x41", out, false) == 3u);  // F0 can no longer complete
  BOOST_TEST(out == "a" + fffd + "A");
  out.clear();
  BOOST_TEST(append_utf8_lossy("\xE2\x82", out, false) == 0u);
  BOOST_TEST(out.empty());
}

BOOST_AUTO_TEST_CASE(find_invalid_utf8_reports_offsets) {
  BOOST_TEST(find_invalid_utf8("plain \xE4\xBD\xA0") == std::string_view::npos);
  BOOST_TEST(find_invalid_utf8("ab\xE4\xBD") == 2u);
  BOOST_TEST(find_invalid_utf8("\x80") == 0u);
}

BOOST_AUTO_TEST_CASE(byte_alphabet_matches_gpt2) {
  const auto& a = byte_alphabet::get();
  BOOST_TEST(a.symbol(' ') == "\xC4\xA0");   // Ġ
  BOOST_TEST(a.symbol('\n') == "\xC4\x8A");  // Ċ
  BOOST_TEST(a.symbol('\t') == "\xC4\x89");  // ĉ
  BOOST_TEST(a.symbol('a') == "a");
  BOOST_TEST(a.symbol(0xE9) == "\xC3\xA9");  // é stands for itself
  BOOST_TEST(a.symbol(0xAD) == "\xC5\x83");  // soft hyphen is remapped (Ń)
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  BOOST_TEST(a.decode(a.encode(all)).value() == all);
  BOOST_TEST(!a.decode("\xE4\xB8\xAD").has_value());  // 中 is not a byte symbol
  BOOST_TEST(!a.decode("\xC4").has_value());
}

BOOST_AUTO_TEST_CASE(smollm_isolates_every_digit) {
  using v = std::vector<std::string>;
  BOOST_TEST(split("smollm", "a 12") == (v{"a", " ", "1", "2"}));
  BOOST_TEST(split("gpt2", "a 12") == (v{"a", " 12"}));
  // The stretch before a digit ends there, so the whitespace look-ahead sees its end.
  BOOST_TEST(split("smollm", "a   1") == (v{"a", "   ", "1"}));
  BOOST_TEST(split("gpt2", "a   1") == (v{"a", "  ", " 1"}));
  BOOST_TEST(split("smollm", "x\xD9\xA1\xD9\xA2") == (v{"x", "\xD9\xA1", "\xD9\xA2"}));  // Arabic-Indic
}

BOOST_AUTO_TEST_CASE(gpt2_rules_for_words_spaces_and_contractions) {
  using v = std::vector<std::string>;
  BOOST_TEST(split("smollm", "don't I'll") == (v{"don", "'t", " I", "'ll"}));
  BOOST_TEST(split("smollm", "a  b") == (v{"a", " ", " b"}));
  BOOST_TEST(split("smollm", "hi!! \n") == (v{"hi", "!!", " \n"}));
  BOOST_TEST(split("smollm", "x\xE1\xA0\x8Ey") == (v{"x", "\xE1\xA0\x8E", "y"}));  // U+180E: not space
  BOOST_TEST(split("smollm", "a\xC2\xA0" "b") == (v{"a", "\xC2\xA0", "b"}));       // NBSP is space
  BOOST_TEST(split("smollm", "").empty());
}

BOOST_AUTO_TEST_CASE(unknown_pre_tokenizer_is_refused) {
  BOOST_TEST(!pre_tokenizer::create("no-such-pre").has_value());
  BOOST_TEST(pre_tokenizer::known_names().find("smollm") != std::string::npos);
}
