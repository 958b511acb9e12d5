// The logit lens's readout on the device (CPU twin: the engine's lens_entry): per row of
// logits, softmax at temperature 1, the top-k ids and probabilities (higher first, lower id on
// ties), the entropy in nats and the probability of the emitted token.
//   m = max z,  Z = sum e^(z - m),  p_i = e^(z_i - m) / Z,
//   H = -sum p log p = log Z - (1/Z) sum e^(z_i - m) (z_i - m)
// One block per row; k rounds of a block-wide selection, each for the best entry strictly after
// the previous pick in (value desc, index asc) order, so nothing is sorted or marked in memory.
#include "kernels/cuda/select.cuh"

namespace tinyloop::kern::cuda {

namespace {

__device__ __forceinline__ bool after(float v, int i, float pv, int pi) {
    return v < pv || (v == pv && i > pi);
}

__global__ void lens_kernel(const float* logits, int vocab, int k, const int* emitted, int* top_ids,
                            float* top_probs, float* entropy, float* p_emitted) {
    __shared__ float red[32];
    __shared__ float sv[32];
    __shared__ int si[32];
    const int row = blockIdx.x;
    const float* z = logits + static_cast<size_t>(row) * vocab;

    float mx = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, z[i]);
    // block max (fixed order as block_sum)
    {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
        mx = warp_max(mx);
        __syncthreads();
        if (lane == 0) red[warp] = mx;
        __syncthreads();
        float t = lane < nw ? red[lane] : -INFINITY;
        mx = warp_max(t);
    }
    float se = 0.0f, sez = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float d = z[i] - mx;
        const float e = expf(d);
        se += e;
        if (e > 0.0f) sez = fmaf(e, d, sez);
    }
    const float Z = block_sum(se, red);
    const float S = block_sum(sez, red);
    if (threadIdx.x == 0) {
        entropy[row] = logf(Z) - S / Z;
        if (p_emitted) {
            const int em = emitted ? emitted[row] : -1;
            p_emitted[row] = (em >= 0 && em < vocab) ? expf(z[em] - mx) / Z : 0.0f;
        }
    }
    float pv = INFINITY;
    int pi = -1;
    for (int r = 0; r < k; ++r) {
        Best b{-INFINITY, INT_MAX};
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            const float v = z[i];
            if (after(v, i, pv, pi) && better(v, i, b)) b = {v, i};
        }
        b = block_best(b, sv, si);
        if (threadIdx.x == 0) {
            top_ids[static_cast<size_t>(row) * k + r] = b.i == INT_MAX ? -1 : b.i;
            top_probs[static_cast<size_t>(row) * k + r] = b.i == INT_MAX ? 0.0f : expf(b.v - mx) / Z;
        }
        pv = b.v;
        pi = b.i;
        if (b.i == INT_MAX) pv = -INFINITY;  // nothing left: later rounds find nothing either
    }
}

}  // namespace

void lens_topk(Context& ctx, const float* logits, int n_rows, int vocab, int k, const int* emitted, int* top_ids,
               float* top_probs, float* entropy, float* p_emitted) {
    if (n_rows <= 0) return;
    if (k < 1 || k > 64 || vocab < 1)
        throw CudaError("lens_topk: k " + std::to_string(k) + " is outside [1, 64] or vocab < 1", false);
    lens_kernel<<<n_rows, 256, 0, stream_of(ctx)>>>(logits, vocab, k, emitted, top_ids, top_probs, entropy,
                                                    p_emitted);
    TL_CUDA_LAUNCHED();
}

}  // namespace tinyloop::kern::cuda
