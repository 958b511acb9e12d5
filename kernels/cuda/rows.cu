// The row ops of the published looped architectures (FORMAT.md §1b), the CPU's plain loops
// (forward/backend_cpu.cpp: CpuOps::add_rows, scale, concat_rows) on the device:
//   add_rows:    y[t, c] += b[c]                  (qk_bias)
//   scale:       y[i] *= s                        (embed_scale)
//   concat_rows: out[t] = concat(a[t], b[t])      (the adapter's input [h; e])
// Each output element is one float operation or a copy, so the bits equal the CPU's.
#include "kernels/cuda/common.cuh"

namespace tinyloop::kern::cuda {

namespace {

__global__ void add_rows_kernel(float* y, const float* b, size_t total, int cols) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < total) y[i] += b[i % static_cast<size_t>(cols)];
}

__global__ void scale_kernel(float* y, float s, size_t n) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= s;
}

__global__ void concat_kernel(float* out, const float* a, const float* b, size_t total, int da, int db) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const size_t w = static_cast<size_t>(da) + db;
    const size_t t = i / w, c = i % w;
    out[i] = c < static_cast<size_t>(da) ? a[t * da + c] : b[t * db + (c - da)];
}

}  // namespace

void add_rows(Context& ctx, float* y, const float* b, int n, int cols) {
    const size_t total = static_cast<size_t>(n) * cols;
    if (total == 0) return;
    add_rows_kernel<<<blocks_for(total, 256), 256, 0, stream_of(ctx)>>>(y, b, total, cols);
    TL_CUDA_LAUNCHED();
}

void scale(Context& ctx, float* y, float s, size_t n) {
    if (n == 0) return;
    scale_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(y, s, n);
    TL_CUDA_LAUNCHED();
}

void concat_rows(Context& ctx, float* out, const float* a, const float* b, int n, int da, int db) {
    const size_t total = static_cast<size_t>(n) * (static_cast<size_t>(da) + db);
    if (total == 0) return;
    concat_kernel<<<blocks_for(total, 256), 256, 0, stream_of(ctx)>>>(out, a, b, total, da, db);
    TL_CUDA_LAUNCHED();
}

}  // namespace tinyloop::kern::cuda
