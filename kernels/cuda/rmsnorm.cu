// RMSNorm: y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * g (FORMAT.md §1).
// CPU twin: kern::rmsnorm_ref (sum of squares in double). Here: one block per row, each
// thread sums its strided elements in order, then block_sum's fixed tree, so a row's bits do
// not depend on the number of rows.
#include "kernels/cuda/common.cuh"

namespace tinyloop::kern::cuda {

namespace {

__global__ void rmsnorm_kernel(const float* x, const float* g, int d, float eps, float* y) {
    __shared__ float red[32];
    const size_t off = static_cast<size_t>(blockIdx.x) * d;
    const float* xt = x + off;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss = fmaf(xt[i], xt[i], ss);
    ss = block_sum(ss, red);
    const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
    float* yt = y + off;
    for (int i = threadIdx.x; i < d; i += blockDim.x) yt[i] = xt[i] * inv * g[i];
}

}  // namespace

void rmsnorm(Context& ctx, const float* x, const float* g, int n_tok, int d, float eps, float* y) {
    if (n_tok <= 0 || d <= 0) return;
    rmsnorm_kernel<<<n_tok, 256, 0, stream_of(ctx)>>>(x, g, d, eps, y);
    TL_CUDA_LAUNCHED();
}

}  // namespace tinyloop::kern::cuda
