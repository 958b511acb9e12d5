// Asymmetric group quantization (FORMAT.md §2): w = scale * (q - zero), scale and zero per
// group of group_size consecutive elements of a row, both stored as f16.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "tinyloop/tinyloop.h"

namespace tinyloop {

// Bits per stored weight (FORMAT.md §2): f32 32, f16 16, bf16 16, q8 8, q4 4, q2 2.
inline int dtype_bits(DType t) {
    switch (t) {
        case DType::F32: return 32;
        case DType::F16: return 16;
        case DType::BF16: return 16;
        case DType::Q8: return 8;
        case DType::Q4: return 4;
        case DType::Q2: return 2;
    }
    return 0;
}

// Q8, Q4 and Q2 are stored as group-quantized codes with f16 scales and zeros.
inline bool dtype_is_quantized(DType t) { return t == DType::Q8 || t == DType::Q4 || t == DType::Q2; }

// The kernels' type of a stored dtype (one to one).
inline kern::WType dtype_wtype(DType t) {
    switch (t) {
        case DType::F32: return kern::WType::F32;
        case DType::F16: return kern::WType::F16;
        case DType::BF16: return kern::WType::BF16;
        case DType::Q8: return kern::WType::Q8;
        case DType::Q4: return kern::WType::Q4;
        case DType::Q2: return kern::WType::Q2;
    }
    return kern::WType::F32;
}



struct QuantizedMatrix {
    std::vector<uint8_t> codes;    // rows * cols * bits / 8
    std::vector<uint16_t> scales;  // rows * cols / group_size (f16)
    std::vector<uint16_t> zeros;   // rows * cols / group_size (f16)
};

// Quantizes a row-major [rows, cols] matrix. dtype is Q8, Q4 or Q2; group_size divides cols.
// The per-group range is searched to minimise the squared error of the dequantized values.
// With a pool, blocks of rows are quantized on its threads: every group depends on its own values
// only, so the result is the same bytes for any pool (or none).
QuantizedMatrix quantize_matrix(const float* w, int rows, int cols, DType dtype, int group_size,
                                kern::ThreadPool* pool = nullptr);

}  // namespace tinyloop
