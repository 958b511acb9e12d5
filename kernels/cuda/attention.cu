// Causal attention over one KV-cache layer (kern::AttentionArgs, device pointers; CPU twin
// kern::attention_ref). For query t, head h (kv head h / (n_heads / n_kv_heads)), over its row
// list: the range [kv_begin[t], kv_end[t]) then, for tree attention, extra_rows[extra_offsets[t]
// .. extra_offsets[t+1]):
//   s_p = (q . k_p) / sqrt(head_dim),  out = sum_p e^(s_p - max) v_p / sum_p e^(s_p - max)
//
// One block of four warps per (t, h). Warp w takes list entries w, w + 4, ... in order with an
// online softmax (running max, sum and weighted v; each lane holds head_dim/32 dimensions);
// the four partial states are merged in warp order. The order depends only on the row list,
// so decode, chunked prefill and tree verification of the same rows give the same bits, and a
// query with no rows gets zeros. With an INT8 cache (AttentionArgs.kq) each key and value element
// is its (row, kv head)'s scale times its code, one rounded product (kern::dequantize_kv_row's),
// then the same arithmetic.
#include "kernels/cuda/common.cuh"

namespace tinyloop::kern::cuda {

namespace {

constexpr int kWarps = 4;

// A key or value element: f[at] of an f32 cache, or its scale times its code (INT8).
template <bool kInt8>
__device__ __forceinline__ float kv_elem(const float* f, const int8_t* codes, float sc, size_t at) {
    if (!kInt8) return f[at];
    return __fmul_rn(sc, static_cast<float>(codes[at]));
}

template <int DPL, bool kInt8>  // dimensions per lane: head_dim <= 32 * DPL
__global__ void attention_kernel(AttentionArgs a, float scale) {
    __shared__ float s_m[kWarps], s_l[kWarps];
    __shared__ float s_acc[kWarps][32 * DPL];
    const int t = blockIdx.x / a.n_heads, h = blockIdx.x % a.n_heads;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int hd = a.head_dim;
    const int kh = h / (a.n_heads / a.n_kv_heads);
    const size_t koff = static_cast<size_t>(kh) * hd;
    const float* q = a.q + (static_cast<size_t>(t) * a.n_heads + h) * hd;
    float* out = a.out + (static_cast<size_t>(t) * a.n_heads + h) * hd;

    const int b = a.kv_begin[t], e = a.kv_end[t];
    const int nr = e > b ? e - b : 0;
    const int* extra = nullptr;
    int n_extra = 0;
    if (a.extra_offsets) {
        extra = a.extra_rows + a.extra_offsets[t];
        n_extra = a.extra_offsets[t + 1] - a.extra_offsets[t];
    }
    const int n = nr + n_extra;
    if (n <= 0) {
        for (int d = threadIdx.x; d < hd; d += blockDim.x) out[d] = 0.0f;
        return;
    }

    float qv[DPL], acc[DPL];
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
        const int d = lane + 32 * j;
        qv[j] = d < hd ? q[d] : 0.0f;
        acc[j] = 0.0f;
    }
    // the cache's pointers by value (no reference to the kernel's parameter: it could be
    // copied to local memory)
    const float *kf = a.k, *vf = a.v, *ksc = a.ks, *vsc = a.vs;
    const int8_t *kq = a.kq, *vq = a.vq;
    const int stride = a.kv_stride, sstride = a.scale_stride;
    float m = -INFINITY, l = 0.0f;
    for (int i = warp; i < n; i += kWarps) {
        const int p = i < nr ? b + i : extra[i - nr];
        const size_t row = static_cast<size_t>(p) * stride + koff;
        const float k_sc = kInt8 ? ksc[static_cast<size_t>(p) * sstride + kh] : 0.0f;
        const float v_sc = kInt8 ? vsc[static_cast<size_t>(p) * sstride + kh] : 0.0f;
        float part = 0.0f;
#pragma unroll
        for (int j = 0; j < DPL; ++j) {
            const int d = lane + 32 * j;
            if (d < hd) part = fmaf(qv[j], kv_elem<kInt8>(kf, kq, k_sc, row + d), part);
        }
        const float s = warp_sum(part) * scale;
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new), w = expf(s - m_new);
        l = l * corr + w;
#pragma unroll
        for (int j = 0; j < DPL; ++j) {
            const int d = lane + 32 * j;
            acc[j] = acc[j] * corr + (d < hd ? w * kv_elem<kInt8>(vf, vq, v_sc, row + d) : 0.0f);
        }
        m = m_new;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < DPL; ++j) s_acc[warp][lane + 32 * j] = acc[j];
    __syncthreads();
    if (warp != 0) return;
    float mx = s_m[0];
    for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, s_m[w]);
    float sum = 0.0f;
    float o[DPL];
#pragma unroll
    for (int j = 0; j < DPL; ++j) o[j] = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
        if (s_l[w] == 0.0f) continue;  // a warp that saw no rows
        const float c = expf(s_m[w] - mx);
        sum += s_l[w] * c;
#pragma unroll
        for (int j = 0; j < DPL; ++j) o[j] += s_acc[w][lane + 32 * j] * c;
    }
    const float inv = 1.0f / sum;
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
        const int d = lane + 32 * j;
        if (d < hd) out[d] = o[j] * inv;
    }
}

}  // namespace

void attention(Context& ctx, const AttentionArgs& a) {
    if (a.n_tok <= 0 || a.n_heads <= 0) return;
    if (a.head_dim < 1 || a.head_dim > 256)
        throw CudaError("attention: head_dim " + std::to_string(a.head_dim) +
                            " is outside [1, 256] (the CUDA back end's limit)", false);
    if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
        throw CudaError("attention: n_heads must be a multiple of n_kv_heads", false);
    const float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
    const dim3 grid(static_cast<unsigned>(a.n_tok) * a.n_heads), block(32 * kWarps);
    cudaStream_t s = stream_of(ctx);
    if (a.kq) {  // the INT8 cache
        if (!a.vq || !a.ks || !a.vs || a.scale_stride < a.n_kv_heads)
            throw CudaError("attention: an INT8 cache needs kq, vq, ks, vs and scale_stride >= n_kv_heads", false);
        if (a.head_dim <= 32) attention_kernel<1, true><<<grid, block, 0, s>>>(a, scale);
        else if (a.head_dim <= 64) attention_kernel<2, true><<<grid, block, 0, s>>>(a, scale);
        else if (a.head_dim <= 128) attention_kernel<4, true><<<grid, block, 0, s>>>(a, scale);
        else attention_kernel<8, true><<<grid, block, 0, s>>>(a, scale);
    } else if (a.head_dim <= 32) attention_kernel<1, false><<<grid, block, 0, s>>>(a, scale);
    else if (a.head_dim <= 64) attention_kernel<2, false><<<grid, block, 0, s>>>(a, scale);
    else if (a.head_dim <= 128) attention_kernel<4, false><<<grid, block, 0, s>>>(a, scale);
    else attention_kernel<8, false><<<grid, block, 0, s>>>(a, scale);
    TL_CUDA_LAUNCHED();
}

}  // namespace tinyloop::kern::cuda
