#define BOOST_TEST_MODULE tokenizer_reference_cases
// The default model's tokenizer against Hugging Face `tokenizers` on the same vocab and
// merges (tests/fixtures/tokenizer/cases.json, see tools/fixtures/tokenizer_reference.py).
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gguf_metadata_reader.hpp"
#include "tandem/error.hpp"
#include "tandem/stream_decoder.hpp"
#include "tandem/tokenizer.hpp"

namespace json = boost::json;
using tandem::tokenizer;
using ids = std::vector<int32_t>;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  BOOST_TEST_REQUIRE(v != nullptr, name << " is not set (run through meson test)");
  return v;
}

struct model {
  tandem::model_metadata meta = tandem::test::read_gguf_metadata(env("TANDEM_TEST_MODEL"));
  tokenizer tok = tokenizer::from_metadata(meta, env("TANDEM_TEST_MODEL"));
  json::object fixture = load_fixture();

  static json::object load_fixture() {
    std::ifstream in(env("TANDEM_FIXTURES") + "/tokenizer/cases.json", std::ios::binary);
    BOOST_TEST_REQUIRE(in.good(), "cannot read tests/fixtures/tokenizer/cases.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str()).as_object();
  }
  const json::array& cases(const char* key = "cases") const { return fixture.at(key).as_array(); }
};

model& shared_model() {
  static model m;  // the vocab loads once for every test case here
  return m;
}

ids to_ids(const json::value& v) {
  ids out;
  for (const auto& x : v.as_array()) out.push_back(static_cast<int32_t>(x.as_int64()));
  return out;
}

std::string str(const json::value& v) { return std::string(v.as_string()); }

// An independent UTF-8 check: decode code points, reject overlongs, surrogates, > U+10FFFF.
bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

}  // namespace

BOOST_AUTO_TEST_CASE(vocab_facts) {
  const tokenizer& tok = shared_model().tok;
  BOOST_TEST(tok.vocab_size() == 49152);
  BOOST_TEST(tok.pre() == "smollm");
  BOOST_TEST(tok.bos() == 1);
  BOOST_TEST(tok.eos() == 2);
  BOOST_TEST(!tok.add_bos());
  BOOST_TEST(*tok.find("<|im_start|>") == 1);
  BOOST_TEST(tok.is_end_of_generation(2));  // <|im_end|>
  BOOST_TEST(tok.is_end_of_generation(0));  // <|endoftext|>
  BOOST_TEST(!tok.is_end_of_generation(1));
  BOOST_TEST(tok.is_special(16));
  BOOST_TEST(!tok.is_special(17));
  BOOST_TEST(tok.token_bytes(*tok.find("\xC4\xA0the")) == " the");
  BOOST_TEST(shared_model().cases().size() >= 150u);
}

BOOST_AUTO_TEST_CASE(ids_match_the_reference) {
  const tokenizer& tok = shared_model().tok;
  for (const auto& c : shared_model().cases()) {
    const auto& o = c.as_object();
    const ids got = tok.encode(str(o.at("text")), o.at("parse_special").as_bool());
    BOOST_TEST(got == to_ids(o.at("ids")), str(o.at("name")));
  }
}

BOOST_AUTO_TEST_CASE(gpt2_pre_tokenizer_matches_the_reference) {
  auto meta = shared_model().meta;
  meta.set("tokenizer.ggml.pre", std::string("gpt2"));
  const tokenizer tok = tokenizer::from_metadata(meta);
  for (const auto& c : shared_model().cases("gpt2_cases")) {
    const auto& o = c.as_object();
    const ids got = tok.encode(str(o.at("text")), o.at("parse_special").as_bool());
    BOOST_TEST(got == to_ids(o.at("ids")), str(o.at("name")));
  }
}

BOOST_AUTO_TEST_CASE(decode_is_lossless_and_matches_the_reference) {
  const tokenizer& tok = shared_model().tok;
  size_t lossless = 0;
  for (const auto& c : shared_model().cases()) {
    const auto& o = c.as_object();
    const std::string text = str(o.at("text"));
    const std::string decoded = tok.decode(tok.encode(text, o.at("parse_special").as_bool()));
    BOOST_TEST(decoded == str(o.at("decoded")), str(o.at("name")));
    // Only texts holding a byte the vocab lacks (e.g. U+0004) may not round-trip.
    if (o.at("lossless").as_bool()) {
      BOOST_TEST(decoded == text, str(o.at("name")));
      ++lossless;
    }
  }
  BOOST_TEST(lossless >= 150u);
  for (const auto& c : shared_model().cases("decode_cases")) {
    const auto& o = c.as_object();
    const bool skip = o.at("skip_special").as_bool();
    BOOST_TEST(tok.decode(to_ids(o.at("ids")), skip) == str(o.at("text")));
  }
}

BOOST_AUTO_TEST_CASE(streaming_equals_decode_and_stays_valid) {
  const tokenizer& tok = shared_model().tok;
  size_t held_back = 0;
  auto check = [&](const ids& seq, bool skip, const std::string& name) {
    tandem::stream_decoder dec(tok, skip);
    std::string all;
    for (int32_t id : seq) {
      const std::string piece = dec.push(id);
      BOOST_TEST(valid_utf8(piece), name << ": push(" << id << ") gave invalid UTF-8");
      if (piece.empty() && dec.pending() > 0) ++held_back;
      all += piece;
    }
    const std::string rest = dec.flush();
    BOOST_TEST(valid_utf8(rest), name);
    BOOST_TEST(all + rest == tok.decode(seq, skip), name);
  };
  for (const auto& c : shared_model().cases()) {
    const auto& o = c.as_object();
    for (bool skip : {false, true}) check(to_ids(o.at("ids")), skip, str(o.at("name")));
  }
  for (const auto& c : shared_model().cases("decode_cases")) {
    check(to_ids(c.at("ids")), c.at("skip_special").as_bool(), "decode case");
  }
  BOOST_TEST(held_back > 0u);  // emoji and CJK cases split characters across tokens
}

BOOST_AUTO_TEST_CASE(emoji_split_across_tokens_is_held_back) {
  const tokenizer& tok = shared_model().tok;
  const ids e = tok.encode("\xF0\x9F\x98\x80");  // 😀
  BOOST_TEST_REQUIRE(e.size() >= 2u);
  tandem::stream_decoder dec(tok);
  for (size_t i = 0; i + 1 < e.size(); ++i) BOOST_TEST(dec.push(e[i]) == "");
  BOOST_TEST(dec.push(e.back()) == "\xF0\x9F\x98\x80");
  BOOST_TEST(dec.flush() == "");
}

BOOST_AUTO_TEST_CASE(bad_real_metadata) {
  const auto& meta = shared_model().meta;
  auto m = meta;
  auto merges = *m.get_strings("tokenizer.ggml.merges");
  merges[7] = "\xC4\xA0 notatoken";
  m.set("tokenizer.ggml.merges", merges);
  BOOST_CHECK_THROW(tokenizer::from_metadata(m), tandem::model_error);
  m = meta;
  auto types = *m.get_ints("tokenizer.ggml.token_type");
  types.resize(100);
  m.set("tokenizer.ggml.token_type", types);
  BOOST_CHECK_THROW(tokenizer::from_metadata(m), tandem::model_error);
  BOOST_CHECK_THROW(tandem::test::read_gguf_metadata(env("TANDEM_FIXTURES") + "/tokenizer/cases.json"),
                    tandem::model_error);
}

BOOST_AUTO_TEST_CASE(hundred_kilobytes_round_trip) {
  const tokenizer& tok = shared_model().tok;
  std::string text;
  for (const auto& c : shared_model().cases()) {
    if (c.at("lossless").as_bool()) text += str(c.at("text")) + "\n";
  }
  while (text.size() < 100 * 1024) text += text;
  const auto t0 = std::chrono::steady_clock::now();
  const ids out = tok.encode(text);
  const auto t1 = std::chrono::steady_clock::now();
  BOOST_TEST(tok.decode(out) == text);
  // Reported, not asserted: timings belong to benchmarks, not unit tests.
  const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  BOOST_TEST_MESSAGE("encoded " << text.size() << " bytes into " << out.size() << " tokens in "
                                << ms << " ms");
}

BOOST_AUTO_TEST_CASE(long_single_pieces_round_trip) {
  // One pre-token of 100 KB (one letter, one whitespace run, one emoji run) stresses the
  // merge queue and the regex (a JIT stack overflow falls back to the interpreter).
  const tokenizer& tok = shared_model().tok;
  for (std::string unit : {"a", " ", "\n", "\xF0\x9F\x98\x80", "7", "ab ", "\xE4\xBD\xA0"}) {
    std::string text;
    while (text.size() < 100 * 1024) text += unit;
    const auto t0 = std::chrono::steady_clock::now();
    const ids out = tok.encode(text);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    BOOST_TEST(tok.decode(out) == text);
    BOOST_TEST_MESSAGE("unit '" << unit << "': " << out.size() << " tokens in " << ms << " ms");
  }
}
