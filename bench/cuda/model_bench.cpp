// bench_cuda_model: the llama forward of a SmolLM2-135M-shaped model (Q4_1 blocks, Q8_0
// tied embedding, random weights) on backend.cuda: decode at batch 1, 2, 4, 8, 16, 32, 64
// and 128 (engine-style steps: plan upload, recorded graph replay up to 64 sequences,
// eager above; GPU argmax, ids to the host) and one prefill each of 128, 512, 2048 and
// 8192 tokens. Per-op tables (each op run eagerly and timed alone) for decode at batch 1
// and 8 and the 512-token prefill. Then decode at 1-32 sequences once more with the linears
// fused (TANDEM_LLAMA_FUSED_LINEARS=1; TANDEM_BENCH_SKIP_FUSED=1 leaves it out). Then the
// decode curve at 2-64 sequences under three other linear dispatches (TANDEM_BENCH_SKIP_MMA_AB=1
// leaves them out): backend.cuda's linear_by_shape = false (the kernel by the rows alone:
// the q8 GEMV to 4 rows, the int8 tensor-core kernel to 16, the f16 GEMM above, as before
// session 14), mma_max_rows = 0 (no tensor-core kernel) and = 32; and at 1-64 sequences with the
// gate/up product and its SiLU gate as two ops (TANDEM_LLAMA_SWIGLU=0, the path before
// linear_swiglu; TANDEM_BENCH_SKIP_SWIGLU_AB=1 leaves it out), and at 1-64 sequences with the
// o / down projections and the norms after them in one launch each (TANDEM_LLAMA_NORM_EPILOGUE=1,
// linear_add_rms_norm, off by default until measured; TANDEM_BENCH_SKIP_NORM_AB=1 leaves it out). Ceiling of
// decode: weight bytes per step over copy bandwidth.
//
//   build/bench/cuda/bench_cuda_model
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "cuda_backend.hpp"
#include "common/step_inputs.hpp"
#include "llama_model.hpp"
#include "tandem_quant/ggml_blocks.hpp"

using namespace tandem;
using clk = std::chrono::steady_clock;

namespace {

// Random blocks of the default model's tensor types and shapes.
class random_weights final : public weight_format {
 public:
  explicit random_weights(const llama_hparams& hp) {
    auto add = [&](std::string name, dtype t, std::vector<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> f(static_cast<size_t>(n));
      for (auto& v : f) v = dist_(rng_);
      auto& bytes = store_.emplace_back();
      if (t == dtype::f32) {
        for (auto& v : f) v = 1.0f + 0.1f * v;
        bytes.resize(f.size() * 4);
        std::memcpy(bytes.data(), f.data(), bytes.size());
      } else {
        bytes.resize(static_cast<size_t>(*row_bytes(t, n)));
        if (t == dtype::q4_1) quantize_row_q4_1(f.data(), bytes.data(), n);
        else quantize_row_q8_0(f.data(), bytes.data(), n);
      }
      tensors_.push_back({std::move(name), t, std::move(shape), bytes.data(), bytes.size()});
    };
    const int64_t q = int64_t{hp.n_heads} * hp.head_dim, kv = int64_t{hp.n_kv_heads} * hp.head_dim;
    add("token_embd.weight", dtype::q8_0, {hp.vocab, hp.hidden});
    add("output_norm.weight", dtype::f32, {hp.hidden});
    for (int l = 0; l < hp.n_layers; ++l) {
      auto b = [&](const char* w) { return "blk." + std::to_string(l) + "." + w + ".weight"; };
      add(b("attn_norm"), dtype::f32, {hp.hidden});
      add(b("ffn_norm"), dtype::f32, {hp.hidden});
      add(b("attn_q"), dtype::q4_1, {q, hp.hidden});
      add(b("attn_k"), dtype::q4_1, {kv, hp.hidden});
      add(b("attn_v"), dtype::q4_1, {kv, hp.hidden});
      add(b("attn_output"), dtype::q4_1, {hp.hidden, q});
      add(b("ffn_gate"), dtype::q4_1, {hp.ffn, hp.hidden});
      add(b("ffn_up"), dtype::q4_1, {hp.ffn, hp.hidden});
      add(b("ffn_down"), dtype::q4_1, {hp.hidden, hp.ffn});
    }
  }
  void open(const std::filesystem::path&) override {}
  const model_metadata& meta() const override { return meta_; }
  std::span<const tensor_info> tensors() const override { return tensors_; }
  const tensor_info* find(std::string_view name) const override {
    for (const auto& t : tensors_) if (t.name == name) return &t;
    return nullptr;
  }
  double weight_bytes() const {
    double b = 0;
    for (const auto& t : tensors_) b += static_cast<double>(t.nbytes);
    return b;
  }

 private:
  std::mt19937 rng_{1};
  std::normal_distribution<float> dist_{0.0f, 0.05f};
  std::vector<std::vector<uint8_t>> store_;
  std::vector<tensor_info> tensors_;
  model_metadata meta_;
};

llama_hparams smollm2() {
  llama_hparams hp;
  hp.arch = "llama";
  hp.n_layers = 30, hp.hidden = 576, hp.ffn = 1536, hp.n_heads = 9, hp.n_kv_heads = 3, hp.head_dim = 64;
  hp.vocab = 49152, hp.context = 8192, hp.rms_eps = 1e-5f, hp.rope_theta = 100000.0f;
  return hp;
}

struct decode_result {
  double tok_s, step_us, gpu_us;
  std::vector<int32_t> ids;   // every greedy id of the run, step by step
  std::vector<float> logits;  // the last forward's logits rows
};

// Per-op GPU time of `runs` forwards of plan, run eagerly with every op timed on its own
// (TANDEM_CUDA_PROFILE's mode): which kernels the step's time is made of.
void print_per_op(llama_model& m, cuda::cuda_backend& be, const step_plan& plan, int runs, const std::string& what) {
  be.profiler().reset();
  be.profiler().enable(true);
  for (int i = 0; i < runs; ++i) m.forward(plan);
  be.profiler().enable(false);
  std::printf("per-op GPU time, %s (each op timed alone):\n%s", what.c_str(), be.profiler().report().c_str());
}

// `batch` sequences with `prompt` tokens prefilled, then `steps` timed decode steps; the
// per-op table of one step when `per_op`.
decode_result decode(llama_model& m, cuda::cuda_backend& be, int batch, int prompt, int steps, bool per_op) {
  const int page = 16;
  const int pages_per = (prompt + steps + 8 + page - 1) / page;
  std::vector<step_seq> seqs(batch);
  for (int s = 0; s < batch; ++s) {
    seqs[s].request_id = s + 1;
    for (int p = 0; p < pages_per; ++p) seqs[s].pages.push_back(s * pages_per + p);
    seqs[s].tokens.resize(prompt);
    for (int t = 0; t < prompt; ++t) seqs[s].tokens[t] = (t * 31 + s * 7) % 49152;
    seqs[s].sample = true;
    step_plan plan;
    plan.seqs.push_back(seqs[s]);
    m.forward(plan);
    seqs[s].start_pos = prompt;
    seqs[s].tokens = {m.sample({sampling_params{}})[0]};
  }
  std::vector<sampling_params> greedy(batch);
  std::vector<int32_t> all_ids;
  auto step = [&] {
    step_plan plan;
    plan.seqs = seqs;
    m.forward(plan);
    const std::vector<int32_t> ids = m.sample(greedy);
    all_ids.insert(all_ids.end(), ids.begin(), ids.end());
    for (int s = 0; s < batch; ++s) seqs[s].start_pos += 1, seqs[s].tokens = {ids[s]};
  };
  for (int i = 0; i < 4; ++i) step();  // records the graph, warms up
  const auto t0 = clk::now();
  for (int i = 0; i < steps; ++i) step();
  const double s = std::chrono::duration<double>(clk::now() - t0).count();
  // Where the step time goes: the recorded forward alone, replayed back to back (same
  // positions each time, which is fine for timing), without upload gaps or the sampler.
  step_plan plan;
  plan.seqs = seqs;
  m.forward(plan);
  const double gpu_ms = bench::median_ms(be.stream(), 2, 20, [&] { m.forward(plan); });
  const decode_result r{batch * steps / s, s / steps * 1e6, gpu_ms * 1e3, all_ids, m.logits_to_host()};
  if (!per_op) return r;
  print_per_op(m, be, plan, 10, "batch " + std::to_string(batch) + ", 10 eager steps");
  return r;
}

// One cold prefill of n tokens (median ms); the per-op table of it when `per_op`.
double prefill(llama_model& m, cuda::cuda_backend& be, int n, bool per_op) {
  step_plan plan;
  step_seq s;
  s.request_id = 1;
  for (int p = 0; p < (n + 15) / 16; ++p) s.pages.push_back(p);
  s.tokens.resize(n);
  for (int t = 0; t < n; ++t) s.tokens[t] = (t * 131) % 49152;
  s.sample = true;
  plan.seqs.push_back(s);
  const double ms = bench::median_ms(be.stream(), 1, 5, [&] { m.forward(plan); });
  if (per_op) print_per_op(m, be, plan, 5, "prefill " + std::to_string(n) + " tokens, 5 eager runs");
  return ms;
}

}  // namespace

int main() {
  const llama_hparams hp = smollm2();
  random_weights w(hp);
  cuda::cuda_backend be;
  const double copy = bench::copy_gbs(be.stream());  // also brings the clocks up from idle
  llama_model model(be, w, hp, 64 * 8192 / 16 / 4, 16);  // 131k tokens of KV
  const decode_result b1 = decode(model, be, 1, 128, 256, true);
  // TANDEM_BENCH_B1_ONLY=1: stop after batch 1 (for a profiler run over that loop).
  if (const char* only = std::getenv("TANDEM_BENCH_B1_ONLY"); only != nullptr && std::string(only) == "1") {
    std::printf("decode batch 1: %.0f tok/s, %.1f us/step, forward %.1f us\n", b1.tok_s, b1.step_us, b1.gpu_us);
    return 0;
  }
  // Bytes one decode step must read: every weight once (tied embedding read as the LM head).
  const double wbytes = w.weight_bytes();
  const double floor_us = wbytes / (copy * 1e9) * 1e6;
  std::vector<std::pair<int, decode_result>> curve = {{1, b1}};
  for (int batch : {2, 4, 8, 16, 32, 64, 128}) curve.push_back({batch, decode(model, be, batch, 128, 64, batch == 8)});
  std::vector<std::pair<int, double>> prefills;
  for (int n : {128, 512, 2048, 8192}) prefills.push_back({n, prefill(model, be, n, n == 512)});
  // The same model with TANDEM_LLAMA_FUSED_LINEARS=1 (norms and SiLU inside the linears,
  // residual adds in their epilogues): decode at 1-32 sequences.
  std::vector<std::pair<int, decode_result>> fused_curve;
  // Each curve's start on stderr, unbuffered: a crash says which curve it was in.
  if (const char* skip = std::getenv("TANDEM_BENCH_SKIP_FUSED"); skip == nullptr || std::string(skip) != "1") {
    std::fprintf(stderr, "curve: fused layer\n");
    setenv("TANDEM_LLAMA_FUSED_LINEARS", "1", 1);
    llama_model fused(be, w, hp, 64 * 8192 / 16 / 4, 16);
    unsetenv("TANDEM_LLAMA_FUSED_LINEARS");
    for (int batch : {1, 2, 4, 8, 16, 32})
      fused_curve.push_back({batch, decode(fused, be, batch, 128, batch == 1 ? 256 : 64, false)});
  }

  // The same model under other linear dispatches (see the header).
  std::vector<std::pair<std::string, std::vector<std::pair<int, decode_result>>>> dispatch_curves;
  if (const char* skip = std::getenv("TANDEM_BENCH_SKIP_MMA_AB"); skip == nullptr || std::string(skip) != "1") {
    for (int64_t rows : {int64_t{-1}, int64_t{0}, int64_t{32}}) {
      std::fprintf(stderr, "curve: dispatch %lld\n", static_cast<long long>(rows));
      cuda::cuda_options o;
      if (rows < 0) o.linear_by_shape = false;  // the kernel by the rows alone
      else o.mma_max_rows = rows;
      cuda::cuda_backend be2(o);
      llama_model m2(be2, w, hp, 64 * 8192 / 16 / 4, 16);
      std::vector<std::pair<int, decode_result>> c;
      for (int batch : {2, 4, 8, 16, 32, 64}) c.push_back({batch, decode(m2, be2, batch, 128, 64, false)});
      dispatch_curves.push_back({rows < 0 ? std::string("linear_by_shape=false") : "mma_max_rows=" + std::to_string(rows),
                                 std::move(c)});
    }
  }
  // The default dispatch with one llama switch flipped, at 1-64 sequences: `skip` = 1 leaves
  // it out.
  const auto switch_curve = [&](const char* skip_var, const char* var, const char* value, const char* label) {
    if (const char* skip = std::getenv(skip_var); skip != nullptr && std::string(skip) == "1") return;
    std::fprintf(stderr, "curve: %s\n", label);
    setenv(var, value, 1);
    llama_model ms(be, w, hp, 64 * 8192 / 16 / 4, 16);
    unsetenv(var);
    std::vector<std::pair<int, decode_result>> c;
    for (int batch : {1, 2, 4, 8, 16, 32, 64}) c.push_back({batch, decode(ms, be, batch, 128, batch == 1 ? 256 : 64, false)});
    dispatch_curves.push_back({label, std::move(c)});
  };
  // The gate/up product and the SiLU gate as two launches, against linear_swiglu's one.
  switch_curve("TANDEM_BENCH_SKIP_SWIGLU_AB", "TANDEM_LLAMA_SWIGLU", "0", "swiglu as two ops");
  // Each o / down projection and the norm after it in one launch (linear_add_rms_norm),
  // against the two ops.
  switch_curve("TANDEM_BENCH_SKIP_NORM_AB", "TANDEM_LLAMA_NORM_EPILOGUE", "1", "norm in the linear's epilogue");

  std::printf("weights %.1f MB / %.0f GB/s = %.1f us per step (the floor at any batch up to where compute binds)\n",
              wbytes / 1e6, copy, floor_us);
  std::printf("%-34s %12s %12s %14s %s\n", "case", "tok/s", "us/step", "forward us", "recorded");
  for (const auto& [batch, r] : curve) {
    const std::string name = "decode batch " + std::to_string(batch) + " (ctx 128..)";
    std::printf("%-34s %12.0f %12.1f %14.1f %s\n", name.c_str(), r.tok_s, r.step_us, r.gpu_us,
                recorded_batch_size(batch) > 0 ? "graph" : "eager");
    std::printf("{\"bench\":\"cuda_model_decode\",\"batch\":%d,\"tok_s\":%.0f,\"step_us\":%.1f,\"gpu_us\":%.1f}\n",
                batch, r.tok_s, r.step_us, r.gpu_us);
  }
  for (size_t i = 0; i < fused_curve.size(); ++i) {
    const auto& [batch, r] = fused_curve[i];
    const decode_result& plain = curve[i].second;  // the same batch, separate ops
    size_t same = 0;
    while (same < r.ids.size() && same < plain.ids.size() && r.ids[same] == plain.ids[same]) ++same;
    double d = r.logits.size() == plain.logits.size() ? 0.0 : -1.0;
    for (size_t j = 0; d >= 0 && j < r.logits.size(); ++j)
      d = std::max(d, static_cast<double>(std::fabs(r.logits[j] - plain.logits[j])));
    const std::string name = "fused decode batch " + std::to_string(batch);
    std::printf("%-34s %12.0f %12.1f %14.1f %s; greedy ids identical %zu of %zu, last logits max |diff| %.3g\n",
                name.c_str(), r.tok_s, r.step_us, r.gpu_us, "graph", same, plain.ids.size(), d);
    std::printf("{\"bench\":\"cuda_model_decode_fused\",\"batch\":%d,\"tok_s\":%.0f,\"step_us\":%.1f,\"gpu_us\":%.1f}\n",
                batch, r.tok_s, r.step_us, r.gpu_us);
  }
  for (const auto& [label, c] : dispatch_curves) {
    for (const auto& [batch, r] : c) {
      const decode_result* plain = nullptr;  // the default dispatch's run of the same batch
      for (const auto& [b0, r0] : curve)
        if (b0 == batch) plain = &r0;
      size_t same = 0;
      while (plain && same < r.ids.size() && same < plain->ids.size() && r.ids[same] == plain->ids[same]) ++same;
      const std::string name = label + " decode batch " + std::to_string(batch);
      std::printf("%-34s %12.0f %12.1f %14.1f graph; greedy ids as the default dispatch's: %zu of %zu\n",
                  name.c_str(), r.tok_s, r.step_us, r.gpu_us, same, plain ? plain->ids.size() : size_t{0});
      std::printf("{\"bench\":\"cuda_model_decode_dispatch\",\"dispatch\":\"%s\",\"batch\":%d,\"tok_s\":%.0f,"
                  "\"step_us\":%.1f,\"gpu_us\":%.1f}\n",
                  label.c_str(), batch, r.tok_s, r.step_us, r.gpu_us);
    }
  }
  for (const auto& [n, ms] : prefills) {
    const std::string name = "prefill " + std::to_string(n) + " tokens (1 sequence)";
    std::printf("%-34s %12.0f %12.1f\n", name.c_str(), n / (ms * 1e-3), ms * 1e3);
    std::printf("{\"bench\":\"cuda_model_prefill\",\"tokens\":%d,\"tok_s\":%.0f,\"ms\":%.3f}\n", n,
                n / (ms * 1e-3), ms);
  }
  const decode_result& b64 = curve[6].second;
  const double pf_ms = prefills.back().second, pf = 8192 / (pf_ms * 1e-3);
  std::printf("{\"bench\":\"cuda_model\",\"copy_gbs\":%.0f,\"decode_b1_tok_s\":%.0f,\"decode_b1_step_us\":%.1f,"
              "\"decode_b1_gpu_us\":%.1f,\"decode_b64_tok_s\":%.0f,\"decode_b64_step_us\":%.1f,\"decode_b64_gpu_us\":%.1f,\"prefill_8192_tok_s\":%.0f,"
              "\"prefill_8192_ms\":%.2f,\"weight_mb\":%.1f}\n",
              copy, b1.tok_s, b1.step_us, b1.gpu_us, b64.tok_s, b64.step_us, b64.gpu_us, pf, pf_ms, wbytes / 1e6);
  return 0;
}
