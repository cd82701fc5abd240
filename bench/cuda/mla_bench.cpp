// bench_cuda_mla: backend.cuda's MLA decode (mla_attention, one new token per sequence) over
// the latent cache at GLM-5's shapes (64 heads, kv_lora_rank 512 + rope 64, nope 192, v
// 256), N sequences of C tokens of context each, dense (every cached position) and sparse
// (DSA's top-2048 positions per token, spread over the context). The target is the
// dense case at 32 sequences x 8k: at least 60% of the device-to-device copy figure.
//
// Bytes counted per call: the latent rows the op must read (dense: N * C; sparse: N *
// min(C, 2048); (512 + 64) * 4 bytes each, the cache is f32) plus the absorbed kv_b weight
// (W_UK and W_UV, 64 * (192 + 256) * 512 * 4 bytes), read once. The copy figure is read +
// write bytes of a 2 GiB device copy in the same run (bench_util.hpp). Cache contents are a
// constant (they change nothing in the kernel's work); pages are a shuffled permutation.
// Decode steps run the tensor-core kernel (mla_attend_tc) where the device takes it, which
// reads each latent row once (per row and split); not counted above are the absorbed
// queries (147 KB a row, read from L2 by each split's block), the splits' partials (131 KB
// per row and split, written then merged) and o_lat: ~50 MB at 32 x 8k against the 663 MB
// counted, mostly L2-resident, so the % of copy is a slight understatement.
// TANDEM_CUDA_MLA_TC=0 runs the f32 kernel instead (to compare). With the tensor-core
// kernel, every case runs each of its variants side by side (TANDEM_CUDA_MLA_TC_STAGE, set
// per run): f16 (the default: the latent tile global -> registers -> f16 -> shared memory,
// three stages, two barriers a tile), f16s2 (the same over two stages, three barriers) and
// f32 (cp.async of the f32 rows, rounded to f16 in shared memory: the earlier kernel);
// --stage all adds f16-nopf (f16 without its L2 prefetch, TANDEM_CUDA_MLA_TC_PREFETCH=0),
// --stage f16|f16s2|f16-nopf|f32 runs that one alone.
//
//   build/bench/cuda/bench_cuda_mla [--seqs 1,8,32] [--contexts 8192,32768] [--stage NAME]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "cuda_backend.hpp"
#include "tandem_cuda/mla.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_quant/ggml_blocks.hpp"

using namespace tandem;

int main(int argc, char** argv) try {
  std::vector<int64_t> seqs{1, 8, 32}, contexts{8192, 32768};
  std::string stage_arg = "default";  // f16, f16s2, f32
  const std::vector<std::string> variants{"f16", "f16-nopf", "f16s2", "f32"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seqs" && i + 1 < argc) seqs = bench::parse_list(argv[++i]);
    else if (a == "--contexts" && i + 1 < argc) contexts = bench::parse_list(argv[++i]);
    else if (a == "--stage" && i + 1 < argc &&
             (std::string(argv[i + 1]) == "all" ||
              std::find(variants.begin(), variants.end(), argv[i + 1]) != variants.end()))
      stage_arg = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: bench_cuda_mla [--seqs a,b] [--contexts a,b] [--stage all|f16|f16-nopf|f16s2|f32]\n");
      return 2;
    }
  }
  const int heads = 64, nope = 192, rope = 64, vd = 256, rank = 512, page = 64, topk_n = 2048;
  const int lat = rank + rope;
  cuda::cuda_backend be;
  const bench::device_info dev = bench::device_banner(be.stream());
  bool tc = false;
  {
    cudaDeviceProp prop{};
    int d = 0;
    cudaGetDevice(&d);
    cudaGetDeviceProperties(&prop, d);
    const char* e = std::getenv("TANDEM_CUDA_MLA_TC");
    tc = (e == nullptr || std::string(e) != "0") &&
         cuda::mla_tc_supported(heads, rank, rope, prop.sharedMemPerBlockOptin);
    std::printf("decode attention: %s\n", tc ? "tensor cores (mla_attend_tc: f16 operands, f32 accumulation)"
                                              : "f32 CUDA cores (mla_attend)");
  }
  // The tensor-core kernel's stagings to run (TANDEM_CUDA_MLA_TC_STAGE, read at every call).
  std::vector<std::string> stages;
  for (const std::string& v : variants)
    if (tc && (stage_arg == v || stage_arg == "all" || (stage_arg == "default" && v != "f16-nopf")))
      stages.push_back(v);
  if (!tc) stages.push_back("");
  const char* env_stage = std::getenv("TANDEM_CUDA_MLA_TC_STAGE");
  const std::string saved_stage = env_stage != nullptr ? env_stage : "";
  const char* env_pf = std::getenv("TANDEM_CUDA_MLA_TC_PREFETCH");
  const std::string saved_pf = env_pf != nullptr ? env_pf : "";

  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<uint16_t> kvb(static_cast<size_t>(heads) * (nope + vd) * rank);
  for (auto& x : kvb) x = fp32_to_bf16(nd(rng));
  tensor_info ti;
  ti.name = "bench.kv_b_proj";
  ti.type = dtype::bf16;
  ti.shape = {int64_t{heads} * (nope + vd), rank};
  ti.data = kvb.data();
  ti.nbytes = kvb.size() * 2;
  auto w = be.load_mla(ti, heads, nope, vd);
  const double weight_bytes = double(heads) * (nope + vd) * rank * 4;

  const int64_t maxN = *std::max_element(seqs.begin(), seqs.end());
  const int64_t maxC = *std::max_element(contexts.begin(), contexts.end());
  const int64_t pages_per_seq = (maxC + 1 + page - 1) / page;
  kv_layout layout{1, maxN * pages_per_seq, page, 1, lat, dtype::f32};
  layout.values = false;
  auto kv = be.alloc_kv(layout);
  std::printf("latent cache: %lld pages of %d tokens x %d f32 = %.2f GB\n", static_cast<long long>(layout.n_pages),
              page, lat, double(layout.n_pages) * page * lat * 4 / 1e9);

  auto q = be.alloc(size_t(maxN) * heads * (nope + rope) * 4), kva = be.alloc(size_t(maxN) * lat * 4);
  auto out = be.alloc(size_t(maxN) * heads * vd * 4), topk = be.alloc(size_t(maxN) * topk_n * 4);
  {
    std::vector<float> h(size_t(maxN) * heads * (nope + rope));
    for (auto& x : h) x = nd(rng);
    be.copy_to_device(q->data(), h.data(), h.size() * 4);
    std::vector<float> k(size_t(maxN) * lat);
    for (auto& x : k) x = nd(rng);
    be.copy_to_device(kva->data(), k.data(), k.size() * 4);
  }
  // Batch index arrays on the device, rewritten per (N, C).
  auto qs = be.alloc(size_t(maxN + 1) * 4), sl = be.alloc(size_t(maxN) * 4), sm = be.alloc(size_t(maxN) * 4);
  auto pos = be.alloc(size_t(maxN) * 4), pt = be.alloc(size_t(maxN * pages_per_seq) * 4);
  std::vector<int32_t> perm(static_cast<size_t>(layout.n_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);

  mla_params p;
  p.rope_dims = rope;
  p.rope_theta = 1e6f;
  p.scale = 1.0f / std::sqrt(float(nope + rope));
  std::printf("\n| seqs | context | mode | staging | ms | latent MB read | GB/s | %% of copy |\n"
              "| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |\n");
  for (int64_t C : contexts)
    for (int64_t N : seqs) {
      const int64_t P = (C + 1 + page - 1) / page;
      std::vector<int32_t> hqs(N + 1), hsl(N), hsm(N), hpos(N), hpt(N * P);
      for (int64_t s = 0; s < N; ++s) {
        hqs[s] = int32_t(s);
        hsl[s] = int32_t(C + 1);
        hpos[s] = int32_t(C);
        for (int64_t j = 0; j < P; ++j) hpt[s * P + j] = perm[s * pages_per_seq + j];
        hsm[s] = hpt[s * P + C / page] * page + int32_t(C % page);
      }
      hqs[N] = int32_t(N);
      be.copy_to_device(qs->data(), hqs.data(), hqs.size() * 4);
      be.copy_to_device(sl->data(), hsl.data(), hsl.size() * 4);
      be.copy_to_device(sm->data(), hsm.data(), hsm.size() * 4);
      be.copy_to_device(pos->data(), hpos.data(), hpos.size() * 4);
      be.copy_to_device(pt->data(), hpt.data(), hpt.size() * 4);
      const int64_t K = std::min<int64_t>(topk_n, C + 1);
      std::vector<int32_t> htk(size_t(N) * topk_n, -1);
      for (int64_t s = 0; s < N; ++s)
        for (int64_t j = 0; j < K; ++j) htk[s * topk_n + j] = int32_t(j * (C + 1) / K);
      be.copy_to_device(topk->data(), htk.data(), htk.size() * 4);
      be.synchronize();

      attention_batch b;
      b.n_seqs = int(N);
      b.n_tokens = int(N);
      b.max_pages_per_seq = int(P);
      b.query_start = tensor_view::contiguous(qs->data(), dtype::i32, {N + 1}, be.dev());
      b.seq_lens = tensor_view::contiguous(sl->data(), dtype::i32, {N}, be.dev());
      b.page_table = tensor_view::contiguous(pt->data(), dtype::i32, {N, P}, be.dev());
      b.slot_mapping = tensor_view::contiguous(sm->data(), dtype::i32, {N}, be.dev());
      b.positions = tensor_view::contiguous(pos->data(), dtype::i32, {N}, be.dev());
      const tensor_view qv = tensor_view::contiguous(q->data(), dtype::f32, {N, heads, nope + rope}, be.dev());
      const tensor_view kv_a = tensor_view::contiguous(kva->data(), dtype::f32, {N, lat}, be.dev());
      const tensor_view ov = tensor_view::contiguous(out->data(), dtype::f32, {N, heads, vd}, be.dev());
      const tensor_view tv = tensor_view::contiguous(topk->data(), dtype::i32, {N, topk_n}, be.dev());
      for (int sparse = 0; sparse < 2; ++sparse)
        for (const std::string& stage : stages) {
          if (!stage.empty()) setenv("TANDEM_CUDA_MLA_TC_STAGE", stage == "f16-nopf" ? "f16" : stage.c_str(), 1);
          if (stage == "f16-nopf") setenv("TANDEM_CUDA_MLA_TC_PREFETCH", "0", 1);
          else if (env_pf != nullptr) setenv("TANDEM_CUDA_MLA_TC_PREFETCH", saved_pf.c_str(), 1);
          else unsetenv("TANDEM_CUDA_MLA_TC_PREFETCH");
          const double ms = bench::median_ms(be.stream(), 2, 9, [&] {
            be.mla_attention(qv, kv_a, *w, *kv, 0, b, p, sparse ? tv : tensor_view{}, ov);
          });
          const double rows = double(N) * (sparse ? double(K) : double(C + 1));
          const double bytes = rows * lat * 4 + weight_bytes;
          const double gbs = bytes / (ms * 1e-3) / 1e9;
          std::printf("| %lld | %lld | %s | %s | %.3f | %.0f | %.0f | %.0f%% |\n", static_cast<long long>(N),
                      static_cast<long long>(C), sparse ? "top-2048" : "dense", stage.empty() ? "-" : stage.c_str(), ms,
                      rows * lat * 4 / 1e6, gbs, 100.0 * gbs / dev.copy);
        }
      if (env_stage != nullptr) setenv("TANDEM_CUDA_MLA_TC_STAGE", saved_stage.c_str(), 1);
      else unsetenv("TANDEM_CUDA_MLA_TC_STAGE");
      if (env_pf != nullptr) setenv("TANDEM_CUDA_MLA_TC_PREFETCH", saved_pf.c_str(), 1);
      else unsetenv("TANDEM_CUDA_MLA_TC_PREFETCH");
    }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_cuda_mla: %s\n", e.what());
  return 1;
}
