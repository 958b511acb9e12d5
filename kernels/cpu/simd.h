// A thin vector type for the SIMD kernels, picked by the instruction set the including file is
// compiled for (__AVX512F__: 16 floats, __AVX2__: 8 floats). Only *_avx512.cpp and *_avx2.cpp
// include this. Everything sits in an anonymous namespace so each instruction set keeps its own
// copy (no inline function compiled for AVX-512 can be picked by the linker for another caller).
//
// Reductions have one fixed order (hsum below), so a kernel that accumulates in lanes and then
// calls hsum gives the same bits however many rows or tokens it processes in one call.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "simd.h is for the *_avx2.cpp / *_avx512.cpp files (built with AVX2, FMA, F16C)"
#endif

// GCC 12's AVX-512 headers trip -Wuninitialized on their own _mm256_undefined_* (a known false
// positive); this header is only included by the instruction-set files.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tinyloop::kern::detail {
namespace {

inline float hsum128(__m128 v) {  // ((v0 + v2) + (v1 + v3))
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 0x55));
    return _mm_cvtss_f32(v);
}
inline float hmax128(__m128 v) {
    v = _mm_max_ps(v, _mm_movehl_ps(v, v));
    v = _mm_max_ss(v, _mm_shuffle_ps(v, v, 0x55));
    return _mm_cvtss_f32(v);
}
inline float hsum256(__m256 v) {
    return hsum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}
inline float hmax256(__m256 v) {
    return hmax128(_mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

#if defined(__AVX512F__)

struct V {
    using T = __m512;
    static constexpr int W = 16;
    static constexpr int kRegs = 32;
    static constexpr int kTokTile = 8;  // tokens sharing one weight load in matmul
    static constexpr int row_tile(int tok) { return tok <= 2 ? 4 : 2; }

    static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
    static T zero() { return _mm512_setzero_ps(); }
    static T set1(float f) { return _mm512_set1_ps(f); }
    static T load(const float* p) { return _mm512_loadu_ps(p); }
    static T load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
    static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
    static void store_n(float* p, T v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }
    static T load_h(const uint16_t* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static T load_h_n(const uint16_t* p, int n) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(n), p));
    }
    // bf16 -> f32: zero-extend each 16-bit value and shift it into the top half (exact).
    static T load_bf(const uint16_t* p) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
    }
    static T load_bf_n(const uint16_t* p, int n) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask(n), p)), 16));
    }
    static T add(T a, T b) { return _mm512_add_ps(a, b); }
    static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
    static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
    static T div(T a, T b) { return _mm512_div_ps(a, b); }
    static T max(T a, T b) { return _mm512_max_ps(a, b); }
    static T neg(T a) { return _mm512_xor_ps(a, _mm512_set1_ps(-0.0f)); }
    static T min(T a, T b) { return _mm512_min_ps(a, b); }
    static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }  // a*b + c, one rounding
    // GCC builds _mm*_mul_ps from plain vector arithmetic and may fuse it with a following add
    // (-ffp-contract=fast is its default); a value passed through here is rounded as written.
    static T rounded(T v) {
        asm("" : "+v"(v));
        return v;
    }
    static T floor(T a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
    static T pow2i(T n) {  // 2^n for integral n in [-126, 127]
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
    }
    static float hsum(T v) {
        return hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
    }
    static float hmax(T v) {
        return hmax256(_mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
    }
    // Lane r of the result = hsum(v[r]), for W vectors at once: the same pairwise adds as hsum
    // (lanes i and i+8, then i and i+4, then i and i+2, then i and i+1), done for all vectors
    // together by transposing shuffles, so every lane is bit-identical to hsum of its vector.
    static T hsum_rows(const T* v) {
        T t[8], u[4], w[2];
        for (int r = 0; r < 8; ++r) {
            t[r] = _mm512_add_ps(_mm512_shuffle_f32x4(v[r], v[r + 8], 0x44), _mm512_shuffle_f32x4(v[r], v[r + 8], 0xEE));
        }
        for (int r = 0; r < 4; ++r) {
            u[r] = _mm512_add_ps(_mm512_shuffle_f32x4(t[r], t[r + 4], 0x88), _mm512_shuffle_f32x4(t[r], t[r + 4], 0xDD));
        }
        for (int r = 0; r < 2; ++r) {
            w[r] = _mm512_add_ps(_mm512_shuffle_ps(u[r], u[r + 2], 0x44), _mm512_shuffle_ps(u[r], u[r + 2], 0xEE));
        }
        const T z = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
        // Lane 4L + j of z holds vector {0,2,1,3}[j] + {0,8,4,12}[L]; this index is its own inverse.
        return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15), z);
    }
    // One 32-column block of codes -> 32 floats in two vectors, in the order of
    // matmul_block_perm (matmul.cpp).
    static T cvt(__m512i v) { return _mm512_cvtepi32_ps(v); }
    static void q8(const uint8_t* p, T* out) {  // natural order
        out[0] = cvt(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
        out[1] = cvt(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
    }
    static void q4(const uint8_t* p, T* out) {  // [even columns, odd columns]
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        out[0] = cvt(_mm512_and_si512(v, _mm512_set1_epi32(15)));
        out[1] = cvt(_mm512_srli_epi32(v, 4));
    }
    static void q2(const uint8_t* p, T* out) {  // [4i+0, 4i+1 | 4i+2, 4i+3], i < 8
        long long b;
        std::memcpy(&b, p, 8);
        const __m512i v = _mm512_cvtepu8_epi32(_mm_set1_epi64x(b));
        const __m512i three = _mm512_set1_epi32(3);
        const __m512i sh01 = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m512i sh23 = _mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 4, 4, 4, 4, 4, 4, 4, 4);
        out[0] = cvt(_mm512_and_si512(_mm512_srlv_epi32(v, sh01), three));
        out[1] = cvt(_mm512_and_si512(_mm512_srlv_epi32(v, sh23), three));
    }

    // Table decoding: tbl lane c holds the weight of code c (q2: of c % 4), built once per group
    // as fma(iota, scale, m), the very value the cvt + fma path gives; vpermps then picks by the
    // low 4 bits of each lane, so one shuffle replaces a cvt, an and and an fma.
    static constexpr bool kLutQ4 = true;
    static T lut_iota_q4() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
    static T lut_iota_q2() { return _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3); }
    static void q4_lut(const uint8_t* p, T tbl, T* out) {  // order as q4
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        out[0] = _mm512_permutexvar_ps(v, tbl);
        out[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), tbl);
    }
    static void q2_lut(const uint8_t* p, T tbl, T* out) {  // order as q2
        long long b;
        std::memcpy(&b, p, 8);
        const __m512i v = _mm512_cvtepu8_epi32(_mm_set1_epi64x(b));
        const __m512i sh01 = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m512i sh23 = _mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 4, 4, 4, 4, 4, 4, 4, 4);
        out[0] = _mm512_permutexvar_ps(_mm512_srlv_epi32(v, sh01), tbl);
        out[1] = _mm512_permutexvar_ps(_mm512_srlv_epi32(v, sh23), tbl);
    }
};

#else  // AVX2

struct V {
    using T = __m256;
    static constexpr int W = 8;
    static constexpr int kRegs = 16;
    static constexpr int kTokTile = 8;
    static constexpr int row_tile(int tok) { return tok == 1 ? 3 : 1; }

    static __m256i mask(int n) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    static T zero() { return _mm256_setzero_ps(); }
    static T set1(float f) { return _mm256_set1_ps(f); }
    static T load(const float* p) { return _mm256_loadu_ps(p); }
    static T load_n(const float* p, int n) { return _mm256_maskload_ps(p, mask(n)); }
    static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
    static void store_n(float* p, T v, int n) { _mm256_maskstore_ps(p, mask(n), v); }
    static T load_h(const uint16_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static T load_h_n(const uint16_t* p, int n) {
        uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        std::memcpy(tmp, p, static_cast<size_t>(n) * 2);
        return load_h(tmp);
    }
    // bf16 -> f32: zero-extend each 16-bit value and shift it into the top half (exact).
    static T load_bf(const uint16_t* p) {
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
    }
    static T load_bf_n(const uint16_t* p, int n) {
        uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        std::memcpy(tmp, p, static_cast<size_t>(n) * 2);
        return load_bf(tmp);
    }
    static T add(T a, T b) { return _mm256_add_ps(a, b); }
    static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
    static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
    static T div(T a, T b) { return _mm256_div_ps(a, b); }
    static T max(T a, T b) { return _mm256_max_ps(a, b); }
    static T neg(T a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
    static T min(T a, T b) { return _mm256_min_ps(a, b); }
    static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
    static T rounded(T v) {  // see the AVX-512 version
        asm("" : "+x"(v));
        return v;
    }
    static T floor(T a) { return _mm256_floor_ps(a); }
    static T pow2i(T n) {
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
    }
    static float hsum(T v) { return hsum256(v); }
    static float hmax(T v) { return hmax256(v); }
    // Lane r = hsum(v[r]) for W vectors at once, bit-identical to hsum (see the AVX-512 version).
    static T hsum_rows(const T* v) {
        T t[4], w[2];
        for (int r = 0; r < 4; ++r) {
            t[r] = _mm256_add_ps(_mm256_permute2f128_ps(v[r], v[r + 4], 0x20), _mm256_permute2f128_ps(v[r], v[r + 4], 0x31));
        }
        for (int r = 0; r < 2; ++r) {
            w[r] = _mm256_add_ps(_mm256_shuffle_ps(t[r], t[r + 2], 0x44), _mm256_shuffle_ps(t[r], t[r + 2], 0xEE));
        }
        const T z = _mm256_add_ps(_mm256_shuffle_ps(w[0], w[1], 0x88), _mm256_shuffle_ps(w[0], w[1], 0xDD));
        // Lane 4L + j of z holds vector {0,2,1,3}[j] + 4L; this index is its own inverse.
        return _mm256_permutevar8x32_ps(z, _mm256_setr_epi32(0, 2, 1, 3, 4, 6, 5, 7));
    }

    static T cvt(__m256i v) { return _mm256_cvtepi32_ps(v); }
    static __m256i bytes8(const uint8_t* p) {
        return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    }
    static void q8(const uint8_t* p, T* out) {  // natural order
        for (int u = 0; u < 4; ++u) out[u] = cvt(bytes8(p + 8 * u));
    }
    static void q4(const uint8_t* p, T* out) {  // [even 0..15, odd 0..15, even 16..31, odd 16..31]
        const __m256i fifteen = _mm256_set1_epi32(15);
        const __m256i a = bytes8(p), b = bytes8(p + 8);
        out[0] = cvt(_mm256_and_si256(a, fifteen));
        out[1] = cvt(_mm256_srli_epi32(a, 4));
        out[2] = cvt(_mm256_and_si256(b, fifteen));
        out[3] = cvt(_mm256_srli_epi32(b, 4));
    }
    static void q2(const uint8_t* p, T* out) {  // [4i+0 | 4i+1 | 4i+2 | 4i+3], i < 8
        const __m256i three = _mm256_set1_epi32(3);
        const __m256i v = bytes8(p);
        out[0] = cvt(_mm256_and_si256(v, three));
        out[1] = cvt(_mm256_and_si256(_mm256_srli_epi32(v, 2), three));
        out[2] = cvt(_mm256_and_si256(_mm256_srli_epi32(v, 4), three));
        out[3] = cvt(_mm256_srli_epi32(v, 6));
    }

    // Table decoding (see the AVX-512 version): vpermps here picks by 3 bits, enough for q2 with
    // the 4 weights repeated; q4 would need two lookups and a blend, so it stays on cvt + fma.
    static constexpr bool kLutQ4 = false;
    static T lut_iota_q4() { return zero(); }
    static T lut_iota_q2() { return _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3); }
    static void q4_lut(const uint8_t*, T, T*) {}
    static void q2_lut(const uint8_t* p, T tbl, T* out) {  // order as q2
        const __m256i v = bytes8(p);
        out[0] = _mm256_permutevar8x32_ps(tbl, v);
        out[1] = _mm256_permutevar8x32_ps(tbl, _mm256_srli_epi32(v, 2));
        out[2] = _mm256_permutevar8x32_ps(tbl, _mm256_srli_epi32(v, 4));
        out[3] = _mm256_permutevar8x32_ps(tbl, _mm256_srli_epi32(v, 6));
    }
};

#endif

// e^x for every lane (Cephes expf: x = n ln2 + r, degree-6 polynomial in r; about 2 ulp).
// Inputs are clamped to [-87.3, 88.37], so very negative x gives ~1e-38 rather than 0.
inline V::T vexp(V::T x) {
    x = V::min(V::max(x, V::set1(-87.3365447505f)), V::set1(88.3762626647949f));
    const V::T n = V::floor(V::fma(x, V::set1(1.44269504088896341f), V::set1(0.5f)));
    V::T r = V::fma(n, V::set1(-0.693359375f), x);
    r = V::fma(n, V::set1(2.12194440e-4f), r);
    V::T p = V::set1(1.9875691500e-4f);
    p = V::fma(p, r, V::set1(1.3981999507e-3f));
    p = V::fma(p, r, V::set1(8.3334519073e-3f));
    p = V::fma(p, r, V::set1(4.1665795894e-2f));
    p = V::fma(p, r, V::set1(1.6666665459e-1f));
    p = V::fma(p, r, V::set1(5.0000001201e-1f));
    p = V::fma(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
    return V::mul(p, V::pow2i(n));
}

}  // namespace
}  // namespace tinyloop::kern::detail
