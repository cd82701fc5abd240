// bench_cuda_model: the llama forward of a SmolLM2-135M-shaped model (Q4_1 blocks, Q8_0
// tied embedding, random weights) on backend.cuda: decode at batch 1 and 64 (engine-style
// steps: plan upload, recorded graph replay, GPU argmax, ids to the host) and one prefill
// of 8192 tokens; batch 1 both with the fused decode stack and per op
// (TANDEM_CUDA_DECODE_STACK=0). Ceiling of batch-1 decode: weight bytes per token over
// copy bandwidth.
//
//   build/bench/cuda/bench_cuda_model
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "cuda_backend.hpp"
#include "llama_model.hpp"
#include "random_llama.hpp"
#include "tandem_quant/ggml_blocks.hpp"

using namespace tandem;
using clk = std::chrono::steady_clock;
using test::random_weights;
using test::smollm2;

namespace {

struct decode_result { double tok_s, step_us, gpu_us; };

// `batch` sequences with `prompt` tokens prefilled, then `steps` timed decode steps.
decode_result decode(llama_model& m, cuda::cuda_backend& be, int batch, int prompt, int steps) {
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
  auto step = [&] {
    step_plan plan;
    plan.seqs = seqs;
    m.forward(plan);
    const std::vector<int32_t> ids = m.sample(greedy);
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
  // Per-op GPU time of the same step, run eagerly with every op timed on its own
  // (TANDEM_CUDA_PROFILE's mode): which kernels the step's time is made of.
  be.profiler().reset();
  be.profiler().enable(true);
  for (int i = 0; i < 10; ++i) m.forward(plan);
  be.profiler().enable(false);
  std::printf("per-op GPU time, batch %d, 10 eager steps (each op timed alone):\n%s", batch,
              be.profiler().report().c_str());
  return {batch * steps / s, s / steps * 1e6, gpu_ms * 1e3};
}

double prefill(llama_model& m, cuda::cuda_backend& be, int n) {
  step_plan plan;
  step_seq s;
  s.request_id = 1;
  for (int p = 0; p < (n + 15) / 16; ++p) s.pages.push_back(p);
  s.tokens.resize(n);
  for (int t = 0; t < n; ++t) s.tokens[t] = (t * 131) % 49152;
  s.sample = true;
  plan.seqs.push_back(s);
  return bench::median_ms(be.stream(), 1, 5, [&] { m.forward(plan); });
}

}  // namespace

int main() {
  const llama_hparams hp = smollm2();
  random_weights w(hp);
  cuda::cuda_backend be;
  const double copy = bench::copy_gbs(be.stream());  // also brings the clocks up from idle
  llama_model model(be, w, hp, 64 * 8192 / 16 / 4, 16);  // 131k tokens of KV
  // Batch 1 with the fused decode stack (one cooperative launch for all layers) and with
  // the per-op loop (TANDEM_CUDA_DECODE_STACK=0, read by the model per step).
  const char* env = std::getenv("TANDEM_CUDA_DECODE_STACK");
  const std::string env_before = env ? env : "";
  setenv("TANDEM_CUDA_DECODE_STACK", "0", 1);
  const decode_result b1_ops = decode(model, be, 1, 128, 256);
  if (env_before.empty()) unsetenv("TANDEM_CUDA_DECODE_STACK");
  else setenv("TANDEM_CUDA_DECODE_STACK", env_before.c_str(), 1);
  const decode_result b1 = decode(model, be, 1, 128, 256);
  // TANDEM_BENCH_B1_ONLY=1: stop after batch 1 (for a profiler run over that loop).
  if (const char* only = std::getenv("TANDEM_BENCH_B1_ONLY"); only != nullptr && std::string(only) == "1") {
    std::printf("decode batch 1: %.0f tok/s, %.1f us/step, forward %.1f us\n", b1.tok_s, b1.step_us, b1.gpu_us);
    std::printf("decode batch 1 (TANDEM_CUDA_DECODE_STACK=0): %.0f tok/s, %.1f us/step, forward %.1f us\n",
                b1_ops.tok_s, b1_ops.step_us, b1_ops.gpu_us);
    return 0;
  }
  const decode_result b64 = decode(model, be, 64, 128, 64);
  const double pf_ms = prefill(model, be, 8192);
  const double pf = 8192 / (pf_ms * 1e-3);
  // Bytes one decode token must read: every weight once (tied embedding read as the LM head).
  const double wbytes = w.weight_bytes();
  const double floor_us = wbytes / (copy * 1e9) * 1e6;

  std::printf("%-40s %14s %14s %s\n", "case", "tok/s", "us/step", "ceiling");
  std::printf("%-40s %14.0f %14.1f weights %.1f MB / %.0f GB/s = %.1f us/token (%.0f tok/s)\n",
              "decode batch 1 (ctx 128..)", b1.tok_s, b1.step_us, wbytes / 1e6, copy, floor_us, 1e6 / floor_us);
  std::printf("%-40s %14s %14.1f forward only (uploads + graph replay, no sampling)\n", "  of which GPU, batch 1", "", b1.gpu_us);
  std::printf("%-40s %14.0f %14.1f\n", "decode batch 1, per-op (STACK=0)", b1_ops.tok_s, b1_ops.step_us);
  std::printf("%-40s %14s %14.1f forward only\n", "  of which GPU, batch 1 per-op", "", b1_ops.gpu_us);
  std::printf("%-40s %14.0f %14.1f\n", "decode batch 64 (ctx 128..)", b64.tok_s, b64.step_us);
  std::printf("%-40s %14s %14.1f forward only\n", "  of which GPU, batch 64", "", b64.gpu_us);
  std::printf("%-40s %14.0f %14.1f\n", "prefill 8192 tokens (1 sequence)", pf, pf_ms * 1e3);
  std::printf("{\"bench\":\"cuda_model\",\"copy_gbs\":%.0f,\"decode_b1_tok_s\":%.0f,\"decode_b1_step_us\":%.1f,"
              "\"decode_b1_gpu_us\":%.1f,\"decode_b1_ops_tok_s\":%.0f,\"decode_b1_ops_gpu_us\":%.1f,\"decode_b64_tok_s\":%.0f,\"decode_b64_step_us\":%.1f,\"decode_b64_gpu_us\":%.1f,\"prefill_8192_tok_s\":%.0f,"
              "\"prefill_8192_ms\":%.2f,\"weight_mb\":%.1f}\n",
              copy, b1.tok_s, b1.step_us, b1.gpu_us, b1_ops.tok_s, b1_ops.gpu_us, b64.tok_s, b64.step_us, b64.gpu_us, pf, pf_ms, wbytes / 1e6);
  return 0;
}
