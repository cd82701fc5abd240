#pragma once
// Programmatic dependent launch (sm_90+), shared by tandem's CUDA kernels: a kernel
// launched with launch_pdl() may start while the previous kernel of the stream is still
// running. It must call pdl_wait() before touching anything an earlier kernel wrote (it
// returns once that kernel has finished and its writes are visible); work before it may
// only read constants such as weights. pdl_trigger() lets the next kernel start launching
// early. TANDEM_CUDA_PDL=0 turns the attribute off (to measure what it gives).
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <utility>

namespace tandem::cuda::pdl {

__device__ __forceinline__ void wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

inline bool enabled() {
  static const bool on = [] {
    const char* e = std::getenv("TANDEM_CUDA_PDL");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}

// kernel<<<grid, block, smem, stream>>>(args...) with the PDL attribute; launch errors are
// left for the caller's cudaGetLastError.
template <class... KArgs, class... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = enabled() ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace tandem::cuda::pdl
