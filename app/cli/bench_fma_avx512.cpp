// The AVX-512 FMA peak loop for `tinyloop bench`. This file alone is compiled with
// -mavx512f -mfma (app/CMakeLists.txt); bench_machine.cpp calls it only after
// __builtin_cpu_supports("avx512f").
#include "bench_machine.h"

#if defined(TL_X86_FMA_KERNELS)
#include <immintrin.h>

namespace tinyloop::cli {

// 12 independent chains: FMA latency (4 cycles) x 2 ports = 8 in flight, with room to spare.
constexpr int kChains = 12;
const int fma_avx512_flops_per_iter = kChains * 16 * 2;

float fma_avx512_kernel(long iters, float a, float b) {
    __m512 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c) * 1e-3f);
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    for (long i = 0; i < iters; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], va, vb);
    __m512 s = acc[0];
    for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
    alignas(64) float lanes[16];  // (GCC 12's _mm512_reduce_add_ps trips -Wuninitialized)
    _mm512_store_ps(lanes, s);
    float total = 0.0f;
    for (float x : lanes) total += x;
    return total;
}

// Sums n 64-bit words (n a multiple of 32) with 64-byte loads into four accumulators: a read
// stream as wide as the kernels' own, so the bandwidth it measures is what they can get.
uint64_t read_avx512_kernel(const uint64_t* p, size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 32) {
        a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
        a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 8));
        a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 16));
        a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 24));
    }
    alignas(64) uint64_t lanes[8];
    _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
    uint64_t total = 0;
    for (uint64_t x : lanes) total += x;
    return total;
}

}  // namespace tinyloop::cli
#else
namespace tinyloop::cli {
const int fma_avx512_flops_per_iter = 0;
float fma_avx512_kernel(long, float, float) { return 0.0f; }
uint64_t read_avx512_kernel(const uint64_t*, size_t) { return 0; }
}  // namespace tinyloop::cli
#endif
