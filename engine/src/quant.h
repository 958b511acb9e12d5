// Asymmetric group quantization (FORMAT.md §2): w = scale * (q - zero), scale and zero per
// group of group_size consecutive elements of a row, both stored as f16.
#pragma once

#include <cstdint>
#include <vector>

#include "tinyloop/tinyloop.h"

namespace tinyloop {

struct QuantizedMatrix {
    std::vector<uint8_t> codes;    // rows * cols * bits / 8
    std::vector<uint16_t> scales;  // rows * cols / group_size (f16)
    std::vector<uint16_t> zeros;   // rows * cols / group_size (f16)
};

// Quantizes a row-major [rows, cols] matrix. dtype is Q8, Q4 or Q2; group_size divides cols.
// The per-group range is searched to minimise the squared error of the dequantized values.
QuantizedMatrix quantize_matrix(const float* w, int rows, int cols, DType dtype, int group_size);

}  // namespace tinyloop
