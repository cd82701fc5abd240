// bench_cuda_kernels: the decode-critical kernels of backend.cuda against the copy
// bandwidth measured in the same run.
//  - Q4_1 GEMV (1 token) on 16384 x 16384 weights (168 MB, past the 60 MB L2; two matrices
//    alternate), counting the bytes it must read (quants + scales + x + y);
//  - decode attention, 32 sequences x 8192 tokens of context, 9 query / 3 KV heads of 64,
//    on f32, bf16 and fp8 e4m3 pools: the K and V bytes read per layer (4, 2 or 1 per
//    element) against copy bandwidth, and each narrow pool's speed-up over f32;
//  - prefill attention, one sequence of 8192 tokens, 9 query / 3 KV heads of 64, page 16,
//    on the same three pools: the tensor-core kernel (attention_prefill_tc) next to the
//    scalar one, in TFLOP/s of the causal FLOPs 4 n^2 HD heads / 2 (the H200 does ~790
//    dense bf16 with wgmma, ~400 usable with mma.sync);
//  - the decode step's linears alone (SmolLM2-135M shapes) at 1 to 128 token rows: the
//    dispatched path (q8 GEMV up to 4 rows, int8 tensor-core kernel to 16, f16 GEMM above),
//    up to 32 rows the GEMV with x staged in every block and with x quantized once into
//    global scratch, and up to 64 rows the int8 tensor-core kernel (gemv_q8_mma); enough
//    copies of each matrix that the weights come from DRAM, the calls back to back in one
//    graph (as in a decode step), against the weights' bytes over the copy bandwidth;
//  - the o / down projection with the norm after it at 1 to 16 rows (SmolLM2-135M's 576
//    and a 2048-wide model's shapes): linear_add_rms_norm (one launch, the linear's last
//    block normalising) against linear() then add_rms_norm(), in the same kind of graph;
//  - a speculative verify's attention (1-32 sequences x 2-16 new tokens, contexts of 256 to
//    8192) on the prefill path against the decode kernel (TANDEM_CUDA_DECODE_VERIFY=1).
//
//   build/bench/cuda/bench_cuda_kernels
//   TANDEM_BENCH_LINEARS_ONLY=1 build/bench/cuda/bench_cuda_kernels   # only the linear curve
//   TANDEM_BENCH_NORM_ONLY=1 build/bench/cuda/bench_cuda_kernels      # only the projection + norm curve
//   TANDEM_BENCH_VERIFY_ONLY=1 build/bench/cuda/bench_cuda_kernels    # only the verify attention curve
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "tandem_cuda/kernels.hpp"
#include "cuda_backend.hpp"
#include "cuda_weights.hpp"
#include "tandem_quant/ggml_blocks.hpp"

using namespace tandem;

namespace {

// Random Q4_1 (d = 0.01, m = -0.08) or Q8_0 (d = 0.01) blocks with random quants.
tensor_info random_blocks(dtype type, std::vector<uint8_t>& bytes, int64_t out, int64_t in, std::mt19937& rng) {
  const bool q4 = type == dtype::q4_1;
  const size_t block = q4 ? 20 : 34, head = q4 ? 4 : 2;
  bytes.resize(static_cast<size_t>(out * (in / 32)) * block);
  std::uniform_int_distribution<int> byte(0, 255);
  const uint16_t d = fp32_to_fp16(0.01f), m = fp32_to_fp16(-0.08f);
  for (size_t i = 0; i < bytes.size(); i += block) {
    std::memcpy(&bytes[i], &d, 2);
    if (q4) std::memcpy(&bytes[i + 2], &m, 2);
    for (size_t j = head; j < block; ++j) bytes[i + j] = static_cast<uint8_t>(byte(rng));
  }
  tensor_info t;
  t.name = q4 ? "bench.q4_1" : "bench.q8_0";
  t.type = type;
  t.shape = {out, in};
  t.data = bytes.data();
  t.nbytes = bytes.size();
  return t;
}


std::unique_ptr<device_buffer> upload(cuda::cuda_backend& be, const std::vector<int32_t>& v) {
  auto b = be.alloc(v.size() * 4);
  be.copy_to_device(b->data(), v.data(), v.size() * 4);
  return b;
}

struct decode_variant {
  const char* stages;
  const char* chunk;
  double ms = 0;
};
struct decode_result {
  dtype type;
  double ms = 0;
  double bytes = 0;  // K and V read per launch
  cuda::decode_plan planned;
  std::vector<decode_variant> variants;
  double gbs(double t_ms) const { return bytes / (t_ms * 1e-3) / 1e9; }
};

// Decode attention, 32 sequences x 8192 keys, 9/3 heads of 64, on a pool of `type`; then
// under other ring depths and chunks (plan_decode's choice is the first figure).
decode_result bench_decode(cuda::cuda_backend& be, dtype type) {
  const int seqs = 32, ctx = 8192, page = 16, heads = 9, kvh = 3, hd = 64;
  const int pages_per = ctx / page;
  kv_layout lay{1, int64_t{seqs} * pages_per, page, kvh, hd, type};
  auto kv = be.alloc_kv(lay);
  const cuda::dev_kv pool = dynamic_cast<cuda::cuda_kv&>(*kv).layer(0);
  const size_t pool_bytes = static_cast<size_t>(lay.n_pages) * page * kvh * hd * traits(type).block_bytes;
  bench::ck(cudaMemset(pool.k, 0x3c, pool_bytes));  // small finite values in every type, not zeros
  bench::ck(cudaMemset(pool.v, 0x3c, pool_bytes));
  std::vector<int32_t> qs(seqs + 1), lens(seqs, ctx), table(int64_t{seqs} * pages_per), slots(seqs);
  for (int s = 0; s <= seqs; ++s) qs[s] = s;
  for (int s = 0; s < seqs; ++s) {
    for (int p = 0; p < pages_per; ++p) table[int64_t{s} * pages_per + p] = s * pages_per + p;
    slots[s] = (s * pages_per + pages_per - 1) * page + page - 1;
  }
  auto dqs = upload(be, qs), dl = upload(be, lens), dt = upload(be, table), ds = upload(be, slots);
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
  auto run = [&] { be.attention(qv, kv3, vv, *kv, 0, b, 0.125f, ov); };
  decode_result r{type, 0, 0, {}, {}};
  r.ms = bench::median_ms(be.stream(), 3, 30, run);
  r.bytes = 2.0 * seqs * ctx * kvh * hd * traits(type).block_bytes;
  r.planned = cuda::plan_decode(seqs, kvh, pages_per, page, hd, heads, pool.type);
  r.variants = {{"2", ""}, {"3", ""}, {"4", ""}, {"2", "512"}, {"2", "256"}};
  if (type != dtype::f32) r.variants.insert(r.variants.end(), {{"6", ""}, {"8", ""}, {"4", "512"}});
  for (decode_variant& dv : r.variants) {
    setenv("TANDEM_CUDA_DECODE_STAGES", dv.stages, 1);
    if (*dv.chunk) setenv("TANDEM_CUDA_DECODE_CHUNK", dv.chunk, 1);
    dv.ms = bench::median_ms(be.stream(), 3, 30, run);
    unsetenv("TANDEM_CUDA_DECODE_STAGES");
    unsetenv("TANDEM_CUDA_DECODE_CHUNK");
  }
  return r;
}

void print_decode(const decode_result& r, double copy) {
  char line[96];
  std::snprintf(line, sizeof line, "decode attention 32 seqs x 8192, %s KV", std::string(name(r.type)).c_str());
  std::printf("%-44s %12.1f %12.0f %9.1f%%\n", line, r.ms * 1e3, r.gbs(r.ms), 100 * r.gbs(r.ms) / copy);
  std::printf("  (planned: %d stages, chunk %d)\n", r.planned.stages, r.planned.chunk);
  for (const decode_variant& v : r.variants) {
    std::snprintf(line, sizeof line, "  stages %s, chunk %s", v.stages, *v.chunk ? v.chunk : "planned");
    std::printf("%-44s %12.1f %12.0f %9.1f%%\n", line, v.ms * 1e3, r.gbs(v.ms), 100 * r.gbs(v.ms) / copy);
  }
}

// A speculative verify's attention: `seqs` sequences of `ctx` cached keys, each with `rows`
// new tokens (a token and its draft), 9/3 heads of 64, bf16 pool, RoPE inside, as the
// engine runs it: on the prefill path (RoPE of q and of k, the KV write, the tensor-core
// prefill kernel: four launches) and, with TANDEM_CUDA_DECODE_VERIFY=1, on the decode kernel
// (one launch). Each call is timed alone (the median of back-to-back launches), so the
// figures are the launches' own latency chain, what a batch-1 verify step pays per layer.
void verify_curve() {
  cuda::cuda_backend be({0, 0, false, false});
  const int page = 16, heads = 9, kvh = 3, hd = 64;
  const rope_params rp{100000.0f, 0, false};
  std::printf("%-44s %14s %14s %8s\n", "verify attention (bf16 KV, 9/3 x 64)", "prefill path us", "decode kernel us",
              "ratio");
  for (const auto& [seqs, rows, ctx] : {std::tuple{1, 2, 256}, std::tuple{1, 8, 256}, std::tuple{1, 16, 256},
                                       std::tuple{1, 8, 2048}, std::tuple{1, 8, 8192}, std::tuple{8, 8, 256},
                                       std::tuple{8, 8, 2048}, std::tuple{32, 4, 2048}}) {
    const int len = ctx + rows, pages_per = (len + page - 1) / page, n = seqs * rows;
    kv_layout lay{1, int64_t{seqs} * pages_per, page, kvh, hd, dtype::bf16};
    auto kv = be.alloc_kv(lay);
    const cuda::dev_kv pool = dynamic_cast<cuda::cuda_kv&>(*kv).layer(0);
    const size_t pool_bytes = static_cast<size_t>(lay.n_pages) * page * kvh * hd * 2;
    bench::ck(cudaMemset(pool.k, 0x3c, pool_bytes));
    bench::ck(cudaMemset(pool.v, 0x3c, pool_bytes));
    std::vector<int32_t> qs(seqs + 1), lens(seqs, len), table(int64_t{seqs} * pages_per), slots(n), pos(n);
    for (int s = 0; s <= seqs; ++s) qs[s] = s * rows;
    for (int s = 0; s < seqs; ++s) {
      for (int p = 0; p < pages_per; ++p) table[int64_t{s} * pages_per + p] = s * pages_per + p;
      for (int r = 0; r < rows; ++r) {
        const int t = ctx + r;
        pos[s * rows + r] = t;
        slots[s * rows + r] = (s * pages_per + t / page) * page + t % page;
      }
    }
    auto dqs = upload(be, qs), dl = upload(be, lens), dt = upload(be, table), ds = upload(be, slots), dp = upload(be, pos);
    attention_batch b;
    b.n_seqs = seqs;
    b.n_tokens = n;
    b.max_query_len = rows;
    b.max_pages_per_seq = pages_per;
    b.query_start = tensor_view::contiguous(dqs->data(), dtype::i32, {seqs + 1}, be.dev());
    b.seq_lens = tensor_view::contiguous(dl->data(), dtype::i32, {seqs}, be.dev());
    b.page_table = tensor_view::contiguous(dt->data(), dtype::i32, {seqs, pages_per}, be.dev());
    b.slot_mapping = tensor_view::contiguous(ds->data(), dtype::i32, {n}, be.dev());
    b.positions = tensor_view::contiguous(dp->data(), dtype::i32, {n}, be.dev());
    b.rope = &rp;
    auto q = be.alloc(size_t{4} * n * heads * hd), k = be.alloc(size_t{4} * n * kvh * hd),
         v = be.alloc(size_t{4} * n * kvh * hd), o = be.alloc(size_t{4} * n * heads * hd);
    bench::ck(cudaMemset(q->data(), 0x3c, size_t{4} * n * heads * hd));
    bench::ck(cudaMemset(k->data(), 0x3c, size_t{4} * n * kvh * hd));
    bench::ck(cudaMemset(v->data(), 0x3c, size_t{4} * n * kvh * hd));
    auto qv = tensor_view::contiguous(q->data(), dtype::f32, {n, heads, hd}, be.dev());
    auto kv3 = tensor_view::contiguous(k->data(), dtype::f32, {n, kvh, hd}, be.dev());
    auto vv = tensor_view::contiguous(v->data(), dtype::f32, {n, kvh, hd}, be.dev());
    auto ov = tensor_view::contiguous(o->data(), dtype::f32, {n, heads, hd}, be.dev());
    auto run = [&] { be.attention(qv, kv3, vv, *kv, 0, b, 0.125f, ov); };
    const double prefill_ms = bench::median_ms(be.stream(), 3, 50, run);
    setenv("TANDEM_CUDA_DECODE_VERIFY", "1", 1);
    const double decode_ms = bench::median_ms(be.stream(), 3, 50, run);
    unsetenv("TANDEM_CUDA_DECODE_VERIFY");
    char line[96];
    std::snprintf(line, sizeof line, "  %d seqs x %d rows, context %d", seqs, rows, ctx);
    std::printf("%-44s %14.1f %14.1f %7.2fx\n", line, prefill_ms * 1e3, decode_ms * 1e3, prefill_ms / decode_ms);
  }
}

constexpr int prefill_tokens = 8192;

struct prefill_result {
  dtype type;
  double tc_ms = 0, scalar_ms = 0, tc_tflops = 0, scalar_tflops = 0;
};

// Prefill attention over one 8192-token sequence on a pool of `type`: random q, K, V (not
// constants: a uniform softmax hides errors), K and V written through kv_write so the pool
// holds them rounded as the engine stores them.
prefill_result bench_prefill(cuda::cuda_backend& be, dtype type, std::mt19937& rng) {
  const int pn = prefill_tokens, page = 16, heads = 9, kvh = 3, hd = 64, ppages = pn / page;
  kv_layout play{1, ppages, page, kvh, hd, type};
  auto pkv = be.alloc_kv(play);
  const cuda::dev_kv ppool = dynamic_cast<cuda::cuda_kv&>(*pkv).layer(0);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto randv = [&](size_t count) {
    std::vector<float> h(count);
    for (auto& x : h) x = nd(rng);
    return h;
  };
  const size_t kv_floats = static_cast<size_t>(pn) * kvh * hd;
  auto kf = be.alloc(kv_floats * 4), vf = be.alloc(kv_floats * 4);
  be.copy_to_device(kf->data(), randv(kv_floats).data(), kv_floats * 4);
  be.copy_to_device(vf->data(), randv(kv_floats).data(), kv_floats * 4);
  auto pq = be.alloc(size_t{pn} * heads * hd * 4), po = be.alloc(size_t{pn} * heads * hd * 4);
  be.copy_to_device(pq->data(), randv(size_t{pn} * heads * hd).data(), size_t{pn} * heads * hd * 4);
  std::vector<int32_t> pqs = {0, pn}, plens = {pn}, ptable(ppages), pslots(pn);
  for (int p = 0; p < ppages; ++p) ptable[p] = p;
  for (int t = 0; t < pn; ++t) pslots[t] = t;
  auto dpqs = upload(be, pqs), dplens = upload(be, plens), dptable = upload(be, ptable), dpslots = upload(be, pslots);
  be.synchronize();
  const cuda::dev_batch pb{1, pn, ppages, static_cast<const int32_t*>(dpqs->data()),
                           static_cast<const int32_t*>(dplens->data()), static_cast<const int32_t*>(dptable->data()),
                           static_cast<const int32_t*>(dpslots->data())};
  cuda::kv_write(static_cast<const float*>(kf->data()), static_cast<const float*>(vf->data()), pb, ppool, be.stream());
  bench::ck(cudaGetLastError());
  const auto pqp = static_cast<const float*>(pq->data());
  const auto pop = static_cast<float*>(po->data());
  prefill_result r{type, 0, 0, 0, 0};
  r.tc_ms = bench::median_ms(be.stream(), 3, 20, [&] {
    cuda::attention_prefill_tc(pqp, heads, ppool, pb, 0.125f, pop, be.stream());
  });
  bench::ck(cudaGetLastError());
  r.scalar_ms = bench::median_ms(be.stream(), 1, 3, [&] {
    cuda::attention_prefill(pqp, heads, ppool, pb, 0.125f, pop, be.stream());
  });
  bench::ck(cudaGetLastError());
  const double flops = 4.0 * pn * double{pn} * hd * heads / 2;
  r.tc_tflops = flops / (r.tc_ms * 1e-3) / 1e12;
  r.scalar_tflops = flops / (r.scalar_ms * 1e-3) / 1e12;
  return r;
}

// The linear curve (see the header): one line per (matrix, rows, path).
void linear_curve(double copy, std::mt19937& rng) {
  cuda::cuda_backend be;  // default options: f16 copies for the GEMM above mma_max_rows (16)
  struct shape { const char* name; dtype t; int64_t out, in; };
  const shape shapes[] = {{"q/k/v 960x576 q4_1", dtype::q4_1, 960, 576},
                          {"o 576x576 q4_1", dtype::q4_1, 576, 576},
                          {"gate/up 3072x576 q4_1", dtype::q4_1, 3072, 576},
                          {"down 576x1536 q4_1", dtype::q4_1, 576, 1536},
                          {"LM head 49152x576 q8_0", dtype::q8_0, 49152, 576}};
  const int64_t rows_list[] = {1, 2, 4, 8, 16, 32, 64, 128};
  std::printf("%-24s %5s %-9s %10s %10s %8s %10s %12s\n", "linear", "rows", "path", "us/call", "GB/s", "of copy",
              "us/row", "weights MB");
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const shape& sh : shapes) {
    std::vector<uint8_t> host;
    const tensor_info info = random_blocks(sh.t, host, sh.out, sh.in, rng);
    const double wbytes = static_cast<double>(info.nbytes);
    // Copies past 3x the 60 MB L2, at least 4.
    const int copies = std::max(4, static_cast<int>(180e6 / wbytes) + 1);
    std::vector<std::unique_ptr<linear_weight>> ws;
    for (int i = 0; i < copies; ++i) ws.push_back(be.load_linear(info));
    std::vector<float> xh(static_cast<size_t>(128 * sh.in));
    for (auto& v : xh) v = nd(rng);
    auto x = be.alloc(xh.size() * 4), y = be.alloc(static_cast<size_t>(128 * sh.out) * 4);
    be.copy_to_device(x->data(), xh.data(), xh.size() * 4);
    auto scratch = be.alloc(cuda::gemv_q8_scratch_bytes(cuda::gemv_q8_mma_max_tokens, sh.in));
    be.synchronize();
    for (int64_t n : rows_list) {
      auto xv = tensor_view::contiguous(x->data(), dtype::f32, {n, sh.in}, be.dev());
      auto yv = tensor_view::contiguous(y->data(), dtype::f32, {n, sh.out}, be.dev());
      struct path { const char* name; int staging; };  // -1: linear(); -2 / -3: gemv_q8_mma automatic / global
      std::vector<path> paths = {{"dispatch", -1}};
      if (n <= cuda::gemv_q8_max_tokens) {
        const cuda::dev_matrix& m0 = dynamic_cast<const cuda::cuda_linear&>(*ws[0]).matrix();
        if (cuda::gemv_q8_stageable(m0, n)) paths.push_back({"in-block", static_cast<int>(cuda::q8_staging::in_block)});
        paths.push_back({"global", static_cast<int>(cuda::q8_staging::global)});
      }
      if (n <= cuda::gemv_q8_mma_max_tokens) {
        const cuda::dev_matrix& m0 = dynamic_cast<const cuda::cuda_linear&>(*ws[0]).matrix();
        paths.push_back({cuda::gemv_q8_mma_stageable(m0, n) ? "mma-blk" : "mma-glb", -2});
        if (cuda::gemv_q8_mma_stageable(m0, n)) paths.push_back({"mma-glb", -3});
      }
      for (const path& p : paths) {
        auto call = [&](int i) {
          const linear_weight& w = *ws[static_cast<size_t>(i) % ws.size()];
          if (p.staging == -1) {
            be.linear(w, xv, yv);
          } else if (p.staging <= -2) {
            cuda::gemv_q8_mma(dynamic_cast<const cuda::cuda_linear&>(w).matrix(), static_cast<const float*>(x->data()),
                              n, {}, false, static_cast<float*>(y->data()), scratch->data(), be.stream(),
                              p.staging == -2 ? cuda::q8_staging::automatic : cuda::q8_staging::global);
          } else {
            const cuda::dev_matrix& m = dynamic_cast<const cuda::cuda_linear&>(w).matrix();
            cuda::gemv_q8_fused(m, static_cast<const float*>(x->data()), n, {}, false, static_cast<float*>(y->data()),
                                scratch->data(), be.stream(), static_cast<cuda::q8_staging>(p.staging));
          }
        };
        call(0);  // eager: sizes the backend's scratch before the capture
        be.synchronize();
        bench::ck(cudaGetLastError());
        const double ms = bench::graph_ms(be.stream(), copies, call);
        const double gbs = wbytes / (ms * 1e-3) / 1e9;
        std::printf("%-24s %5lld %-9s %10.2f %10.0f %7.1f%% %10.3f %12.2f\n", sh.name, static_cast<long long>(n), p.name,
                    ms * 1e3, gbs, 100 * gbs / copy, ms * 1e3 / n, wbytes / 1e6);
        std::printf("{\"bench\":\"cuda_linear\",\"linear\":\"%s\",\"rows\":%lld,\"path\":\"%s\",\"us\":%.3f,"
                    "\"gbs\":%.0f,\"frac\":%.3f}\n",
                    sh.name, static_cast<long long>(n), p.name, ms * 1e3, gbs, gbs / copy);
      }
    }
  }
}

// The projection + norm curve (see the header): one line per (matrix, rows, variant).
void norm_curve(double copy, std::mt19937& rng) {
  cuda::cuda_backend be;
  struct shape { const char* name; int64_t out, in; };
  const shape shapes[] = {{"o 576x576 q4_1", 576, 576},
                          {"down 576x1536 q4_1", 576, 1536},
                          {"o 2048x2048 q4_1", 2048, 2048},
                          {"down 2048x5632 q4_1", 2048, 5632}};
  std::printf("%-24s %5s %-9s %10s %10s %8s\n", "projection + norm", "rows", "variant", "us/call", "GB/s", "of copy");
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const shape& sh : shapes) {
    std::vector<uint8_t> host;
    const tensor_info info = random_blocks(dtype::q4_1, host, sh.out, sh.in, rng);
    const double wbytes = static_cast<double>(info.nbytes);
    const int copies = std::max(4, static_cast<int>(180e6 / wbytes) + 1);  // weights from DRAM
    std::vector<std::unique_ptr<linear_weight>> ws;
    for (int i = 0; i < copies; ++i) ws.push_back(be.load_linear(info));
    const int64_t max_rows = 16;
    std::vector<float> xh(static_cast<size_t>(max_rows * sh.in)), rh(static_cast<size_t>(max_rows * sh.out)),
        wh(static_cast<size_t>(sh.out), 1.0f);
    for (auto& v : xh) v = nd(rng);
    for (auto& v : rh) v = nd(rng);
    const size_t rbytes = rh.size() * 4;
    auto x = be.alloc(xh.size() * 4), prod = be.alloc(rbytes), r = be.alloc(rbytes), out = be.alloc(rbytes),
         nw = be.alloc(wh.size() * 4);
    be.copy_to_device(x->data(), xh.data(), xh.size() * 4);
    be.copy_to_device(r->data(), rh.data(), rbytes);
    be.copy_to_device(nw->data(), wh.data(), wh.size() * 4);
    be.synchronize();
    for (int64_t n : {1, 2, 3, 4, 8, 16}) {
      auto v = [&](const std::unique_ptr<device_buffer>& b, int64_t cols) {
        return tensor_view::contiguous(b->data(), dtype::f32, {n, cols}, be.dev());
      };
      const tensor_view nwv = tensor_view::contiguous(nw->data(), dtype::f32, {sh.out}, be.dev());
      for (const bool fused : {true, false}) {
        auto call = [&](int i) {
          const linear_weight& w = *ws[static_cast<size_t>(i) % ws.size()];
          if (fused) {
            be.linear_add_rms_norm(w, v(x, sh.in), v(prod, sh.out), v(r, sh.out), nwv, 1e-5f, v(out, sh.out), {});
          } else {
            be.linear(w, v(x, sh.in), v(prod, sh.out));
            be.add_rms_norm(v(r, sh.out), v(prod, sh.out), nwv, 1e-5f, v(out, sh.out));
          }
        };
        call(0);  // eager: sizes the backend's scratch (and the ticket) before the capture
        be.synchronize();
        bench::ck(cudaGetLastError());
        const double ms = bench::graph_ms(be.stream(), copies, call);
        const double gbs = wbytes / (ms * 1e-3) / 1e9;
        const char* variant = fused ? "one op" : "two ops";
        std::printf("%-24s %5lld %-9s %10.2f %10.0f %7.1f%%\n", sh.name, static_cast<long long>(n), variant, ms * 1e3,
                    gbs, 100 * gbs / copy);
        std::printf("{\"bench\":\"cuda_linear_add_rms_norm\",\"linear\":\"%s\",\"rows\":%lld,\"variant\":\"%s\","
                    "\"us\":%.3f}\n",
                    sh.name, static_cast<long long>(n), variant, ms * 1e3);
      }
    }
  }
}

}  // namespace

int main() {
  cuda::cuda_backend be({0, 0, false, false});  // no f16 copies: only the GEMV is timed
  std::mt19937 rng(7);
  const double copy = bench::copy_gbs(be.stream());
  if (const char* only = std::getenv("TANDEM_BENCH_LINEARS_ONLY"); only != nullptr && std::string(only) == "1") {
    std::printf("device copy 2 GiB: %.0f GB/s\n", copy);
    linear_curve(copy, rng);
    return 0;
  }
  if (const char* only = std::getenv("TANDEM_BENCH_NORM_ONLY"); only != nullptr && std::string(only) == "1") {
    std::printf("device copy 2 GiB: %.0f GB/s\n", copy);
    norm_curve(copy, rng);
    return 0;
  }
  if (const char* only = std::getenv("TANDEM_BENCH_VERIFY_ONLY"); only != nullptr && std::string(only) == "1") {
    verify_curve();
    return 0;
  }

  const int64_t N = 16384;
  std::vector<uint8_t> host;
  auto w0 = be.load_linear(random_blocks(dtype::q4_1, host, N, N, rng));
  auto w1 = be.load_linear(random_blocks(dtype::q4_1, host, N, N, rng));
  auto x = be.alloc(N * 4), y = be.alloc(N * 4);
  std::vector<float> xh(N, 0.5f);
  be.copy_to_device(x->data(), xh.data(), N * 4);
  auto xv = tensor_view::contiguous(x->data(), dtype::f32, {1, N}, be.dev());
  auto yv = tensor_view::contiguous(y->data(), dtype::f32, {1, N}, be.dev());
  int flip = 0;
  const double gemv_ms = bench::median_ms(be.stream(), 3, 50, [&] { be.linear(flip++ % 2 ? *w1 : *w0, xv, yv); });
  const double gemv_bytes = N * (N / 32) * 20.0 + 2 * N * 4.0;
  const double gemv_gbs = gemv_bytes / (gemv_ms * 1e-3) / 1e9;

  const decode_result d32 = bench_decode(be, dtype::f32), d16 = bench_decode(be, dtype::bf16),
                      d8 = bench_decode(be, dtype::fp8_e4m3);
  const prefill_result p32 = bench_prefill(be, dtype::f32, rng), p16 = bench_prefill(be, dtype::bf16, rng),
                       p8 = bench_prefill(be, dtype::fp8_e4m3, rng);

  std::printf("%-44s %12s %12s %10s\n", "kernel", "time (us)", "GB/s", "of copy");
  std::printf("%-44s %12s %12.0f %10s\n", "device copy 2 GiB (read + write)", "-", copy, "100%");
  std::printf("%-44s %12.1f %12.0f %9.1f%%\n", "Q4_1 GEMV 16384x16384, 1 token", gemv_ms * 1e3, gemv_gbs, 100 * gemv_gbs / copy);
  for (const decode_result* d : {&d32, &d16, &d8}) print_decode(*d, copy);
  std::printf("%-44s %12s %12s\n", "prefill attention (1 x 8192, 9/3 x 64)", "time (us)", "TFLOP/s");
  for (const prefill_result* p : {&p32, &p16, &p8}) {
    std::printf("  %-42s %12.1f %12.1f\n", ("attention_prefill_tc (f16 mma.sync), " + std::string(name(p->type)) + " KV").c_str(),
                p->tc_ms * 1e3, p->tc_tflops);
    std::printf("  %-42s %12.1f %12.2f\n", ("attention_prefill (scalar f32), " + std::string(name(p->type)) + " KV").c_str(),
                p->scalar_ms * 1e3, p->scalar_tflops);
    std::printf("{\"bench\":\"cuda_prefill_attention\",\"kv\":\"%s\",\"n\":%d,\"tc_us\":%.1f,\"tc_tflops\":%.1f,"
                "\"scalar_us\":%.1f,\"scalar_tflops\":%.2f}\n",
                std::string(name(p->type)).c_str(), prefill_tokens, p->tc_ms * 1e3, p->tc_tflops, p->scalar_ms * 1e3,
                p->scalar_tflops);
  }
  const double attn_ms = d32.ms, attn_gbs = d32.gbs(d32.ms);
  std::printf("{\"bench\":\"cuda_kernels\",\"copy_gbs\":%.0f,\"gemv_q4_1_us\":%.2f,\"gemv_q4_1_gbs\":%.0f,"
              "\"gemv_frac\":%.3f,\"attn_decode_us\":%.2f,\"attn_decode_gbs\":%.0f,\"attn_frac\":%.3f}\n",
              copy, gemv_ms * 1e3, gemv_gbs, gemv_gbs / copy, attn_ms * 1e3, attn_gbs, attn_gbs / copy);
  for (const decode_result* d : {&d16, &d8})
    std::printf("{\"bench\":\"cuda_decode_attention\",\"kv\":\"%s\",\"us\":%.2f,\"gbs\":%.0f,\"frac\":%.3f,"
                "\"speedup_vs_f32\":%.2f}\n",
                std::string(name(d->type)).c_str(), d->ms * 1e3, d->gbs(d->ms), d->gbs(d->ms) / copy, d32.ms / d->ms);
  std::printf("\n");
  linear_curve(copy, rng);
  std::printf("\n");
  norm_curve(copy, rng);
  std::printf("\n");
  verify_curve();
  return 0;
}
