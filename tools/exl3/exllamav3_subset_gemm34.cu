// exllamav3's EXL3 GEMM kernel (exl3_gemm_kernel, quant/exl3_gemm_kernel.cuh of PyPI exllamav3 1.6.5)
// at the wide tile shapes 3 (TILESIZE_K 32, N 256, 512 threads) and 4 (K 16, N 512, 256 threads), for
// the "gemm34" part of tools/exl3/exllamav3_ext_subset.py. The "gemm" part (exllamav3_subset_gemm.cu)
// has shapes 1 and 2; together they are the four 16-row shapes exl3_gemm's autotuner chooses from for
// 1..16 rows (exl3_gemm_gr: every shape that passes exl3_gemm_shape_compat, at
// min(k / TILESIZE_K * n / TILESIZE_N, SMs) blocks; for matrices of 8192^2 and up the autotuner's
// candidate list is just that launch per shape, see CoopKernelAutotuner::tune). Its static
// select_gemm_shape picks shape 3 for 8192^2 and 16384^2 on Hopper.
//
// mul1 codebook (cb 2) and fp16 output only, K = 2, 3, 4, 6, 8. Launched as exl3_gemm_gr does with a
// forced shape (select_exl3_gemm_kernel + EXL3_COOP_LAUNCH) and as the autotuner launches a candidate:
// a cooperative launch of min(SMs, k/TILESIZE_K * n/TILESIZE_N) blocks (or force_num_sms), DevCtx's
// shared-memory request (90 KB) and lock buffer, exl3_gemm_kernel's argument list. Input Hadamard with
// suh and output Hadamard with svh always run: C = x·W, W = diag(suh)·H·Ŵ·H·diag(svh).
//
// Built twice over: with X3_INST_K defined a file holds that K's two instances (one generated .cu per
// K, compiled in parallel); without it, the launcher.
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#include "util.h"
#include "util.cuh"
#include "ptx.cuh"

#define X3_CAT2(a, b) a##b
#define X3_CAT(a, b) X3_CAT2(a, b)

#if defined(X3_INST_K)

#include "quant/exl3_gemm_kernel.cuh"

// [shape 3, shape 4], mul1, fp16 output
fp_exl3_gemm_kernel X3_CAT(x3_gemm34_kernels_k, X3_INST_K)[2] =
{
    exl3_gemm_kernel<X3_INST_K, false, false, 2, EXL3_GEMM_SHAPE_3>,
    exl3_gemm_kernel<X3_INST_K, false, false, 2, EXL3_GEMM_SHAPE_4>
};

#else  // the launcher

#include <c10/cuda/CUDAGuard.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/Tensor.h>
#include "exllamav3_subset_linear.h"
#include <initializer_list>
#include <set>
#include <vector>
#include "quant/exl3_kernel_map.cuh"
#include "quant/exl3_devctx.cuh"

extern fp_exl3_gemm_kernel x3_gemm34_kernels_k2[2];
extern fp_exl3_gemm_kernel x3_gemm34_kernels_k3[2];
extern fp_exl3_gemm_kernel x3_gemm34_kernels_k4[2];
extern fp_exl3_gemm_kernel x3_gemm34_kernels_k6[2];
extern fp_exl3_gemm_kernel x3_gemm34_kernels_k8[2];

static fp_exl3_gemm_kernel* x3_gemm34_table(int K)
{
    switch (K)
    {
        case 2: return x3_gemm34_kernels_k2;
        case 3: return x3_gemm34_kernels_k3;
        case 4: return x3_gemm34_kernels_k4;
        case 6: return x3_gemm34_kernels_k6;
        case 8: return x3_gemm34_kernels_k8;
    }
    return nullptr;
}

static const int x3_tilesize_k[] = {EXL3_GEMM_TILESIZE_K};
static const int x3_tilesize_n[] = {EXL3_GEMM_TILESIZE_N};
static const int x3_blockdim[] = {EXL3_GEMM_BLOCKDIM};

std::vector<int> x3_exl3_gemm34_shapes()
{
    return {3, 4};
}

std::vector<int> x3_exl3_gemm34_bits()
{
    return {2, 3, 4, 6, 8};
}

// C = x·W through exl3_gemm_kernel at shape 3 or 4; returns the shape. force_num_sms 0: exllamav3's
// grid, min(SMs, tiles).
int x3_exl3_gemm34
(
    const at::Tensor& A,
    const at::Tensor& B,
    at::Tensor& C,
    const at::Tensor& suh,
    at::Tensor& A_had,
    const at::Tensor& svh,
    int shape_idx,
    int force_num_sms
)
{
    const at::cuda::OptionalCUDAGuard device_guard(A.device());
    cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();

    x3_check_linear_args(A, B, C, suh, A_had, svh, "exl3_gemm34");
    TORCH_CHECK(shape_idx == 3 || shape_idx == 4, "x3 exl3_gemm34: shapes 3 and 4 only");

    const int tile_u16 = B.size(2);
    const int K = tile_u16 / 16;
    TORCH_CHECK(tile_u16 == 16 * K, "x3 exl3_gemm34: integer K only");
    fp_exl3_gemm_kernel* table = x3_gemm34_table(K);
    TORCH_CHECK(table, "x3 exl3_gemm34: K = 2, 3, 4, 6, 8 only (mul1)");

    int size_k = A.size(-1);
    int size_m = A.numel() / size_k;
    int size_n = B.size(1) * 16;
    TORCH_CHECK(size_k % 128 == 0 && size_n % 128 == 0, "x3 exl3_gemm34: k and n must be multiples of 128");
    TORCH_CHECK(C.numel() >= (int64_t) size_m * size_n, "x3 exl3_gemm34: C too small");
    TORCH_CHECK(A_had.numel() >= A.numel(), "x3 exl3_gemm34: A_had too small");
    TORCH_CHECK(suh.numel() >= size_k && svh.numel() >= size_n, "x3 exl3_gemm34: suh/svh too small");
    if (!size_m) return 0;

    int device;
    cuda_check(cudaGetDevice(&device));
    int num_sms = force_num_sms > 0 ? force_num_sms : DevCtx::instance().get_num_sms(device);
    int* locks = DevCtx::instance().get_locks(device);
    int smem_max = DevCtx::instance().get_smem_request(device);

    const int tk = x3_tilesize_k[shape_idx], tn = x3_tilesize_n[shape_idx];
    TORCH_CHECK(size_k % tk == 0 && size_n % tn == 0, "x3 exl3_gemm34: tile shape does not divide the matrix");
    TORCH_CHECK(exl3_gemm_smem_bytes_for_shape(shape_idx, K, false, true) <= smem_max,
                "x3 exl3_gemm34: shape needs more shared memory than the device grants");

    // select_exl3_gemm_kernel / the autotuner's max_candidate_sms: no empty blocks
    int max_slices = size_k / tk * size_n / tn;
    num_sms = MAX(MIN(max_slices, num_sms), 1);
    int block_dim = x3_blockdim[shape_idx];
    fp_exl3_gemm_kernel kernel = table[shape_idx - 3];

    x3_linear_kernel_args args(A, B, C, suh, A_had, svh, size_m, size_k, size_n, locks);

    // Once per kernel, as exl3_gemm_gr's kernel_attr_set (so a call under graph capture makes none)
    static std::set<void*> attr_set[MAX_DEVICES];
    if (attr_set[device].find((void*) kernel) == attr_set[device].end())
    {
        cuda_check(cudaFuncSetAttribute((const void*) kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
        attr_set[device].insert((void*) kernel);
    }
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
