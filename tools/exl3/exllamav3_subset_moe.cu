// Instances of exllamav3's MoE kernels (PyPI exllamav3 1.6.5) for the "moe" part of
// tools/exl3/exllamav3_ext_subset.py: K = 4, mul1 codebook (cb 2), behind the getters that exllamav3's
// own host code calls (quant/exl3_moe.cu and quant/exl3_moe_coop.cu, both compiled unchanged):
//
//  X3_MOE_TILE 16  exl3_moe_kernel_k4_n256_cb2()      -> exl3_moe_kernel<4, 256, 2>       (16-row tile;
//                  exl3_moe takes the N = 256 shape because hidden and width are multiples of 256)
//  X3_MOE_TILE 32  exl3_moe_kernel_k4_n128_cb2_m32()  -> exl3_moe_kernel<4, 128, 2, 32>
//  X3_MOE_TILE 64  exl3_moe_kernel_k4_n128_cb2_m64()  -> exl3_moe_kernel<4, 128, 2, 64>
//                  (the row-tile tiers BlockSparseMLP.forward launches for experts with more than 16 /
//                  32 rows, mul1 only)
//  X3_MOE_COOP 1   exl3_moe_coop_kernel_a_k4(cb, Hi, wide) -> exl3_moe_coop_a_kernel<4, 2, true>
//  X3_MOE_COOP 2   exl3_moe_coop_kernel_b_k4(cb, wide)     -> exl3_moe_coop_b_kernel<4, 2, true>
//                  (the decode path BC_BlockSparseMLP::run_bszN runs for 1..8 tokens: two launches,
//                  plus exllamav3's rotation kernel at bsz > 1, defined in exl3_moe_coop.cu)
//
// Upstream's comp_units (exl3_moe_inst_k4_cb2*.cu, exl3_moe_coop_inst_k4.cu) hold the same templates
// for more codebooks and tiles. Only the wide coop tile is built: exl3_moe_coop_launch picks it for every
// stage below Blackwell (moe_coop_pick_wide: cc < CC_BLACKWELL), unless EXL3_MOE_COOP_WIDE=0 forces
// the narrow one, which fails here with a message. The getters of everything else are stubs
// (exllamav3_subset_stubs.cu). One generated .cu per instance includes this file.
#include <c10/util/Exception.h>

#if defined(X3_MOE_TILE)

#include "quant/comp_units/exl3_moe_instances.cuh"
#include "quant/exl3_moe_kernel.cuh"

#if X3_MOE_TILE == 16
fp_exl3_moe_kernel exl3_moe_kernel_k4_n256_cb2() { return exl3_moe_kernel<4, 256, 2>; }
#elif X3_MOE_TILE == 32
fp_exl3_moe_kernel exl3_moe_kernel_k4_n128_cb2_m32() { return exl3_moe_kernel<4, 128, 2, 32>; }
#elif X3_MOE_TILE == 64
fp_exl3_moe_kernel exl3_moe_kernel_k4_n128_cb2_m64() { return exl3_moe_kernel<4, 128, 2, 64>; }
#else
#error "X3_MOE_TILE: 16, 32 or 64"
#endif

#elif defined(X3_MOE_COOP)

#include "quant/comp_units/exl3_moe_coop_instances.cuh"
#include "quant/exl3_moe_coop_kernel.cuh"

#if X3_MOE_COOP == 1
MoeCoopKernel exl3_moe_coop_kernel_a_k4(int cb, int Hi, bool wide)
{
    using namespace exl3_moe_coop_ns;
    TORCH_CHECK(cb == 2 && wide, "x3 exl3_moe_coop: only the mul1 wide gate/up kernel is built (cb ", cb, ", wide ", wide, ")");
    return { (void*) exl3_moe_coop_a_kernel<4, 2, true>, smem_a_bytes<4>(Hi) };
}
#elif X3_MOE_COOP == 2
MoeCoopKernel exl3_moe_coop_kernel_b_k4(int cb, bool wide)
{
    using namespace exl3_moe_coop_ns;
    TORCH_CHECK(cb == 2 && wide, "x3 exl3_moe_coop: only the mul1 wide down kernel is built (cb ", cb, ", wide ", wide, ")");
    return { (void*) exl3_moe_coop_b_kernel<4, 2, true>, smem_b_bytes<4>() };
}
#else
#error "X3_MOE_COOP: 1 (gate/up) or 2 (down)"
#endif

#else
#error "define X3_MOE_TILE or X3_MOE_COOP"
#endif
