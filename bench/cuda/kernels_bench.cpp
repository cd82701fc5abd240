// bench_cuda_kernels: the decode-critical kernels of backend.cuda against the copy
// bandwidth measured in the same run.
//  - Q4_1 GEMV (1 token) on 16384 x 16384 weights (168 MB, past the 60 MB L2; two matrices
//    alternate), counting the bytes it must read (quants + scales + x + y);
//  - decode attention, 32 sequences x 8192 tokens of context, 9 query / 3 KV heads of 64,
//    f32 KV: the K and V bytes read per layer;
//  - prefill attention, one sequence of 8192 tokens, 9 query / 3 KV heads of 64, page 16:
//    the tensor-core kernel (attention_prefill_tc) next to the scalar one, in TFLOP/s of the
//    causal FLOPs 4 n^2 HD heads / 2 (the H200 does ~790 dense bf16 with wgmma, ~400 usable
//    with mma.sync).
//
//   build/bench/cuda/bench_cuda_kernels
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench_util.hpp"
#include "tandem_cuda/kernels.hpp"
#include "cuda_backend.hpp"
#include "cuda_weights.hpp"
#include "tandem_quant/ggml_blocks.hpp"

using namespace tandem;

namespace {

tensor_info random_q4_1(std::vector<uint8_t>& bytes, int64_t out, int64_t in, std::mt19937& rng) {
  bytes.resize(static_cast<size_t>(out * (in / 32) * 20));
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0; i < bytes.size(); i += 20) {
    const uint16_t d = fp32_to_fp16(0.01f), m = fp32_to_fp16(-0.08f);
    std::memcpy(&bytes[i], &d, 2);
    std::memcpy(&bytes[i + 2], &m, 2);
    for (int j = 4; j < 20; ++j) bytes[i + j] = static_cast<uint8_t>(byte(rng));
  }
  tensor_info t;
  t.name = "bench.q4_1";
  t.type = dtype::q4_1;
  t.shape = {out, in};
  t.data = bytes.data();
  t.nbytes = bytes.size();
  return t;
}

}  // namespace

int main() {
  cuda::cuda_backend be({0, 0, false, false});  // no f16 copies: only the GEMV is timed
  std::mt19937 rng(7);
  const double copy = bench::copy_gbs(be.stream());

  const int64_t N = 16384;
  std::vector<uint8_t> host;
  auto w0 = be.load_linear(random_q4_1(host, N, N, rng));
  auto w1 = be.load_linear(random_q4_1(host, N, N, rng));
  auto x = be.alloc(N * 4), y = be.alloc(N * 4);
  std::vector<float> xh(N, 0.5f);
  be.copy_to_device(x->data(), xh.data(), N * 4);
  auto xv = tensor_view::contiguous(x->data(), dtype::f32, {1, N}, be.dev());
  auto yv = tensor_view::contiguous(y->data(), dtype::f32, {1, N}, be.dev());
  int flip = 0;
  const double gemv_ms = bench::median_ms(be.stream(), 3, 50, [&] { be.linear(flip++ % 2 ? *w1 : *w0, xv, yv); });
  const double gemv_bytes = N * (N / 32) * 20.0 + 2 * N * 4.0;
  const double gemv_gbs = gemv_bytes / (gemv_ms * 1e-3) / 1e9;

  const int seqs = 32, ctx = 8192, page = 16, heads = 9, kvh = 3, hd = 64;
  const int pages_per = ctx / page;
  kv_layout lay{1, int64_t{seqs} * pages_per, page, kvh, hd, dtype::f32};
  auto kv = be.alloc_kv(lay);
  const cuda::dev_kv pool = dynamic_cast<cuda::cuda_kv&>(*kv).layer(0);
  const size_t pool_bytes = static_cast<size_t>(lay.n_pages) * page * kvh * hd * 4;
  bench::ck(cudaMemset(pool.k, 0x3c, pool_bytes));  // small finite floats, not zeros
  bench::ck(cudaMemset(pool.v, 0x3c, pool_bytes));
  std::vector<int32_t> qs(seqs + 1), lens(seqs, ctx), table(int64_t{seqs} * pages_per), slots(seqs);
  for (int s = 0; s <= seqs; ++s) qs[s] = s;
  for (int s = 0; s < seqs; ++s) {
    for (int p = 0; p < pages_per; ++p) table[int64_t{s} * pages_per + p] = s * pages_per + p;
    slots[s] = (s * pages_per + pages_per - 1) * page + page - 1;
  }
  auto up = [&](const std::vector<int32_t>& v) {
    auto b = be.alloc(v.size() * 4);
    be.copy_to_device(b->data(), v.data(), v.size() * 4);
    return b;
  };
  auto dqs = up(qs), dl = up(lens), dt = up(table), ds = up(slots);
  attention_batch b;
  b.n_seqs = b.n_tokens = seqs;
  b.max_pages_per_seq = pages_per;
  b.query_start = tensor_view::contiguous(dqs->data(), dtype::i32, {seqs + 1}, be.dev());
  b.seq_lens = tensor_view::contiguous(dl->data(), dtype::i32, {seqs}, be.dev());
  b.page_table = tensor_view::contiguous(dt->data(), dtype::i32, {seqs, pages_per}, be.dev());
  b.slot_mapping = tensor_view::contiguous(ds->data(), dtype::i32, {seqs}, be.dev());
  b.positions = b.slot_mapping;
  auto q = be.alloc(seqs * heads * hd * 4), k = be.alloc(seqs * kvh * hd * 4), v = be.alloc(seqs * kvh * hd * 4),
       o = be.alloc(seqs * heads * hd * 4);
  bench::ck(cudaMemset(q->data(), 0x3c, seqs * heads * hd * 4));
  bench::ck(cudaMemset(k->data(), 0x3c, seqs * kvh * hd * 4));
  bench::ck(cudaMemset(v->data(), 0x3c, seqs * kvh * hd * 4));
  auto qv = tensor_view::contiguous(q->data(), dtype::f32, {seqs, heads, hd}, be.dev());
  auto kv3 = tensor_view::contiguous(k->data(), dtype::f32, {seqs, kvh, hd}, be.dev());
  auto vv = tensor_view::contiguous(v->data(), dtype::f32, {seqs, kvh, hd}, be.dev());
  auto ov = tensor_view::contiguous(o->data(), dtype::f32, {seqs, heads, hd}, be.dev());
  const double attn_ms = bench::median_ms(be.stream(), 3, 30, [&] { be.attention(qv, kv3, vv, *kv, 0, b, 0.125f, ov); });
  const double attn_bytes = 2.0 * seqs * ctx * kvh * hd * 4;
  const double attn_gbs = attn_bytes / (attn_ms * 1e-3) / 1e9;
  // The same under other ring depths and chunks (plan_decode's choice is the line above).
  struct variant { const char* stages; const char* chunk; double ms; };
  std::vector<variant> variants = {{"3", "", 0}, {"4", "", 0}, {"2", "512", 0}, {"2", "256", 0}};
  for (variant& v : variants) {
    setenv("TANDEM_CUDA_DECODE_STAGES", v.stages, 1);
    if (*v.chunk) setenv("TANDEM_CUDA_DECODE_CHUNK", v.chunk, 1);
    v.ms = bench::median_ms(be.stream(), 3, 30, [&] { be.attention(qv, kv3, vv, *kv, 0, b, 0.125f, ov); });
    unsetenv("TANDEM_CUDA_DECODE_STAGES");
    unsetenv("TANDEM_CUDA_DECODE_CHUNK");
  }
  const cuda::decode_plan planned = cuda::plan_decode(seqs, kvh, pages_per, page, hd, heads);

  // Prefill attention: random q, K, V (not constants: a uniform softmax hides errors).
  const int pn = 8192, ppages = pn / page;
  kv_layout play{1, ppages, page, kvh, hd, dtype::f32};
  auto pkv = be.alloc_kv(play);
  const cuda::dev_kv ppool = dynamic_cast<cuda::cuda_kv&>(*pkv).layer(0);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto randv = [&](size_t count) {
    std::vector<float> h(count);
    for (auto& x : h) x = nd(rng);
    return h;
  };
  const size_t pkv_floats = static_cast<size_t>(pn) * kvh * hd;
  be.copy_to_device(ppool.k, randv(pkv_floats).data(), pkv_floats * 4);
  be.copy_to_device(ppool.v, randv(pkv_floats).data(), pkv_floats * 4);
  auto pq = be.alloc(size_t{pn} * heads * hd * 4), po = be.alloc(size_t{pn} * heads * hd * 4);
  be.copy_to_device(pq->data(), randv(size_t{pn} * heads * hd).data(), size_t{pn} * heads * hd * 4);
  std::vector<int32_t> pqs = {0, pn}, plens = {pn}, ptable(ppages), pslots(pn);
  for (int p = 0; p < ppages; ++p) ptable[p] = p;
  for (int t = 0; t < pn; ++t) pslots[t] = t;
  auto dpqs = up(pqs), dplens = up(plens), dptable = up(ptable), dpslots = up(pslots);
  be.synchronize();
  const cuda::dev_batch pb{1, pn, ppages, static_cast<const int32_t*>(dpqs->data()),
                           static_cast<const int32_t*>(dplens->data()), static_cast<const int32_t*>(dptable->data()),
                           static_cast<const int32_t*>(dpslots->data())};
  const auto pqp = static_cast<const float*>(pq->data());
  const auto pop = static_cast<float*>(po->data());
  const double tc_ms = bench::median_ms(be.stream(), 3, 20, [&] {
    cuda::attention_prefill_tc(pqp, heads, ppool, pb, 0.125f, pop, be.stream());
  });
  bench::ck(cudaGetLastError());
  const double scalar_ms = bench::median_ms(be.stream(), 1, 3, [&] {
    cuda::attention_prefill(pqp, heads, ppool, pb, 0.125f, pop, be.stream());
  });
  bench::ck(cudaGetLastError());
  const double prefill_flops = 4.0 * pn * double{pn} * hd * heads / 2;
  const double tc_tflops = prefill_flops / (tc_ms * 1e-3) / 1e12, scalar_tflops = prefill_flops / (scalar_ms * 1e-3) / 1e12;

  std::printf("%-44s %12s %12s %10s\n", "kernel", "time (us)", "GB/s", "of copy");
  std::printf("%-44s %12s %12.0f %10s\n", "device copy 2 GiB (read + write)", "-", copy, "100%");
  std::printf("%-44s %12.1f %12.0f %9.1f%%\n", "Q4_1 GEMV 16384x16384, 1 token", gemv_ms * 1e3, gemv_gbs, 100 * gemv_gbs / copy);
  std::printf("%-44s %12.1f %12.0f %9.1f%%\n", "decode attention 32 seqs x 8192, f32 KV", attn_ms * 1e3, attn_gbs, 100 * attn_gbs / copy);
  std::printf("  (planned: %d stages, chunk %d)\n", planned.stages, planned.chunk);
  for (const variant& v : variants) {
    const double gbs = attn_bytes / (v.ms * 1e-3) / 1e9;
    char name[64];
    std::snprintf(name, sizeof name, "  stages %s, chunk %s", v.stages, *v.chunk ? v.chunk : "planned");
    std::printf("%-44s %12.1f %12.0f %9.1f%%\n", name, v.ms * 1e3, gbs, 100 * gbs / copy);
  }
  std::printf("%-44s %12s %12s\n", "prefill attention (1 x 8192, 9/3 x 64)", "time (us)", "TFLOP/s");
  std::printf("%-44s %12.1f %12.1f\n", "  attention_prefill_tc (f16 mma.sync)", tc_ms * 1e3, tc_tflops);
  std::printf("%-44s %12.1f %12.2f\n", "  attention_prefill (scalar f32)", scalar_ms * 1e3, scalar_tflops);
  std::printf("{\"bench\":\"cuda_prefill_attention\",\"n\":%d,\"tc_us\":%.1f,\"tc_tflops\":%.1f,"
              "\"scalar_us\":%.1f,\"scalar_tflops\":%.2f}\n",
              pn, tc_ms * 1e3, tc_tflops, scalar_ms * 1e3, scalar_tflops);
  std::printf("{\"bench\":\"cuda_kernels\",\"copy_gbs\":%.0f,\"gemv_q4_1_us\":%.2f,\"gemv_q4_1_gbs\":%.0f,"
              "\"gemv_frac\":%.3f,\"attn_decode_us\":%.2f,\"attn_decode_gbs\":%.0f,\"attn_frac\":%.3f}\n",
              copy, gemv_ms * 1e3, gemv_gbs, gemv_gbs / copy, attn_ms * 1e3, attn_gbs, attn_gbs / copy);
  return 0;
}
