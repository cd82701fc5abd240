// The persistent fused decode stack: all decoder layers of one batch-1 decode step in ONE
// cooperative launch. Batch-1 decode is latency bound (each per-op kernel is a short
// chain of dependent memory round trips plus a launch); here the grid stays resident and
// grid barriers (grid_barrier.cuh, ~1 us) replace kernel boundaries.
//
// Phases of one layer (each ends at a grid barrier; the weights of the next phase are
// requested into registers, or the old keys into L2, BEFORE waiting at it):
//  A. every block: rms_norm(x, attn_norm) quantized into shared memory (each block
//     redundantly: 576 floats); warp tasks = pairs of q/k/v rows that RoPE rotates
//     together, so the rotation runs in the GEMV epilogue; rotated q -> scratch, rotated k
//     and v -> the KV pool at the new token's slot.
//  B. attention: block = (KV head, split of keys); warp = 32 keys per pass, lane = key,
//     online softmax per warp over its passes, warps merged in shared memory -> one
//     partial (acc, max, sum) per (KV head, split, query head).
//  C. every block merges the splits of all heads (shared memory), quantizes the result;
//     warp task = one o row; epilogue x += o (the residual add), proj = o.
//  D. every block: rms_norm(x, ffn_norm) quantized; warp task = (gate row i, up row i);
//     epilogue act[i] = silu(gate) * up.
//  E. act quantized per block; warp task = one down row; epilogue proj = down and, except
//     in the last layer, x += down (the last add is the caller's add_rms_norm).
// Numerics: the linears are gemv_q8's (q8_dot.cuh) bit for bit, the norms rms_norm's, the
// SiLU silu_mul's, the residual adds add_rms_norm's; attention is fp32 as
// attention_decode.cu up to summation order.
#include <cfloat>
#include <stdexcept>

#include "common.cuh"
#include "grid_barrier.cuh"
#include "q8_dot.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {
namespace {

constexpr int HD = 64;                // head_dim
constexpr int GM = 4;                 // largest GQA group
constexpr int NW = 16;                // warps per block
constexpr int threads = NW * 32;
constexpr int keys_per_pass = NW * 32;  // keys a block covers per pass (lane = key)
constexpr int max_in = 4096;          // widest linear input staged in shared memory
constexpr int part_floats = HD + 2;   // one partial: acc[HD], max, sum

// (cos, sin) of pair p at `pos` as attention_decode.cu: the host table when it covers pos,
// else computed in double as ref::rope_angle does.
__device__ __forceinline__ float2 rope_cs(const dev_rope& r, int rot, int pos, int p) {
  if (r.table != nullptr && pos < r.table_positions) return r.table[int64_t{pos} * (rot / 2) + p];
  const double angle = static_cast<double>(pos) * pow(static_cast<double>(r.theta), -2.0 * p / rot);
  return make_float2(static_cast<float>(cos(angle)), static_cast<float>(sin(angle)));
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

struct smem_t {
  alignas(16) int8_t xq[max_in];       // the staged, quantized linear input
  float2 ds[max_in / 32];
  float red[32];
  alignas(16) float qs[GM][HD];        // B: the group's rotated, scaled queries
  float merge[NW][GM][part_floats];    // B: per-warp partials
  alignas(16) float attn[max_in];      // C: merged attention output
};

// The attention plan of this step: splits per KV head (the same in phases B and C).
__device__ __forceinline__ int attention_splits(int len, int n_kv) {
  const int per_head = static_cast<int>(gridDim.x) / n_kv;
  return max(1, min(per_head, (len + keys_per_pass - 1) / keys_per_pass));
}

// Pool slot of key t of the sequence, or -1 when its page is outside the pool.
__device__ __forceinline__ int64_t key_slot(const stack_params& p, int t) {
  const int32_t page = p.page_table[t / p.page_size];
  return page >= 0 && page < p.n_pages ? int64_t{page} * p.page_size + t % p.page_size : -1;
}

// ---- A: q/k/v rows in RoPE pairs ----------------------------------------------------
// Pair task P: head P / 32 of the q|k|v heads, pair p = P % 32 of it. Rotated pairs are
// (2p, 2p + 1) or, neox, (p, p + rot / 2); dims past rotary_dims pair up unrotated.
__device__ __forceinline__ void qkv_rows(const stack_params& p, int task, int rot, int64_t (&rows)[2], bool& rotate) {
  const int head = task / (HD / 2), pr = task % (HD / 2), half = rot / 2;
  int a, b;
  if (pr < half) {
    a = p.rope.neox ? pr : 2 * pr, b = p.rope.neox ? pr + half : 2 * pr + 1;
    rotate = p.rope.on && head < p.n_heads + p.n_kv_heads;
  } else {
    a = rot + 2 * (pr - half), b = a + 1;
    rotate = false;
  }
  rows[0] = int64_t{head} * HD + a, rows[1] = int64_t{head} * HD + b;
}

// xs: x, already copied into shared memory.
__device__ void phase_qkv(const stack_params& p, const stack_layer& L, smem_t& sm, const float* xs, int nw, int lane,
                          int task, const q8::wblock (&first)[2]) {
  const int warp = threadIdx.x >> 5;
  q8::stage_q8<NW>(xs, L.attn_norm, p.eps, static_cast<int>(L.qkv.in), sm.xq, sm.ds, sm.red, warp, lane);
  const int rot = p.rope.rotary_dims == 0 ? HD : p.rope.rotary_dims;
  const int n_tasks = (p.n_heads + 2 * p.n_kv_heads) * (HD / 2);
  const int pos = p.seq_lens[0] - 1;
  const int64_t slot = p.slot_mapping[0];
  const bool slot_ok = slot >= 0 && slot < p.n_pages * p.page_size;
  const int64_t ts = int64_t{p.n_kv_heads} * HD;  // floats per pool token
  float* q = static_cast<float*>(p.scratch);
  q8::wblock wb[2] = {first[0], first[1]};
  while (task < n_tasks) {
    int64_t rows[2];
    bool rotate;
    qkv_rows(p, task, rot, rows, rotate);
    float y[2];
    q8::dot_rows<2>(L.qkv, rows, wb, sm.xq, sm.ds, lane, y);
    if (lane == 0) {
      float ya = y[0], yb = y[1];
      if (rotate) {  // attention_decode.cu's rotate(), on the pair
        const float2 cs = rope_cs(p.rope, rot, pos, (task % (HD / 2)));
        ya = y[0] * cs.x - y[1] * cs.y;
        yb = y[0] * cs.y + y[1] * cs.x;
      }
      const int64_t qdim = int64_t{p.n_heads} * HD;
      if (rows[0] < qdim) {
        q[rows[0]] = ya, q[rows[1]] = yb;
      } else if (slot_ok) {
        const bool is_k = rows[0] < qdim + ts;
        float* pool = is_k ? L.k : L.v;
        const int64_t off = rows[0] - qdim - (is_k ? 0 : ts);  // kv_head * HD + dim
        pool[slot * ts + off] = ya;
        pool[slot * ts + off + (rows[1] - rows[0])] = yb;
      }
    }
    task += nw;
    if (task < n_tasks) {
      qkv_rows(p, task, rot, rows, rotate);
      q8::load_first<2>(L.qkv, rows, lane, wb);
    }
  }
}

// ---- B: attention splits -------------------------------------------------------------
// Before the barrier: the old keys this block will read, into L2 (the newest is written in A).
__device__ void prefetch_keys(const stack_params& p, const stack_layer& L) {
  const int len = p.seq_lens[0], S = attention_splits(len, p.n_kv_heads);
  if (static_cast<int>(blockIdx.x) >= p.n_kv_heads * S) return;
  const int kvh = blockIdx.x / S, split = blockIdx.x % S;
  const int t = split * keys_per_pass + static_cast<int>(threadIdx.x);
  if (t >= len - 1) return;
  const int64_t slot = key_slot(p, t);
  if (slot < 0) return;
  const int64_t off = slot * p.n_kv_heads * HD + kvh * HD;
  prefetch_l2(L.k + off), prefetch_l2(L.k + off + 32);
  prefetch_l2(L.v + off), prefetch_l2(L.v + off + 32);
}

__device__ void phase_attention(const stack_params& p, const stack_layer& L, smem_t& sm, int lane) {
  const int len = p.seq_lens[0], S = attention_splits(len, p.n_kv_heads);
  if (static_cast<int>(blockIdx.x) >= p.n_kv_heads * S) return;
  const int kvh = blockIdx.x / S, split = blockIdx.x % S, warp = threadIdx.x >> 5;
  const int G = p.n_heads / p.n_kv_heads;
  const int64_t ts = int64_t{p.n_kv_heads} * HD;
  const float* q = static_cast<const float*>(p.scratch);
  for (int i = threadIdx.x; i < G * HD; i += threads) sm.qs[i / HD][i % HD] = __ldcg(q + kvh * G * HD + i) * p.scale;
  __syncthreads();

  float m[GM], l[GM], acc[GM][2];
#pragma unroll
  for (int g = 0; g < GM; ++g) m[g] = -INFINITY, l[g] = 0.0f, acc[g][0] = acc[g][1] = 0.0f;
  for (int base = split * keys_per_pass + warp * 32; base < len; base += S * keys_per_pass) {
    const int t = base + lane;
    const int64_t slot = t < len ? key_slot(p, t) : -1;
    // q.k of this lane's key for every head of the group, K read as 16 float4.
    const float4* kp = reinterpret_cast<const float4*>(L.k + (slot >= 0 ? slot : 0) * ts + kvh * HD);
    float dots[GM] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int c = 0; c < HD / 4; ++c) {
      const float4 kc = slot >= 0 ? __ldcg(kp + c) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int g = 0; g < GM; ++g) {
        const float4 qv = reinterpret_cast<const float4*>(sm.qs[g])[c];
        if (g < G) dots[g] = fmaf(qv.x, kc.x, fmaf(qv.y, kc.y, fmaf(qv.z, kc.z, fmaf(qv.w, kc.w, dots[g]))));
      }
    }
    float pr[GM];
#pragma unroll
    for (int g = 0; g < GM; ++g) {
      pr[g] = 0.0f;
      if (g < G) {
        const float sc = slot >= 0 ? dots[g] : -INFINITY;
        const float m_new = fmaxf(m[g], detail::warp_max(sc));
        if (m_new != -INFINITY) {  // false only while no readable key has been seen
          const float corr = expf(m[g] - m_new);
          l[g] *= corr, acc[g][0] *= corr, acc[g][1] *= corr;
          m[g] = m_new;
          pr[g] = slot >= 0 ? expf(sc - m_new) : 0.0f;
        }
        l[g] += detail::warp_sum(pr[g]);
      }
    }
    // p.v: lane owns dims 2 lane, 2 lane + 1; V rows of the 32 keys, 8 loads in flight.
    for (int j0 = 0; j0 < 32; j0 += 8) {
      float2 vv[8];
      int64_t sj[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        sj[j] = __shfl_sync(0xffffffffu, slot, j0 + j);
        vv[j] = sj[j] >= 0 ? __ldcg(reinterpret_cast<const float2*>(L.v + sj[j] * ts + kvh * HD) + lane)
                           : make_float2(0.f, 0.f);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int g = 0; g < GM; ++g) {
          const float pj = __shfl_sync(0xffffffffu, pr[g], j0 + j);
          if (g < G) acc[g][0] = fmaf(pj, vv[j].x, acc[g][0]), acc[g][1] = fmaf(pj, vv[j].y, acc[g][1]);
        }
      }
    }
  }
  // Merge the block's warps (a warp that saw no key has max -inf and is skipped).
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    if (g < G) {
      sm.merge[warp][g][2 * lane] = acc[g][0], sm.merge[warp][g][2 * lane + 1] = acc[g][1];
      if (lane == 0) sm.merge[warp][g][HD] = m[g], sm.merge[warp][g][HD + 1] = l[g];
    }
  }
  __syncthreads();
  float* parts = static_cast<float*>(p.scratch) + max_in;
  for (int i = threadIdx.x; i < G * HD; i += threads) {
    const int g = i / HD, d = i % HD;
    float M = -INFINITY;
    for (int w = 0; w < NW; ++w) M = fmaxf(M, sm.merge[w][g][HD]);
    float num = 0.0f, den = 0.0f;
    for (int w = 0; w < NW; ++w) {
      const float mw = sm.merge[w][g][HD];
      if (mw == -INFINITY) continue;
      const float e = expf(mw - M);
      num = fmaf(e, sm.merge[w][g][d], num);
      den = fmaf(e, sm.merge[w][g][HD + 1], den);
    }
    float* part = parts + ((int64_t{kvh} * S + split) * G + g) * part_floats;
    part[d] = num;
    if (d == 0) part[HD] = M, part[HD + 1] = den;
  }
}

// ---- C: merge + o + residual -----------------------------------------------------------
__device__ void merge_heads(const stack_params& p, smem_t& sm) {
  const int len = p.seq_lens[0], S = attention_splits(len, p.n_kv_heads);
  const int G = p.n_heads / p.n_kv_heads;
  const float* parts = static_cast<const float*>(p.scratch) + max_in;
  for (int i = threadIdx.x; i < p.n_heads * HD; i += threads) {
    const int h = i / HD, d = i % HD, kvh = h / G, g = h % G;
    const float* base = parts + (int64_t{kvh} * S * G + g) * part_floats;
    float M = -INFINITY;
    for (int s = 0; s < S; ++s) M = fmaxf(M, __ldcg(base + int64_t{s} * G * part_floats + HD));
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < S; ++s) {
      const float* part = base + int64_t{s} * G * part_floats;
      const float ms = __ldcg(part + HD);
      if (ms == -INFINITY) continue;
      const float e = expf(ms - M);
      num = fmaf(e, __ldcg(part + d), num);
      den = fmaf(e, __ldcg(part + HD + 1), den);
    }
    sm.attn[i] = num / den;
  }
  __syncthreads();
}

// One-row tasks with a residual epilogue (o and down): y = row . xq; proj = y and, when
// `add`, x += y (each output read and written by one lane only).
__device__ void rows_residual(const stack_params& p, const dev_matrix& w, const smem_t& sm, int lane, int task,
                              q8::wblock first, bool add) {
  q8::wblock wb[1] = {first};
  while (task < w.out) {
    const int64_t rows[1] = {task};
    float y[1];
    q8::dot_rows<1>(w, rows, wb, sm.xq, sm.ds, lane, y);
    if (lane == 0) {
      if (add) p.x[task] = __ldcg(p.x + task) + y[0];
      p.proj[task] = y[0];
    }
    task += gridDim.x * NW;
    if (task < w.out) {
      const int64_t next[1] = {task};
      q8::load_first<1>(w, next, lane, wb);
    }
  }
}

// ---- D: pre-norm + gate/up + SiLU ------------------------------------------------------
__device__ void phase_gate_up(const stack_params& p, const stack_layer& L, smem_t& sm, const float* xs, int lane,
                              int task, const q8::wblock (&first)[2]) {
  const int warp = threadIdx.x >> 5;
  q8::stage_q8<NW>(xs, L.ffn_norm, p.eps, static_cast<int>(L.gate_up.in), sm.xq, sm.ds, sm.red, warp, lane);
  float* act = static_cast<float*>(p.scratch) + max_in + gridDim.x * GM * part_floats;
  q8::wblock wb[2] = {first[0], first[1]};
  while (task < p.ffn) {
    const int64_t rows[2] = {task, int64_t{p.ffn} + task};
    float y[2];
    q8::dot_rows<2>(L.gate_up, rows, wb, sm.xq, sm.ds, lane, y);
    if (lane == 0) act[task] = y[0] / (1.0f + expf(-y[0])) * y[1];  // silu_mul's arithmetic
    task += gridDim.x * NW;
    if (task < p.ffn) {
      const int64_t next[2] = {task, int64_t{p.ffn} + task};
      q8::load_first<2>(L.gate_up, next, lane, wb);
    }
  }
}

// Global data other blocks wrote in the previous phase is read through L2 (__ldcg), never a
// stale L1 line: stage it through this copy into shared memory first.
__device__ void copy_cg(const float* src, float* dst, int n) {
  for (int i = threadIdx.x; i < n; i += threads) dst[i] = __ldcg(src + i);
  __syncthreads();
}

__global__ void __launch_bounds__(threads, 1) decode_stack_kernel(stack_params p) {
  __shared__ smem_t sm;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gw = blockIdx.x * NW + warp, nw = gridDim.x * NW;
  const int rot = p.rope.rotary_dims == 0 ? HD : p.rope.rotary_dims;
  for (int li = 0; li < p.n_layers; ++li) {
    const stack_layer& L = p.layers[li];
    const bool last = li == p.n_layers - 1;
    {  // A
      q8::wblock wb[2];
      if (gw < (p.n_heads + 2 * p.n_kv_heads) * (HD / 2)) {
        int64_t rows[2];
        bool rotate;
        qkv_rows(p, gw, rot, rows, rotate);
        q8::load_first<2>(L.qkv, rows, lane, wb);
      }
      if (li > 0) detail::grid_barrier(p.barrier);  // x: the previous layer's E
      copy_cg(p.x, sm.attn, p.d);                     // x through L2, then normed from shared
      phase_qkv(p, L, sm, sm.attn, nw, lane, gw, wb);
    }
    prefetch_keys(p, L);
    detail::grid_barrier(p.barrier);  // B needs q and the new k, v
    phase_attention(p, L, sm, lane);
    {  // C
      q8::wblock wb;
      if (gw < L.o.out) {
        const int64_t rows[1] = {gw};
        q8::wblock f[1];
        q8::load_first<1>(L.o, rows, lane, f);
        wb = f[0];
      }
      detail::grid_barrier(p.barrier);  // the partials of every split
      merge_heads(p, sm);
      q8::stage_q8<NW>(sm.attn, nullptr, 0.0f, static_cast<int>(L.o.in), sm.xq, sm.ds, sm.red, warp, lane);
      rows_residual(p, L.o, sm, lane, gw, wb, true);
    }
    {  // D
      q8::wblock wb[2];
      if (gw < p.ffn) {
        const int64_t rows[2] = {gw, int64_t{p.ffn} + gw};
        q8::load_first<2>(L.gate_up, rows, lane, wb);
      }
      detail::grid_barrier(p.barrier);  // x after the o residual add
      copy_cg(p.x, sm.attn, p.d);
      phase_gate_up(p, L, sm, sm.attn, lane, gw, wb);
    }
    {  // E
      q8::wblock wb;
      if (gw < L.down.out) {
        const int64_t rows[1] = {gw};
        q8::wblock f[1];
        q8::load_first<1>(L.down, rows, lane, f);
        wb = f[0];
      }
      detail::grid_barrier(p.barrier);  // act
      const float* act = static_cast<const float*>(p.scratch) + max_in + gridDim.x * GM * part_floats;
      copy_cg(act, sm.attn, p.ffn);
      q8::stage_q8<NW>(sm.attn, nullptr, 0.0f, p.ffn, sm.xq, sm.ds, sm.red, warp, lane);
      rows_residual(p, L.down, sm, lane, gw, wb, !last);
    }
  }
}

}  // namespace

bool decode_stack_supported(const stack_layer& l, int n_heads, int n_kv_heads, int head_dim) {
  if (head_dim != HD || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || n_heads / n_kv_heads > GM) return false;
  const int64_t qdim = int64_t{n_heads} * HD, kvdim = int64_t{n_kv_heads} * HD;
  const dev_matrix* all[] = {&l.qkv, &l.o, &l.gate_up, &l.down};
  for (const dev_matrix* m : all)
    if (!gemv_q8_supported(*m) || m->in > max_in) return false;
  const int64_t d = l.qkv.in, ffn = l.down.in;
  return l.qkv.n_segs == 3 && l.qkv.seg[1] == qdim && l.qkv.seg[2] == qdim + kvdim && l.qkv.out == qdim + 2 * kvdim &&
         l.o.in == qdim && l.o.out == d && l.gate_up.n_segs == 2 && l.gate_up.in == d &&
         l.gate_up.seg[1] == ffn && l.gate_up.out == 2 * ffn && l.down.out == d && d <= max_in && qdim <= max_in &&
         l.attn_norm != nullptr && l.ffn_norm != nullptr;
}

int decode_stack_grid(int device) {
  int sms = 0, per_sm = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_stack_kernel, threads, 0) != cudaSuccess) return 0;
  return sms * per_sm;
}

size_t decode_stack_scratch_bytes(const stack_params& p, int grid) {
  // q [max_in], partials [grid][GM][part_floats] (at most grid splits x KV heads), act [ffn].
  return (static_cast<size_t>(max_in) + static_cast<size_t>(grid) * GM * part_floats + static_cast<size_t>(p.ffn)) *
         sizeof(float);
}

size_t decode_stack_barrier_bytes() { return detail::grid_barrier_bytes; }

void decode_stack(const stack_params& p, int grid, cudaStream_t stream) {
  if (grid <= 0) throw std::invalid_argument("decode_stack: no resident blocks");
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;  // every block resident: the grid barriers need it
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, decode_stack_kernel, p);
}

}  // namespace tandem::cuda
