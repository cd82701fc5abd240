// Python bindings for a subset of exllamav3's CUDA extension (PyPI exllamav3 1.6.5,
// exllamav3/exllamav3_ext/), built by tools/exl3/exllamav3_ext_subset.py. The functions are
// exllamav3's own, unchanged, declared by its own headers; only the GEMM launcher
// (exllamav3_subset_gemm.cu) is ours, because exllamav3's exl3_gemm() drags in every kernel
// instance, the GEMV paths and the autotuner. One file for the extension "parts", chosen with
// -DX3_PART_CORE / -DX3_PART_QUANT / -DX3_PART_GEMM (and GEMM34 / GEMV / MOE, the benchmark parts),
// so a part that fails to build does not take the others with it. Signatures (exllamav3_ext/quant/*.cuh):
//
//  core:  reconstruct(unpacked f16 [k,n], packed i16 [k/16,n/16,16K], float K, bool mcg, bool mul1)
//         reconstruct_had_slice(unpacked, packed, suh f16 [k], svh f16 [n], float K, mcg, mul1, int64 n_offset)
//         had_r_128(input, output, pre_scale?, post_scale?, float scale)
//         pack_trellis(packed i16 [tk,tn,16K], unpacked i16 [tk,tn,256], int K)
//         unpack_trellis(unpacked, packed, int K)
//  quant: quantize_tiles(input f32 [T,256], output_tiles f32 [T,256], output_indices i16 [T,256],
//                        temp_costs f16, temp_edges i16/u8, int K, bool mcg, bool mul1)
//         quantize_tiles_scratch(int device, int K, bool mcg, bool mul1, int L) -> (optimized, wave)
//         decode(input_indices i16 [r,c], output_tiles f32|f16 [r,c], bool mcg, bool mul1)
//  gemm:  exl3_gemm(A f16 [m,k], B i16 [k/16,n/16,16K], C f16 [m,n], suh f16 [k], A_had f16 [m,k],
//                   svh f16 [n], bool mcg, bool mul1, int force_shape_idx, int force_num_sms) -> shape
//         exl3_gemm_shapes() -> the instantiated shape indices
//  gemm34: exl3_gemm34(A, B, C, suh, A_had, svh, int shape_idx (3|4), int force_num_sms) -> shape
//          (exllamav3_subset_gemm34.cu: the same kernel at the wide shapes 3 and 4, mul1, K 2/3/4/6/8)
//  gemv:  exl3_gemv(A f16 [m,k], B i16 [k/16,n/16,16K], C f16 [m,n], suh, A_had, svh, int mode) -> cfg
//         (0 narrow, 1 wide) or -1 (declined, nothing launched): exllamav3's QTIP-style GEMV as
//         exl3_gemv_try_launch runs it; mode = EXL3_GEMV's values (1 heuristic, 2 force, 3 narrow, 4 wide)
//         exl3_gemv_choice(m, k, n, K, mode) -> the cfg that call would take, without launching
//         exl3_gemv_int8(A, B, C, suh, A_had, svh) -> bool: exllamav3's own exl3_gemv_int8 host code
//         (plain int8 by default), True when it handled the call
//         exl3_gemv_int8_max_k(int device) -> exllamav3's per-arch K gate of the int8 path
//  moe:   exl3_moe(...), exl3_moe_gather(...), exl3_moe_max_concurrency(device), exl3_moe_coop(...):
//         exllamav3's own host functions (quant/exl3_moe.cu, exl3_moe_coop.cu, unchanged; signatures in
//         exl3_moe.cuh / exl3_moe_coop.cuh), with only the K = 4 mul1 kernels built
//         (exllamav3_subset_moe.cu, stubs for the rest in exllamav3_subset_stubs.cu)
#include <torch/extension.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#if defined(X3_PART_CORE)
#include "quant/hadamard.cuh"
#include "quant/pack.cuh"
#include "quant/reconstruct.cuh"
#endif
#if defined(X3_PART_QUANT)
#include "quant/quantize.cuh"
#endif
#if defined(X3_PART_GEMM)
// tools/exl3/exllamav3_subset_gemm.cu
int x3_exl3_gemm(const at::Tensor& A, const at::Tensor& B, at::Tensor& C, const at::Tensor& suh,
                 at::Tensor& A_had, const at::Tensor& svh, bool mcg, bool mul1, int force_shape_idx,
                 int force_num_sms);
std::vector<int> x3_exl3_gemm_shapes();
int x3_exl3_gemm_select_shape(int size_m, int size_k, int size_n, int K);
#endif
#if defined(X3_PART_GEMM34)
// tools/exl3/exllamav3_subset_gemm34.cu
int x3_exl3_gemm34(const at::Tensor& A, const at::Tensor& B, at::Tensor& C, const at::Tensor& suh,
                   at::Tensor& A_had, const at::Tensor& svh, int shape_idx, int force_num_sms);
std::vector<int> x3_exl3_gemm34_shapes();
std::vector<int> x3_exl3_gemm34_bits();
#endif
#if defined(X3_PART_GEMV)
// tools/exl3/exllamav3_subset_gemv.cu
int x3_exl3_gemv(const at::Tensor& A, const at::Tensor& B, at::Tensor& C, const at::Tensor& suh,
                 at::Tensor& A_had, const at::Tensor& svh, int mode);
int x3_exl3_gemv_choice(int size_m, int size_k, int size_n, int K, int mode);
bool x3_exl3_gemv_int8(const at::Tensor& A, const at::Tensor& B, at::Tensor& C, const at::Tensor& suh,
                       at::Tensor& A_had, const at::Tensor& svh);
int exl3_gemv_int8_max_k(int device);  // quant/exl3_gemv_int8.cuh
#endif
#if defined(X3_PART_MOE)
#include "quant/exl3_moe.cuh"
#include "quant/exl3_moe_coop.cuh"
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
#if defined(X3_PART_CORE)
    m.attr("PART") = "core";
    m.def("reconstruct", &reconstruct, "reconstruct");
    m.def("reconstruct_had_slice", &reconstruct_had_slice, "reconstruct_had_slice");
    m.def("had_r_128", &had_r_128, "had_r_128");
    m.def("pack_trellis", &pack_trellis, "pack_trellis");
    m.def("unpack_trellis", &unpack_trellis, "unpack_trellis");
#endif
#if defined(X3_PART_QUANT)
    m.attr("PART") = "quant";
    m.def("quantize_tiles", &quantize_tiles, "quantize_tiles");
    m.def("quantize_tiles_scratch", &quantize_tiles_scratch, "quantize_tiles_scratch");
    m.def("decode", &decode, "decode");
#endif
#if defined(X3_PART_GEMM)
    m.attr("PART") = "gemm";
    m.def("exl3_gemm", &x3_exl3_gemm, "exl3_gemm (exllamav3's exl3_gemm_kernel, our launcher)");
    m.def("exl3_gemm_shapes", &x3_exl3_gemm_shapes, "instantiated shape indices");
    m.def("exl3_gemm_select_shape", &x3_exl3_gemm_select_shape, "the shape exllamav3 would pick (from the instantiated ones)");
#endif
#if defined(X3_PART_GEMM34)
    m.attr("PART") = "gemm34";
    m.def("exl3_gemm34", &x3_exl3_gemm34, "exl3_gemm_kernel at shape 3 or 4 (mul1, our launcher)");
    m.def("exl3_gemm34_shapes", &x3_exl3_gemm34_shapes, "instantiated shape indices");
    m.def("exl3_gemm34_bits", &x3_exl3_gemm34_bits, "instantiated K");
#endif
#if defined(X3_PART_GEMV)
    m.attr("PART") = "gemv";
    m.def("exl3_gemv", &x3_exl3_gemv, "exllamav3's QTIP-style GEMV (mul1, K 2..4), launched as exl3_gemv_try_launch");
    m.def("exl3_gemv_choice", &x3_exl3_gemv_choice, "the GEMV config exllamav3 would take (-1: none)");
    m.def("exl3_gemv_int8", &x3_exl3_gemv_int8, "exllamav3's exl3_gemv_int8 (True: handled)");
    m.def("exl3_gemv_int8_max_k", &exl3_gemv_int8_max_k, "exl3_gemv_int8_max_k");
#endif
#if defined(X3_PART_MOE)
    m.attr("PART") = "moe";
    m.def("exl3_moe", &exl3_moe, "exl3_moe");
    m.def("exl3_moe_gather", &exl3_moe_gather, "exl3_moe_gather");
    m.def("exl3_moe_max_concurrency", &exl3_moe_max_concurrency, "exl3_moe_max_concurrency");
    m.def("exl3_moe_coop", &exl3_moe_coop, "exl3_moe_coop");
#endif
}
