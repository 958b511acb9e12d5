// RoPE, half-split (FORMAT.md §1; kern::rope_ref): for token t at position p, each head,
// pair (i, i + hd/2) rotated by p * theta^(-2i/hd). The angle, cos and sin in double, rounded
// to float once; then x0*c - x1*s and x0*s + x1*c with explicit round-to-nearest products and
// no fma, the CPU's exact sequence. The results equal the CPU's bit for bit wherever CUDA's
// double pow/cos/sin round to the same float as the host's libm (nearly always; the op test
// bounds the difference and records the exact fraction as rope_exact_fraction).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_helpers.h"

namespace tinyloop::kern::cuda {

namespace {

// One thread per (token, pair i); it rotates that pair in every head.
__global__ void rope_kernel(float* x, int n_tok, int n_heads, int head_dim, const int* positions, float theta) {
    const int half = head_dim / 2;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_tok * half) return;
    const int t = idx / half, i = idx % half;
    float c, s;
    rope_cos_sin(positions[t], i, head_dim, theta, &c, &s);
    for (int h = 0; h < n_heads; ++h) {
        float* xh = x + (static_cast<size_t>(t) * n_heads + h) * head_dim;
        const float x0 = xh[i], x1 = xh[i + half];
        xh[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        xh[i + half] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

// Token t's (block's) every (head, pair) of q and of k rotated by the table's cos/sin at its
// position, the threads of the block striding over them.
__device__ __forceinline__ void rotate_token(float* q, float* k, int t, int n_heads, int n_kv_heads, int head_dim,
                                             const int* positions, const float2* table) {
    const int half = head_dim / 2;
    const float2* cs = table + static_cast<size_t>(positions[t]) * half;
    const int nq = n_heads * half, nk = n_kv_heads * half;
    for (int idx = threadIdx.x; idx < nq + nk; idx += blockDim.x) {
        const bool is_q = idx < nq;
        const int j = is_q ? idx : idx - nq;
        const int h = j / half, i = j % half;
        const float2 r = cs[i];
        const float c = r.x, s = r.y;
        float* xh = is_q ? q + (static_cast<size_t>(t) * n_heads + h) * head_dim
                         : k + (static_cast<size_t>(t) * n_kv_heads + h) * head_dim;
        const float x0 = xh[i], x1 = xh[i + half];
        xh[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        xh[i + half] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

// One block per token: every (head, pair) of q and of k rotated, then k's and v's rows copied
// to the cache. A __syncthreads separates the rotation of k from its copy.
__global__ void rope_store_kernel(float* q, float* k, const float* v, int n_heads, int n_kv_heads, int head_dim,
                                  const int* positions, const float2* table, float* k_cache, float* v_cache,
                                  const int* rows) {
    const int t = blockIdx.x;
    rotate_token(q, k, t, n_heads, n_kv_heads, head_dim, positions, table);
    __syncthreads();
    const int row = n_kv_heads * head_dim;
    const float* ks = k + static_cast<size_t>(t) * row;
    const float* vs = v + static_cast<size_t>(t) * row;
    float* kd = k_cache + static_cast<size_t>(rows[t]) * row;
    float* vd = v_cache + static_cast<size_t>(rows[t]) * row;
    for (int j = threadIdx.x; j < row; j += blockDim.x) {
        kd[j] = ks[j];
        vd[j] = vs[j];
    }
}

// rope_store's INT8 twin (the INT8 KV cache): the rotation as rope_store (none when table is
// null: the rows already rotated, q unused), then each (row, kv head) of k and of v quantized
// as kern::quantize_kv_row (kv_int8_* of device_helpers.h, one warp each): codes at row rows[t] of
// the layer's [rows, n_kv_heads * head_dim] codes, scales at [rows[t] * n_kv_heads + head].
__global__ void rope_store_int8_kernel(float* q, float* k, const float* v, int n_heads, int n_kv_heads, int head_dim,
                                       const int* positions, const float2* table, int8_t* k_codes, int8_t* v_codes,
                                       float* k_scales, float* v_scales, const int* rows) {
    const int t = blockIdx.x;
    if (table) rotate_token(q, k, t, n_heads, n_kv_heads, head_dim, positions, table);
    __syncthreads();
    const int row = n_kv_heads * head_dim;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const size_t dst = static_cast<size_t>(rows[t]);
    for (int job = warp; job < 2 * n_kv_heads; job += n_warps) {
        const bool is_v = job >= n_kv_heads;
        const int h = is_v ? job - n_kv_heads : job;
        const float* x = (is_v ? v : k) + static_cast<size_t>(t) * row + static_cast<size_t>(h) * head_dim;
        float amax = 0.0f;
        for (int j = lane; j < head_dim; j += 32) amax = fmaxf(amax, fabsf(x[j]));
        amax = warp_max(amax);  // a max: the same in any order
        const float sc = kv_int8_scale(amax), inv = kv_int8_inverse(sc);
        int8_t* c = (is_v ? v_codes : k_codes) + dst * row + static_cast<size_t>(h) * head_dim;
        for (int j = lane; j < head_dim; j += 32) c[j] = kv_int8_code(x[j], inv);
        if (lane == 0) (is_v ? v_scales : k_scales)[dst * n_kv_heads + h] = sc;
    }
}

}  // namespace

void rope_store_int8(Context& ctx, float* q, float* k, const float* v, int n_tok, int n_heads, int n_kv_heads,
                     int head_dim, const int* positions, const float* table, int8_t* k_codes, int8_t* v_codes,
                     float* k_scales, float* v_scales, const int* dst_rows) {
    if (n_tok <= 0 || head_dim < 2 || n_kv_heads <= 0) return;
    rope_store_int8_kernel<<<n_tok, 256, 0, stream_of(ctx)>>>(q, k, v, n_heads, n_kv_heads, head_dim, positions,
                                                              reinterpret_cast<const float2*>(table), k_codes, v_codes,
                                                              k_scales, v_scales, dst_rows);
    TL_CUDA_LAUNCHED();
}

void rope_store(Context& ctx, float* q, float* k, const float* v, int n_tok, int n_heads, int n_kv_heads, int head_dim,
                const int* positions, const float* table, float* k_cache, float* v_cache, const int* dst_rows) {
    if (n_tok <= 0 || head_dim < 2) return;
    rope_store_kernel<<<n_tok, 256, 0, stream_of(ctx)>>>(q, k, v, n_heads, n_kv_heads, head_dim, positions,
                                                         reinterpret_cast<const float2*>(table), k_cache, v_cache,
                                                         dst_rows);
    TL_CUDA_LAUNCHED();
}

void rope(Context& ctx, float* x, int n_tok, int n_heads, int head_dim, const int* positions, float theta) {
    if (n_tok <= 0 || n_heads <= 0 || head_dim < 2) return;
    const size_t n = static_cast<size_t>(n_tok) * (head_dim / 2);
    rope_kernel<<<blocks_for(n, 128), 128, 0, stream_of(ctx)>>>(x, n_tok, n_heads, head_dim, positions, theta);
    TL_CUDA_LAUNCHED();
}

}  // namespace tinyloop::kern::cuda
