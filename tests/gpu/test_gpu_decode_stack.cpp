#define BOOST_TEST_MODULE gpu_decode_stack
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/included/unit_test.hpp>

// backend.cuda's fused decode stack (one cooperative launch for all 30 layers of a batch-1
// decode step) against the per-op loop (TANDEM_CUDA_DECODE_STACK=0) of the same weights: a
// SmolLM2-135M-shaped llama with random Q4_1 weights (bench/cuda/random_llama.hpp), two
// llama_models on one backend fed the same tokens (the per-op path's greedy choice).
//  - prompts of 1, 15, 16, 17, 100 and 700 tokens (page size 16: page boundaries inside and
//    at the edge of the prompt), then 40 decode steps each, both eager (all_logits: no
//    recording) and recorded (a CUDA graph replayed every step);
//  - logits: relative L2 error <= 5e-3. Both sides quantize activations to q8 and accumulate
//    in fp32; the linears, norms and SiLU are bit-identical, only attention sums in another
//    order (~1e-7 relative), but one such ulp can move a q8 rounding boundary of the next
//    linear's input (a step of amax / 127), which then travels through the later layers:
//    the expected error is ~1e-3, and 5e-3 leaves room without hiding a wrong head, page or
//    position (those give O(1) errors);
//  - greedy tokens identical, except at a near-tie (the per-op path's top-2 margin < 0.05),
//    which is reported;
//  - prepare_decode_stack returns nullptr with q8_activations off (the exact path).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "../../bench/cuda/random_llama.hpp"
#include "gpu_util.hpp"
#include "llama_model.hpp"

using namespace tandem;

namespace {

constexpr float tie_margin = 0.05f;
constexpr double logits_tol = 5e-3;
constexpr int page = 16;
constexpr int64_t pool_pages = 128;  // 2048 tokens per model

const test::random_weights& weights() {
  static const test::random_weights w(test::smollm2());
  return w;
}

struct top2 {
  int32_t id;
  float margin;
};
top2 best(const std::vector<float>& l) {
  int32_t a = 0;
  for (size_t i = 1; i < l.size(); ++i)
    if (l[i] > l[a]) a = static_cast<int32_t>(i);
  float second = -INFINITY;
  for (size_t i = 0; i < l.size(); ++i)
    if (static_cast<int32_t>(i) != a) second = std::max(second, l[i]);
  return {a, l[a] - second};
}

// One step of `s` on m with the stack on or off; returns the last row's logits.
std::vector<float> step(llama_model& m, const step_seq& s, bool stack, bool eager) {
  setenv("TANDEM_CUDA_DECODE_STACK", stack ? "1" : "0", 1);
  step_plan plan;
  plan.seqs.push_back(s);
  m.forward(plan, eager);
  std::vector<float> l = m.logits_to_host();
  const int64_t vocab = m.hparams().vocab;
  return std::vector<float>(l.end() - vocab, l.end());
}

// Prefill `prompt` tokens, then 40 decode steps; both models see the per-op path's tokens.
// One backend per model: recorded steps are keyed per model workspace, so two models must
// not share a backend's graph table.
void compare(int prompt, bool eager) {
  const llama_hparams hp = test::smollm2();
  cuda::cuda_backend be_fused, be_plain;
  llama_model fused(be_fused, weights(), hp, pool_pages, page), plain(be_plain, weights(), hp, pool_pages, page);
  step_seq s;
  s.request_id = 1;
  s.sample = true;
  for (int p = 0; p < (prompt + 40 + page - 1) / page; ++p) s.pages.push_back(p);
  for (int t = 0; t < prompt; ++t) s.tokens.push_back((t * 131 + 7) % static_cast<int32_t>(hp.vocab));
  int ties = 0;
  double worst = 0.0;
  for (int i = 0; i <= 40; ++i) {
    const std::vector<float> a = step(fused, s, true, eager), b = step(plain, s, false, eager);
    const double e = test::rel_err(a, b);
    worst = std::max(worst, e);
    BOOST_TEST(e <= logits_tol, "prompt " << prompt << (eager ? " eager" : " recorded") << " step " << i
                                          << ": logits relative error " << e);
    const top2 ta = best(a), tb = best(b);
    if (ta.id != tb.id) {
      BOOST_TEST(tb.margin < tie_margin, "prompt " << prompt << " step " << i << ": token " << ta.id << " vs "
                                                   << tb.id << " at margin " << tb.margin);
      ++ties;
    }
    s.start_pos += static_cast<int64_t>(s.tokens.size());
    s.tokens = {tb.id};
  }
  std::printf("prompt %4d %-8s: worst logits relative error %.2e, near-tie token differences %d\n", prompt,
              eager ? "eager" : "recorded", worst, ties);
}

const std::vector<int> prompt_lengths = {1, 15, 16, 17, 100, 700};

}  // namespace

BOOST_AUTO_TEST_CASE(stack_matches_per_op_loop_eager) {
  for (int p : prompt_lengths) compare(p, true);
}

BOOST_AUTO_TEST_CASE(stack_matches_per_op_loop_recorded) {
  for (int p : prompt_lengths) compare(p, false);
}

// The stack is only offered for the q8 path: the exact path keeps the f32 GEMV.
BOOST_AUTO_TEST_CASE(no_stack_without_q8_activations) {
  cuda::cuda_options off;
  off.q8_activations = false;
  cuda::cuda_backend be(off);
  const test::random_weights& w = weights();
  auto lin = [&](const char* name) { return be.load_linear(*w.find(name)); };
  std::vector<const tensor_info*> qkv = {w.find("blk.0.attn_q.weight"), w.find("blk.0.attn_k.weight"),
                                         w.find("blk.0.attn_v.weight")};
  std::vector<const tensor_info*> gu = {w.find("blk.0.ffn_gate.weight"), w.find("blk.0.ffn_up.weight")};
  auto wqkv = be.load_linear_group(qkv), wgu = be.load_linear_group(gu);
  auto wo = lin("blk.0.attn_output.weight"), down = lin("blk.0.ffn_down.weight");
  auto an = be.load_tensor(*w.find("blk.0.attn_norm.weight"), dtype::f32);
  auto fn = be.load_tensor(*w.find("blk.0.ffn_norm.weight"), dtype::f32);
  llama_stack_desc d;
  d.layers.push_back({wqkv.get(), wo.get(), wgu.get(), down.get(),
                      tensor_view::contiguous(an->data(), dtype::f32, {576}, be.dev()),
                      tensor_view::contiguous(fn->data(), dtype::f32, {576}, be.dev())});
  d.n_heads = 9, d.n_kv_heads = 3, d.head_dim = 64, d.rms_eps = 1e-5f, d.attn_scale = 0.125f;
  BOOST_TEST(!be.prepare_decode_stack(d));
  cuda::cuda_backend on;  // the same weights on a q8 backend do get a stack
  auto wqkv2 = on.load_linear_group(qkv), wgu2 = on.load_linear_group(gu);
  auto wo2 = on.load_linear(*w.find("blk.0.attn_output.weight")), down2 = on.load_linear(*w.find("blk.0.ffn_down.weight"));
  auto an2 = on.load_tensor(*w.find("blk.0.attn_norm.weight"), dtype::f32);
  auto fn2 = on.load_tensor(*w.find("blk.0.ffn_norm.weight"), dtype::f32);
  d.layers[0] = {wqkv2.get(), wo2.get(), wgu2.get(), down2.get(),
                 tensor_view::contiguous(an2->data(), dtype::f32, {576}, on.dev()),
                 tensor_view::contiguous(fn2->data(), dtype::f32, {576}, on.dev())};
  BOOST_TEST(static_cast<bool>(on.prepare_decode_stack(d)));
}

TANDEM_GPU_TEST_MAIN
