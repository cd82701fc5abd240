// See tile_coder_cuda.hpp. Built with TANDEM_QUANTIZE_CUDA only where meson found CUDA.
#include "tile_coder_cuda.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "tandem/error.hpp"
#include "tandem_exl3/codebook.hpp"
#include "tandem_exl3/viterbi.hpp"

#if defined(TANDEM_QUANTIZE_CUDA)
#include <cuda_runtime_api.h>

#include "tandem_exl3_cuda/viterbi.hpp"
#endif

namespace tandem::quantize {

#if defined(TANDEM_QUANTIZE_CUDA)
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw error(std::string("cuda tile coder: ") + what + ": " + cudaGetErrorString(e));
}

// Device buffers grown on demand; one stream. Calls are serialized (the quantizer calls
// the encoder from one thread; the mutex keeps a second caller correct).
struct gpu_coder {
  std::mutex mu;
  cudaStream_t stream = nullptr;
  void *in = nullptr, *st = nullptr, *ws = nullptr;
  size_t tiles_cap = 0, ws_cap = 0;
  std::vector<uint16_t> h_in;

  gpu_coder() { check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"); }
  ~gpu_coder() {
    cudaFree(in), cudaFree(st), cudaFree(ws);
    if (stream) cudaStreamDestroy(stream);
  }

  void encode(const exl3::tile_coder& coder, const float* x, size_t count, uint16_t* states,
              float* out) {
    if (count == 0) return;
    std::lock_guard lock(mu);
    if (count > tiles_cap) {
      cudaFree(in), cudaFree(st);
      in = st = nullptr;
      check(cudaMalloc(&in, count * 512), "malloc");
      check(cudaMalloc(&st, count * 512), "malloc");
      tiles_cap = count;
    }
    const size_t need = tandem::exl3::cuda::viterbi_workspace_bytes(static_cast<int64_t>(count), coder.bits());
    if (need > ws_cap) {
      cudaFree(ws);
      ws = nullptr;
      check(cudaMalloc(&ws, need), "malloc");
      ws_cap = need;
    }
    h_in.resize(count * 256);
    for (size_t i = 0; i < count * 256; ++i)
      h_in[i] = exl3::double_to_half(exl3::round_to_half(x[i]));  // exact: already on the grid
    check(cudaMemcpyAsync(in, h_in.data(), count * 512, cudaMemcpyHostToDevice, stream), "copy in");
    tandem::exl3::cuda::viterbi_tiles(static_cast<const uint16_t*>(in), static_cast<int64_t>(count),
                                      coder.bits(), static_cast<int>(coder.book()),
                                      static_cast<uint16_t*>(st), nullptr, ws, stream);
    check(cudaGetLastError(), "launch");
    check(cudaMemcpyAsync(states, st, count * 512, cudaMemcpyDeviceToHost, stream), "copy out");
    check(cudaStreamSynchronize(stream), "viterbi");
    const float* table = coder.table();
    for (size_t i = 0; i < count * 256; ++i) out[i] = table[states[i]];
  }
};

}  // namespace

bool cuda_tile_coder_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#else
bool cuda_tile_coder_available() { return false; }
#endif

tile_encoder make_tile_encoder(std::string_view device, std::string* used) {
  if (device != "cuda" && device != "cpu" && device != "auto")
    throw error("--device: expected cuda, cpu or auto, got '" + std::string(device) + "'");
  const bool gpu = device != "cpu" && cuda_tile_coder_available();
  if (device == "cuda" && !gpu)
    throw error("--device cuda: this build has no CUDA tile coder or no GPU is visible");
  if (used) *used = gpu ? "cuda" : "cpu";
  if (!gpu) return {};
#if defined(TANDEM_QUANTIZE_CUDA)
  static const auto g = std::make_shared<gpu_coder>();  // one per process: buffers are reused
  return [](const exl3::tile_coder& c, const float* x, size_t n, uint16_t* s, float* q) {
    g->encode(c, x, n, s, q);
  };
#else
  return {};
#endif
}

}  // namespace tandem::quantize
