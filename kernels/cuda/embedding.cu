// Embedding lookup: out[t, :] = dequantized row ids[t] of E (FORMAT.md §1, h = embed[token]).
// CPU twin: kern::dequant_row. One block per token; the id is read on the device, so a token
// chosen on the device (argmax) feeds the next step without a host round trip.
#include "kernels/cuda/dequant.cuh"

namespace tinyloop::kern::cuda {

namespace {

__global__ void embedding_kernel(WeightView E, const int* ids, float* out) {
    const int t = blockIdx.x;
    const int id = ids[t];
    float* o = out + static_cast<size_t>(t) * E.cols;
    if (id < 0 || id >= E.rows) {
        for (int c = threadIdx.x; c < E.cols; c += blockDim.x) o[c] = __int_as_float(0x7fc00000);
        return;
    }
    for (int c = threadIdx.x; c < E.cols; c += blockDim.x) o[c] = weight_at(E, id, c);
}

}  // namespace

void embedding(Context& ctx, const WeightView& E, const int* ids, int n_tok, float* out) {
    if (n_tok <= 0 || E.cols <= 0) return;
    embedding_kernel<<<n_tok, 128, 0, stream_of(ctx)>>>(E, ids, out);
    TL_CUDA_LAUNCHED();
}

}  // namespace tinyloop::kern::cuda
