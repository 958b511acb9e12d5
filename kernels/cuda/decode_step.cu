// The two small ops that let a whole decode step run on the device without the host:
//   store_rows: dst_base[dst_rows[i] * row_floats + j] = src[i * row_floats + j]  (K/V into the
//               cache at positions that live in device memory)
//   advance:    after the step's argmax, the chosen token becomes the next step's input and the
//               position and attention range move on by one.
// A captured decode graph therefore replays unchanged from token to token.
#include "kernels/cuda/common.cuh"

namespace tinyloop::kern::cuda {

namespace {

__global__ void store_rows_kernel(const float* src, int row_floats, float* dst, const int* rows) {
    const int i = blockIdx.x;
    const float* s = src + static_cast<size_t>(i) * row_floats;
    float* d = dst + static_cast<size_t>(rows[i]) * row_floats;
    for (int j = threadIdx.x; j < row_floats; j += blockDim.x) d[j] = s[j];
}

__global__ void advance_kernel(const int* chosen, int* ids, int* pos, int* kv_begin, int* kv_end, int window) {
    ids[0] = chosen[0];
    const int p = pos[0] + 1;
    pos[0] = p;
    kv_end[0] = p + 1;
    kv_begin[0] = window > 0 ? max(0, p + 1 - window) : 0;
}

}  // namespace

void store_rows(Context& ctx, const float* src, int n, int row_floats, float* dst_base, const int* dst_rows) {
    if (n <= 0 || row_floats <= 0) return;
    store_rows_kernel<<<n, 128, 0, stream_of(ctx)>>>(src, row_floats, dst_base, dst_rows);
    TL_CUDA_LAUNCHED();
}

void advance(Context& ctx, const int* chosen, int* ids, int* pos, int* kv_begin, int* kv_end, int window) {
    advance_kernel<<<1, 1, 0, stream_of(ctx)>>>(chosen, ids, pos, kv_begin, kv_end, window);
    TL_CUDA_LAUNCHED();
}

}  // namespace tinyloop::kern::cuda
