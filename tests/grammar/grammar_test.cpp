// tandem's grammar layer over xgrammar on a small vocabulary spelled out here: masks allow
// exactly the tokens that keep the text a prefix of the schema's language, a completed value
// allows only the stop token, bad schemas are grammar_errors, and the mask application sets
// exactly the forbidden logits to -inf.
#define BOOST_TEST_MODULE grammar
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "grammar_sampling.hpp"
#include "tandem/grammar.hpp"

using namespace tandem;

namespace {

// Token 0 is the stop token (a control token: empty bytes), the rest are text.
const std::vector<std::string> texts = {"", "{", "}", "\"", "a", "b", ":", ",", "1", "2", "true", "false", "null",
                                        "[", "]", " ", "\"a\"", "{\"", "\":", "ab", "-", ".", "e", "\n"};
constexpr int32_t stop_id = 0;
constexpr int32_t model_vocab = 40;  // wider than the tokenizer's, as model vocabularies often are

grammar_compiler& compiler() {
  static grammar_compiler gc(grammar_vocabulary{texts, model_vocab, {stop_id}});
  return gc;
}

int32_t id_of(const std::string& t) {
  for (size_t i = 1; i < texts.size(); ++i)
    if (texts[i] == t) return static_cast<int32_t>(i);
  BOOST_FAIL("no token " + t);
  return -1;
}

std::vector<bool> allowed(grammar_matcher& m) {
  std::vector<uint32_t> words(grammar_matcher::mask_words(model_vocab), 0xdeadbeef);
  m.fill_mask(words);
  std::vector<bool> out(model_vocab);
  for (int t = 0; t < model_vocab; ++t) out[t] = (words[t / 32] >> (t % 32)) & 1u;
  return out;
}

std::vector<std::string> allowed_texts(grammar_matcher& m) {
  std::vector<std::string> out;
  const auto a = allowed(m);
  for (int t = 0; t < model_vocab; ++t)
    if (a[t]) out.push_back(t < static_cast<int>(texts.size()) ? (t == stop_id ? "<stop>" : texts[t]) : "<beyond>");
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(json_object_starts_with_a_brace_and_ends_with_stop) {
  grammar_matcher m(compiler().compile(grammar_spec::json_object()));
  // Compact JSON: no leading whitespace, an object only.
  BOOST_TEST(allowed_texts(m) == (std::vector<std::string>{"{", "{\""}), boost::test_tools::per_element());
  BOOST_TEST(m.accept(id_of("{\"")));
  BOOST_TEST(!m.accept(id_of("\n")));  // a raw newline cannot be in a key: refused, the state unchanged
  BOOST_TEST(m.accept(id_of("a")));
  BOOST_TEST(m.accept(id_of("\":")));
  BOOST_TEST(m.accept(id_of("1")));
  BOOST_TEST(m.accept(id_of("}")));
  BOOST_TEST(!m.terminated());
  BOOST_TEST(allowed_texts(m) == (std::vector<std::string>{"<stop>"}), boost::test_tools::per_element());
  BOOST_TEST(m.accept(stop_id));
  BOOST_TEST(m.terminated());
}

BOOST_AUTO_TEST_CASE(a_schema_narrows_every_step) {
  const char* schema = R"({"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"]})";
  grammar_matcher m(compiler().compile(grammar_spec::json_schema(schema)));
  for (const char* t : {"{", "\"", "a", "\"", ":"}) BOOST_TEST(m.accept(id_of(t)), t);
  BOOST_TEST(allowed_texts(m) == (std::vector<std::string>{"true", "false"}), boost::test_tools::per_element());
  BOOST_TEST(!m.accept(id_of("1")));
  BOOST_TEST(!m.accept(id_of("null")));
  BOOST_TEST(m.accept(id_of("false")));
  // strict: no property beyond the schema's, so only the closing brace.
  BOOST_TEST(allowed_texts(m) == (std::vector<std::string>{"}"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(tokens_past_the_tokenizer_and_control_tokens_are_never_allowed) {
  grammar_matcher m(compiler().compile(grammar_spec::json_schema(R"({"type":"string"})")));
  BOOST_TEST(m.accept(id_of("\"")));
  const auto a = allowed(m);
  BOOST_TEST(a[id_of("a")]);
  BOOST_TEST(a[id_of(" ")]);  // inside a string any character goes
  BOOST_TEST(!a[stop_id]);
  for (int t = static_cast<int>(texts.size()); t < model_vocab; ++t) BOOST_TEST(!a[t], t);
}

BOOST_AUTO_TEST_CASE(bad_schemas_are_grammar_errors) {
  for (const char* bad : {R"({"type":"sting"})", R"({"type":"object","properties":{"a":{"$ref":"#/nowhere"}}})",
                          "{not json"}) {
    BOOST_CHECK_THROW(compiler().compile(grammar_spec::json_schema(bad)), grammar_error);
  }
}

BOOST_AUTO_TEST_CASE(the_mask_sets_exactly_the_forbidden_logits_to_minus_infinity) {
  constexpr int vocab = 70;
  std::vector<uint32_t> words = {0xffffffffu, 0x0000000fu, 0x00000022u};  // 0..31, 32..35, 65 and 69
  std::vector<float> row(vocab, 1.5f);
  apply_grammar_mask(row.data(), vocab, words);
  for (int t = 0; t < vocab; ++t) {
    const bool keep = t < 36 || t == 65 || t == 69;
    BOOST_TEST((keep ? row[t] == 1.5f : std::isinf(row[t]) && row[t] < 0), t);
  }
}

BOOST_AUTO_TEST_CASE(sampling_under_a_grammar_follows_it_and_moves_the_matcher) {
  grammar_matcher m(compiler().compile(grammar_spec::json_schema(R"({"type":"array","items":{"type":"integer"}})")));
  // The raw logits prefer "}" then "{" everywhere: the grammar has to overrule them.
  std::vector<float> logits(model_vocab, 0.0f);
  logits[id_of("}")] = 9;
  logits[id_of("{")] = 8;
  logits[id_of("[")] = 1;
  logits[id_of("1")] = 2;
  logits[id_of("]")] = 0.5;
  generation_request r;
  sampling_params greedy;
  std::vector<int32_t> out;
  for (int i = 0; i < 4; ++i) out.push_back(sample_with_grammar(logits.data(), model_vocab, r, greedy, {}, m));
  // "[", then digits as long as the model likes them more than "]"; then only what extends an integer array.
  BOOST_TEST(out[0] == id_of("["));
  for (int i = 1; i < 4; ++i) BOOST_TEST(out[i] == id_of("1"));
  logits[id_of("1")] = -5;
  logits[id_of("2")] = -5;
  BOOST_TEST(sample_with_grammar(logits.data(), model_vocab, r, greedy, {}, m) == id_of("]"));
  BOOST_TEST(sample_with_grammar(logits.data(), model_vocab, r, greedy, {}, m) == stop_id);
}
