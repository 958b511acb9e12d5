// The avx512 instantiation of the SIMD kernels (built with the avx512 flags; see kernels/CMakeLists.txt).
// Reached only through isa_avx512(), which dispatch.cpp calls after checking the CPU.
#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/matmul_fpanel_simd.h"
#include "kernels/cpu/matmul_i8_panel_simd.h"
#include "kernels/cpu/matmul_int8_simd.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/pointwise_simd.h"

namespace tinyloop::kern::detail {
namespace {

// vpdpbusd needs AVX512-VNNI (not in every AVX-512 CPU); without it (or when forced off), maddubs + madd.
void matmul_rows_i8_avx512(const WeightView& W, const ActI8& a, int n_tok, float* y, int r0, int r1) {
    if (avx512_vnni_active()) {
        matmul_rows_i8_simd<true>(W, a, n_tok, y, r0, r1);
    } else {
        matmul_rows_i8_simd<false>(W, a, n_tok, y, r0, r1);
    }
}

}  // namespace

const IsaTable& isa_avx512() {
    static const IsaTable t{matmul_rows_simd, rmsnorm_simd,     rope_token_simd,
                            silu_mul_simd,    add_inplace_simd, attend_one_simd, attend_multi_dispatch,
                            matmul_rows_i8_avx512, matmul_rows_i8_panels, quantize_row_i8_avx512,
                            matmul_rows_fpanels_simd};
    return t;
}

}  // namespace tinyloop::kern::detail
