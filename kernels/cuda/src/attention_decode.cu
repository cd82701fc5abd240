// Decode attention: one new token per sequence, keys split over the grid ("flash
// decoding"), everything of one layer's decode in one launch:
//  - K and V rows stream through shared memory in tiles of 64 keys (32 at head_dim 128)
//    with cp.async, three tiles in flight per block, so a block keeps ~70 KB of loads
//    outstanding without spending registers on them;
//  - the first tiles, the page table and the RoPE angles are requested before the kernel
//    waits for the previous one (programmatic dependent launch): they only depend on the
//    pool and on host uploads, which are complete by then (every tandem kernel waits for
//    its predecessor before it lets the next one start, so a kernel two launches back has
//    finished). At batch 1 this hides the K/V round trips behind the q/k/v GEMV's tail;
//  - the block that holds a sequence's newest key rotates q and k (RoPE, angles as
//    ref::rope_angle), writes the new k and v into the pool, and puts them straight into
//    its shared tile (never reading the pool slot back); every block rotates its own q;
//  - per tile, each warp owns 16 (8) keys: q.k with 4 (8) lanes per key row read
//    conflict-free from padded shared rows, an online softmax per warp, p.v with each lane
//    owning head_dim / 32 dims;
//  - the last block of a (sequence, KV head) to finish merges the splits' partial results
//    (a ticket counter per pair, reset by that block), so no second launch is needed.
// fp32 throughout: matches the reference up to summation order.
#include <cfloat>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attention_decode.cuh"
#include "common.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {
namespace {

constexpr int warps = 4;
constexpr int threads = warps * 32;
constexpr int stages = 3;          // K/V tiles in flight per block
constexpr int max_chunk = 1024;    // keys per block (plan_decode's largest chunk)

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled, nothing is read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// (cos, sin) of pair p at `pos`: the host-made table when it covers pos, else computed in
// double as ref::rope_angle does.
__device__ __forceinline__ float2 rope_cs(const dev_rope& r, int rot, int pos, int p) {
  if (r.table != nullptr && pos < r.table_positions) return r.table[int64_t{pos} * (rot / 2) + p];
  const double angle = static_cast<double>(pos) * pow(static_cast<double>(r.theta), -2.0 * p / rot);
  return make_float2(static_cast<float>(cos(angle)), static_cast<float>(sin(angle)));
}

// Rotates the head_dim floats at v (shared memory) in place with the pairs' (cos, sin).
__device__ void rotate(float* v, const float2* cs, int half, bool neox, int tid, int nthreads) {
  for (int p = tid; p < half; p += nthreads) {
    const int a = neox ? p : 2 * p, b = neox ? p + half : 2 * p + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * cs[p].x - x1 * cs[p].y;
    v[b] = x0 * cs[p].y + x1 * cs[p].x;
  }
}


template <int HD>
struct tile_shape {
  static constexpr int keys = HD == 64 ? 64 : 32;       // keys per tile
  static constexpr int row = HD + 4;                     // padded shared row (floats): conflict-free float4 reads
  static constexpr int kpw = keys / warps;               // keys per warp per tile
  static constexpr int lpk = HD / 16;                    // lanes per key in q.k (16 dims each)
  static constexpr int kpp = 32 / lpk;                   // keys per q.k pass
  static constexpr int passes = kpw / kpp;
  static constexpr int dpl = HD / 32;                    // dims per lane in p.v
  static constexpr int chunks = HD / 4;                  // 16-byte pieces per row
  static_assert(passes * kpp == kpw && kpw * warps == keys);
};

// Dynamic shared memory of decode_kernel<HD, GM>: tiles (reused for the warp merge), slots
// of the block's keys, q, the new k and v, RoPE (cos, sin), per-warp scores.
template <int HD, int GM>
constexpr size_t decode_smem_bytes() {
  using T = tile_shape<HD>;
  constexpr size_t tiles = size_t{stages} * 2 * T::keys * T::row * sizeof(float);
  constexpr size_t merge = size_t{warps} * GM * (HD + 2) * sizeof(float);
  static_assert(merge <= tiles);
  return tiles + max_chunk * sizeof(int32_t) + (GM + 2) * HD * sizeof(float) + HD / 2 * sizeof(float2) +
         size_t{warps} * GM * T::kpw * sizeof(float);
}

template <int HD, int GM>
__global__ void __launch_bounds__(threads, 2)
    decode_kernel(const float* __restrict__ q, const float* __restrict__ k_new, const float* __restrict__ v_new,
                  int n_heads, dev_kv kv, dev_batch b, dev_rope rope, float scale, int chunk,
                  int n_splits, decode_partial<HD>* __restrict__ parts, int* __restrict__ tickets, float* __restrict__ out) {
  using T = tile_shape<HD>;
  extern __shared__ __align__(16) unsigned char smem[];
  float* tiles = reinterpret_cast<float*>(smem);  // [stages][K, V][keys][row]
  auto* slots = reinterpret_cast<int32_t*>(tiles + stages * 2 * T::keys * T::row);  // pool slot per key, -1: none
  float* qs = reinterpret_cast<float*>(slots + max_chunk);  // [GM][HD]
  float* kn = qs + GM * HD;
  float* vn = kn + HD;
  auto* cs = reinterpret_cast<float2*>(vn + HD);  // [HD / 2]
  float* scores = reinterpret_cast<float*>(cs + HD / 2);  // [warps][GM][kpw]
  __shared__ bool last;

  const int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
  const int G = n_heads / kv.n_kv_heads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t ts = int64_t{kv.n_kv_heads} * HD;  // floats per pool token (all KV heads)
  const int64_t pool_tokens = kv.n_pages * kv.page_size;

  // Before waiting for the previous kernel: host uploads (lengths, page table, slots) and
  // the pool's older keys only.
  const int len = b.seq_lens[s];
  const int n_active = (len + chunk - 1) / chunk;
  if (split >= n_active) return;  // past this sequence's keys (the grid is sized for the widest)
  const int pos = len - 1;
  const int k0 = split * chunk, k1 = min(len, k0 + chunk);
  const int n_keys = k1 - k0, n_tiles = (n_keys + T::keys - 1) / T::keys;
  const bool has_new = split == n_active - 1;
  for (int i = tid; i < n_keys; i += threads) {
    const int t = k0 + i;
    const int32_t page = b.page_table[int64_t{s} * b.max_pages + t / kv.page_size];
    slots[i] = page >= 0 && page < kv.n_pages ? page * kv.page_size + t % kv.page_size : -1;
  }
  const int rot = rope.rotary_dims == 0 ? HD : rope.rotary_dims;
  if (rope.on) {
    for (int p = tid; p < rot / 2; p += threads) cs[p] = rope_cs(rope, rot, pos, p);
  }
  __syncthreads();
  // Tile i: its K and V rows, zero-filled past the block's keys and for unreadable slots.
  auto issue = [&](int i) {
    if (i < n_tiles) {
      float* kt = tiles + (i % stages) * 2 * T::keys * T::row;
      float* vt = kt + T::keys * T::row;
      for (int c = tid; c < T::keys * T::chunks; c += threads) {
        const int r = c / T::chunks, col = (c % T::chunks) * 4;
        const int key = i * T::keys + r;
        const int64_t slot = key < n_keys ? slots[key] : -1;
        const int64_t off = (slot >= 0 ? slot : 0) * ts + kvh * HD + col;
        cp_async16(kt + r * T::row + col, kv.k + off, slot >= 0);
        cp_async16(vt + r * T::row + col, kv.v + off, slot >= 0);
      }
    }
    cp_async_commit();  // empty groups keep the wait counts uniform
  };
#pragma unroll
  for (int i = 0; i < stages - 1; ++i) issue(i);

  detail::pdl_wait();  // q, k_new, v_new come from the previous kernel
  detail::pdl_trigger();
  for (int i = tid; i < G * HD; i += threads) qs[i] = q[(int64_t{s} * n_heads + kvh * G) * HD + i];
  if (has_new) {
    for (int i = tid; i < HD; i += threads) {
      kn[i] = k_new[int64_t{s} * ts + kvh * HD + i];
      vn[i] = v_new[int64_t{s} * ts + kvh * HD + i];
    }
  }
  __syncthreads();
  if (rope.on) {
    for (int g = warp; g < G; g += warps) rotate(qs + g * HD, cs, rot / 2, rope.neox, lane, 32);
    if (has_new && warp == warps - 1) rotate(kn, cs, rot / 2, rope.neox, lane, 32);
    __syncthreads();
  }
  if (has_new) {  // the newest key and value join the pool for later steps
    const int64_t slot = b.slot_mapping[s];
    if (slot >= 0 && slot < pool_tokens) {
      for (int i = tid; i < HD; i += threads) {
        kv.k[slot * ts + kvh * HD + i] = kn[i];
        kv.v[slot * ts + kvh * HD + i] = vn[i];
      }
    }
  }

  // This lane's 16 dims of each query head, scale folded in.
  const int sub = lane % T::lpk, kk = lane / T::lpk;
  float qreg[GM][16];
#pragma unroll
  for (int g = 0; g < GM; ++g)
#pragma unroll
    for (int i = 0; i < 16; ++i) qreg[g][i] = g < G ? qs[g * HD + sub * 16 + i] * scale : 0.0f;
  float m[GM], l[GM], acc[GM][T::dpl];
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < T::dpl; ++i) acc[g][i] = 0.0f;
  }
  float* wsc = scores + warp * GM * T::kpw;

  for (int i = 0; i < n_tiles; ++i) {
    issue(i + stages - 1);
    cp_async_wait<stages - 1>();
    __syncthreads();
    float* kt = tiles + (i % stages) * 2 * T::keys * T::row;
    float* vt = kt + T::keys * T::row;
    const int tile0 = k0 + i * T::keys;
    if (has_new && pos >= tile0 && pos < tile0 + T::keys) {  // the pool slot is stale: use ours
      for (int d = tid; d < HD; d += threads) {
        kt[(pos - tile0) * T::row + d] = kn[d];
        vt[(pos - tile0) * T::row + d] = vn[d];
      }
      __syncthreads();
    }
    // q.k: pass p covers keys kk + kpp * p of this warp's slice; lpk lanes per key.
#pragma unroll
    for (int p = 0; p < T::passes; ++p) {
      const int r = warp * T::kpw + p * T::kpp + kk;  // tile row
      const float4* kr = reinterpret_cast<const float4*>(kt + r * T::row + sub * 16);
      float4 kx[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) kx[c] = kr[c];
      const int key = i * T::keys + r;  // index within the block's keys
      const bool ok = key < n_keys && slots[key] >= 0;
#pragma unroll
      for (int g = 0; g < GM; ++g) {
        if (g < G) {
          float d = 0.0f;
#pragma unroll
          for (int c = 0; c < 4; ++c)
            d = fmaf(qreg[g][4 * c], kx[c].x, fmaf(qreg[g][4 * c + 1], kx[c].y,
                fmaf(qreg[g][4 * c + 2], kx[c].z, fmaf(qreg[g][4 * c + 3], kx[c].w, d))));
#pragma unroll
          for (int o = T::lpk / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
          if (sub == 0) wsc[g * T::kpw + p * T::kpp + kk] = ok ? d : -INFINITY;
        }
      }
    }
    __syncwarp();
    // Online softmax over this warp's keys of the tile, then p.v (lane owns dpl dims).
#pragma unroll
    for (int g = 0; g < GM; ++g) {
      if (g < G) {
        float tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < T::kpw; ++j) tmax = fmaxf(tmax, wsc[g * T::kpw + j]);
        const float m_new = fmaxf(m[g], tmax);
        if (m_new == -INFINITY) continue;  // no readable key yet
        const float corr = expf(m[g] - m_new);
        l[g] *= corr;
#pragma unroll
        for (int d = 0; d < T::dpl; ++d) acc[g][d] *= corr;
        m[g] = m_new;
      }
    }
#pragma unroll 4
    for (int j = 0; j < T::kpw; ++j) {
      const float* vr = vt + (warp * T::kpw + j) * T::row + lane * T::dpl;
      float vx[T::dpl];
      if constexpr (T::dpl == 2) {
        const float2 v2 = *reinterpret_cast<const float2*>(vr);
        vx[0] = v2.x, vx[1] = v2.y;
      } else {
        const float4 v4 = *reinterpret_cast<const float4*>(vr);
        vx[0] = v4.x, vx[1] = v4.y, vx[2] = v4.z, vx[3] = v4.w;
      }
#pragma unroll
      for (int g = 0; g < GM; ++g) {
        if (g < G && m[g] != -INFINITY) {
          const float sj = wsc[g * T::kpw + j];
          const float pj = sj == -INFINITY ? 0.0f : expf(sj - m[g]);
          l[g] += pj;
#pragma unroll
          for (int d = 0; d < T::dpl; ++d) acc[g][d] = fmaf(pj, vx[d], acc[g][d]);
        }
      }
    }
    __syncthreads();  // the stage is refilled next iteration; scores rewritten
  }
  cp_async_wait<0>();
  __syncthreads();

  // Merge the warps of this block into the split's partial result (tiles reused).
  float* wm = tiles;                 // [warps][GM]
  float* wl = wm + warps * GM;       // [warps][GM]
  float* wacc = wl + warps * GM;     // [warps][GM][HD]
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    if (g < G) {
      if (lane == 0) wm[warp * GM + g] = m[g], wl[warp * GM + g] = l[g];
#pragma unroll
      for (int d = 0; d < T::dpl; ++d) wacc[(warp * GM + g) * HD + lane * T::dpl + d] = acc[g][d];
    }
  }
  __syncthreads();
  const bool alone = n_active == 1;  // one split: this block's result is the answer
  for (int i = tid; i < G * HD; i += threads) {
    const int g = i / HD, d = i % HD;
    float M = -INFINITY;
    for (int w = 0; w < warps; ++w) M = fmaxf(M, wm[w * GM + g]);
    float num = 0.0f, den = 0.0f;
    for (int w = 0; w < warps; ++w) {
      if (wm[w * GM + g] == -INFINITY) continue;  // a warp with no keys in this split
      const float e = expf(wm[w * GM + g] - M);
      num = fmaf(e, wacc[(w * GM + g) * HD + d], num);
      den = fmaf(e, wl[w * GM + g], den);
    }
    if (alone) {
      out[(int64_t{s} * n_heads + kvh * G + g) * HD + d] = num / den;
      continue;
    }
    decode_partial<HD>& P = parts[(int64_t{s} * n_heads + kvh * G + g) * n_splits + split];
    P.acc[d] = num;
    if (d == 0) P.m = M, P.l = den;
  }
  if (alone) return;
  // The last block of this (sequence, KV head) to get here merges every split.
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    int* ticket = tickets + int64_t{s} * kv.n_kv_heads + kvh;
    last = atomicAdd(ticket, 1) == n_active - 1;
    if (last) *ticket = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = tid; i < G * HD; i += warps * 32) {
    const int g = i / HD, d = i % HD;
    const decode_partial<HD>* P = parts + (int64_t{s} * n_heads + kvh * G + g) * n_splits;
    float M = -INFINITY;
    for (int j = 0; j < n_active; ++j) M = fmaxf(M, __ldcg(&P[j].m));
    float num = 0.0f, den = 0.0f;
    for (int j = 0; j < n_active; ++j) {
      const float mj = __ldcg(&P[j].m);
      if (mj == -INFINITY) continue;
      const float e = expf(mj - M);
      num = fmaf(e, __ldcg(&P[j].acc[d]), num);
      den = fmaf(e, __ldcg(&P[j].l), den);
    }
    out[(int64_t{s} * n_heads + kvh * G + g) * HD + d] = num / den;
  }
}

}  // namespace

decode_plan plan_decode(int n_seqs, int n_kv_heads, int max_pages, int page_size, int head_dim, int n_heads) {
  // Keys per block: the largest of 1024 ... 128 that still gives eight blocks per SM of an
  // H200-sized GPU (132 SMs) when every sequence is at the page table's full width, so the
  // last wave is a small part of a long-context step.
  const int64_t keys = int64_t{max_pages} * page_size;
  int chunk = max_chunk;
  while (chunk > 128 && (keys + chunk - 1) / chunk * n_seqs * n_kv_heads < 8 * 132) chunk /= 2;
  decode_plan p;
  p.chunk = chunk;
  p.splits = static_cast<int>((keys + chunk - 1) / chunk);
  p.scratch_bytes = static_cast<size_t>(n_seqs) * n_heads * p.splits * (head_dim + 2) * sizeof(float);
  p.ticket_bytes = static_cast<size_t>(n_seqs) * n_kv_heads * sizeof(int);
  // Which kernel: the tiled one for short chunks (decode at small batch or short contexts:
  // its loads are requested before the previous kernel ends), the register-streaming one
  // for long chunks (many long sequences: more blocks per SM, more of the bandwidth; on the
  // H200 at 32 x 8k keys 41% of copy against the tiled kernel's 30%).
  // TANDEM_CUDA_DECODE_KERNEL=tiled|split forces one (tests run both).
  const char* force = std::getenv("TANDEM_CUDA_DECODE_KERNEL");
  if (force != nullptr && std::string(force) == "tiled") p.tiled = true;
  else if (force != nullptr && std::string(force) == "split") p.tiled = false;
  else p.tiled = chunk <= 256;
  return p;
}

void attention_decode(const float* q, const float* k, const float* v, int n_heads, const dev_kv& kv,
                      const dev_batch& b, const dev_rope& rope, float scale, float* out,
                      const decode_plan& plan, void* scratch, int* tickets, cudaStream_t stream) {
  if (b.n_seqs == 0) return;
  if (plan.chunk <= 0 || plan.chunk > max_chunk) throw std::invalid_argument("attention_decode: chunk out of range");
  if (!plan.tiled) {
    attention_decode_split(q, k, v, n_heads, kv, b, rope, scale, out, plan, scratch, tickets, stream);
    return;
  }
  const dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(kv.n_kv_heads),
                  static_cast<unsigned>(b.n_seqs));
  const int G = n_heads / kv.n_kv_heads;
  auto launch = [&](auto hd, auto gm) {
    constexpr int HD = decltype(hd)::value, GM = decltype(gm)::value;
    constexpr size_t smem = decode_smem_bytes<HD, GM>();
    static bool sized[16] = {};  // the attribute is per device
    int dev = 0;
    cudaGetDevice(&dev);
    if (!sized[dev & 15]) {
      cudaFuncSetAttribute(decode_kernel<HD, GM>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      sized[dev & 15] = true;
    }
    detail::launch_pdl(decode_kernel<HD, GM>, grid, dim3(threads), smem, stream, q, k, v, n_heads, kv, b, rope,
                       scale, plan.chunk, plan.splits, static_cast<decode_partial<HD>*>(scratch), tickets, out);
  };
  auto by_group = [&](auto hd) {
    if (G <= 1) launch(hd, std::integral_constant<int, 1>{});
    else if (G <= 2) launch(hd, std::integral_constant<int, 2>{});
    else if (G <= 4) launch(hd, std::integral_constant<int, 4>{});
    else launch(hd, std::integral_constant<int, 8>{});
  };
  if (kv.head_dim == 64) by_group(std::integral_constant<int, 64>{});
  else by_group(std::integral_constant<int, 128>{});
}

}  // namespace tandem::cuda
