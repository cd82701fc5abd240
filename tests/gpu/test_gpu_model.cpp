#define BOOST_TEST_MODULE gpu_model
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/included/unit_test.hpp>

// The default model on backend.cuda against backend.cpu with linear=float (weights
// dequantized, fp32 dots: the exact reference path):
//  - last-position logits of fixture prompts, whole vocabulary: max |diff| <= 2e-2 when the
//    prompt is at most 8 tokens (fp32 GEMV, but the prefill attention runs on f16 tensor
//    cores: measured 0.0092 on logits of magnitude ~20), and <= 6e-2 for longer prompts,
//    whose prefill GEMM also rounds x and W to f16 (2^-11 relative each) through 30 layers
//    (measured on the H200: 0.018 to 0.041);
//  - greedy continuations of 64 tokens identical, except from a step where the CPU's own
//    best-vs-second margin is a near-tie (< 0.05), which is reported;
//  - those two bounds hold for an f32 KV pool; backend.cuda's default bf16 pool rounds every
//    stored key and value to 8 significant bits (2^-9 relative, 8x the f16 rounding the
//    prefill attention already applies), so its logits get bf16_tolerance and its greedy
//    tokens may part only where the reference's margin is under that bound;
//  - a batch mixing a prefill chunk with decode tokens gives each sequence the logits (within
//    the two paths' accuracy) and tokens it gets alone (GPU vs GPU, exact path; see
//    mixed_batch_equals_alone).
// Skips (77) without a GPU or without the model file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "gpu_util.hpp"
#include "llama_hparams.hpp"
#include "llama_model.hpp"
#include "tandem/kv_pool.hpp"
#include "tandem/plugin_host.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_ref/sampling.hpp"
#include "../test_model_file.hpp"

using namespace tandem;

namespace {

// Token ids of tests/fixtures/logits/hf_f32.json prompts (raw_capital, code_fib,
// chatml_2plus2, the first 64 of long_prose).
const std::vector<std::vector<int32_t>> prompts = {
    {504, 3575, 282, 4649, 314},
    {1604, 3987, 46477, 24, 94, 727, 472, 1620, 14362, 260, 304, 29, 373, 24681, 46477, 1230, 7996, 198},
    {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182,
     2, 198, 1, 4093, 198, 1780, 314, 216, 34, 27, 34, 47, 2, 198, 1, 520, 9531, 198},
    {504, 1463, 282, 260, 33059, 314, 28, 281, 800, 1853, 28, 260, 1463, 282, 7915, 3735, 2581, 30, 6880, 1092,
     3099, 20067, 284, 18326, 13690, 28, 22088, 15303, 335, 9935, 2837, 335, 13083, 33959, 284, 17310, 288, 1489,
     5177, 7739, 284, 260, 41097, 282, 31268, 1970, 30, 378, 768, 4248, 282, 260, 3201, 7751, 28, 260, 36797, 395,
     282, 23472, 28, 9318, 327, 540}};

constexpr float tie_margin = 0.05f;

struct stack {
  std::unique_ptr<backend> be;
  std::unique_ptr<llama_model> model;
  kv_pool pool{1024, 16};

  // exact: backend.cpu with linear=float, backend.cuda with f32 GEMV activations;
  // otherwise both defaults (8-bit activations in decode linears). kv: the KV pool's element
  // type (default: the backend's preferred, bf16 on backend.cuda).
  stack(plugin_host& host, const weight_format& w, const char* name, bool exact = true,
        std::optional<dtype> kv = std::nullopt) {
    config c;
    if (exact && std::string(name) == "backend.cpu") c.set("linear", std::string("float"));
    if (exact && std::string(name) == "backend.cuda") c.set("q8_activations", false);
    be = host.create<backend>(name, c);
    const auto hp = llama_hparams::from_metadata(w.meta(), "model");
    model = std::make_unique<llama_model>(*be, w, hp);
    if (kv) model->set_kv_type(*kv);
    model->allocate_kv(pool.n_pages(), pool.page_size());
  }

  std::vector<float> prefill_last_logits(const std::vector<int32_t>& ids) {
    std::vector<int32_t> pages;
    BOOST_REQUIRE(pool.grow(pages, static_cast<int64_t>(ids.size())));
    step_plan plan;
    plan.seqs.push_back({1, 0, ids, pages, true, {}});
    model->forward(plan);
    pool.release(pages);
    return model->logits_to_host();
  }

  // Greedy continuation (n tokens) and, per step, the margin best - second of its logits
  // (and the logits themselves when `logits` is given).
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, size_t n, std::vector<float>* margins,
                              std::vector<std::vector<float>>* logits = nullptr) {
    std::vector<int32_t> pages, out, toks = prompt;
    int64_t done = 0;
    while (out.size() < n) {
      BOOST_REQUIRE(pool.grow(pages, static_cast<int64_t>(toks.size())));
      step_plan plan;
      plan.seqs.push_back({1, done, {toks.begin() + done, toks.end()}, pages, true, {}});
      model->forward(plan);
      const int32_t t = model->sample({sampling_params{}})[0];
      if (margins || logits) {
        std::vector<float> l = model->logits_to_host();
        if (logits) logits->push_back(l);
        std::partial_sort(l.begin(), l.begin() + 2, l.end(), std::greater<>());
        if (margins) margins->push_back(l[0] - l[1]);
      }
      done = static_cast<int64_t>(toks.size());
      toks.push_back(t);
      out.push_back(t);
    }
    pool.release(pages);
    return out;
  }
};

struct fixture {
  plugin_host host{plugin_host::default_search_path()};
  std::unique_ptr<weight_format> weights;
  fixture() {
    config wc;
    wc.set("mmap", true);
    weights = host.create<weight_format>("weights.gguf", wc);
    weights->open(std::getenv("TANDEM_TEST_MODEL"));
  }
};

fixture& fx() {
  static fixture f;
  return f;
}

// Steps the two continuations agree, and whether a disagreement is excused by a near-tie.
void check_same_tokens(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                       const std::vector<float>& margins, const std::string& what, float margin = tie_margin) {
  size_t agree = 0;
  while (agree < got.size() && agree < want.size() && got[agree] == want[agree]) ++agree;
  BOOST_TEST_MESSAGE(what << ": " << agree << " of " << want.size() << " tokens identical");
  if (agree == want.size()) return;
  const size_t tie = std::find_if(margins.begin(), margins.end(), [&](float m) { return m < margin; }) -
                     margins.begin();
  BOOST_TEST_MESSAGE(what << ": first near-tie of the reference at step " << tie << "; diverged at step " << agree
                          << ", where the reference's best-vs-second margin is " << margins[agree]);
  BOOST_TEST(agree >= tie, what << ": diverged at step " << agree << " with margin " << margins[agree]);
}

}  // namespace

// bf16 KV against the f32 reference: the f16 figures above scaled by the 8x coarser
// rounding of K and V (0.0092 x 8 ~ 0.074 for short prompts, 0.041 + 0.074 for long ones),
// with room to 0.15 / 0.2. A wrong page or position moves logits by whole units.
constexpr double bf16_tolerance_short = 0.15, bf16_tolerance_long = 0.2;

BOOST_AUTO_TEST_CASE(logits_and_greedy_match_backend_cpu) {
  stack cpu(fx().host, *fx().weights, "backend.cpu");
  stack gpu_f32(fx().host, *fx().weights, "backend.cuda", true, dtype::f32);
  stack gpu_bf16(fx().host, *fx().weights, "backend.cuda");  // the default pool
  BOOST_TEST((gpu_bf16.model->kv().type == dtype::bf16));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto lc = cpu.prefill_last_logits(prompts[i]);
    std::vector<float> margins;
    const auto want = cpu.greedy(prompts[i], 64, &margins);
    const bool short_prompt = prompts[i].size() <= 8;
    for (stack* gpu : {&gpu_f32, &gpu_bf16}) {
      const bool bf16 = gpu == &gpu_bf16;
      const char* kv = bf16 ? "bf16 KV" : "f32 KV";
      const double d = test::max_abs_err(gpu->prefill_last_logits(prompts[i]), lc);
      BOOST_TEST_MESSAGE("prompt " << i << ", " << kv << ": prefill logits max |gpu - cpu| " << d);
      const double tol = bf16 ? (short_prompt ? bf16_tolerance_short : bf16_tolerance_long)
                              : (short_prompt ? 2e-2 : 6e-2);
      BOOST_TEST(d <= tol, "prompt " << i << ", " << kv << ": max |diff| " << d << " (tolerance " << tol << ")");
      const auto got = gpu->greedy(prompts[i], 64, nullptr);
      check_same_tokens(got, want, margins, "prompt " + std::to_string(i) + " greedy, " + kv,
                        bf16 ? static_cast<float>(tol) : tie_margin);
    }
  }
}

// The default configuration (decode activations rounded to 8-bit blocks as backend.cpu's
// and llama.cpp's fast paths do) against the exact reference (backend.cpu, linear=float).
// Its logits may move by up to q8_tolerance: llama.cpp's own 8-bit path moves by up to
// 1.41 on this file (tests/model's fixture header), and backend.cpu's q8 path is held to
// the same bound. (GPU q8 is not compared with CPU q8 token for token: any 1e-3 difference
// upstream, such as the f16 prefill attention, flips some 8-bit roundings, so the two
// 8-bit errors are different draws of the same size.) Greedy tokens must agree until the
// reference's best-vs-second margin comes within that bound.
constexpr float q8_tolerance = 1.5f;

BOOST_AUTO_TEST_CASE(default_q8_stays_within_8_bit_error_of_reference) {
  stack cpu(fx().host, *fx().weights, "backend.cpu", true);
  stack gpu(fx().host, *fx().weights, "backend.cuda", false);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const double d = test::max_abs_err(gpu.prefill_last_logits(prompts[i]), cpu.prefill_last_logits(prompts[i]));
    BOOST_TEST_MESSAGE("prompt " << i << ": q8 prefill logits max |gpu - cpu float| " << d);
    BOOST_TEST(d <= q8_tolerance, "prompt " << i << " q8 max |diff| " << d);
    std::vector<float> margins;
    const auto want = cpu.greedy(prompts[i], 64, &margins);
    const auto got = gpu.greedy(prompts[i], 64, nullptr);
    check_same_tokens(got, want, margins, "prompt " + std::to_string(i) + " q8 greedy", q8_tolerance);
  }
}

// A batch that mixes prefill chunks with decode tokens against each sequence run alone,
// both on the exact path (f32 decode linears; the f16 tensor-core GEMM and prefill
// attention for any step with a prefill in it). The two runs take different kernels for
// the same decode row whenever a prefill shares its step (GEMM and tensor-core attention
// batched, GEMV and the decode kernel alone), so they agree to the accuracy of those
// kernels, not bit for bit: logits_and_greedy_match_backend_cpu holds the decode path
// within 2e-2 and the f16 path within 6e-2 of the same reference, so the two differ by at
// most ~8e-2 (mixed_tolerance, with room to 0.1), and a greedy flip is excused only where
// the alone run's best-vs-second margin is under twice that. A wrong page, position or KV
// write in a mixed step moves logits by whole units, far past the bound. (On the default
// 8-bit path the same comparison is dominated by the GEMV's 8-bit rounding, up to 1.5 —
// session 4 saw a flip at a 0.199 margin there — so it would test nothing.)
constexpr double mixed_tolerance = 0.1;

BOOST_AUTO_TEST_CASE(mixed_batch_equals_alone) {
  stack gpu(fx().host, *fx().weights, "backend.cuda", true);
  // Alone: each prompt's 16-token greedy continuation, its margins and logits per step.
  std::vector<std::vector<int32_t>> alone;
  std::vector<std::vector<float>> margins(prompts.size());
  std::vector<std::vector<std::vector<float>>> alone_logits(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) alone.push_back(gpu.greedy(prompts[i], 16, &margins[i], &alone_logits[i]));
  // Together: prompts start one step apart, so most steps mix a prefill with decodes.
  struct seq { std::vector<int32_t> toks, pages, out; int64_t done = 0; };
  std::vector<seq> s(prompts.size());
  for (size_t i = 0; i < s.size(); ++i) s[i].toks = prompts[i];
  double worst = 0.0;
  for (size_t step = 0; step < 16 + prompts.size(); ++step) {
    step_plan plan;
    std::vector<size_t> idx;
    for (size_t i = 0; i < s.size() && i <= step; ++i) {
      if (s[i].out.size() >= 16) continue;
      BOOST_REQUIRE(gpu.pool.grow(s[i].pages, static_cast<int64_t>(s[i].toks.size())));
      plan.seqs.push_back({i + 1, s[i].done, {s[i].toks.begin() + s[i].done, s[i].toks.end()}, s[i].pages, true, {}});
      idx.push_back(i);
    }
    if (idx.empty()) continue;
    gpu.model->forward(plan);
    const auto ids = gpu.model->sample(std::vector<sampling_params>(idx.size()));
    const std::vector<float> logits = gpu.model->logits_to_host();
    const size_t vocab = logits.size() / idx.size();
    for (size_t j = 0; j < idx.size(); ++j) {
      seq& q = s[idx[j]];
      const size_t k = q.out.size();  // the alone run's step with the same prefix, while tokens agree
      if (std::equal(q.out.begin(), q.out.end(), alone[idx[j]].begin())) {
        const std::vector<float> row(logits.begin() + j * vocab, logits.begin() + (j + 1) * vocab);
        const double d = test::max_abs_err(row, alone_logits[idx[j]][k]);
        worst = std::max(worst, d);
        BOOST_TEST(d <= mixed_tolerance, "prompt " << idx[j] << " step " << k << " (batch of " << idx.size()
                                                   << "): max |batched - alone| " << d);
      }
      q.done = static_cast<int64_t>(q.toks.size());
      q.toks.push_back(ids[j]);
      q.out.push_back(ids[j]);
    }
  }
  BOOST_TEST_MESSAGE("mixed batch: max |batched - alone| logits " << worst << " (tolerance " << mixed_tolerance << ")");
  for (size_t i = 0; i < s.size(); ++i)
    check_same_tokens(s[i].out, alone[i], margins[i], "prompt " + std::to_string(i) + " batched",
                      static_cast<float>(2 * mixed_tolerance));
}

int main(int argc, char* argv[]) {
  if (!tandem::test::have_gpu()) {
    std::fprintf(stderr, "no usable CUDA device: skipped\n");
    return 77;
  }
  if (!tandem::test::test_model_file()) return 77;
  return ::boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
