// The AVX2 FMA peak loop for `tinyloop bench` (compiled with -mavx2 -mfma; called only after
// __builtin_cpu_supports("avx2") && ("fma")).
#include "bench_machine.h"

#if defined(TL_X86_FMA_KERNELS)
#include <immintrin.h>

namespace tinyloop::cli {

constexpr int kChains = 12;
const int fma_avx2_flops_per_iter = kChains * 8 * 2;

float fma_avx2_kernel(long iters, float a, float b) {
    __m256 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c) * 1e-3f);
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    for (long i = 0; i < iters; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], va, vb);
    __m256 s = acc[0];
    for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, s);
    float r = 0;
    for (float v : lanes) r += v;
    return r;
}

}  // namespace tinyloop::cli
#else
namespace tinyloop::cli {
const int fma_avx2_flops_per_iter = 0;
float fma_avx2_kernel(long, float, float) { return 0.0f; }
}  // namespace tinyloop::cli
#endif
