// The pure helpers the CUDA kernels read weights, pick the greedy token and rotate with,
// written once for the device and the host (__host__ __device__ under nvcc, plain inline
// functions under a C++ compiler), so the host tests (tests/cuda/test_cuda_host.cpp) check
// them against the CPU kernels without a GPU:
//   weight_at / weight_pack8  vs kern::dequant_row (FORMAT.md §2: w = scale * (q - zero))
//   better                    vs the engine's argmax (larger first, lower id on ties, NaN never)
//   rope_cos_sin              vs the CPU's RoPE table (kern::rope_ref's angle, cos and sin)
//   split_range, attn_combine vs kern::attention_ref (flash-decoding: partial softmax per
//                             split of the row list, then the max/sum rescaling combine)
//   kv_int8_scale / _code     vs kern::quantize_kv_row (the INT8 KV cache's codes and scales)
//   paged_row                 vs KVCache::phys (the batch engine's paged caches, paged.cu)
// The device code compiles to what it did before (the same loads through __ldg, the same
// intrinsics); only the host branch is new.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define TL_HD __host__ __device__ __forceinline__
#else
#define TL_HD inline
#endif
// #pragma unroll for nvcc's device pass only (the host compilers warn on it).
#if defined(__CUDA_ARCH__)
#define TL_UNROLL _Pragma("unroll")
#else
#define TL_UNROLL
#endif

namespace tinyloop::kern::cuda {

// f16 bits -> f32 (exact): the device's conversion, the CPU's on the host.
TL_HD float hd_h2f(uint16_t h) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(h));
#else
    return f16_to_f32(h);
#endif
}

TL_HD float hd_bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
#endif
}

// A read-only load: through the read-only cache on the device.
template <class T>
TL_HD T hd_load(const T* p) {
#if defined(__CUDA_ARCH__)
    return __ldg(p);
#else
    return *p;
#endif
}

TL_HD int bits_of(WType t) { return t == WType::Q8 ? 8 : t == WType::Q4 ? 4 : 2; }

// W[r, c] for any layout (the slow, general path).
TL_HD float weight_at(const WeightView& W, int r, int c) {
    const size_t rr = static_cast<size_t>(r);
    switch (W.type) {
        case WType::F32: return reinterpret_cast<const float*>(W.data)[rr * W.cols + c];
        case WType::F16: return hd_h2f(reinterpret_cast<const uint16_t*>(W.data)[rr * W.cols + c]);
        case WType::BF16:
            return hd_bits_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(W.data)[rr * W.cols + c]) << 16);
        default: break;
    }
    const int bits = bits_of(W.type);
    const uint8_t* row = W.data + rr * static_cast<size_t>(W.cols) * bits / 8;
    uint32_t q;
    if (bits == 8) q = row[c];
    else if (bits == 4) q = (row[c >> 1] >> ((c & 1) * 4)) & 0xfu;
    else q = (row[c >> 2] >> ((c & 3) * 2)) & 0x3u;
    const size_t gi = rr * (W.cols / W.group_size) + c / W.group_size;
    return hd_h2f(W.scales[gi]) * (static_cast<float>(q) - hd_h2f(W.zeros[gi]));
}

// Whether weight_pack8 may be used: eight consecutive columns never straddle a group and each
// pack's bytes are aligned for the vector loads (rows start at a multiple of 8 columns).
inline bool pack8_ok(const WeightView& W) {
    if (W.cols % 8 != 0) return false;
    if (wtype_is_float(W.type)) return true;
    return W.group_size > 0 && W.group_size % 8 == 0;
}

// w[j] = W[r, c0 + j], j < 8; c0 a multiple of 8 and pack8_ok(W). 16-byte (f32: 2 x 16) loads
// of the packed bytes, little-endian lanes.
TL_HD void weight_pack8(const WeightView& W, int r, int c0, float* w) {
    const size_t rr = static_cast<size_t>(r);
    switch (W.type) {
        case WType::F32: {
#if defined(__CUDA_ARCH__)
            const float4* p = reinterpret_cast<const float4*>(W.data + (rr * W.cols + c0) * 4);
            const float4 a = __ldg(p), b = __ldg(p + 1);
            w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
            w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
#else
            std::memcpy(w, W.data + (rr * W.cols + c0) * 4, 8 * sizeof(float));
#endif
            return;
        }
        case WType::F16:
        case WType::BF16: {  // lower column in the lower half of each word (little-endian)
            uint32_t v[4];
#if defined(__CUDA_ARCH__)
            const uint4 u = __ldg(reinterpret_cast<const uint4*>(W.data + (rr * W.cols + c0) * 2));
            v[0] = u.x; v[1] = u.y; v[2] = u.z; v[3] = u.w;
#else
            std::memcpy(v, W.data + (rr * W.cols + c0) * 2, sizeof v);
#endif
            if (W.type == WType::F16) {
TL_UNROLL
                for (int i = 0; i < 4; ++i) {
                    w[2 * i] = hd_h2f(static_cast<uint16_t>(v[i] & 0xffffu));
                    w[2 * i + 1] = hd_h2f(static_cast<uint16_t>(v[i] >> 16));
                }
            } else {
TL_UNROLL
                for (int i = 0; i < 4; ++i) {
                    w[2 * i] = hd_bits_float(v[i] << 16);
                    w[2 * i + 1] = hd_bits_float(v[i] & 0xffff0000u);
                }
            }
            return;
        }
        default: break;
    }
    const size_t gi = rr * (W.cols / W.group_size) + c0 / W.group_size;
    const float s = hd_h2f(hd_load(W.scales + gi)), z = hd_h2f(hd_load(W.zeros + gi));
    if (W.type == WType::Q8) {
        uint32_t x, y;
#if defined(__CUDA_ARCH__)
        const uint2 u = __ldg(reinterpret_cast<const uint2*>(W.data + rr * W.cols + c0));
        x = u.x;
        y = u.y;
#else
        std::memcpy(&x, W.data + rr * W.cols + c0, 4);
        std::memcpy(&y, W.data + rr * W.cols + c0 + 4, 4);
#endif
TL_UNROLL
        for (int i = 0; i < 4; ++i) {
            w[i] = s * (static_cast<float>((x >> (8 * i)) & 0xffu) - z);
            w[4 + i] = s * (static_cast<float>((y >> (8 * i)) & 0xffu) - z);
        }
    } else if (W.type == WType::Q4) {
        const uint32_t u = hd_load(reinterpret_cast<const uint32_t*>(W.data + rr * (W.cols / 2) + c0 / 2));
TL_UNROLL
        for (int i = 0; i < 8; ++i) w[i] = s * (static_cast<float>((u >> (4 * i)) & 0xfu) - z);
    } else {
        const uint16_t u = hd_load(reinterpret_cast<const unsigned short*>(W.data + rr * (W.cols / 4) + c0 / 4));
TL_UNROLL
        for (int i = 0; i < 8; ++i) w[i] = s * (static_cast<float>((u >> (2 * i)) & 0x3u) - z);
    }
}

// The greedy selection's order: a candidate (value, index) against the best so far.
struct Best {
    float v;
    int i;  // INT_MAX: none
};

// Larger value first, lower index on ties, NaN never chosen: a total order, so the block's
// pick does not depend on the reduction order.
TL_HD bool better(float v, int i, const Best& b) {
    if (v != v) return false;  // NaN
    if (b.i == INT_MAX) return true;
    return v > b.v || (v == b.v && i < b.i);
}

// RoPE's cos and sin for position p, pair i (kern::rope_ref): the angle p * theta^(-2i/hd) in
// double, cos and sin in double, each rounded to float once.
TL_HD void rope_cos_sin(int p, int i, int head_dim, float theta, float* c, float* s) {
    const double ang = static_cast<double>(p) * pow(static_cast<double>(theta), -2.0 * i / head_dim);
    *c = static_cast<float>(cos(ang));
    *s = static_cast<float>(sin(ang));
}

// The table the fused RoPE kernel reads (rope_store): for positions [0, n_pos) and pairs
// [0, head_dim / 2), (cos, sin) at [(p * head_dim / 2 + i) * 2 + {0, 1}], computed here on the
// host as the CPU computes them, so the device's rotation is the CPU's bit for bit by
// construction, and no double pow/cos/sin (whose slow argument reduction needs a stack frame)
// runs in the decode step.
inline std::vector<float> rope_table(int n_pos, int head_dim, float theta) {
    const int half = head_dim / 2;
    std::vector<float> t(size_t(n_pos > 0 ? n_pos : 0) * half * 2);
    for (int p = 0; p < n_pos; ++p)
        for (int i = 0; i < half; ++i) {
            const size_t at = (size_t(p) * half + i) * 2;
            rope_cos_sin(p, i, head_dim, theta, &t[at], &t[at + 1]);
        }
    return t;
}

// ---- the INT8 KV cache (kern::quantize_kv_row; rope_store_int8 in rope.cu) -----------------
//
// One (row, kv head) of head_dim values x: scale s = amax|x| / 127, inverse 1/s (0 when s is 0),
// code_j = clamp(round-half-even(x_j * inv), -127, 127); value = s * code. Float throughout, in
// the CPU's order, so the device stores the CPU's codes and scales bit for bit.
TL_HD float kv_int8_scale(float amax) { return amax / 127.0f; }
TL_HD float kv_int8_inverse(float s) { return s > 0.0f ? 1.0f / s : 0.0f; }
TL_HD int8_t kv_int8_code(float x, float inv) {
#if defined(__CUDA_ARCH__)
    const float r = rintf(__fmul_rn(x, inv));  // round half to even, as nearbyint in the default mode
#else
    const float r = std::nearbyint(x * inv);
#endif
    return static_cast<int8_t>(r < -127.0f ? -127.0f : (r > 127.0f ? 127.0f : r));
}

// ---- paged KV caches (the batch engine's pools; paged.cu) ------------------------------------
//
// The storage row of position p at execution layer `layer` of a sequence whose page table is
// `table` ([layers, blocks]: the pool page holding (layer, p / page_size)), as KVCache::phys:
// page * page_size + p % page_size. The pool's rows fit an int (CudaBatch::adopt checks).
TL_HD int paged_row(const int* table, int blocks, int page_size, int layer, int p) {
    return table[layer * blocks + p / page_size] * page_size + p % page_size;
}

// ---- flash-decoding attention (decode_fast.cu's attention_split) ---------------------------
//
// A query's row list (its range, then its tree extras) of n entries is cut into n_splits
// consecutive pieces of ceil(n / n_splits) entries; the last ones may be short or empty (n <
// n_splits), and nothing bounds a piece's length (a long context makes long pieces, never an
// overflow). Split s holds entries [*b, *e).
TL_HD void split_range(int n, int n_splits, int s, int* b, int* e) {
    const int per = n_splits > 0 ? (n + n_splits - 1) / n_splits : n;
    const int lo = s * per < n ? s * per : n;
    *b = lo;
    *e = lo + per < n ? lo + per : n;
}

// The combine of the splits' partial softmax states, for one output dimension: split s saw the
// scores of its rows with running max m[s], l[s] = sum e^(score - m[s]) and acc[s * stride] =
// sum e^(score - m[s]) v[dim]; every state is rescaled to the global max M:
//   out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M)
// A split with no rows (l[s] == 0, m[s] == -inf) is skipped; a query with no rows at all gets 0
// (as the reference kernel's empty list). Fixed order s = 0, 1, ... (deterministic).
TL_HD float attn_combine(const float* m, const float* l, const float* acc, int n_splits, int stride) {
    float mx = -INFINITY;
    for (int s = 0; s < n_splits; ++s)
        if (l[s] > 0.0f && m[s] > mx) mx = m[s];
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < n_splits; ++s) {
        if (!(l[s] > 0.0f)) continue;
        const float c = expf(m[s] - mx);
        // explicit fmas: the same bits wherever nvcc inlines it (the combine kernel and the
        // product that folds the combine in), not left to contraction
        den = fmaf(l[s], c, den);
        num = fmaf(acc[static_cast<size_t>(s) * stride], c, num);
    }
    return den > 0.0f ? num * (1.0f / den) : 0.0f;
}

}  // namespace tinyloop::kern::cuda
