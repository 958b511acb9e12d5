// Greedy selection on the device: out[t] = the lowest index of the maximum of row t of the
// logits, ids >= n_valid read as -inf, NaN skipped (all NaN: 0). CPU twin: the engine's argmax
// (sampling.cpp) after mask_undecodable, edge cases included. Only this int comes back to the
// host per token.
#include "kernels/cuda/select.cuh"

namespace tinyloop::kern::cuda {

namespace {

__global__ void argmax_kernel(const float* logits, int vocab, int n_valid, int* out) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const float* z = logits + static_cast<size_t>(blockIdx.x) * vocab;
    Best b{-INFINITY, INT_MAX};
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = i < n_valid ? z[i] : -INFINITY;
        if (better(v, i, b)) b = {v, i};
    }
    b = block_best(b, sv, si);
    if (threadIdx.x == 0) out[blockIdx.x] = b.i == INT_MAX ? 0 : b.i;
}

}  // namespace

void argmax(Context& ctx, const float* logits, int n_rows, int vocab, int n_valid, int* out) {
    if (n_rows <= 0) return;
    n_valid = n_valid < 0 ? 0 : n_valid > vocab ? vocab : n_valid;
    argmax_kernel<<<n_rows, 256, 0, stream_of(ctx)>>>(logits, vocab, n_valid, out);
    TL_CUDA_LAUNCHED();
}

}  // namespace tinyloop::kern::cuda
