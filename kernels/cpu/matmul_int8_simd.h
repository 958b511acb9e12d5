// The SIMD int8-activation matmul for Q8/Q4 weights (math, layout and reference:
// matmul_int8.cpp), compiled once per instruction set by ops_avx512.cpp / ops_avx2.cpp.
//
// A chunk is one vector of code bytes: Q8 64 (AVX-512) or 32 (AVX2) columns, Q4 twice that, its
// low nibbles (even columns) and high nibbles (odd columns) unpacked into two byte vectors. Rows
// are walked in spans of V::W 32-column blocks: one vector holds a row's V::W block scales
// (f16 -> f32 once per span), and a lane permute hands each chunk its blocks' scales. Per row
// and token the integer dot of a chunk lands in int32 lanes, each lane inside one block; it is
// converted to float, times the block's weight scale and accumulated with the block's
// activation scale (edx, expanded per lane by the quantizer): acc = fma(D * s, dx, acc). After
// the span's chunks comes its zero-point term, one fma(m, dsx, acc) for all V::W blocks.
// acc[i][j] sees the same sequence for any tile shape, so y never depends on the tiling or on
// other rows (batch invariance).
#pragma once

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/simd.h"

namespace tinyloop::kern::detail {
namespace {

// Lane j holds j / k, for k = 1, 2, 4, 8 (lanes per block, blocks per group).
inline const int32_t* div_table(int k) {
    alignas(64) static const int32_t t[4][16] = {
        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
        {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7},
        {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
        {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}};
    return t[k <= 1 ? 0 : k == 2 ? 1 : k == 4 ? 2 : 3];
}

#if defined(__AVX512F__)

struct VI {
    using I = __m512i;
    static constexpr int kBytes = 64;
    static I load(const void* p) { return _mm512_loadu_si512(p); }
    static I load_n(const void* p, int n) {
        return _mm512_maskz_loadu_epi8(_cvtu64_mask64(n >= 64 ? ~0ull : (1ull << n) - 1ull), p);
    }
    static I zero() { return _mm512_setzero_si512(); }
    static I lo4(I v) { return _mm512_and_si512(v, _mm512_set1_epi8(15)); }
    static I hi4(I v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(15)); }
    // acc + per-lane sum of 4 products of unsigned u and signed s bytes (u <= 15 without VNNI).
    template <bool kVnni>
    static I dot(I acc, I u, I s) {
        if constexpr (kVnni) {
            return _mm512_dpbusd_epi32(acc, u, s);
        } else {
            return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
        }
    }
    // Without VNNI, a full byte u = 16 hi + lo: two maddubs that cannot saturate.
    static I dot_split(I lo, I hi, I s) {
        return _mm512_add_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(hi, s), _mm512_set1_epi16(16)),
                                _mm512_madd_epi16(_mm512_maddubs_epi16(lo, s), _mm512_set1_epi16(1)));
    }
    static V::T cvt(I v) { return _mm512_cvtepi32_ps(v); }
    // Lane j of the result is lane idx[j] of v.
    static V::T permute(V::T v, I idx) { return _mm512_permutexvar_ps(idx, v); }
    static I iota_div(int k) { return _mm512_load_si512(div_table(k)); }  // lane j: j / k
    static I add(I v, int k) { return _mm512_add_epi32(v, _mm512_set1_epi32(k)); }
};

#else  // AVX2

struct VI {
    using I = __m256i;
    static constexpr int kBytes = 32;
    static I load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
    static I load_n(const void* p, int n) {
        alignas(32) uint8_t tmp[32] = {};
        std::memcpy(tmp, p, static_cast<size_t>(n));
        return _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp));
    }
    static I zero() { return _mm256_setzero_si256(); }
    static I lo4(I v) { return _mm256_and_si256(v, _mm256_set1_epi8(15)); }
    static I hi4(I v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15)); }
    template <bool kVnni>
    static I dot(I acc, I u, I s) {
        static_assert(!kVnni, "the AVX2 level has no VNNI path");
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
    }
    static I dot_split(I lo, I hi, I s) {
        return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(hi, s), _mm256_set1_epi16(16)),
                                _mm256_madd_epi16(_mm256_maddubs_epi16(lo, s), _mm256_set1_epi16(1)));
    }
    static V::T cvt(I v) { return _mm256_cvtepi32_ps(v); }
    static V::T permute(V::T v, I idx) { return _mm256_permutevar8x32_ps(v, idx); }
    static I iota_div(int k) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(div_table(k))); }
    static I add(I v, int k) { return _mm256_add_epi32(v, _mm256_set1_epi32(k)); }
};

#endif

template <WType K, bool kVnni, int R, int T>
void tile_i8(const WeightView& W, const ActI8& a, float* y, int r, int t) {
    constexpr bool kQ4 = K == WType::Q4;
    constexpr int kChunkCols = kQ4 ? 2 * VI::kBytes : VI::kBytes;
    constexpr int kChunkBlocks = kChunkCols / 32;
    constexpr int kLanesPerBlock = kQ4 ? 4 : 8;
    static_assert(V::W % kChunkBlocks == 0, "a span of V::W blocks holds whole chunks");
    const int cols = W.cols, nb = cols / 32;
    const int ng = cols / W.group_size, bpg = W.group_size / 32;
    const size_t row_bytes = kQ4 ? static_cast<size_t>(cols) / 2 : static_cast<size_t>(cols);
    const typename VI::I lane_block = VI::iota_div(kLanesPerBlock);  // lane -> block in the chunk
    const typename VI::I block_group = VI::iota_div(bpg);            // block -> group in the span
    V::T acc[R][T];
    for (int i = 0; i < R; ++i) {
        for (int j = 0; j < T; ++j) acc[i][j] = V::zero();
    }
    // Spans of V::W blocks: each row's block scales in one vector, the zero points after the span.
    for (int s0 = 0; s0 < nb; s0 += V::W) {
        const int ns = nb - s0 < V::W ? nb - s0 : V::W;
        const int g0 = s0 / bpg, gn = (ns + bpg - 1) / bpg;
        V::T vs[R];
        for (int i = 0; i < R; ++i) {
            const V::T g = V::load_h_n(W.scales + static_cast<size_t>(r + i) * ng + g0, gn);
            vs[i] = bpg == 1 ? g : VI::permute(g, block_group);
        }
        for (int cb = 0; cb < ns; cb += kChunkBlocks) {
            const int col0 = (s0 + cb) * 32;
            const size_t chunk = static_cast<size_t>(s0 + cb) / kChunkBlocks;
            const int nbytes = kQ4 ? (cols - col0) / 2 : cols - col0;
            const typename VI::I idx = VI::add(lane_block, cb);
            V::T es[R];
            typename VI::I w0[R], w1[R];
            for (int i = 0; i < R; ++i) {
                es[i] = VI::permute(vs[i], idx);
                const uint8_t* p = W.data + static_cast<size_t>(r + i) * row_bytes + (kQ4 ? col0 / 2 : col0);
                const typename VI::I v = nbytes >= VI::kBytes ? VI::load(p) : VI::load_n(p, nbytes);
                if constexpr (kQ4 || !kVnni) {
                    w0[i] = VI::lo4(v);
                    w1[i] = VI::hi4(v);
                } else {
                    w0[i] = v;
                    w1[i] = v;
                }
            }
            for (int j = 0; j < T; ++j) {
                const int8_t* xq = a.q + static_cast<size_t>(t + j) * a.q_stride + chunk * kChunkCols;
                const V::T edx = V::load(a.edx + static_cast<size_t>(t + j) * a.e_stride + chunk * V::W);
                const typename VI::I x0 = VI::load(xq);
                if constexpr (kQ4) {
                    const typename VI::I x1 = VI::load(xq + VI::kBytes);
                    for (int i = 0; i < R; ++i) {
                        const typename VI::I d =
                            VI::template dot<kVnni>(VI::template dot<kVnni>(VI::zero(), w0[i], x0), w1[i], x1);
                        acc[i][j] = V::fma(V::mul(VI::cvt(d), es[i]), edx, acc[i][j]);
                    }
                } else {
                    for (int i = 0; i < R; ++i) {
                        typename VI::I d;
                        if constexpr (kVnni) {
                            d = VI::template dot<true>(VI::zero(), w0[i], x0);
                        } else {
                            d = VI::dot_split(w0[i], w1[i], x0);
                        }
                        acc[i][j] = V::fma(V::mul(VI::cvt(d), es[i]), edx, acc[i][j]);
                    }
                }
            }
        }
        for (int i = 0; i < R; ++i) {  // m_b = -(z_b * s_b), one fma per span and token
            const V::T g = V::load_h_n(W.zeros + static_cast<size_t>(r + i) * ng + g0, gn);
            const V::T m = V::neg(V::mul(bpg == 1 ? g : VI::permute(g, block_group), vs[i]));
            for (int j = 0; j < T; ++j) {
                acc[i][j] = V::fma(m, V::load(a.dsx + static_cast<size_t>(t + j) * a.s_stride + s0), acc[i][j]);
            }
        }
    }
    for (int j = 0; j < T; ++j) {
        for (int i = 0; i < R; ++i) y[static_cast<size_t>(t + j) * W.rows + r + i] = V::hsum(acc[i][j]);
    }
}

template <WType K, bool kVnni, int T>
void rows_pass_i8(const WeightView& W, const ActI8& a, float* y, int t, int r0, int r1) {
    constexpr int R = V::row_tile(T);
    int r = r0;
    for (; r + R <= r1; r += R) tile_i8<K, kVnni, R, T>(W, a, y, r, t);
    for (; r < r1; ++r) tile_i8<K, kVnni, 1, T>(W, a, y, r, t);
}

template <WType K, bool kVnni, int T = V::kTokTile - 1>
void rows_pass_rest_i8(const WeightView& W, const ActI8& a, float* y, int t, int rest, int r0, int r1) {
    if constexpr (T >= 1) {
        if (rest == T) {
            rows_pass_i8<K, kVnni, T>(W, a, y, t, r0, r1);
        } else {
            rows_pass_rest_i8<K, kVnni, T - 1>(W, a, y, t, rest, r0, r1);
        }
    }
}

// Rows in blocks of about kBlockBytes of codes, every token tile over one block before the next
// (as matmul_kind): with many tokens the block stays in L2.
template <WType K, bool kVnni>
void matmul_kind_i8(const WeightView& W, const ActI8& a, int n_tok, float* y, int r0, int r1) {
    constexpr size_t kBlockBytes = 192 * 1024;
    const size_t row_bytes = static_cast<size_t>(W.cols) * (K == WType::Q4 ? 4 : 8) / 8 + 1;
    int block = n_tok <= V::kTokTile ? r1 - r0 : static_cast<int>(kBlockBytes / row_bytes) / 4 * 4;
    if (block < 4) block = 4;
    for (int b0 = r0; b0 < r1; b0 += block) {
        const int b1 = r1 - b0 < block ? r1 : b0 + block;
        int t = 0;
        for (; t + V::kTokTile <= n_tok; t += V::kTokTile) rows_pass_i8<K, kVnni, V::kTokTile>(W, a, y, t, b0, b1);
        if (t < n_tok) rows_pass_rest_i8<K, kVnni>(W, a, y, t, n_tok - t, b0, b1);
    }
}

template <bool kVnni>
void matmul_rows_i8_simd(const WeightView& W, const ActI8& a, int n_tok, float* y, int r0, int r1) {
    if (W.type == WType::Q4) {
        matmul_kind_i8<WType::Q4, kVnni>(W, a, n_tok, y, r0, r1);
    } else {
        matmul_kind_i8<WType::Q8, kVnni>(W, a, n_tok, y, r0, r1);
    }
}

}  // namespace
}  // namespace tinyloop::kern::detail
