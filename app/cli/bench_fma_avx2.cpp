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

// As read_avx512_kernel with 32-byte loads (n a multiple of 32).
uint64_t read_avx2_kernel(const uint64_t* p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 32) {
        for (size_t k = 0; k < 32; k += 16) {
            a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + k)));
            a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + k + 4)));
            a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + k + 8)));
            a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + k + 12)));
        }
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

}  // namespace tinyloop::cli
#else
namespace tinyloop::cli {
const int fma_avx2_flops_per_iter = 0;
float fma_avx2_kernel(long, float, float) { return 0.0f; }
uint64_t read_avx2_kernel(const uint64_t*, size_t) { return 0; }
}  // namespace tinyloop::cli
#endif
