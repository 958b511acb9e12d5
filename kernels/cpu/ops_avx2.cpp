// The avx2 instantiation of the SIMD kernels (built with the avx2 flags; see kernels/CMakeLists.txt).
// Reached only through isa_avx2(), which dispatch.cpp calls after checking the CPU.
#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/matmul_fpanel_simd.h"
#include "kernels/cpu/matmul_int8_simd.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/pointwise_simd.h"

namespace tinyloop::kern::detail {

const IsaTable& isa_avx2() {
    static const IsaTable t{matmul_rows_simd, rmsnorm_simd,     rope_token_simd,
                            silu_mul_simd,    add_inplace_simd, attend_one_simd, attend_multi_dispatch,
                            matmul_rows_i8_simd<false>, nullptr, quantize_row_i8_scalar,
                            matmul_rows_fpanels_simd};
    return t;
}

}  // namespace tinyloop::kern::detail
