// Ŵ to fp16 for prefill (cuBLAS consumes it): one block per 16 x 128 band, one warp per
// tile. Each lane decodes its 8 positions exactly as the GEMV does (decode.cuh), the block
// transposes the fragments through shared memory and writes 16-byte rows. Memory bound:
// 32K bytes read and 512 bytes written per tile.
#include "decode.cuh"
#include "tandem_exl3_cuda/exl3_cuda.hpp"

namespace tandem::exl3::cuda {
namespace {

constexpr int stride = 128 + 8;  // halves per shared row (16-byte aligned, fewer bank conflicts)

template <int K, int CB>
__global__ void __launch_bounds__(256) reconstruct_kernel(const uint32_t* __restrict__ trellis, int64_t n,
                                                          __half* __restrict__ out) {
  __shared__ __align__(16) __half band[16 * stride];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t tk = blockIdx.y, tn = int64_t{blockIdx.x} * 8 + warp;
  const uint32_t* tile = trellis + (tk * (n / 16) + tn) * detail::geom<K>::words;
  const detail::lane_win<K> lw(lane);
  uint32_t w[3];
#pragma unroll
  for (int i = 0; i < detail::geom<K>::win; ++i) w[i] = __ldg(tile + lw.word[i]);
  uint32_t b[4];
  detail::lane_fragments<K, CB>(w, lw.shift, b);
  const int q = lane & 3, g = lane >> 2;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = 2 * q + 8 * (i & 1), c = warp * 16 + g + 8 * (i >> 1);
    band[r * stride + c] = __ushort_as_half(static_cast<unsigned short>(b[i] & 0xffffu));
    band[(r + 1) * stride + c] = __ushort_as_half(static_cast<unsigned short>(b[i] >> 16));
  }
  __syncthreads();
  detail::pdl_wait();  // the previous kernel may still read `out`
  detail::pdl_trigger();
  const int row = threadIdx.x >> 4, chunk = threadIdx.x & 15;
  const uint4 v = *reinterpret_cast<const uint4*>(&band[row * stride + chunk * 8]);
  *reinterpret_cast<uint4*>(out + (tk * 16 + row) * n + int64_t{blockIdx.x} * 128 + chunk * 8) = v;
}

}  // namespace

void exl3_reconstruct(const dev_exl3& w, __half* w_hat, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(w.n / 128), static_cast<unsigned>(w.k / 16));
  detail::dispatch_k_cb(w.K, w.cb, [&]<int K, int CB>() {
    detail::launch_pdl(reconstruct_kernel<K, CB>, grid, dim3(256), 0, stream,
                       reinterpret_cast<const uint32_t*>(w.trellis), w.n, w_hat);
  });
}

}  // namespace tandem::exl3::cuda
