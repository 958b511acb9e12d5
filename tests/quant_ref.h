// Reference dequantization for the loader and quantization tests: FORMAT.md §2 applied directly,
// independently of the kernels, and the error measures those tests share.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "tinyloop/tinyloop.h"

namespace tltest {

// Dequantizes a view with the rules of FORMAT.md §2, independently of the kernels.
inline std::vector<float> decode_view(const tinyloop::kern::WeightView& v) {
    namespace kern = tinyloop::kern;
    const size_t rows = static_cast<size_t>(v.rows), cols = static_cast<size_t>(v.cols);
    std::vector<float> out(rows * cols);
    if (v.type == kern::WType::F32) {
        std::memcpy(out.data(), v.data, out.size() * 4);
    } else if (v.type == kern::WType::F16) {
        const auto* h = reinterpret_cast<const uint16_t*>(v.data);
        for (size_t i = 0; i < out.size(); ++i) out[i] = kern::f16_to_f32(h[i]);
    } else if (v.type == kern::WType::BF16) {  // the upper half of a binary32
        const auto* h = reinterpret_cast<const uint16_t*>(v.data);
        for (size_t i = 0; i < out.size(); ++i) {
            const uint32_t u = static_cast<uint32_t>(h[i]) << 16;
            std::memcpy(&out[i], &u, 4);
        }
    } else {
        const int bits = kern::wtype_bits(v.type);
        const size_t row_bytes = cols * static_cast<size_t>(bits) / 8;
        const size_t per_byte = static_cast<size_t>(8 / bits);
        const size_t groups = cols / static_cast<size_t>(v.group_size);
        for (size_t r = 0; r < rows; ++r)
            for (size_t c = 0; c < cols; ++c) {
                const uint8_t byte = v.data[r * row_bytes + c / per_byte];
                const int q =
                    (byte >> ((c % per_byte) * static_cast<size_t>(bits))) & ((1 << bits) - 1);
                const size_t g = r * groups + c / static_cast<size_t>(v.group_size);
                out[r * cols + c] = kern::f16_to_f32(v.scales[g]) *
                                    (static_cast<float>(q) - kern::f16_to_f32(v.zeros[g]));
            }
    }
    return out;
}

// Relative L2 error of a against b.
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return std::sqrt(num / den);
}

// The relative error a quantized tensor of this dtype must stay under.
inline double bound_for(tinyloop::DType t) {
    switch (t) {
        case tinyloop::DType::Q8:
            return 0.01;
        case tinyloop::DType::Q4:
            return 0.1;
        case tinyloop::DType::Q2:
            return 0.5;
        default:
            return 0;
    }
}

}  // namespace tltest
