// One output row's partial products, the sequence every batch-invariant product on the
// device shares (matmul.cu's kernels and the fast decode step's fused ones in decode_fast.cu):
// the same operations in the same order for (r, t), so a fused kernel that feeds the same x
// (from shared memory instead of global) gives the same bits as matmul.
#pragma once

#include "kernels/cuda/dequant.cuh"

namespace tinyloop::kern::cuda {

template <int TT, bool kPack>
__device__ __forceinline__ void row_partials_any(const WeightView& W, int r, const float* x, int t0, int nt, int lane,
                                                 float* acc);

// W with its type a compile-time constant (the value W already holds).
template <WType kType>
__device__ __forceinline__ WeightView with_type(const WeightView& W) {
    WeightView V = W;
    V.type = kType;
    return V;
}

// acc[j] = sum_c W[r, c] x[t0 + j, c] for j < nt, each lane's partial over its packs (or
// columns) in order; the caller finishes with warp_sum. One fixed sequence per (r, t).
template <int TT, bool kPack>
__device__ __forceinline__ void row_partials(const WeightView& W, int r, const float* x, int t0, int nt, int lane,
                                             float* acc) {
    if (TT == 1 && kPack) {
        // one row (the decode step's products): the loop specialised per weight type (a copy of
        // the view whose type is a constant folds weight_pack8's switch), so the unrolled packs'
        // loads are issued together instead of one cache latency per pack (the first H200
        // profile); the same reads and FMAs in the same order: the same bits.
        switch (W.type) {
            case WType::F32: row_partials_any<TT, kPack>(with_type<WType::F32>(W), r, x, t0, nt, lane, acc); return;
            case WType::F16: row_partials_any<TT, kPack>(with_type<WType::F16>(W), r, x, t0, nt, lane, acc); return;
            case WType::BF16: row_partials_any<TT, kPack>(with_type<WType::BF16>(W), r, x, t0, nt, lane, acc); return;
            case WType::Q8: row_partials_any<TT, kPack>(with_type<WType::Q8>(W), r, x, t0, nt, lane, acc); return;
            case WType::Q4: row_partials_any<TT, kPack>(with_type<WType::Q4>(W), r, x, t0, nt, lane, acc); return;
            default: break;
        }
    }
    row_partials_any<TT, kPack>(W, r, x, t0, nt, lane, acc);
}

template <int TT, bool kPack>
__device__ __forceinline__ void row_partials_any(const WeightView& W, int r, const float* x, int t0, int nt, int lane,
                                                 float* acc) {
    const int cols = W.cols;
#pragma unroll
    for (int j = 0; j < TT; ++j) acc[j] = 0.0f;
    if (kPack) {
        const int packs = cols / 8;
        // one row (the decode step's products): unrolled so the packs' loads of four iterations
        // are in flight together (the first H200 profile: a warp waited one cache latency per
        // pack); the same FMAs in the same order, so the same bits. Not for TT > 1: its
        // registers (the prefill's batch-invariant tiles) would spill.
#pragma unroll(TT == 1 ? 4 : 1)
        for (int k = lane; k < packs; k += 32) {
            float w[8];
            weight_pack8(W, r, 8 * k, w);
#pragma unroll
            for (int j = 0; j < TT; ++j) {
                if (j < nt) {
                    const float4* xp = reinterpret_cast<const float4*>(x + static_cast<size_t>(t0 + j) * cols + 8 * k);
                    const float4 a = xp[0], b = xp[1];
                    float s = acc[j];
                    s = fmaf(w[0], a.x, s); s = fmaf(w[1], a.y, s); s = fmaf(w[2], a.z, s); s = fmaf(w[3], a.w, s);
                    s = fmaf(w[4], b.x, s); s = fmaf(w[5], b.y, s); s = fmaf(w[6], b.z, s); s = fmaf(w[7], b.w, s);
                    acc[j] = s;
                }
            }
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            const float w = weight_at(W, r, c);
#pragma unroll
            for (int j = 0; j < TT; ++j)
                if (j < nt) acc[j] = fmaf(w, x[static_cast<size_t>(t0 + j) * cols + c], acc[j]);
        }
    }
}

}  // namespace tinyloop::kern::cuda
