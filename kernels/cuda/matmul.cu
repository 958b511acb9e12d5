// The dequantizing matrix product for decode and verification (FORMAT.md §2, kern::matmul_ref):
//   y[t, r] = sum_c W[r, c] * x[t, c],  W[r, c] = scale[r, c / gs] * (q[r, c] - zero[r, c / gs])
//
// One warp per output row r. Lane l walks the packs of eight columns l, l + 32, ... in order,
// dequantizes each pack once (the codes stay packed in memory) and multiplies it into up to TT
// tokens' accumulators; the 32 partial sums then meet in one fixed butterfly. The sequence of
// operations for (t, r) is the same whatever n_tok or the token tile TT, so a row's bits never
// depend on the number of rows in the call (batch invariance, checked by the op test).
// Two fused forms save launches in the decode step: y += W x (the residual add) and
// silu(W_gate x) * (W_up x) (SwiGLU), each the same bits as the unfused ops.
#include <cstdint>

#include "kernels/cuda/matmul_rows.cuh"

namespace tinyloop::kern::cuda {

namespace {

constexpr int kWarps = 8;  // rows per block

enum Mode { kStore, kAccumulate, kSwiglu };

// kStore: y = W x; kAccumulate: y += W x (the residual add, one rounding as add_inplace);
// kSwiglu: y = silu(W x) * (U x), as silu_mul after two products (same bits).
template <int TT, bool kPack, int kMode>
__global__ void matmul_kernel(WeightView W, WeightView U, const float* x, int n_tok, float* y) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (r >= W.rows) return;
    for (int t0 = 0; t0 < n_tok; t0 += TT) {
        const int nt = min(TT, n_tok - t0);
        float acc[TT], acc_u[TT];
        row_partials<TT, kPack>(W, r, x, t0, nt, lane, acc);
        if (kMode == kSwiglu) row_partials<TT, kPack>(U, r, x, t0, nt, lane, acc_u);
#pragma unroll
        for (int j = 0; j < TT; ++j) {
            const float s = warp_sum(acc[j]);
            float u = 0.0f;
            if (kMode == kSwiglu) u = warp_sum(acc_u[j]);
            if (lane == 0 && j < nt) {
                float* o = y + static_cast<size_t>(t0 + j) * W.rows + r;
                if (kMode == kStore) *o = s;
                else if (kMode == kAccumulate) *o = *o + s;
                else *o = s * u / (1.0f + expf(-s));
            }
        }
    }
}

// Three products of the same x in one launch (q, k, v): warps [0, A.rows) compute A's rows into
// ya, the next B.rows into yb, the rest into yc. Each row exactly as matmul_kernel's kStore.
template <int TT, bool kPack>
__global__ void matmul3_kernel(WeightView A, WeightView B, WeightView C, const float* x, int n_tok, float* ya,
                               float* yb, float* yc) {
    const int lane = threadIdx.x & 31;
    int r = blockIdx.x * kWarps + (threadIdx.x >> 5);
    // The chosen view copied into registers: a pointer to a kernel parameter (&A) forces the
    // parameters into a 144-byte local-memory copy (the ptxas audit's stack frame).
    WeightView W = A;
    float* y = ya;
    if (r >= A.rows) {
        r -= A.rows;
        W = B;
        y = yb;
        if (r >= B.rows) {
            r -= B.rows;
            W = C;
            y = yc;
            if (r >= C.rows) return;
        }
    }
    for (int t0 = 0; t0 < n_tok; t0 += TT) {
        const int nt = min(TT, n_tok - t0);
        float acc[TT];
        row_partials<TT, kPack>(W, r, x, t0, nt, lane, acc);
#pragma unroll
        for (int j = 0; j < TT; ++j) {
            const float s = warp_sum(acc[j]);
            if (lane == 0 && j < nt) y[static_cast<size_t>(t0 + j) * W.rows + r] = s;
        }
    }
}

template <bool kPack>
void launch3(Context& ctx, const WeightView& A, const WeightView& B, const WeightView& C, const float* x, int n_tok,
             float* ya, float* yb, float* yc) {
    const size_t rows = static_cast<size_t>(A.rows) + B.rows + C.rows;
    const dim3 grid(blocks_for(rows, kWarps)), block(32 * kWarps);
    cudaStream_t s = stream_of(ctx);
    if (n_tok == 1) matmul3_kernel<1, kPack><<<grid, block, 0, s>>>(A, B, C, x, n_tok, ya, yb, yc);
    else if (n_tok == 2) matmul3_kernel<2, kPack><<<grid, block, 0, s>>>(A, B, C, x, n_tok, ya, yb, yc);
    else if (n_tok <= 4) matmul3_kernel<4, kPack><<<grid, block, 0, s>>>(A, B, C, x, n_tok, ya, yb, yc);
    else matmul3_kernel<8, kPack><<<grid, block, 0, s>>>(A, B, C, x, n_tok, ya, yb, yc);
    TL_CUDA_LAUNCHED();
}

template <bool kPack, int kMode>
void launch(Context& ctx, const WeightView& W, const WeightView& U, const float* x, int n_tok, float* y) {
    const dim3 grid(blocks_for(static_cast<size_t>(W.rows), kWarps)), block(32 * kWarps);
    cudaStream_t s = stream_of(ctx);
    if (n_tok == 1) matmul_kernel<1, kPack, kMode><<<grid, block, 0, s>>>(W, U, x, n_tok, y);
    else if (n_tok == 2) matmul_kernel<2, kPack, kMode><<<grid, block, 0, s>>>(W, U, x, n_tok, y);
    else if (n_tok <= 4) matmul_kernel<4, kPack, kMode><<<grid, block, 0, s>>>(W, U, x, n_tok, y);
    else matmul_kernel<8, kPack, kMode><<<grid, block, 0, s>>>(W, U, x, n_tok, y);
    TL_CUDA_LAUNCHED();
}

template <int kMode>
void dispatch(Context& ctx, const WeightView& W, const WeightView& U, const float* x, int n_tok, float* y) {
    if (n_tok <= 0 || W.rows <= 0) return;
    // The vector path loads x as float4: it needs 16-byte aligned rows of x as well.
    const bool pack = pack8_ok(W) && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(W.data) % 16 == 0 &&
                      (kMode != kSwiglu || (pack8_ok(U) && reinterpret_cast<uintptr_t>(U.data) % 16 == 0));
    if (pack) launch<true, kMode>(ctx, W, U, x, n_tok, y);
    else launch<false, kMode>(ctx, W, U, x, n_tok, y);
}

}  // namespace

void matmul(Context& ctx, const WeightView& W, const float* x, int n_tok, float* y, bool accumulate) {
    if (accumulate) dispatch<kAccumulate>(ctx, W, W, x, n_tok, y);
    else dispatch<kStore>(ctx, W, W, x, n_tok, y);
}

void matmul3(Context& ctx, const WeightView& A, const WeightView& B, const WeightView& C, const float* x, int n_tok,
             float* ya, float* yb, float* yc) {
    if (A.cols != B.cols || A.cols != C.cols)
        throw CudaError("matmul3: the three weights must have the same number of columns", false);
    if (n_tok <= 0) return;
    auto ok = [](const WeightView& W) { return pack8_ok(W) && reinterpret_cast<uintptr_t>(W.data) % 16 == 0; };
    // the vector path must be chosen exactly as matmul would choose it for each weight alone
    const bool x_ok = reinterpret_cast<uintptr_t>(x) % 16 == 0;
    const bool pa = ok(A) && x_ok, pb = ok(B) && x_ok, pc = ok(C) && x_ok;
    if (pa && pb && pc) launch3<true>(ctx, A, B, C, x, n_tok, ya, yb, yc);
    else if (!pa && !pb && !pc) launch3<false>(ctx, A, B, C, x, n_tok, ya, yb, yc);
    else {  // mixed layouts: three launches, the same bits
        matmul(ctx, A, x, n_tok, ya);
        matmul(ctx, B, x, n_tok, yb);
        matmul(ctx, C, x, n_tok, yc);
    }
}

void matmul_swiglu(Context& ctx, const WeightView& gate, const WeightView& up, const float* x, int n_tok, float* out) {
    if (gate.rows != up.rows || gate.cols != up.cols)
        throw CudaError("matmul_swiglu: gate [" + std::to_string(gate.rows) + ", " + std::to_string(gate.cols) +
                            "] and up [" + std::to_string(up.rows) + ", " + std::to_string(up.cols) + "] differ in shape",
                        false);
    dispatch<kSwiglu>(ctx, gate, up, x, n_tok, out);
}

}  // namespace tinyloop::kern::cuda
