#define BOOST_TEST_MODULE model_logits
#include <boost/test/unit_test.hpp>

// The llama forward on backend.cpu against references no one here wrote:
//  - linear=float (weights dequantized, f32 dots) against Hugging Face transformers in
//    float32 on the same dequantized weights: logits within 2e-3, greedy identical;
//  - linear=q8 (the fast path: activations rounded to 8 bits like llama.cpp) against
//    llama.cpp on the file as shipped: logits within the stated tolerance, greedy identical
//    up to the first step where the reference's own best-vs-second margin is a near-tie.
// And the hidden-state taps a drafter reads: the tap of layer l is bit for bit the stream
// that a model cut after layer l leaves for its output norm.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "llama_hparams.hpp"
#include "llama_model.hpp"
#include "logits_fixture.hpp"
#include "tandem/backend.hpp"
#include "tandem/error.hpp"
#include "tandem/kv_pool.hpp"
#include "tandem/plugin_host.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_ref/sampling.hpp"

using namespace tandem;
using test::ref_prompt;

namespace {

struct stack {
  plugin_host host{plugin_host::default_search_path()};
  std::unique_ptr<weight_format> weights;
  std::unique_ptr<backend> be;
  std::unique_ptr<llama_model> model;
  kv_pool pool{256, 16};

  explicit stack(const std::string& linear) {
    const char* file = std::getenv("TANDEM_TEST_MODEL");
    BOOST_REQUIRE_MESSAGE(file, "TANDEM_TEST_MODEL is not set");
    config wc, bc;
    wc.set("mmap", true);
    bc.set("threads", int64_t{0});
    bc.set("memory_mb", int64_t{0});
    bc.set("linear", linear);
    weights = host.create<weight_format>("weights.gguf", wc);
    weights->open(file);
    be = host.create<backend>("backend.cpu", bc);
    auto hp = llama_hparams::from_metadata(weights->meta(), file);
    model = std::make_unique<llama_model>(*be, *weights, hp, pool.n_pages(), pool.page_size());
  }

  // Logits of `ids` (one prefill): every position [n, vocab] when all, else the last [1, vocab].
  std::vector<float> prefill_logits(const std::vector<int32_t>& ids, bool all) {
    std::vector<int32_t> pages;
    BOOST_REQUIRE(pool.grow(pages, static_cast<int64_t>(ids.size())));
    step_plan plan;
    plan.seqs.push_back({1, 0, ids, pages, true, {}});
    model->forward(plan, all);
    pool.release(pages);
    return model->logits_to_host();
  }

  // Greedy continuation, one token per forward with the KV cache, up to n or EOS.
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, size_t n, int32_t eos) {
    std::vector<int32_t> pages, out, toks = prompt;
    int64_t done = 0;
    while (out.size() < n) {
      BOOST_REQUIRE(pool.grow(pages, static_cast<int64_t>(toks.size())));
      step_plan plan;
      plan.seqs.push_back({1, done, {toks.begin() + done, toks.end()}, pages, true, {}});
      model->forward(plan);
      int32_t t = model->sample({sampling_params{}})[0];
      done = static_cast<int64_t>(toks.size());
      toks.push_back(t);
      out.push_back(t);
      if (t == eos) break;
    }
    pool.release(pages);
    return out;
  }
};

float max_top_diff(const float* row, const std::vector<std::pair<int32_t, float>>& ref) {
  float worst = 0;
  for (auto [id, logit] : ref) worst = std::max(worst, std::fabs(row[id] - logit));
  return worst;
}

size_t agreeing_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

void check_against(stack& s, const std::vector<ref_prompt>& refs, float tol, float tie_margin) {
  const int vocab = s.model->hparams().vocab;
  for (const ref_prompt& r : refs) {
    BOOST_TEST_CONTEXT("prompt " << r.name) {
      const bool all = !r.per_position_top.empty();
      const std::vector<float> logits = s.prefill_logits(r.ids, all);
      const float* last = logits.data() + (all ? r.ids.size() - 1 : 0) * vocab;
      const float d_last = max_top_diff(last, r.last_top);
      BOOST_TEST_MESSAGE(r.name << ": top-40 max |diff| " << d_last);
      BOOST_TEST(d_last <= tol);
      BOOST_TEST(ref::argmax_row(last, vocab) == r.last_top[0].first);
      for (size_t p = 0; p < r.per_position_top.size(); ++p)
        BOOST_TEST(max_top_diff(logits.data() + p * vocab, r.per_position_top[p]) <= tol);
      if (!r.last_full.empty()) {
        float worst = 0;
        for (int i = 0; i < vocab; ++i) worst = std::max(worst, std::fabs(last[i] - r.last_full[i]));
        BOOST_TEST_MESSAGE(r.name << ": full-vocabulary max |diff| " << worst);
        BOOST_TEST(worst <= tol);
      }
      // Greedy must match until the reference itself faces a near-tie.
      const std::vector<int32_t> got = s.greedy(r.ids, r.greedy.size(), 2);
      size_t must = r.greedy.size();
      for (size_t i = 0; i < r.greedy_margin.size(); ++i)
        if (r.greedy_margin[i] < tie_margin) {
          must = i;
          BOOST_TEST_MESSAGE(r.name << ": near-tie in the reference at step " << i << " (margin "
                                    << r.greedy_margin[i] << ")");
          break;
        }
      const size_t agree = agreeing_prefix(got, r.greedy);
      BOOST_TEST_MESSAGE(r.name << ": greedy agrees for " << agree << " of " << r.greedy.size() << " tokens");
      BOOST_TEST(agree >= must);
    }
  }
}

}  // namespace

// Exact path against a float32 reference: differences are only summation order.
BOOST_AUTO_TEST_CASE(float_linears_match_transformers_f32) {
  stack s("float");
  check_against(s, test::load_logits_fixture("hf_f32.json"), 2e-3f, 4e-3f);
}

BOOST_AUTO_TEST_CASE(float_linears_match_llama_cpp_on_dequantized_weights) {
  stack s("float");
  check_against(s, test::load_logits_fixture("llamacpp_f32deq.json"), 2e-3f, 4e-3f);
}

// The fast path rounds activations to 8-bit blocks before each quantized dot, as llama.cpp
// does. Against the float32 reference its logits move by up to q8_tolerance: llama.cpp's
// own 8-bit path, on the same file and prompts, moves by up to 1.41 (the fixture header's
// measured_differences), so the bound says tandem's fast path is no rougher than the
// reference engine's. Greedy tokens must agree until the reference faces a step whose
// margin is within that bound of a tie.
constexpr float q8_tolerance = 1.5f;

BOOST_AUTO_TEST_CASE(q8_linears_stay_within_llama_cpp_error_of_f32_reference) {
  stack s("q8");
  check_against(s, test::load_logits_fixture("hf_f32.json"), q8_tolerance, q8_tolerance);
}

// forward_options::hidden_layers: the tap of layer l is the residual stream after layer l
// (kept by the norm that adds the layer's output), which is what a model of only the first
// l + 1 layers leaves before its output norm (hidden_states(-1)): the same ops on the same
// rows, so the same bits; for a prompt and for the decode step after it. A layer listed
// twice reads the same rows at both listings; the last layer's tap is the full model's
// hidden_states(-1).
BOOST_AUTO_TEST_CASE(taps_are_the_stream_of_a_model_cut_after_the_layer) {
  stack s("q8");
  const std::vector<int> layers = {14, 0, 29, 14, 5};
  const std::vector<int32_t> prompt = {1, 504, 3000, 42, 7, 12000, 88};
  std::vector<int32_t> pages;
  BOOST_REQUIRE(s.pool.grow(pages, static_cast<int64_t>(prompt.size()) + 1));
  const auto host_rows = [&](const tensor_view& v) {
    std::vector<float> h(static_cast<size_t>(v.numel()));
    s.be->copy_to_host(h.data(), v.data, h.size() * sizeof(float));
    s.be->synchronize();
    return h;
  };
  // The prompt, then one decode token: each step's taps (by listing) and final stream.
  const auto run = [&](llama_model& m, const std::vector<int>& taps) {
    std::vector<std::vector<std::vector<float>>> steps;
    for (int step = 0; step < 2; ++step) {
      step_plan plan;
      plan.seqs.push_back({1, step == 0 ? 0 : static_cast<int64_t>(prompt.size()),
                           step == 0 ? prompt : std::vector<int32_t>{501}, pages, true, {}});
      m.forward(plan, forward_options{.hidden_layers = taps});
      std::vector<std::vector<float>> got;
      for (size_t i = 0; i < taps.size(); ++i) got.push_back(host_rows(m.hidden_states(static_cast<int>(i))));
      got.push_back(host_rows(m.hidden_states(-1)));
      steps.push_back(std::move(got));
    }
    return steps;
  };
  const auto full = run(*s.model, layers);
  for (int step = 0; step < 2; ++step)
    BOOST_TEST_CONTEXT("step " << step) {
      const auto& f = full[static_cast<size_t>(step)];
      BOOST_TEST(f[0].size() == (step == 0 ? prompt.size() : 1u) * static_cast<size_t>(s.model->info().hidden));
      BOOST_TEST((f[0] == f[3]));  // layer 14 twice
      BOOST_TEST((f[2] == f[5]));  // layer 29 = the stream the output norm reads
      BOOST_TEST((f[0] != f[1]));
    }
  for (int l : {0, 5, 14, 29}) {
    llama_hparams hp = s.model->hparams();
    hp.n_layers = l + 1;
    llama_model cut(*s.be, *s.weights, hp, s.pool.n_pages(), s.pool.page_size());
    const auto stream = run(cut, {});
    const size_t listed = static_cast<size_t>(std::find(layers.begin(), layers.end(), l) - layers.begin());
    for (int step = 0; step < 2; ++step)
      BOOST_TEST_CONTEXT("layer " << l << ", step " << step) {
        BOOST_TEST((full[static_cast<size_t>(step)][listed] == stream[static_cast<size_t>(step)][0]));
      }
  }
  s.pool.release(pages);
}

// The llama layers with each o / down projection and the norm after it as one
// backend::linear_add_rms_norm (TANDEM_LLAMA_NORM_EPILOGUE=1: the down projection then
// carries the next layer's norm, or the output norm, and a tap's copy) against the two ops:
// on backend.cpu the op's default is those two ops, so logits and taps must be the same bits,
// for a prompt and a decode step.
BOOST_AUTO_TEST_CASE(norm_epilogue_layers_give_the_same_bits) {
  stack s("q8");
  const std::vector<int> taps = {0, 14, 29};
  const std::vector<int32_t> prompt = {1, 504, 3000, 42, 7, 12000, 88};
  const auto host_rows = [&](const tensor_view& v) {
    std::vector<float> h(static_cast<size_t>(v.numel()));
    s.be->copy_to_host(h.data(), v.data, h.size() * sizeof(float));
    s.be->synchronize();
    return h;
  };
  const auto run = [&](llama_model& m) {
    std::vector<int32_t> pages;
    BOOST_REQUIRE(s.pool.grow(pages, static_cast<int64_t>(prompt.size()) + 1));
    std::vector<std::vector<float>> got;
    for (int step = 0; step < 2; ++step) {
      step_plan plan;
      plan.seqs.push_back({1, step == 0 ? 0 : static_cast<int64_t>(prompt.size()),
                           step == 0 ? prompt : std::vector<int32_t>{501}, pages, true, {}});
      m.forward(plan, forward_options{.all_logits = true, .hidden_layers = taps});
      got.push_back(m.logits_to_host());
      for (size_t i = 0; i < taps.size(); ++i) got.push_back(host_rows(m.hidden_states(static_cast<int>(i))));
    }
    s.pool.release(pages);
    return got;
  };
  const auto two_ops = run(*s.model);
  setenv("TANDEM_LLAMA_NORM_EPILOGUE", "1", 1);
  llama_model fused(*s.be, *s.weights, s.model->hparams(), s.pool.n_pages(), s.pool.page_size());
  unsetenv("TANDEM_LLAMA_NORM_EPILOGUE");
  const auto one_op = run(fused);
  BOOST_REQUIRE(two_ops.size() == one_op.size());
  for (size_t i = 0; i < two_ops.size(); ++i) BOOST_TEST((two_ops[i] == one_op[i]), "output " << i);
  setenv("TANDEM_LLAMA_NORM_EPILOGUE", "yes", 1);
  BOOST_CHECK_THROW(llama_model(*s.be, *s.weights, s.model->hparams(), s.pool.n_pages(), s.pool.page_size()),
                    tandem::error);
  unsetenv("TANDEM_LLAMA_NORM_EPILOGUE");
}
