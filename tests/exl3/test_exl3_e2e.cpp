// End to end on tests/fixtures/exl3 (tools/fixtures/make_exl3_tiny.py): a tiny random llama
// in EXL3 format, written through the safetensors package, loaded through weights.exl3 and
// run on backend.cpu. Checked against that script's independent numpy code:
//  - tiles.json: every codebook, K = 1..8, one tile's 256 fp16 values, bit for bit;
//  - reference.json: float64 logits of a Hugging Face-convention forward (rotate-half RoPE
//    on unpermuted q/k), so this also checks that the rope row order is handled;
//  - exl3: exact (rotated space, fp16 roundings) against exl3: reconstruct (f32 W).
#define BOOST_TEST_MODULE exl3_e2e
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include <boost/json.hpp>

#include "llama_hparams.hpp"
#include "llama_model.hpp"
#include "tandem/backend.hpp"
#include "tandem/chat_template.hpp"
#include "tandem/kv_pool.hpp"
#include "tandem/plugin_host.hpp"
#include "tandem/tokenizer.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_exl3/trellis.hpp"

using namespace tandem;
namespace json = boost::json;

namespace {

std::string fixtures() {
  const char* f = std::getenv("TANDEM_FIXTURES");
  BOOST_REQUIRE_MESSAGE(f, "TANDEM_FIXTURES is not set");
  return std::string(f) + "/exl3";
}

json::value read_json(const std::string& path) {
  std::ifstream in(path);
  BOOST_REQUIRE_MESSAGE(in, "cannot open " + path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return json::parse(text);
}

struct stack {
  plugin_host host{plugin_host::default_search_path()};
  std::unique_ptr<weight_format> weights;
  std::unique_ptr<backend> be;
  std::unique_ptr<llama_model> model;
  kv_pool pool{64, 16};

  explicit stack(const std::string& exl3_mode) {
    config wc, bc;
    bc.set("threads", int64_t{2});
    bc.set("memory_mb", int64_t{256});
    bc.set("linear", std::string("float"));
    bc.set("exl3", exl3_mode);
    weights = host.create<weight_format>("weights.exl3", wc);
    weights->open(fixtures() + "/tiny");
    be = host.create<backend>("backend.cpu", bc);
    auto hp = llama_hparams::from_metadata(weights->meta(), "tiny");
    model = std::make_unique<llama_model>(*be, *weights, hp, pool.n_pages(), pool.page_size());
  }

  std::vector<float> logits(const std::vector<int32_t>& ids) {
    std::vector<int32_t> pages;
    BOOST_REQUIRE(pool.grow(pages, static_cast<int64_t>(ids.size())));
    step_plan plan;
    plan.seqs.push_back({1, 0, ids, pages, true, {}});
    model->forward(plan, true);
    pool.release(pages);
    return model->logits_to_host();
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(tiles_bit_exact_with_numpy) {
  const json::value f = read_json(fixtures() + "/tiles.json");
  int n = 0;
  for (const auto& t : f.at("tiles").as_array()) {
    const auto cb = exl3::parse_codebook(std::string(t.at("codebook").as_string()));
    BOOST_TEST_REQUIRE(cb.has_value());
    const int K = static_cast<int>(t.at("K").as_int64());
    std::vector<uint16_t> words;
    for (const auto& w : t.at("words").as_array()) words.push_back(static_cast<uint16_t>(w.as_int64()));
    BOOST_TEST_REQUIRE(words.size() == static_cast<size_t>(exl3::tile_words(K)));
    uint16_t out[16][16];
    exl3::decode_tile(*cb, words.data(), K, out);
    const auto& want = t.at("fp16").as_array();
    for (int i = 0; i < 256; ++i)
      BOOST_TEST_REQUIRE(out[i / 16][i % 16] == want[i].as_int64(), exl3::name(*cb) << " K=" << K << " #" << i);
    ++n;
  }
  BOOST_TEST(n == 24);
}

BOOST_AUTO_TEST_CASE(logits_against_numpy_and_exact_vs_reconstruct) {
  const json::value ref = read_json(fixtures() + "/reference.json");
  stack recon("reconstruct"), exact("exact");
  const int vocab = recon.model->hparams().vocab;
  BOOST_TEST(vocab == 299);
  for (const auto& p : ref.at("prompts").as_array()) {
    std::vector<int32_t> ids;
    for (const auto& v : p.at("ids").as_array()) ids.push_back(static_cast<int32_t>(v.as_int64()));
    const auto a = recon.logits(ids), b = exact.logits(ids);
    BOOST_TEST_REQUIRE(a.size() == ids.size() * vocab);
    double d_ref = 0, d_exact = 0, scale = 0;
    const auto& rows = p.at("logits").as_array();
    for (size_t t = 0; t < ids.size(); ++t) {
      const auto& row = rows[t].as_array();
      for (int v = 0; v < vocab; ++v) {
        const double r = row[v].to_number<double>();
        scale = std::max(scale, std::fabs(r));
        d_ref = std::max(d_ref, std::fabs(a[t * vocab + v] - r));
        d_exact = std::max(d_exact, double(std::fabs(b[t * vocab + v] - a[t * vocab + v])));
      }
    }
    BOOST_TEST_MESSAGE("prompt of " << ids.size() << ": max |logit| " << scale << ", reconstruct vs numpy "
                                    << d_ref << ", exact vs reconstruct " << d_exact);
    BOOST_TEST(scale > 0.5);               // the logits are not degenerate
    BOOST_TEST(d_ref < 2e-3 * scale);      // f32 forward vs float64 reference
    BOOST_TEST(d_exact < 3e-2 * scale);    // fp16 activations/outputs inside every linear
    BOOST_TEST(d_exact > 0.0);             // the exact path really is another computation
  }
}

BOOST_AUTO_TEST_CASE(tokenizer_and_template_from_metadata) {
  plugin_host host{plugin_host::default_search_path()};
  auto w = host.create<weight_format>("weights.exl3", config{});
  w->open(fixtures() + "/tiny");
  const tokenizer tok = tokenizer::from_metadata(w->meta(), "tiny");
  const std::string text = "the quick brown fox, what is 2+2? héllo";
  const auto ids = tok.encode(text);
  BOOST_TEST(ids.size() < text.size());  // the merges apply
  BOOST_TEST(tok.decode(ids) == text);
  const auto chat = tok.encode("<|im_start|>user\nhi<|im_end|>");
  BOOST_TEST(chat.front() == tok.bos());
  BOOST_TEST(chat.back() == tok.eos());
  chat_template tpl(*w->meta().get_string("tokenizer.chat_template"));
  chat_render_options opt;
  const std::vector<chat_message> msgs{{"user", "hi"}};
  const std::string prompt = tpl.render(msgs, opt);
  BOOST_TEST(prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}
