// SwiGLU's elementwise half and the residual add (FORMAT.md §1):
//   out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g)   (CPU: kern::silu_mul_ref)
//   y[i] += x[i]                                                 (CPU: kern::add_inplace)
#include "kernels/cuda/common.cuh"

namespace tinyloop::kern::cuda {

namespace {

__global__ void silu_mul_kernel(const float* gate, const float* up, float* out, size_t n) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    out[i] = g * up[i] / (1.0f + expf(-g));
}

__global__ void add_kernel(float* y, const float* x, size_t n) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

}  // namespace

void silu_mul(Context& ctx, const float* gate, const float* up, float* out, size_t n) {
    if (n == 0) return;
    silu_mul_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(gate, up, out, n);
    TL_CUDA_LAUNCHED();
}

void add_inplace(Context& ctx, float* y, const float* x, size_t n) {
    if (n == 0) return;
    add_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(y, x, n);
    TL_CUDA_LAUNCHED();
}

}  // namespace tinyloop::kern::cuda
