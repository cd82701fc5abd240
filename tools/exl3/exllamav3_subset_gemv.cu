// exllamav3's QTIP-style small-m GEMV (exl3_gemv_kernel, quant/exl3_gemv_kernel.cuh of PyPI
// exllamav3 1.6.5) with a launcher of ours, for the "gemv" part of tools/exl3/exllamav3_ext_subset.py.
//
// exllamav3's own host file (quant/exl3_gemv.cu) instantiates the kernel for 3 codebooks x fp16/fp32
// output x 2 row modes x 2 configurations x 2 extraction styles x K = 2, 3, 4 (88 kernels in one
// translation unit), far more than a one-off benchmark can compile. This file instantiates it only for
// the mul1 codebook (cb 2), fp16 output and the default shuffle extraction (SMEM_STAGE = false):
// K = 2, 3, 4 x MMODE {0: m == 1, 1: 2 <= m <= 8} x CFG {0: narrow, 1: wide}, and launches it exactly as
// exl3_gemv_try_launch does (quant/exl3_gemv.cu): same shape heuristic (exl3_gemv_cfg, copied verbatim),
// grid MIN(size_n / cols, co-resident blocks), 512 (narrow) or 256 (wide) threads, no dynamic shared
// memory, cooperative launch, exl3_gemm_kernel's argument list (locks from DevCtx). The int8 GEMV of
// the same part is exllamav3's own host code (quant/exl3_gemv_int8.cu) with our instance files
// (exllamav3_subset_int8.cu); x3_exl3_gemv_int8 below only supplies its stream argument.
//
// Built twice over: with X3_GEMV_BITS defined (2, 3, 4) a file holds that K's four instances (the
// builder generates one small .cu per K so they compile in parallel); without it, the launchers.
#include <cuda_fp16.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#include "util.h"
#include "util.cuh"

#define X3_CAT2(a, b) a##b
#define X3_CAT(a, b) X3_CAT2(a, b)

#if defined(X3_GEMV_BITS)

#include "quant/exl3_gemv_kernel.cuh"

// [MMODE][CFG]: fp16 output, mul1 codebook, shuffle extraction
void* X3_CAT(x3_gemv_kernels_k, X3_GEMV_BITS)[2][2] =
{
    { (void*) exl3_gemv_kernel<X3_GEMV_BITS, false, 2, 0, 0, false>,
      (void*) exl3_gemv_kernel<X3_GEMV_BITS, false, 2, 0, 1, false> },
    { (void*) exl3_gemv_kernel<X3_GEMV_BITS, false, 2, 1, 0, false>,
      (void*) exl3_gemv_kernel<X3_GEMV_BITS, false, 2, 1, 1, false> }
};

#else  // the launchers

#include <c10/cuda/CUDAGuard.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/Tensor.h>
#include "exllamav3_subset_linear.h"
#include <cstdlib>
#include <initializer_list>
#include <map>
#include "quant/exl3_gemv_kernel.cuh"   // EXL3_GEMV_MAX_M
#include "quant/exl3_devctx.cuh"
#include "quant/exl3_gemv_int8.cuh"

extern void* x3_gemv_kernels_k2[2][2];
extern void* x3_gemv_kernels_k3[2][2];
extern void* x3_gemv_kernels_k4[2][2];

static void* x3_gemv_select_kernel(int bits, int mmode, int cfg)
{
    switch (bits)
    {
        case 2: return x3_gemv_kernels_k2[mmode][cfg];
        case 3: return x3_gemv_kernels_k3[mmode][cfg];
        case 4: return x3_gemv_kernels_k4[mmode][cfg];
    }
    return nullptr;
}

// exllamav3's exl3_gemv_cfg (quant/exl3_gemv.cu), verbatim. -1: not eligible, 0: narrow config,
// 1: wide config. mode: EXL3_GEMV's values (1 = heuristic, the default; 2 = wherever the hard
// constraints allow, as the exl3_gemv test entry point forces; 3 = narrow; 4 = wide)
static int x3_gemv_cfg(int cc, int size_m, int size_k, int size_n, int K, int cb, int mode, int narrow_coresident)
{
    if (mode == 0) return -1;
    if (K < 2 || K > 4) return -1;
    if (K != 4 && cb == 0) return -1;
    if (size_m > EXL3_GEMV_MAX_M) return -1;
    if (size_k % 128 || size_n % 128) return -1;
    //if (cc != CC_AMPERE) return -1;  // measured win on Ampere; Ada/Blackwell are memory-bound here
    if (mode == 2) return size_n <= 8192 ? 0 : 1;
    if (mode == 3) return 0;   // testing: force narrow config
    if (mode == 4) return 1;   // testing: force wide config

    if (K == 2) return size_n <= 8192 ? 0 : 1;
    if (K == 3 && cc == CC_ADA) return size_n <= 8192 ? 0 : 1;
    if (size_n / 32 <= narrow_coresident) return 0;
    if (size_k <= 2048 && size_n <= 8192) return 0;
    if (K == 3) return -1;
    if (size_n >= 8192 && size_k <= 4096) return 1;
    if (size_n >= 8192 && size_n <= 10240 && size_k <= 5120 && cc == CC_AMPERE) return 1;
    return -1;
}

// Blocks of `kernel` co-resident per SM (exl3_gemv_try_launch's occupancy cache)
static int x3_gemv_occupancy(int device, void* kernel, int block_dim)
{
    static std::map<void*, int> cache[MAX_DEVICES];
    auto it = cache[device].find(kernel);
    if (it != cache[device].end()) return it->second;
    int blocks_per_sm;
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, block_dim, 0));
    cache[device][kernel] = blocks_per_sm;
    return blocks_per_sm;
}

// The configuration exl3_gemv_try_launch would take for this call (mul1, fp16 out, su/sv given), -1
// where it declines (exl3_gemm then runs the cooperative GEMM kernel). Sets *grid, *block_dim.
static int x3_gemv_plan(int device, int size_m, int size_k, int size_n, int K, int mode, void** kernel,
                        int* grid, int* block_dim)
{
    const int cb = 2;
    if (K < 2 || K > 4) return -1;
    if (size_m < 1 || size_m > EXL3_GEMV_MAX_M) return -1;
    if (size_k % 128 || size_n % 128) return -1;
    if (mode == 0) return -1;
    TORCH_CHECK(!std::getenv("EXL3_GEMV_SMEM") || atoi(std::getenv("EXL3_GEMV_SMEM")) != 1,
                "x3 exl3_gemv: the smem-staged instances (EXL3_GEMV_SMEM=1) are not built");
    int cc = DevCtx::instance().get_cc(device);
    int mmode = size_m == 1 ? 0 : 1;
    int num_sms = DevCtx::instance().get_num_sms(device);

    void* narrow_kernel = x3_gemv_select_kernel(K, mmode, 0);
    if (!narrow_kernel) return -1;
    int narrow_coresident = x3_gemv_occupancy(device, narrow_kernel, 512) * num_sms;

    int cfg = x3_gemv_cfg(cc, size_m, size_k, size_n, K, cb, mode, narrow_coresident);
    if (cfg < 0) return -1;

    void* k = cfg == 0 ? narrow_kernel : x3_gemv_select_kernel(K, mmode, cfg);
    if (!k) return -1;
    int bd = cfg == 0 ? 512 : 256;
    int cols = cfg == 0 ? 32 : 64;
    int max_blocks = x3_gemv_occupancy(device, k, bd) * num_sms;
    int g = MIN(size_n / cols, max_blocks);
    if (g < 1) return -1;
    *kernel = k;
    *grid = g;
    *block_dim = bd;
    return cfg;
}

// Which configuration exllamav3 takes (mode 1: its default heuristic), without launching: 0 narrow,
// 1 wide, -1 none (the GEMM kernel runs instead)
int x3_exl3_gemv_choice(int size_m, int size_k, int size_n, int K, int mode)
{
    int device;
    cuda_check(cudaGetDevice(&device));
    void* kernel;
    int grid, block_dim;
    return x3_gemv_plan(device, size_m, size_k, size_n, K, mode, &kernel, &grid, &block_dim);
}

// C = x·W (fp16 [m, n]) through exl3_gemv_kernel, launched as exl3_gemv_try_launch does; returns the
// configuration launched (0 narrow, 1 wide) or -1 when the call is not eligible in `mode` (nothing
// launched). W = diag(suh)·H·Ŵ·H·diag(svh), B the trellis (k/16, n/16, 16K) of a mul1 tensor.
int x3_exl3_gemv
(
    const at::Tensor& A,
    const at::Tensor& B,
    at::Tensor& C,
    const at::Tensor& suh,
    at::Tensor& A_had,
    const at::Tensor& svh,
    int mode
)
{
    const at::cuda::OptionalCUDAGuard device_guard(A.device());
    cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();

    x3_check_linear_args(A, B, C, suh, A_had, svh, "exl3_gemv");
    const int tile_u16 = B.size(2);
    const int K = tile_u16 / 16;
    TORCH_CHECK(tile_u16 == 16 * K, "x3 exl3_gemv: integer K only");

    int size_k = A.size(-1);
    int size_m = A.numel() / size_k;
    int size_n = B.size(1) * 16;
    TORCH_CHECK(C.numel() >= (int64_t) size_m * size_n, "x3 exl3_gemv: C too small");
    TORCH_CHECK(A_had.numel() >= A.numel(), "x3 exl3_gemv: A_had too small");
    TORCH_CHECK(suh.numel() >= size_k && svh.numel() >= size_n, "x3 exl3_gemv: suh/svh too small");
    if (!size_m) return -1;

    int device;
    cuda_check(cudaGetDevice(&device));
    void* kernel;
    int grid, block_dim;
    int cfg = x3_gemv_plan(device, size_m, size_k, size_n, K, mode, &kernel, &grid, &block_dim);
    if (cfg < 0) return -1;

    int* locks = DevCtx::instance().get_locks(device);
    x3_linear_kernel_args args(A, B, C, suh, A_had, svh, size_m, size_k, size_n, locks);
    cuda_check(cudaLaunchCooperativeKernel(kernel, dim3(grid), dim3(block_dim), args.list, 0, stream));
    cuda_check(cudaPeekAtLastError());
    return cfg;
}

// exllamav3's own exl3_gemv_int8 (quant/exl3_gemv_int8.cu, unchanged) on the current stream, no graph
// recording, as exl3_gemm_gr calls it; true when it handled the call (false: exllamav3 would fall through
// to its fp16 kernels). EXL3_INT8_GEMV (default 2, plain int8) and EXL3_INT8_GEMV_MAX_K are read there.
bool x3_exl3_gemv_int8
(
    const at::Tensor& A,
    const at::Tensor& B,
    at::Tensor& C,
    const at::Tensor& suh,
    at::Tensor& A_had,
    const at::Tensor& svh
)
{
    const at::cuda::OptionalCUDAGuard device_guard(A.device());
    cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
    TORCH_CHECK_DTYPE(A, kHalf);
    TORCH_CHECK_DTYPE(B, kShort);
    TORCH_CHECK_DTYPE(C, kHalf);
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous() && C.is_contiguous(), "x3 exl3_gemv_int8: tensors must be contiguous");
    bool ok = exl3_gemv_int8(A, B, C, suh, A_had, svh, stream, nullptr);
    cuda_check(cudaPeekAtLastError());
    return ok;
}

#endif
