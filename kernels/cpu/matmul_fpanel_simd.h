// The float panel matmul (layout and order: matmul.cpp, "Float panels"), written once over the
// vector type V of simd.h and compiled once per instruction set by ops_avx512.cpp / ops_avx2.cpp.
//
// A panel is 16 output rows, stored [k][16]: one AVX-512 vector (two AVX2 vectors) holds the 16
// rows' weights at column k, and lane l of an accumulator is output row 16 p + l. Per column k
// the tile broadcasts x[t, k] of each of its T tokens and multiplies it by the vectors of its P
// panels: P * T independent chains, each one output's fma chain over the block's k in order;
// after each block of kFPanelBlock columns the tile adds its chains to the outputs' running sums
// (tot), in block order. No horizontal sum, no reordering: every output has the bits of matmul_f32_panel_ref for any P, T, row block
// or thread split, and at every SIMD level.
#pragma once

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/simd.h"

namespace tinyloop::kern::detail {
namespace {

constexpr int kPanelVecs = 16 / V::W;  // vectors per panel row-set (1 on AVX-512, 2 on AVX2)
// Accumulators a tile may hold (the rest: the panels' weight vectors and one broadcast).
constexpr int kPanelAcc = V::kRegs >= 32 ? 24 : 12;
// Tokens of a full tile (fpanel_token_tile in cpu_internal.h says the same to matmul, which packs
// the activations in tiles of this many): 2 panels x 12 tokens on AVX-512 (24 accumulators, 2 weight loads and 12
// broadcasts per 24 FMAs; measured ahead of 3 x 8 and 4 x 6 by ~10% on the d512 matrices).
constexpr int kPanelTok = V::kRegs >= 32 ? 12 : 6;
constexpr int kPanelMax = V::kRegs >= 32 ? 8 : 3;   // panels of a tile at most (decode)

// Panels of a tile of T tokens: as many as the accumulators allow, at most kPanelMax.
constexpr int panel_tile(int tok) {
    const int p = kPanelAcc / (tok * kPanelVecs);
    return p < 1 ? 1 : p > kPanelMax ? kPanelMax : p;
}

template <WType K>
V::T load_panel(const uint8_t* pan, size_t idx) {
    if constexpr (K == WType::BF16) {
        return V::load_bf(reinterpret_cast<const uint16_t*>(pan) + idx);
    } else {
        return V::load(reinterpret_cast<const float*>(pan) + idx);
    }
}

// Panels [p, p + P) x tokens [t, t + T); rows past W.rows (the zero padding) are not stored.
// xs: the tile's activations interleaved, xs[k * T + j] = x[t + j, k] (matmul.cpp packs them).
template <WType K, int P, int T>
void fpanel_tile(const WeightView& W, const float* xs, float* y, int p, int t) {
    const int cols = W.cols;
    const size_t pstride = static_cast<size_t>(cols) * 16;  // elements per panel
    const uint8_t* pan = W.fpanels;
    V::T acc[P][T][kPanelVecs];
    alignas(64) float tot[P][T][16];  // the blocks' sums so far (kFPanelBlock columns each)
    for (int k0 = 0; k0 < cols; k0 += kFPanelBlock) {
        for (int i = 0; i < P; ++i) {
            for (int j = 0; j < T; ++j) {
                for (int v = 0; v < kPanelVecs; ++v) acc[i][j][v] = V::zero();
            }
        }
        const int k1 = cols < k0 + kFPanelBlock ? cols : k0 + kFPanelBlock;
        for (int k = k0; k < k1; ++k) {
            V::T w[P][kPanelVecs];
            for (int i = 0; i < P; ++i) {
                for (int v = 0; v < kPanelVecs; ++v) {
                    w[i][v] = load_panel<K>(pan, static_cast<size_t>(p + i) * pstride + static_cast<size_t>(k) * 16 + v * V::W);
                }
            }
            for (int j = 0; j < T; ++j) {
                const V::T xb = V::set1(xs[static_cast<size_t>(k) * T + j]);
                for (int i = 0; i < P; ++i) {
                    for (int v = 0; v < kPanelVecs; ++v) acc[i][j][v] = V::fma(w[i][v], xb, acc[i][j][v]);
                }
            }
        }
        for (int i = 0; i < P; ++i) {
            for (int j = 0; j < T; ++j) {
                for (int v = 0; v < kPanelVecs; ++v) {
                    float* s = &tot[i][j][v * V::W];
                    V::store(s, k0 == 0 ? acc[i][j][v] : V::add(V::load(s), acc[i][j][v]));
                }
            }
        }
    }
    for (int i = 0; i < P; ++i) {
        for (int j = 0; j < T; ++j) {
            for (int v = 0; v < kPanelVecs; ++v) acc[i][j][v] = V::load(&tot[i][j][v * V::W]);
        }
    }
    for (int i = 0; i < P; ++i) {
        const int r = (p + i) * 16;
        for (int v = 0; v < kPanelVecs; ++v) {
            const int n = W.rows - (r + v * V::W);
            if (n <= 0) break;
            for (int j = 0; j < T; ++j) {
                float* out = y + static_cast<size_t>(t + j) * W.rows + r + v * V::W;
                if (n >= V::W) {
                    V::store(out, acc[i][j][v]);
                } else {
                    V::store_n(out, acc[i][j][v], n);
                }
            }
        }
    }
}

// The last n < panel_tile(T) panels of a pass in one tile of n panels (n chains per token: a
// thread's few panels of a decode step still overlap their FMA latencies).
template <WType K, int T, int Q>
void fpanel_rest(const WeightView& W, const float* xt, float* y, int p, int t, int n) {
    if constexpr (Q >= 1) {
        if (n == Q) {
            fpanel_tile<K, Q, T>(W, xt, y, p, t);
        } else {
            fpanel_rest<K, T, Q - 1>(W, xt, y, p, t, n);
        }
    }
}

// Tokens [t, t + T) over panels [p0, p1): tiles of panel_tile(T) panels, then one smaller tile.
// xs: the packed activations of all tokens; this tile's start at t * cols.
template <WType K, int T>
void fpanel_pass(const WeightView& W, const float* xs, float* y, int t, int p0, int p1) {
    constexpr int P = panel_tile(T);
    const float* xt = xs + static_cast<size_t>(t) * W.cols;
    int p = p0;
    for (; p + P <= p1; p += P) fpanel_tile<K, P, T>(W, xt, y, p, t);
    if (p < p1) fpanel_rest<K, T, P - 1>(W, xt, y, p, t, p1 - p);
}

template <WType K, int T>
void fpanel_pass_rest(const WeightView& W, const float* x, float* y, int t, int rest, int p0, int p1) {
    if constexpr (T >= 1) {
        if (rest == T) {
            fpanel_pass<K, T>(W, x, y, t, p0, p1);
        } else {
            fpanel_pass_rest<K, T - 1>(W, x, y, t, rest, p0, p1);
        }
    }
}

// Tiles of TT tokens (kPanelTok). Panels in blocks of about kBlockBytes, every token tile over
// one block before the next: with many tokens the block stays in L2 instead of streaming the
// matrix once per tile.
template <WType K, int TT>
void fpanel_kind(const WeightView& W, const float* x, int n_tok, float* y, int r0, int r1) {
    constexpr size_t kBlockBytes = 512 * 1024;  // 256 KiB to 1 MiB measured alike (L2: 2 MiB)
    const size_t panel_bytes = static_cast<size_t>(W.cols) * 16 * (K == WType::BF16 ? 2 : 4);
    const int pa = r0 / 16, pb = (r1 + 15) / 16;
    constexpr int P = panel_tile(TT);
    // One token tile: all panels in one block. Else whole tiles of P panels (no single-panel rest).
    int block = pb - pa;
    if (n_tok > TT) {
        block = static_cast<int>(kBlockBytes / panel_bytes) / P * P;
        if (block < P) block = P;
    }
    const float* xs = x;  // packed by matmul (pack_float_panel_tokens) in tiles of TT tokens
    for (int b0 = pa; b0 < pb; b0 += block) {
        const int b1 = pb - b0 < block ? pb : b0 + block;
        int t = 0;
        for (; t + TT <= n_tok; t += TT) fpanel_pass<K, TT>(W, xs, y, t, b0, b1);
        if (t < n_tok) fpanel_pass_rest<K, TT - 1>(W, xs, y, t, n_tok - t, b0, b1);
    }
}

// Rows [r0, r1) (r0 a multiple of 16; r1 one too, or W.rows) over W.fpanels.
void matmul_rows_fpanels_simd(const WeightView& W, const float* x, int n_tok, float* y, int r0, int r1) {
    if (W.type == WType::BF16) {
        fpanel_kind<WType::BF16, kPanelTok>(W, x, n_tok, y, r0, r1);
    } else {
        fpanel_kind<WType::F32, kPanelTok>(W, x, n_tok, y, r0, r1);
    }
}

}  // namespace
}  // namespace tinyloop::kern::detail
