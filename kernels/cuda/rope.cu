// RoPE, half-split (FORMAT.md §1; kern::rope_ref): for token t at position p, each head,
// pair (i, i + hd/2) rotated by p * theta^(-2i/hd). The angle, cos and sin in double, rounded
// to float once; then x0*c - x1*s and x0*s + x1*c with explicit round-to-nearest products and
// no fma, the CPU's exact sequence. The results equal the CPU's bit for bit wherever CUDA's
// double pow/cos/sin round to the same float as the host's libm (nearly always; the op test
// bounds the difference and records the exact fraction as rope_exact_fraction).
#include "kernels/cuda/common.cuh"

namespace tinyloop::kern::cuda {

namespace {

// One thread per (token, pair i); it rotates that pair in every head.
__global__ void rope_kernel(float* x, int n_tok, int n_heads, int head_dim, const int* positions, float theta) {
    const int half = head_dim / 2;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_tok * half) return;
    const int t = idx / half, i = idx % half;
    const double ang = static_cast<double>(positions[t]) * pow(static_cast<double>(theta), -2.0 * i / head_dim);
    const float c = static_cast<float>(cos(ang)), s = static_cast<float>(sin(ang));
    for (int h = 0; h < n_heads; ++h) {
        float* xh = x + (static_cast<size_t>(t) * n_heads + h) * head_dim;
        const float x0 = xh[i], x1 = xh[i + half];
        xh[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        xh[i + half] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

}  // namespace

void rope(Context& ctx, float* x, int n_tok, int n_heads, int head_dim, const int* positions, float theta) {
    if (n_tok <= 0 || n_heads <= 0 || head_dim < 2) return;
    const size_t n = static_cast<size_t>(n_tok) * (head_dim / 2);
    rope_kernel<<<blocks_for(n, 128), 128, 0, stream_of(ctx)>>>(x, n_tok, n_heads, head_dim, positions, theta);
    TL_CUDA_LAUNCHED();
}

}  // namespace tinyloop::kern::cuda
