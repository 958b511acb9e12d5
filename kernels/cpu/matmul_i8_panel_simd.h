// The int8-activation matmul over row panels (layout, math and scalar reference: matmul_int8.cpp,
// i8_pack_panels and matmul_i8_panel_ref), AVX-512 VNNI only: included by ops_avx512.cpp.
//
// A panel is 16 rows; per 32-column block its codes are 8 (Q8) or 4 (Q4) vectors in which int32
// lane i is row i. vpdpbusd with one broadcast word of four activation codes adds four products
// to each of the 16 rows, so a block's exact integer dot D_b for 16 rows takes 8 instructions,
// with no horizontal sums and no per-lane scale shuffles. Per (row, token) the float sequence is
//   acc = fma(float(D_b), s_g * dx_b, acc);  acc = fma(m_g, dsx_b, acc)   for b = 0, 1, ...
// whatever the tile (panels x tokens), the token count or the thread split: batch invariant.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_internal.h"

namespace tinyloop::kern::detail {
namespace {

struct PanelGeom {
    int nb = 0, ng = 0, bpg = 0;
    size_t block_bytes = 0;   // one panel's codes for one 32-column block
    const uint8_t* codes = nullptr;
    const uint8_t* params = nullptr;  // per (panel, group): 16 f16 scales, then 16 f16 zeros
};

inline PanelGeom panel_geom(const WeightView& W) {
    PanelGeom g;
    g.nb = W.cols / 32;
    g.ng = W.cols / W.group_size;
    g.bpg = W.group_size / 32;
    g.block_bytes = W.type == WType::Q4 ? 256 : 512;
    g.codes = W.panels;
    g.params = W.panels + i8_panel_code_bytes(W);
    return g;
}

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// Panels p0 .. p0+NP-1 (rows 16 p ..) for tokens t0 .. t0+T-1.
template <bool kQ4, int NP, int T>
void panel_tile(const PanelGeom& g, const ActI8& a, float* y, int rows, int p0, int t0) {
    __m512 acc[NP][T];
    for (int i = 0; i < NP; ++i) {
        for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
    }
    const __m512i low4 = _mm512_set1_epi8(15);
    for (int gi = 0; gi < g.ng; ++gi) {
        __m512 s[NP], m[NP];
        for (int i = 0; i < NP; ++i) {
            const uint8_t* pr = g.params + (static_cast<size_t>(p0 + i) * g.ng + gi) * 64;
            s[i] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pr)));
            const __m512 z = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pr + 32)));
            m[i] = _mm512_xor_ps(_mm512_mul_ps(z, s[i]), _mm512_set1_ps(-0.0f));  // -(z * s)
        }
        for (int bb = 0; bb < g.bpg; ++bb) {
            const int b = gi * g.bpg + bb;
            __m512i D[NP][T];
            for (int i = 0; i < NP; ++i) {
                for (int j = 0; j < T; ++j) D[i][j] = _mm512_setzero_si512();
            }
            if constexpr (!kQ4) {
                for (int k = 0; k < 8; ++k) {
                    for (int i = 0; i < NP; ++i) {
                        const __m512i w = _mm512_load_si512(
                            g.codes + (static_cast<size_t>(p0 + i) * g.nb + b) * g.block_bytes + k * 64);
                        for (int j = 0; j < T; ++j) {
                            const int8_t* xq = a.q + static_cast<size_t>(t0 + j) * a.q_stride + b * 32 + 4 * k;
                            D[i][j] = _mm512_dpbusd_epi32(D[i][j], w, bcast4(xq));
                        }
                    }
                }
            } else {
                for (int k = 0; k < 4; ++k) {
                    for (int i = 0; i < NP; ++i) {
                        const __m512i v = _mm512_load_si512(
                            g.codes + (static_cast<size_t>(p0 + i) * g.nb + b) * g.block_bytes + k * 64);
                        const __m512i lo = _mm512_and_si512(v, low4);
                        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                        for (int j = 0; j < T; ++j) {
                            const int8_t* xq = a.q + static_cast<size_t>(t0 + j) * a.q_stride + b * 32 + 8 * k;
                            D[i][j] = _mm512_dpbusd_epi32(D[i][j], lo, bcast4(xq));
                            D[i][j] = _mm512_dpbusd_epi32(D[i][j], hi, bcast4(xq + 4));
                        }
                    }
                }
            }
            for (int j = 0; j < T; ++j) {
                const size_t o = static_cast<size_t>(t0 + j) * a.s_stride + b;
                const __m512 dx = _mm512_set1_ps(a.dx[o]);
                const __m512 dsx = _mm512_set1_ps(a.dsx[o]);
                for (int i = 0; i < NP; ++i) {
                    acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D[i][j]), _mm512_mul_ps(s[i], dx), acc[i][j]);
                    acc[i][j] = _mm512_fmadd_ps(m[i], dsx, acc[i][j]);
                }
            }
        }
    }
    for (int i = 0; i < NP; ++i) {
        const int r = (p0 + i) * 16;
        const int n = rows - r < 16 ? rows - r : 16;
        const __mmask16 mask = static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u);
        for (int j = 0; j < T; ++j) _mm512_mask_storeu_ps(y + static_cast<size_t>(t0 + j) * rows + r, mask, acc[i][j]);
    }
}

// Panels [pa, pb) for tokens t .. t+T-1, NP panels at a time, then one at a time.
template <bool kQ4, int NP, int T>
void panel_span(const PanelGeom& g, const ActI8& a, float* y, int rows, int pa, int pb, int t) {
    int p = pa;
    if constexpr (NP > 1) {
        for (; p + NP <= pb; p += NP) panel_tile<kQ4, NP, T>(g, a, y, rows, p, t);
    }
    for (; p < pb; ++p) panel_tile<kQ4, 1, T>(g, a, y, rows, p, t);
}

// Tiles: 8 tokens x 1 panel; a remainder of 2-4 tokens x 2 panels (enough independent vpdpbusd
// chains); one token (decode) x 4 panels.
template <bool kQ4>
void panel_rest(const PanelGeom& g, const ActI8& a, float* y, int rows, int pa, int pb, int t, int rest) {
    switch (rest) {
        case 1: panel_span<kQ4, 4, 1>(g, a, y, rows, pa, pb, t); break;
        case 2: panel_span<kQ4, 2, 2>(g, a, y, rows, pa, pb, t); break;
        case 3: panel_span<kQ4, 2, 3>(g, a, y, rows, pa, pb, t); break;
        case 4: panel_span<kQ4, 2, 4>(g, a, y, rows, pa, pb, t); break;
        case 5: panel_span<kQ4, 1, 5>(g, a, y, rows, pa, pb, t); break;
        case 6: panel_span<kQ4, 1, 6>(g, a, y, rows, pa, pb, t); break;
        case 7: panel_span<kQ4, 1, 7>(g, a, y, rows, pa, pb, t); break;
        default: break;
    }
}

// Rows [r0, r1) (r0 a multiple of 16; r1 too unless it is W.rows). With many tokens, panels in
// spans of about kBlockBytes of codes, every token tile over one span before the next (the span
// stays in L2).
template <bool kQ4>
void matmul_panels_kind(const WeightView& W, const ActI8& a, int n_tok, float* y, int r0, int r1) {
    constexpr size_t kBlockBytes = 192 * 1024;
    constexpr int kTok = 8;
    const PanelGeom g = panel_geom(W);
    const int pa = r0 / 16, pb = (r1 + 15) / 16;
    const size_t panel_bytes = g.block_bytes * static_cast<size_t>(g.nb);
    int span = n_tok <= kTok ? pb - pa : static_cast<int>(kBlockBytes / panel_bytes);
    if (span < 1) span = 1;
    for (int s0 = pa; s0 < pb; s0 += span) {
        const int s1 = pb - s0 < span ? pb : s0 + span;
        int t = 0;
        for (; t + kTok <= n_tok; t += kTok) panel_span<kQ4, 1, kTok>(g, a, y, W.rows, s0, s1, t);
        if (t < n_tok) panel_rest<kQ4>(g, a, y, W.rows, s0, s1, t, n_tok - t);
    }
}

// quantize_row_int8 in AVX-512 (the same operations per element: |x| max, x * (127 / max)
// rounded half to even by cvtps2dq, so the same codes and dx), and dsx_b = dx_b * S_b.
void quantize_row_i8_avx512(const float* x, int cols, int8_t* q, float* dx, float* dsx) {
    const __m512 sign = _mm512_set1_ps(-0.0f), inf = _mm512_set1_ps(__builtin_inff());
    for (int b = 0; b * 32 < cols; ++b) {
        const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
        const __m512 a0 = _mm512_andnot_ps(sign, x0), a1 = _mm512_andnot_ps(sign, x1);
        // NaN (unordered) or infinity anywhere in the block
        const __mmask16 bad = _mm512_cmp_ps_mask(a0, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(a1, inf, _CMP_NLT_UQ);
        if (bad != 0) {
            dx[b] = __builtin_nanf("");
            dsx[b] = dx[b];
            std::memset(q + 32 * b, 0, 32);
            continue;
        }
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
        dx[b] = amax / 127.0f;
        const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, inv)), i1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, inv));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b), _mm512_cvtsepi32_epi8(i0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16), _mm512_cvtsepi32_epi8(i1));
        const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
        dsx[b] = dx[b] * static_cast<float>(sum);
    }
}

void matmul_rows_i8_panels(const WeightView& W, const ActI8& a, int n_tok, float* y, int r0, int r1) {
    if (W.type == WType::Q4) {
        matmul_panels_kind<true>(W, a, n_tok, y, r0, r1);
    } else {
        matmul_panels_kind<false>(W, a, n_tok, y, r0, r1);
    }
}

}  // namespace
}  // namespace tinyloop::kern::detail
