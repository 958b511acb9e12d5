// Reading one weight (or eight consecutive ones) of a stored matrix on the device, exactly as
// kern::dequant_row does on the CPU (FORMAT.md §2): w = scale * (float(q) - zero), f16 widened,
// bf16 widened by a 16-bit shift (exact, the top half of the f32).
#pragma once

#include "kernels/cuda/common.cuh"

namespace tinyloop::kern::cuda {

__device__ __forceinline__ int bits_of(WType t) {
    return t == WType::Q8 ? 8 : t == WType::Q4 ? 4 : 2;
}

// W[r, c] for any layout (the slow, general path).
__device__ __forceinline__ float weight_at(const WeightView& W, int r, int c) {
    const size_t rr = static_cast<size_t>(r);
    switch (W.type) {
        case WType::F32: return reinterpret_cast<const float*>(W.data)[rr * W.cols + c];
        case WType::F16: return h2f(reinterpret_cast<const uint16_t*>(W.data)[rr * W.cols + c]);
        case WType::BF16:
            return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(W.data)[rr * W.cols + c]) << 16);
        default: break;
    }
    const int bits = bits_of(W.type);
    const uint8_t* row = W.data + rr * static_cast<size_t>(W.cols) * bits / 8;
    uint32_t q;
    if (bits == 8) q = row[c];
    else if (bits == 4) q = (row[c >> 1] >> ((c & 1) * 4)) & 0xfu;
    else q = (row[c >> 2] >> ((c & 3) * 2)) & 0x3u;
    const size_t gi = rr * (W.cols / W.group_size) + c / W.group_size;
    return h2f(W.scales[gi]) * (static_cast<float>(q) - h2f(W.zeros[gi]));
}

// Whether weight_pack8 may be used: eight consecutive columns never straddle a group and each
// pack's bytes are aligned for the vector loads (rows start at a multiple of 8 columns).
inline bool pack8_ok(const WeightView& W) {
    if (W.cols % 8 != 0) return false;
    if (wtype_is_float(W.type)) return true;
    return W.group_size > 0 && W.group_size % 8 == 0;
}

// w[j] = W[r, c0 + j], j < 8; c0 a multiple of 8 and pack8_ok(W).
__device__ __forceinline__ void weight_pack8(const WeightView& W, int r, int c0, float* w) {
    const size_t rr = static_cast<size_t>(r);
    switch (W.type) {
        case WType::F32: {
            const float4* p = reinterpret_cast<const float4*>(W.data + (rr * W.cols + c0) * 4);
            const float4 a = __ldg(p), b = __ldg(p + 1);
            w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
            w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
            return;
        }
        case WType::F16: {
            const uint4 u = __ldg(reinterpret_cast<const uint4*>(W.data + (rr * W.cols + c0) * 2));
            const uint32_t v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                w[2 * i] = h2f(static_cast<uint16_t>(v[i] & 0xffffu));
                w[2 * i + 1] = h2f(static_cast<uint16_t>(v[i] >> 16));
            }
            return;
        }
        case WType::BF16: {  // lower column in the lower half of each word (little-endian)
            const uint4 u = __ldg(reinterpret_cast<const uint4*>(W.data + (rr * W.cols + c0) * 2));
            const uint32_t v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                w[2 * i] = __uint_as_float(v[i] << 16);
                w[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u);
            }
            return;
        }
        default: break;
    }
    const size_t gi = rr * (W.cols / W.group_size) + c0 / W.group_size;
    const float s = h2f(__ldg(W.scales + gi)), z = h2f(__ldg(W.zeros + gi));
    if (W.type == WType::Q8) {
        const uint2 u = __ldg(reinterpret_cast<const uint2*>(W.data + rr * W.cols + c0));
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            w[i] = s * (static_cast<float>((u.x >> (8 * i)) & 0xffu) - z);
            w[4 + i] = s * (static_cast<float>((u.y >> (8 * i)) & 0xffu) - z);
        }
    } else if (W.type == WType::Q4) {
        const uint32_t u = __ldg(reinterpret_cast<const uint32_t*>(W.data + rr * (W.cols / 2) + c0 / 2));
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = s * (static_cast<float>((u >> (4 * i)) & 0xfu) - z);
    } else {
        const uint16_t u = __ldg(reinterpret_cast<const unsigned short*>(W.data + rr * (W.cols / 4) + c0 / 4));
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = s * (static_cast<float>((u >> (2 * i)) & 0x3u) - z);
    }
}

}  // namespace tinyloop::kern::cuda
