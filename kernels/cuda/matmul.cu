// The dequantizing matrix product for decode and verification (FORMAT.md §2, kern::matmul_ref):
//   y[t, r] = sum_c W[r, c] * x[t, c],  W[r, c] = scale[r, c / gs] * (q[r, c] - zero[r, c / gs])
//
// One warp per output row r. Lane l walks the packs of eight columns l, l + 32, ... in order,
// dequantizes each pack once (the codes stay packed in memory) and multiplies it into up to TT
// tokens' accumulators; the 32 partial sums then meet in one fixed butterfly. The sequence of
// operations for (t, r) is the same whatever n_tok or the token tile TT, so a row's bits never
// depend on the number of rows in the call (batch invariance, checked by the op test).
#include <cstdint>

#include "kernels/cuda/dequant.cuh"

namespace tinyloop::kern::cuda {

namespace {

constexpr int kWarps = 8;  // rows per block

template <int TT, bool kPack>
__global__ void matmul_kernel(WeightView W, const float* x, int n_tok, float* y) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (r >= W.rows) return;
    const int cols = W.cols;
    for (int t0 = 0; t0 < n_tok; t0 += TT) {
        const int nt = min(TT, n_tok - t0);
        float acc[TT];
#pragma unroll
        for (int j = 0; j < TT; ++j) acc[j] = 0.0f;
        if (kPack) {
            const int packs = cols / 8;
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
#pragma unroll
        for (int j = 0; j < TT; ++j) {
            const float s = warp_sum(acc[j]);
            if (lane == 0 && j < nt) y[static_cast<size_t>(t0 + j) * W.rows + r] = s;
        }
    }
}

template <bool kPack>
void launch(Context& ctx, const WeightView& W, const float* x, int n_tok, float* y) {
    const dim3 grid(blocks_for(static_cast<size_t>(W.rows), kWarps)), block(32 * kWarps);
    cudaStream_t s = stream_of(ctx);
    if (n_tok == 1) matmul_kernel<1, kPack><<<grid, block, 0, s>>>(W, x, n_tok, y);
    else if (n_tok == 2) matmul_kernel<2, kPack><<<grid, block, 0, s>>>(W, x, n_tok, y);
    else if (n_tok <= 4) matmul_kernel<4, kPack><<<grid, block, 0, s>>>(W, x, n_tok, y);
    else matmul_kernel<8, kPack><<<grid, block, 0, s>>>(W, x, n_tok, y);
    TL_CUDA_LAUNCHED();
}

}  // namespace

void matmul(Context& ctx, const WeightView& W, const float* x, int n_tok, float* y) {
    if (n_tok <= 0 || W.rows <= 0) return;
    // The vector path loads x as float4: it needs 16-byte aligned rows of x as well.
    const bool pack = pack8_ok(W) && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(W.data) % 16 == 0;
    if (pack) launch<true>(ctx, W, x, n_tok, y);
    else launch<false>(ctx, W, x, n_tok, y);
}

}  // namespace tinyloop::kern::cuda
