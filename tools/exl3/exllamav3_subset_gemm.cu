// exllamav3's EXL3 GEMM kernel (exl3_gemm_kernel, quant/exl3_gemm_kernel.cuh of PyPI
// exllamav3 1.6.5) with a small launcher of ours, for tools/exl3/exllamav3_ext_subset.py.
//
// exllamav3's own host function exl3_gemm() (quant/exl3_gemm.cu) references the whole kernel map
// (27 compilation units of 28 kernels each), the QTIP-style and int8 GEMVs and the autotuner, far
// more than a one-off check can compile. This file instantiates the same kernel template only for
// fp16 output and the shapes exllamav3 picks for small matrices on Hopper (shape 1: TILESIZE_K 16,
// N 128, 256 threads; shape 2: K 32, N 128, 512 threads), and launches it exactly as exl3_gemm_gr
// does when a shape is forced (select_exl3_gemm_kernel + EXL3_COOP_LAUNCH): a cooperative launch of
// min(SMs, k/TILESIZE_K * n/TILESIZE_N) blocks with DevCtx's shared-memory request (90 KB) and
// lock buffer. The kernel always applies the input Hadamard with suh and the output Hadamard with
// svh (both are required), so C = x·W in the original basis, W = diag(suh)·H·Ŵ·H·diag(svh).
//
// Built twice over: with X3_INST_K defined (1..8) a file holds that K's instances (the builder
// generates one small .cu per K so the 8 compile in parallel); without it, the launcher.
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#include "util.h"
#include "util.cuh"
#include "ptx.cuh"

#define X3_NUM_SHAPES 2
#define X3_CAT2(a, b) a##b
#define X3_CAT(a, b) X3_CAT2(a, b)

#if defined(X3_INST_K)

#include "quant/exl3_gemm_kernel.cuh"

#define X3_INST(K, cb) \
    { exl3_gemm_kernel<K, false, false, cb, EXL3_GEMM_SHAPE_1>, \
      exl3_gemm_kernel<K, false, false, cb, EXL3_GEMM_SHAPE_2> }

// [codebook][shape slot]: slot 0 = shape 1, slot 1 = shape 2
fp_exl3_gemm_kernel X3_CAT(x3_gemm_kernels_k, X3_INST_K)[3][X3_NUM_SHAPES] =
{
    X3_INST(X3_INST_K, 0),
    X3_INST(X3_INST_K, 1),
    X3_INST(X3_INST_K, 2)
};

#else  // the launcher

#include <c10/cuda/CUDAGuard.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/Tensor.h>
#include "exllamav3_subset_linear.h"
#include <initializer_list>
#include <vector>
#include "quant/exl3_kernel_map.cuh"
#include "quant/exl3_devctx.cuh"

extern fp_exl3_gemm_kernel x3_gemm_kernels_k1[3][X3_NUM_SHAPES];
extern fp_exl3_gemm_kernel x3_gemm_kernels_k2[3][X3_NUM_SHAPES];
extern fp_exl3_gemm_kernel x3_gemm_kernels_k3[3][X3_NUM_SHAPES];
extern fp_exl3_gemm_kernel x3_gemm_kernels_k4[3][X3_NUM_SHAPES];
extern fp_exl3_gemm_kernel x3_gemm_kernels_k5[3][X3_NUM_SHAPES];
extern fp_exl3_gemm_kernel x3_gemm_kernels_k6[3][X3_NUM_SHAPES];
extern fp_exl3_gemm_kernel x3_gemm_kernels_k7[3][X3_NUM_SHAPES];
extern fp_exl3_gemm_kernel x3_gemm_kernels_k8[3][X3_NUM_SHAPES];

static fp_exl3_gemm_kernel (*const x3_gemm_table[9])[X3_NUM_SHAPES] =
{
    nullptr, x3_gemm_kernels_k1, x3_gemm_kernels_k2, x3_gemm_kernels_k3, x3_gemm_kernels_k4,
    x3_gemm_kernels_k5, x3_gemm_kernels_k6, x3_gemm_kernels_k7, x3_gemm_kernels_k8
};

static const int x3_tilesize_k[] = {EXL3_GEMM_TILESIZE_K};
static const int x3_tilesize_n[] = {EXL3_GEMM_TILESIZE_N};
static const int x3_blockdim[] = {EXL3_GEMM_BLOCKDIM};

// exllamav3's select_gemm_shape (quant/exl3_kernel_map.cu, CUDA branch), for one matrix
// (multi = false, bszm_in = bszm_out = 1), verbatim.
static int x3_select_gemm_shape_upstream(int cc, int size_k, int size_n, int K)
{
    const bool multi = false;
    bool mod_256 = (size_n % 256 == 0);
    bool mod_512 = (size_n % 512 == 0);

    switch(cc)
    {
        case CC_OLD:
        case CC_AMPERE:
            if (mod_256 && K <= 4)
            {
                if (size_n <= 2048 || size_k <= 2048) return 2;
                return 3;
            }
            if (mod_256 && size_n < 4096) return size_k > 8192 ? 3 : 2;
            if (mod_512 && (size_n * size_k) > (4096 * 4096) && K <= 6) return 4;
            if (mod_256) return 3;
            return 2;

        case CC_ADA:
            if (mod_256 && K <= 3)
            {
                if (size_k <= 2048 && !multi) return 2;
                if (size_n < 4096 && size_k <= 12288) return 2;
                return 3;
            }
            if (size_n <= 16384) return 2;
            if (mod_512 && size_n >= 32768) return 4;
            if (mod_256) return 3;
            return 2;

        case CC_HOPPER:
        case CC_BLACKWELL:
            if ((K == 4 || K == 2) && !multi)
            {
                if (size_k <= 2048) return 1;
            }
            if (K >= 7)
            {
                if (mod_256 && size_n <= 8192) return size_k > 32768 ? 3 : 2;
                if (mod_512 && size_n > 32768) return 4;
                return 2;
            }
            if (mod_256 && size_n <= 4096) return size_k > 8192 && K >= 3 ? 3 : 2;
            if (mod_512 && size_n > 16384) return 4;
            if (mod_256) return 3;
            return 2;
    }
    return 0;
}

// The upstream choice when it is instantiated here (1 or 2), else shape 2 (3 and 4 are wider
// tiles of the same kernel, picked upstream only for large matrices).
static int x3_select_shape(int cc, int size_k, int size_n, int K)
{
    int s = x3_select_gemm_shape_upstream(cc, size_k, size_n, K);
    if (s == 1 || s == 2) return s;
    return (size_k % x3_tilesize_k[2] == 0) ? 2 : 1;
}

std::vector<int> x3_exl3_gemm_shapes()
{
    return {1, 2};
}

int x3_exl3_gemm_select_shape(int size_m, int size_k, int size_n, int K)
{
    (void) size_m;
    int device;
    cuda_check(cudaGetDevice(&device));
    return x3_select_shape(DevCtx::instance().get_cc(device), size_k, size_n, K);
}

int x3_exl3_gemm
(
    const at::Tensor& A,
    const at::Tensor& B,
    at::Tensor& C,
    const at::Tensor& suh,
    at::Tensor& A_had,
    const at::Tensor& svh,
    bool mcg,
    bool mul1,
    int force_shape_idx,
    int force_num_sms
)
{
    const at::cuda::OptionalCUDAGuard device_guard(A.device());
    cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();

    x3_check_linear_args(A, B, C, suh, A_had, svh, "exl3_gemm");
    TORCH_CHECK(!(mcg && mul1), "x3 exl3_gemm: specified both mcg and mul1");

    const int tile_u16 = B.size(2);
    const int K = tile_u16 / 16;
    TORCH_CHECK(tile_u16 == 16 * K && K >= 1 && K <= 8, "x3 exl3_gemm: integer K = 1..8 only");
    const int cb = mul1 ? 2 : mcg ? 1 : 0;

    int size_k = A.size(-1);
    int size_m = A.numel() / size_k;
    int size_n = B.size(1) * 16;
    TORCH_CHECK(size_k % 128 == 0 && size_n % 128 == 0, "x3 exl3_gemm: k and n must be multiples of 128");
    TORCH_CHECK(C.numel() >= (int64_t) size_m * size_n, "x3 exl3_gemm: C too small");
    TORCH_CHECK(A_had.numel() >= A.numel(), "x3 exl3_gemm: A_had too small");
    TORCH_CHECK(suh.numel() >= size_k && svh.numel() >= size_n, "x3 exl3_gemm: suh/svh too small");
    if (!size_m) return 0;

    int device;
    cuda_check(cudaGetDevice(&device));
    int cc = DevCtx::instance().get_cc(device);
    int num_sms = force_num_sms > 0 ? force_num_sms : DevCtx::instance().get_num_sms(device);
    int* locks = DevCtx::instance().get_locks(device);
    int smem_max = DevCtx::instance().get_smem_request(device);

    int shape_idx = force_shape_idx > 0 ? force_shape_idx : x3_select_shape(cc, size_k, size_n, K);
    TORCH_CHECK(shape_idx == 1 || shape_idx == 2, "x3 exl3_gemm: only shapes 1 and 2 are instantiated");
    const int tk = x3_tilesize_k[shape_idx], tn = x3_tilesize_n[shape_idx];
    TORCH_CHECK(size_k % tk == 0 && size_n % tn == 0, "x3 exl3_gemm: tile shape does not divide the matrix");
    TORCH_CHECK(exl3_gemm_smem_bytes_for_shape(shape_idx, K, false, true) <= smem_max,
                "x3 exl3_gemm: shape needs more shared memory than the device grants");

    // select_exl3_gemm_kernel: avoid empty blocks
    int max_slices = size_k / tk * size_n / tn;
    num_sms = MAX(MIN(max_slices, num_sms), 1);
    int block_dim = x3_blockdim[shape_idx];

    fp_exl3_gemm_kernel kernel = x3_gemm_table[K][cb][shape_idx - 1];
    TORCH_CHECK(kernel, "x3 exl3_gemm: no kernel");

    x3_linear_kernel_args args(A, B, C, suh, A_had, svh, size_m, size_k, size_n, locks);

    cuda_check(cudaFuncSetAttribute((const void*) kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
    cuda_check(cudaLaunchCooperativeKernel
    (
        (const void*) kernel,
        dim3(num_sms),
        dim3(block_dim),
        args.list,
        smem_max,
        stream
    ));
    cuda_check(cudaPeekAtLastError());
    return shape_idx;
}

#endif
