#pragma once
// The argument checks our exllamav3-subset launchers share (exllamav3_subset_gemm.cu,
// exllamav3_subset_gemm34.cu, exllamav3_subset_gemv.cu), as exllamav3's exl3_gemm makes them:
// A f16 [m, k], B int16 trellis [k/16, n/16, 16K], C f16 [m, n], suh / A_had / svh f16, all
// contiguous on A's device. `what` names the launcher in the messages.
#include <ATen/Tensor.h>

#include <initializer_list>

#include "util.h"

inline void x3_check_linear_args(const at::Tensor& A, const at::Tensor& B, const at::Tensor& C, const at::Tensor& suh,
                                 const at::Tensor& A_had, const at::Tensor& svh, const char* what)
{
    TORCH_CHECK_DIM(B, 3);
    TORCH_CHECK_SHAPES(A, -1, B, 0, 16);
    TORCH_CHECK_SHAPES(C, -1, B, 1, 16);
    TORCH_CHECK_DTYPE(A, kHalf);
    TORCH_CHECK_DTYPE(B, kShort);
    TORCH_CHECK_DTYPE(C, kHalf);
    TORCH_CHECK_DTYPE(suh, kHalf);
    TORCH_CHECK_DTYPE(svh, kHalf);
    TORCH_CHECK_DTYPE(A_had, kHalf);
    for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&A, &B, &C, &suh, &A_had, &svh})
    {
        TORCH_CHECK(t->is_contiguous(), "x3 ", what, ": tensors must be contiguous");
        TORCH_CHECK(t->device() == A.device(), "x3 ", what, ": tensors must share a device");
    }
}
