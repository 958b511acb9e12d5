// The SIMD matmul (math and contract: matmul.cpp), written once over the vector type V of
// simd.h and compiled once per instruction set by ops_avx512.cpp / ops_avx2.cpp.
//
// A tile is R rows x T tokens. Per row it unpacks a 32-column block of codes into weights in
// registers, w = fma(q, scale, -zero*scale): q8 (and q4 on AVX2) by int->float conversion and an
// fma, q4/q2 by a per-group table of all code values and one shuffle per vector. It then feeds
// every token of the tile from those registers: weight reuse for prefill, R independent
// accumulator chains for decode. acc[i][j] sees exactly the same fma sequence for any R and T,
// and hsum has one order, so y[t, r] never depends on the tiling.
#pragma once

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/simd.h"

namespace tinyloop::kern::detail {
namespace {

constexpr int kNB = 32 / V::W;  // vectors per 32-column block

// Scale s and offset m = -(zero * s) of groups [g0, g0 + n) of one row, as floats.
inline void group_params(const uint16_t* scales, const uint16_t* zeros, int n, float* s, float* m) {
    for (int i = 0; i < n; i += V::W) {
        const int k = n - i < V::W ? n - i : V::W;
        const V::T vs = V::load_h_n(scales + i, k), vz = V::load_h_n(zeros + i, k);
        V::store_n(s + i, vs, k);
        V::store_n(m + i, V::neg(V::mul(vz, vs)), k);
    }
}

template <WType K>
void decode_block(const uint8_t* p, V::T* q) {
    if constexpr (K == WType::Q8) {
        V::q8(p, q);
    } else if constexpr (K == WType::Q4) {
        V::q4(p, q);
    } else {
        V::q2(p, q);
    }
}

// Weights of a 32-column block: by table lookup (tbl from group_table) or by cvt + fma.
template <WType K>
constexpr bool kUsesTable = (K == WType::Q4 && V::kLutQ4) || K == WType::Q2;

template <WType K>
V::T group_table(float s, float m) {
    return V::fma(K == WType::Q4 ? V::lut_iota_q4() : V::lut_iota_q2(), V::set1(s), V::set1(m));
}

template <WType K>
void block_weights(const uint8_t* p, float s, float m, V::T tbl, V::T* w) {
    if constexpr (kUsesTable<K>) {
        if constexpr (K == WType::Q4) {
            V::q4_lut(p, tbl, w);
        } else {
            V::q2_lut(p, tbl, w);
        }
    } else {
        decode_block<K>(p, w);
        const V::T vs = V::set1(s), vm = V::set1(m);
        for (int u = 0; u < kNB; ++u) w[u] = V::fma(w[u], vs, vm);
    }
}

template <WType K, int R, int T>
void tile_quant(const WeightView& W, const float* x, float* y, int r, int t) {
    constexpr int bits = K == WType::Q8 ? 8 : K == WType::Q4 ? 4 : 2;
    // All R rows' weights of a block in registers at once when they fit; else row by row.
    constexpr bool kRowsFirst = R * kNB + R * T + 2 <= V::kRegs;
    constexpr int kGC = 32;  // groups whose scales are unpacked at a time
    const int cols = W.cols;
    const int ng = cols / W.group_size;
    const int bpg = W.group_size / 32;  // blocks per group
    const size_t row_bytes = static_cast<size_t>(cols) * bits / 8;
    alignas(64) float sc[R][kGC], mc[R][kGC];
    V::T acc[R][T];
    for (int i = 0; i < R; ++i) {
        for (int j = 0; j < T; ++j) acc[i][j] = V::zero();
    }
    for (int g0 = 0; g0 < ng; g0 += kGC) {
        const int gn = ng - g0 < kGC ? ng - g0 : kGC;
        for (int i = 0; i < R; ++i) {
            const size_t off = static_cast<size_t>(r + i) * ng + g0;
            group_params(W.scales + off, W.zeros + off, gn, sc[i], mc[i]);
        }
        for (int g = 0; g < gn; ++g) {
            V::T tbl[R];
            for (int i = 0; i < R; ++i) tbl[i] = kUsesTable<K> ? group_table<K>(sc[i][g], mc[i][g]) : V::zero();
            for (int b = 0; b < bpg; ++b) {
                const int k = ((g0 + g) * bpg + b) * 32;
                if constexpr (kRowsFirst) {
                    V::T w[R][kNB];
                    for (int i = 0; i < R; ++i) {
                        block_weights<K>(W.data + static_cast<size_t>(r + i) * row_bytes + k * bits / 8,
                                         sc[i][g], mc[i][g], tbl[i], w[i]);
                    }
                    for (int j = 0; j < T; ++j) {
                        const float* xj = x + static_cast<size_t>(t + j) * cols + k;
                        for (int u = 0; u < kNB; ++u) {
                            const V::T xv = V::load(xj + u * V::W);
                            for (int i = 0; i < R; ++i) acc[i][j] = V::fma(w[i][u], xv, acc[i][j]);
                        }
                    }
                } else {
                    for (int i = 0; i < R; ++i) {
                        V::T w[kNB];
                        block_weights<K>(W.data + static_cast<size_t>(r + i) * row_bytes + k * bits / 8,
                                         sc[i][g], mc[i][g], tbl[i], w);
                        for (int j = 0; j < T; ++j) {
                            const float* xj = x + static_cast<size_t>(t + j) * cols + k;
                            for (int u = 0; u < kNB; ++u) acc[i][j] = V::fma(w[u], V::load(xj + u * V::W), acc[i][j]);
                        }
                    }
                }
            }
        }
    }
    for (int j = 0; j < T; ++j) {
        for (int i = 0; i < R; ++i) y[static_cast<size_t>(t + j) * W.rows + r + i] = V::hsum(acc[i][j]);
    }
}

template <WType K>
V::T load_w(const uint8_t* data, size_t off) {
    if constexpr (K == WType::F32) {
        return V::load(reinterpret_cast<const float*>(data) + off);
    } else if constexpr (K == WType::BF16) {
        return V::load_bf(reinterpret_cast<const uint16_t*>(data) + off);
    } else {
        return V::load_h(reinterpret_cast<const uint16_t*>(data) + off);
    }
}
template <WType K>
V::T load_w_n(const uint8_t* data, size_t off, int n) {
    if constexpr (K == WType::F32) {
        return V::load_n(reinterpret_cast<const float*>(data) + off, n);
    } else if constexpr (K == WType::BF16) {
        return V::load_bf_n(reinterpret_cast<const uint16_t*>(data) + off, n);
    } else {
        return V::load_h_n(reinterpret_cast<const uint16_t*>(data) + off, n);
    }
}

template <WType K, int R, int T>
void tile_float(const WeightView& W, const float* x, float* y, int r, int t) {
    const int cols = W.cols;
    V::T acc[R][T];
    for (int i = 0; i < R; ++i) {
        for (int j = 0; j < T; ++j) acc[i][j] = V::zero();
    }
    int k = 0;
    for (; k + V::W <= cols; k += V::W) {
        V::T w[R];
        for (int i = 0; i < R; ++i) w[i] = load_w<K>(W.data, static_cast<size_t>(r + i) * cols + k);
        for (int j = 0; j < T; ++j) {
            const V::T xv = V::load(x + static_cast<size_t>(t + j) * cols + k);
            for (int i = 0; i < R; ++i) acc[i][j] = V::fma(w[i], xv, acc[i][j]);
        }
    }
    if (k < cols) {  // zero-filled lanes add 0*0 to a +0-started accumulator: no effect
        const int n = cols - k;
        for (int i = 0; i < R; ++i) {
            const V::T w = load_w_n<K>(W.data, static_cast<size_t>(r + i) * cols + k, n);
            for (int j = 0; j < T; ++j) {
                acc[i][j] = V::fma(w, V::load_n(x + static_cast<size_t>(t + j) * cols + k, n), acc[i][j]);
            }
        }
    }
    for (int j = 0; j < T; ++j) {
        for (int i = 0; i < R; ++i) y[static_cast<size_t>(t + j) * W.rows + r + i] = V::hsum(acc[i][j]);
    }
}

template <WType K, int R, int T>
void tile(const WeightView& W, const float* x, float* y, int r, int t) {
    if constexpr (K == WType::F32 || K == WType::F16 || K == WType::BF16) {
        tile_float<K, R, T>(W, x, y, r, t);
    } else {
        tile_quant<K, R, T>(W, x, y, r, t);
    }
}

// The tile of the float kinds (F32, F16, BF16). With 32 vector registers: up to 6 tokens x 4 rows (24
// accumulators + 4 weights + 1 activation), 10 loads per 24 FMAs where 8 x 2 needs 10 per 16.
template <WType K>
constexpr bool kFloatKind = K == WType::F32 || K == WType::F16 || K == WType::BF16;
template <WType K>
constexpr int kTok = kFloatKind<K> && V::kRegs >= 32 ? 6 : V::kTokTile;
template <WType K>
constexpr int row_tile(int tok) {
    return kFloatKind<K> && V::kRegs >= 32 ? 4 : V::row_tile(tok);
}

// Tokens [t, t+T) against rows [r0, r1): full row tiles, then single rows.
template <WType K, int T>
void rows_pass(const WeightView& W, const float* x, float* y, int t, int r0, int r1) {
    constexpr int R = row_tile<K>(T);
    int r = r0;
    for (; r + R <= r1; r += R) tile<K, R, T>(W, x, y, r, t);
    for (; r < r1; ++r) tile<K, 1, T>(W, x, y, r, t);
}

template <WType K, int T = kTok<K> - 1>
void rows_pass_rest(const WeightView& W, const float* x, float* y, int t, int rest, int r0, int r1) {
    if constexpr (T >= 1) {
        if (rest == T) {
            rows_pass<K, T>(W, x, y, t, r0, r1);
        } else {
            rows_pass_rest<K, T - 1>(W, x, y, t, rest, r0, r1);
        }
    }
}

// Rows in blocks of about kBlockBytes of weights, every token tile over one block before the
// next: with many tokens the block stays in L2 instead of streaming the matrix once per tile.
template <WType K>
void matmul_kind(const WeightView& W, const float* x, int n_tok, float* y, int r0, int r1) {
    constexpr size_t kBlockBytes = 192 * 1024;
    const size_t row_bytes = static_cast<size_t>(W.cols) * wtype_bits(K) / 8 + 1;
    int block = n_tok <= kTok<K> ? r1 - r0 : static_cast<int>(kBlockBytes / row_bytes) / 4 * 4;
    if (block < 4) block = 4;
    for (int b0 = r0; b0 < r1; b0 += block) {
        const int b1 = r1 - b0 < block ? r1 : b0 + block;
        int t = 0;
        for (; t + kTok<K> <= n_tok; t += kTok<K>) rows_pass<K, kTok<K>>(W, x, y, t, b0, b1);
        if (t < n_tok) rows_pass_rest<K>(W, x, y, t, n_tok - t, b0, b1);
    }
}

void matmul_rows_simd(const WeightView& W, const float* x, int n_tok, float* y, int r0, int r1) {
    switch (W.type) {
        case WType::F32: matmul_kind<WType::F32>(W, x, n_tok, y, r0, r1); return;
        case WType::F16: matmul_kind<WType::F16>(W, x, n_tok, y, r0, r1); return;
        case WType::BF16: matmul_kind<WType::BF16>(W, x, n_tok, y, r0, r1); return;
        case WType::Q8: matmul_kind<WType::Q8>(W, x, n_tok, y, r0, r1); return;
        case WType::Q4: matmul_kind<WType::Q4>(W, x, n_tok, y, r0, r1); return;
        case WType::Q2: matmul_kind<WType::Q2>(W, x, n_tok, y, r0, r1); return;
    }
}

}  // namespace
}  // namespace tinyloop::kern::detail
