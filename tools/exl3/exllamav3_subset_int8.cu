// Instances of exllamav3's int8-activation GEMV (exl3_gemv_int8_sq_kernel, quant/exl3_gemv_int8_kernel.cuh
// of PyPI exllamav3 1.6.5) for the "gemv" part of tools/exl3/exllamav3_ext_subset.py, behind the selector
// that exllamav3's own host code (quant/exl3_gemv_int8.cu, compiled unchanged) calls:
// exl3_gemv_int8_sq_sel_k<K>(M, c_fp32, residual), declared in comp_units/exl3_gemv_int8_instances.cuh.
//
// Upstream's comp_units/exl3_gemv_int8_inst_sq_k<K>.cu instantiate M = 1, 2 x fp16/fp32 output x plain /
// residual mode. Here only what exl3_gemm runs for one row in the default mode (EXL3_INT8_GEMV=2, plain
// int8, fp16 output) is built: M = 1, c_fp32 = false, residual = false. Any other combination returns
// nullptr, which exllamav3's host code treats as "no kernel" and declines (its caller then falls through
// to the fp16 kernels), so a call outside the built set cannot launch a wrong instance. The selectors of
// the K values and kernels not built (sq K = 1, 5; every cooperative kernel; the half-integer rates) are
// in exllamav3_subset_stubs.cu.
//
// One generated .cu per K includes this file with X3_INT8_K defined (2, 3, 4, 6: the sq kernel exists up
// to K = 6, and exl3_gemv_int8_max_k is 6 on Hopper).
#include "quant/comp_units/exl3_gemv_int8_instances.cuh"
#include "quant/exl3_gemv_int8_kernel.cuh"

#define X3_CAT2(a, b) a##b
#define X3_CAT(a, b) X3_CAT2(a, b)

#if !defined(X3_INT8_K)
#error "define X3_INT8_K"
#endif

void* X3_CAT(exl3_gemv_int8_sq_sel_k, X3_INT8_K)(int M, bool c_fp32, bool residual)
{
    if (M == 1 && !c_fp32 && !residual) return (void*) exl3_gemv_int8_sq_kernel<X3_INT8_K, 1, false, false>;
    return nullptr;
}
