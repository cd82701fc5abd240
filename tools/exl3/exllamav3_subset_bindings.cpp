// Python bindings for a subset of exllamav3's CUDA extension (PyPI exllamav3 1.6.5,
// exllamav3/exllamav3_ext/), built by tools/exl3/exllamav3_ext_subset.py. The functions are
// exllamav3's own, unchanged, declared by its own headers; only the GEMM launcher
// (exllamav3_subset_gemm.cu) is ours, because exllamav3's exl3_gemm() drags in every kernel
// instance, the GEMV paths and the autotuner. One file for three extension "parts", chosen
// with -DX3_PART_CORE / -DX3_PART_QUANT / -DX3_PART_GEMM, so a part that fails to build does not
// take the others with it. Signatures (exllamav3_ext/quant/*.cuh):
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
}
