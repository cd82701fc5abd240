// Stand-ins for the kernel getters and selectors that exllamav3's unchanged host files reference but
// tools/exl3/exllamav3_ext_subset.py does not build (PyPI exllamav3 1.6.5). Each returns "no kernel",
// which the host code treats as a declined path or a failed check, never as a launch:
//
//  X3_STUBS_GEMV (part "gemv", for quant/exl3_gemv_int8.cu)
//      exl3_gemv_int8_sq_sel_k1/k5, every exl3_gemv_int8_coop_sel_k*, and the half-integer selectors
//      return nullptr: exl3_gemv_int8 then returns false (not handled), as it does for any call it
//      declines. Graph::record_param (graph.cu, not built) throws: it is only reached with a Graph,
//      and the subset passes none.
//  X3_STUBS_MOE (part "moe", for quant/exl3_moe.cu and quant/exl3_moe_coop.cu)
//      every exl3_moe_kernel_* getter except the three K = 4 mul1 ones returns nullptr (exl3_moe
//      fills its instance tables with them at load time); the coop selectors except K = 4 throw.
//
// One generated .cu per part includes this file with its macro defined.
#include <c10/util/Exception.h>
#include <cstdint>

#if defined(X3_STUBS_GEMV)

#include <ATen/Tensor.h>
#include "graph.cuh"
#include "quant/comp_units/exl3_gemv_int8_instances.cuh"

#define X3_SQ_STUB(name) void* name(int, bool, bool) { return nullptr; }
#define X3_COOP_STUB(name) void* name(bool, bool) { return nullptr; }
X3_SQ_STUB(exl3_gemv_int8_sq_sel_k1)
X3_SQ_STUB(exl3_gemv_int8_sq_sel_k5)
X3_SQ_STUB(exl3_gemv_int8_sq_sel_h1)
X3_SQ_STUB(exl3_gemv_int8_sq_sel_h2)
X3_SQ_STUB(exl3_gemv_int8_sq_sel_h3)
X3_COOP_STUB(exl3_gemv_int8_coop_sel_k1)
X3_COOP_STUB(exl3_gemv_int8_coop_sel_k2)
X3_COOP_STUB(exl3_gemv_int8_coop_sel_k3)
X3_COOP_STUB(exl3_gemv_int8_coop_sel_k4)
X3_COOP_STUB(exl3_gemv_int8_coop_sel_k5)
X3_COOP_STUB(exl3_gemv_int8_coop_sel_k6)
X3_COOP_STUB(exl3_gemv_int8_coop_sel_k7)
X3_COOP_STUB(exl3_gemv_int8_coop_sel_k8)
X3_COOP_STUB(exl3_gemv_int8_coop_sel_h1)
X3_COOP_STUB(exl3_gemv_int8_coop_sel_h2)
X3_COOP_STUB(exl3_gemv_int8_coop_sel_h3)
#undef X3_SQ_STUB
#undef X3_COOP_STUB

void Graph::record_param(void* kernel, int param_id, int param_offset, int size)
{
    (void) kernel; (void) param_id; (void) param_offset; (void) size;
    TORCH_CHECK(false, "x3 subset: exllamav3's Graph is not built (graph recording is not supported)");
}

#elif defined(X3_STUBS_MOE)

#include "quant/comp_units/exl3_moe_instances.cuh"
#include "quant/comp_units/exl3_moe_coop_instances.cuh"

#define X3_NULL_GETTER(name) fp_exl3_moe_kernel name() { return nullptr; }

// [K][N][cb] of exl3_moe_kernel_instances (K = 0 is the runtime-K instance), less k4_n256_cb2
#define X3_NULL_GETTERS_K(K) \
    X3_NULL_GETTER(exl3_moe_kernel_k##K##_n128_cb1) \
    X3_NULL_GETTER(exl3_moe_kernel_k##K##_n256_cb1) \
    X3_NULL_GETTER(exl3_moe_kernel_k##K##_n128_cb2)
X3_NULL_GETTERS_K(0) X3_NULL_GETTERS_K(1) X3_NULL_GETTERS_K(2) X3_NULL_GETTERS_K(3) X3_NULL_GETTERS_K(4)
X3_NULL_GETTERS_K(5) X3_NULL_GETTERS_K(6) X3_NULL_GETTERS_K(7) X3_NULL_GETTERS_K(8)
X3_NULL_GETTER(exl3_moe_kernel_k0_n256_cb2)
X3_NULL_GETTER(exl3_moe_kernel_k1_n256_cb2)
X3_NULL_GETTER(exl3_moe_kernel_k2_n256_cb2)
X3_NULL_GETTER(exl3_moe_kernel_k3_n256_cb2)
X3_NULL_GETTER(exl3_moe_kernel_k5_n256_cb2)
X3_NULL_GETTER(exl3_moe_kernel_k6_n256_cb2)
X3_NULL_GETTER(exl3_moe_kernel_k7_n256_cb2)
X3_NULL_GETTER(exl3_moe_kernel_k8_n256_cb2)

// 32- and 64-row tiles [K], less K = 4
#define X3_NULL_GETTERS_MTILE(K) \
    X3_NULL_GETTER(exl3_moe_kernel_k##K##_n128_cb2_m32) \
    X3_NULL_GETTER(exl3_moe_kernel_k##K##_n128_cb2_m64)
X3_NULL_GETTERS_MTILE(0) X3_NULL_GETTERS_MTILE(1) X3_NULL_GETTERS_MTILE(2) X3_NULL_GETTERS_MTILE(3)
X3_NULL_GETTERS_MTILE(5) X3_NULL_GETTERS_MTILE(6) X3_NULL_GETTERS_MTILE(7) X3_NULL_GETTERS_MTILE(8)

// Half-integer rates
#define X3_NULL_GETTERS_H(K) \
    X3_NULL_GETTER(exl3_moe_kernel_h##K##_n128_cb2) \
    X3_NULL_GETTER(exl3_moe_kernel_h##K##_n256_cb2) \
    X3_NULL_GETTER(exl3_moe_kernel_h##K##_n128_cb2_m32) \
    X3_NULL_GETTER(exl3_moe_kernel_h##K##_n128_cb2_m64)
X3_NULL_GETTERS_H(1) X3_NULL_GETTERS_H(2) X3_NULL_GETTERS_H(3)

// Coop (decode) kernels: K = 4 only (exllamav3_subset_moe.cu)
#define X3_COOP_STUBS_K(K) \
    MoeCoopKernel exl3_moe_coop_kernel_a_k##K(int, int, bool) \
    { TORCH_CHECK(false, "x3 exl3_moe_coop: only K = 4 is built (gate/up K = " #K ")"); return { nullptr, 0 }; } \
    MoeCoopKernel exl3_moe_coop_kernel_b_k##K(int, bool) \
    { TORCH_CHECK(false, "x3 exl3_moe_coop: only K = 4 is built (down K = " #K ")"); return { nullptr, 0 }; }
X3_COOP_STUBS_K(1) X3_COOP_STUBS_K(2) X3_COOP_STUBS_K(3) X3_COOP_STUBS_K(5) X3_COOP_STUBS_K(6)
X3_COOP_STUBS_K(7) X3_COOP_STUBS_K(8)
#define X3_COOP_STUBS_H(K) \
    MoeCoopKernel exl3_moe_coop_kernel_a_h##K(int, bool) \
    { TORCH_CHECK(false, "x3 exl3_moe_coop: half-integer rates are not built"); return { nullptr, 0 }; } \
    MoeCoopKernel exl3_moe_coop_kernel_b_h##K(bool) \
    { TORCH_CHECK(false, "x3 exl3_moe_coop: half-integer rates are not built"); return { nullptr, 0 }; }
X3_COOP_STUBS_H(1) X3_COOP_STUBS_H(2) X3_COOP_STUBS_H(3)

#else
#error "define X3_STUBS_GEMV or X3_STUBS_MOE"
#endif
