// The EXL3 tile coder on the GPU: tail-biting Viterbi with fp16 costs, bit-identical to the
// CPU coder (tandem_exl3/viterbi.cpp). See tandem_exl3_cuda/viterbi.hpp for the contract.
//
// Layout. One persistent block of 512 threads per tile (grid = min(tiles, resident blocks),
// blocks loop over tiles). A trellis step maps the 2^(16-K) edge costs `prev` (fp16, shared
// memory, double buffered) to `cur`: cur[e] = min_k fp16(fp16(cb(s) - w)^2 + prev[s >> K])
// with s = k << (16-K) | e. Each thread owns 128 fixed states — NJ edges (16-edge chunks,
// adjacent edges paired in a half2: both have the same predecessor) x NK values of k — and
// keeps their codebook values in 64 half2 registers for the whole search, so a state costs
// HSUB2 + HFMA2 + HSET2 + 2 LOP3 per pair and nothing is decoded or loaded per step:
//   K <= 3: NK = 2^K (all k), NJ = 128 >> K, chunk c of thread t is edges 16(512c + t)..;
//   K >= 4: NK = 8, NJ = 16; 2^(K-3) adjacent lanes share a chunk (different k blocks) and
//           reduce-scatter 32-bit keys (cost_bits << 16 | k) with shuffles.
// Ties: within a thread k ascends with strict < (the CPU's scan); across threads the min of
// (cost, k) keys is the same lexicographic minimum in any order. fp16 costs are >= +0, so
// their bits order as their values (+inf = 0x7c00 included).
//
// Backpointers go to a global slab per block (L2-resident for the traceback): K <= 3 packs
// each thread's edges into 64 bits per step (K or, at K = 3, 4 bits an edge), K >= 4 stores
// a byte per edge. Pass 1 records only its last 128 steps (the traceback stops at rotated
// position 128). Tracebacks are run by one thread.
#include <cuda_fp16.h>

#include "tandem_exl3_cuda/viterbi.hpp"

namespace tandem::exl3::cuda {
namespace {

constexpr int kThreads = 512;

template <int K>
struct cfg {
  static constexpr int E = 1 << (16 - K);               // edges
  static constexpr int NK = (1 << K) < 8 ? (1 << K) : 8;  // k values per thread
  static constexpr int NJ = 128 / NK;                   // edges per thread
  static constexpr int TPG = (1 << K) / NK;             // lanes sharing a chunk
  static constexpr int CHUNKS = NJ / 16;
  static constexpr int NP = (16 >> K) > 0 ? (16 >> K) : 1;  // predecessors per k per chunk
  static constexpr int BPE = K == 3 ? 4 : K;            // packed bits per edge (K <= 3)
  static constexpr int STEP_BYTES = K <= 3 ? kThreads * 8 : E;
  static constexpr int NF = TPG <= 16 ? 16 / TPG : 1;   // edges a lane owns after the reduction
};

constexpr int step_bytes(int K) { return K <= 3 ? kThreads * 8 : 1 << (16 - K); }

__device__ __forceinline__ __half cb_decode(int cb, uint32_t s) {
  if (cb == 2) {  // mul1
    const uint32_t x = s * 0x83DCD12Du;
    const uint32_t bs = __dp4a(x, 0x01010101u, 0u);
    return __hfma(__ushort_as_half(static_cast<unsigned short>(0x6400u + bs)),
                  __ushort_as_half(0x1EEE), __ushort_as_half(0xC931));
  }
  uint32_t x = cb == 0 ? s * 89226354u + 64248484u : s * 0xCBAC1FEDu;
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  return __hadd(__ushort_as_half(static_cast<unsigned short>(x & 0xffffu)),
                __ushort_as_half(static_cast<unsigned short>(x >> 16)));
}

__device__ __forceinline__ uint32_t h2u(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 u2h(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// First edge of chunk c of thread tid.
template <int K>
__device__ __forceinline__ int chunk_edge(int tid, int c) {
  using C = cfg<K>;
  return (c * (kThreads / C::TPG) + tid / C::TPG) * 16;
}

// The backpointer (winning k) of edge e at step t.
template <int K>
__device__ __forceinline__ uint32_t bp_get(const uint8_t* slab, int t, int e) {
  using C = cfg<K>;
  const uint8_t* row = slab + static_cast<size_t>(t) * C::STEP_BYTES;
  if constexpr (K <= 3) {
    const int g = e >> 4, owner = g % kThreads, c = g / kThreads;
    const int pos = (16 * c + (e & 15)) * C::BPE;
    const uint32_t w = reinterpret_cast<const uint32_t*>(row)[owner * 2 + pos / 32];
    return (w >> (pos % 32)) & ((1u << K) - 1);
  } else {
    return row[e];
  }
}

// One trellis step. bp == nullptr: backpointers not recorded.
template <int K>
__device__ __forceinline__ void step(const __half2 (&cbv)[cfg<K>::CHUNKS][8][cfg<K>::NK],
                                     __half w, const __half* __restrict__ prev,
                                     __half* __restrict__ cur, uint8_t* __restrict__ bp, int tid) {
  using C = cfg<K>;
  const __half2 w2 = __half2half2(w);
  const int k0 = (tid % C::TPG) * C::NK;
  [[maybe_unused]] uint32_t bits[2] = {0u, 0u};
#pragma unroll
  for (int c = 0; c < C::CHUNKS; ++c) {
    const int ec = chunk_edge<K>(tid, c);
    // k outer (the predecessor costs of one k at a time), pairs inner.
    uint32_t cur2[8], arg2[8];
#pragma unroll
    for (int k = 0; k < C::NK; ++k) {
      // pb[q] = prev[(k0+k) << (16-2K) + (ec >> K) + q], broadcast to both halves.
      __half2 pb[C::NP];
      const __half* p = prev + ((k0 + k) << (16 - 2 * K)) + (ec >> K);
      if constexpr (C::NP == 8) {
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          pb[2 * q] = __low2half2(u2h(u[q]));
          pb[2 * q + 1] = __high2half2(u2h(u[q]));
        }
      } else if constexpr (C::NP == 4) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        pb[0] = __low2half2(u2h(v.x)), pb[1] = __high2half2(u2h(v.x));
        pb[2] = __low2half2(u2h(v.y)), pb[3] = __high2half2(u2h(v.y));
      } else if constexpr (C::NP == 2) {
        const uint32_t v = *reinterpret_cast<const uint32_t*>(p);
        pb[0] = __low2half2(u2h(v)), pb[1] = __high2half2(u2h(v));
      } else {
        pb[0] = __half2half2(*p);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const __half2 d = __hsub2(cbv[c][i][k], w2);
        const uint32_t cst = h2u(__hfma2(d, d, pb[(2 * i) >> K]));
        if (k == 0) {
          cur2[i] = cst, arg2[i] = 0u;
        } else {
          const uint32_t m = __hlt2_mask(u2h(cst), u2h(cur2[i]));  // strict <: ties keep lower k
          cur2[i] = (cst & m) | (cur2[i] & ~m);
          arg2[i] = (static_cast<uint32_t>(k) * 0x10001u & m) | (arg2[i] & ~m);
        }
      }
    }
    if constexpr (C::TPG == 1) {
      uint4* out = reinterpret_cast<uint4*>(cur + ec);
      out[0] = make_uint4(cur2[0], cur2[1], cur2[2], cur2[3]);
      out[1] = make_uint4(cur2[4], cur2[5], cur2[6], cur2[7]);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int pos = (16 * c + 2 * i) * C::BPE;
        const uint32_t pair = (arg2[i] & 0xffffu) | (arg2[i] >> (16 - C::BPE));
        bits[pos / 32] |= pair << (pos % 32);
      }
    } else {
      // Keys (cost_bits << 16 | k), edges ec .. ec+15; reduce-scatter over the TPG lanes.
      uint32_t key[16];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        key[2 * i] = __byte_perm(arg2[i], cur2[i], 0x5410) | static_cast<uint32_t>(k0);
        key[2 * i + 1] = __byte_perm(arg2[i], cur2[i], 0x7632) | static_cast<uint32_t>(k0);
      }
      int off = 0;
#pragma unroll
      for (int r = 0; (C::TPG >> (r + 1)) > 0; ++r) {
        const int bm = C::TPG >> (r + 1), L = 16 >> r;
        if (L > 1) {
          const bool up = (tid & bm) != 0;
#pragma unroll
          for (int i = 0; i < L / 2; ++i) {
            const uint32_t send = up ? key[i] : key[i + L / 2];
            const uint32_t mine = up ? key[i + L / 2] : key[i];
            key[i] = min(mine, __shfl_xor_sync(0xffffffffu, send, bm));
          }
          off += up ? L / 2 : 0;
        } else {
          key[0] = min(key[0], __shfl_xor_sync(0xffffffffu, key[0], bm));
        }
      }
      if (C::TPG <= 16 || (tid & 1) == 0) {
        const int e = ec + off;
        if constexpr (C::NF == 1) {
          cur[e] = __ushort_as_half(static_cast<unsigned short>(key[0] >> 16));
          if (bp) bp[e] = static_cast<uint8_t>(key[0]);
        } else {
          uint32_t hc[C::NF / 2];
          uint32_t bb[(C::NF + 3) / 4] = {};
#pragma unroll
          for (int i = 0; i < C::NF / 2; ++i)
            hc[i] = (key[2 * i] >> 16) | (key[2 * i + 1] & 0xffff0000u);
#pragma unroll
          for (int i = 0; i < C::NF; ++i) bb[i / 4] |= (key[i] & 0xffu) << (8 * (i % 4));
          if constexpr (C::NF == 8) {
            *reinterpret_cast<uint4*>(cur + e) = make_uint4(hc[0], hc[1], hc[2], hc[3]);
            if (bp) *reinterpret_cast<uint2*>(bp + e) = make_uint2(bb[0], bb[1]);
          } else if constexpr (C::NF == 4) {
            *reinterpret_cast<uint2*>(cur + e) = make_uint2(hc[0], hc[1]);
            if (bp) *reinterpret_cast<uint32_t*>(bp + e) = bb[0];
          } else {
            *reinterpret_cast<uint32_t*>(cur + e) = hc[0];
            if (bp) *reinterpret_cast<uint16_t*>(bp + e) = static_cast<uint16_t>(bb[0]);
          }
        }
      }
    }
  }
  if constexpr (C::TPG == 1) {
    if (bp) reinterpret_cast<uint2*>(bp)[tid] = make_uint2(bits[0], bits[1]);
  }
}

template <int K>
__global__ void __launch_bounds__(kThreads, 1)
viterbi_kernel(const uint16_t* __restrict__ in, int64_t tiles, int cb, uint16_t* __restrict__ states,
               float* __restrict__ costs, uint8_t* __restrict__ workspace) {
  using C = cfg<K>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* const buf0 = reinterpret_cast<__half*>(smem_raw);
  __half* const buf1 = buf0 + C::E;
  __shared__ __half w_s[256];
  __shared__ uint16_t st_s[256];
  __shared__ uint32_t red_s[kThreads / 32];
  __shared__ int e_star_s;

  const int tid = threadIdx.x;
  uint8_t* const slab = workspace + static_cast<size_t>(blockIdx.x) * 256 * C::STEP_BYTES;

  // This thread's states' codebook values, for the whole search.
  __half2 cbv[C::CHUNKS][8][C::NK];
  {
    const int k0 = (tid % C::TPG) * C::NK;
#pragma unroll
    for (int c = 0; c < C::CHUNKS; ++c)
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int k = 0; k < C::NK; ++k) {
          const uint32_t s = (static_cast<uint32_t>(k0 + k) << (16 - K)) |
                             static_cast<uint32_t>(chunk_edge<K>(tid, c) + 2 * i);
          // Packed once; the opaque move keeps the compiler from holding the two halves
          // unpacked (128 registers) and re-packing them every step.
          uint32_t u = h2u(__halves2half2(cb_decode(cb, s), cb_decode(cb, s + 1)));
          asm volatile("mov.b32 %0, %0;" : "+r"(u));
          cbv[c][i][k] = u2h(u);
        }
  }

  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    if (tid < 256) w_s[tid] = __ushort_as_half(in[tile * 256 + tid]);
    // Pass 1: free starts, the sequence rotated to begin at position 128.
    for (int e = tid; e < C::E; e += kThreads) buf0[e] = __ushort_as_half(0);
    __syncthreads();
    __half *prev = buf0, *cur = buf1;
    for (int t = 0; t < 256; ++t) {
      step<K>(cbv, w_s[(t + 128) & 255], prev, cur,
              t >= 128 ? slab + static_cast<size_t>(t) * C::STEP_BYTES : nullptr, tid);
      __syncthreads();
      __half* tmp = prev;
      prev = cur, cur = tmp;
    }
    // Cheapest final edge, lowest index on ties.
    uint32_t best = 0xffffffffu;
    for (int e = tid; e < C::E; e += kThreads)
      best = min(best, (static_cast<uint32_t>(__half_as_ushort(prev[e])) << 16) | static_cast<uint32_t>(e));
    best = __reduce_min_sync(0xffffffffu, best);
    if ((tid & 31) == 0) red_s[tid / 32] = best;
    __syncthreads();
    if (tid == 0) {
      for (int i = 1; i < kThreads / 32; ++i) best = min(best, red_s[i]);
      int e = static_cast<int>(best & 0xffffu);
      for (int t = 255; t >= 128; --t) {
        const uint32_t s = (bp_get<K>(slab, t, e) << (16 - K)) | static_cast<uint32_t>(e);
        e = static_cast<int>(s >> K);
      }
      e_star_s = e;  // the edge entering tile position 0 (rotated position 128)
    }
    __syncthreads();
    const int e_star = e_star_s;
    // Pass 2: start and end forced to E*.
    for (int e = tid; e < C::E; e += kThreads)
      buf0[e] = e == e_star ? __ushort_as_half(0) : __ushort_as_half(0x7c00);
    __syncthreads();
    prev = buf0, cur = buf1;
    for (int t = 0; t < 256; ++t) {
      step<K>(cbv, w_s[t], prev, cur, slab + static_cast<size_t>(t) * C::STEP_BYTES, tid);
      __syncthreads();
      __half* tmp = prev;
      prev = cur, cur = tmp;
    }
    if (tid == 0) {
      if (costs) costs[tile] = __half2float(prev[e_star]);
      int e = e_star;
      for (int t = 255; t >= 0; --t) {
        const uint32_t s = (bp_get<K>(slab, t, e) << (16 - K)) | static_cast<uint32_t>(e);
        st_s[t] = static_cast<uint16_t>(s);
        e = static_cast<int>(s >> K);
      }
    }
    __syncthreads();
    if (tid < 256) states[tile * 256 + tid] = st_s[tid];
    // The next tile's writes to w_s / buf0 / the slab come after this barrier.
    __syncthreads();
  }
}

template <int K>
int resident_blocks_k() {
  const size_t smem = 4u * cfg<K>::E;
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
  if (cudaFuncSetAttribute(viterbi_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem)) != cudaSuccess)
    return 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, viterbi_kernel<K>, kThreads, smem) !=
      cudaSuccess)
    return 0;
  return sms * (per_sm > 0 ? per_sm : 1);
}

int resident_blocks(int K) {
  switch (K) {
    case 1: return resident_blocks_k<1>();
    case 2: return resident_blocks_k<2>();
    case 3: return resident_blocks_k<3>();
    case 4: return resident_blocks_k<4>();
    case 5: return resident_blocks_k<5>();
    case 6: return resident_blocks_k<6>();
    case 7: return resident_blocks_k<7>();
    case 8: return resident_blocks_k<8>();
    default: return 0;
  }
}

int64_t grid_for(int64_t tiles, int K) {
  const int64_t r = resident_blocks(K);
  return r > 0 ? (tiles < r ? tiles : r) : 0;
}

template <int K>
void launch(const uint16_t* in, int64_t tiles, int cb, uint16_t* states, float* costs, void* ws,
            int64_t grid, cudaStream_t stream) {
  viterbi_kernel<K><<<static_cast<unsigned>(grid), kThreads, 4u * cfg<K>::E, stream>>>(
      in, tiles, cb, states, costs, static_cast<uint8_t*>(ws));
}

}  // namespace

size_t viterbi_workspace_bytes(int64_t tiles, int K) {
  if (K < 1 || K > 8 || tiles <= 0) return 0;
  return static_cast<size_t>(grid_for(tiles, K)) * 256u * static_cast<size_t>(step_bytes(K));
}

void viterbi_tiles(const uint16_t* inputs_f16, int64_t tiles, int K, int cb, uint16_t* states,
                   float* costs, void* workspace, cudaStream_t stream) {
  if (tiles <= 0) return;
  if (K < 1 || K > 8 || cb < 0 || cb > 2) {
    // Reported as an invalid launch, like the other entry points' argument errors.
    viterbi_kernel<1><<<0, kThreads, 0, stream>>>(nullptr, 0, 0, nullptr, nullptr, nullptr);
    return;
  }
  const int64_t grid = grid_for(tiles, K);
  if (grid <= 0) return;  // the cudaGetLastError from the failed query stays set
  switch (K) {
    case 1: return launch<1>(inputs_f16, tiles, cb, states, costs, workspace, grid, stream);
    case 2: return launch<2>(inputs_f16, tiles, cb, states, costs, workspace, grid, stream);
    case 3: return launch<3>(inputs_f16, tiles, cb, states, costs, workspace, grid, stream);
    case 4: return launch<4>(inputs_f16, tiles, cb, states, costs, workspace, grid, stream);
    case 5: return launch<5>(inputs_f16, tiles, cb, states, costs, workspace, grid, stream);
    case 6: return launch<6>(inputs_f16, tiles, cb, states, costs, workspace, grid, stream);
    case 7: return launch<7>(inputs_f16, tiles, cb, states, costs, workspace, grid, stream);
    default: return launch<8>(inputs_f16, tiles, cb, states, costs, workspace, grid, stream);
  }
}

}  // namespace tandem::exl3::cuda
