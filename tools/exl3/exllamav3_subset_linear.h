#pragma once
// What our exllamav3-subset launchers share (exllamav3_subset_gemm.cu, exllamav3_subset_gemm34.cu,
// exllamav3_subset_gemv.cu): the argument checks exllamav3's exl3_gemm makes, and the kernel argument
// list of exl3_gemm_kernel, which exl3_gemv_kernel shares.
#include <ATen/Tensor.h>
#include <cuda_fp16.h>

#include <initializer_list>

#include "util.h"

// A f16 [m, k], B int16 trellis [k/16, n/16, 16K], C f16 [m, n], suh / A_had / svh f16, all
// contiguous on A's device. `what` names the launcher in the messages.
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

// The kernel arguments (A, B, C, size_m, size_k, size_n, locks, suh, A_had, svh) for
// cudaLaunchCooperativeKernel: `list` points into this object, which therefore stays put.
struct x3_linear_kernel_args
{
    const half* A;
    const uint16_t* B;
    void* C;
    int size_m, size_k, size_n;
    int* locks;
    const half* suh;
    half* A_had;
    const half* svh;
    void* list[10];

    x3_linear_kernel_args(const at::Tensor& A_, const at::Tensor& B_, at::Tensor& C_, const at::Tensor& suh_,
                          at::Tensor& A_had_, const at::Tensor& svh_, int m, int k, int n, int* locks_)
        : A((const half*) A_.data_ptr()), B((const uint16_t*) B_.data_ptr()), C(C_.data_ptr()),
          size_m(m), size_k(k), size_n(n), locks(locks_), suh((const half*) suh_.data_ptr()),
          A_had((half*) A_had_.data_ptr()), svh((const half*) svh_.data_ptr()),
          list{&A, &B, &C, &size_m, &size_k, &size_n, &locks, &suh, &A_had, &svh}
    {
    }
    x3_linear_kernel_args(const x3_linear_kernel_args&) = delete;
    x3_linear_kernel_args& operator=(const x3_linear_kernel_args&) = delete;
};
