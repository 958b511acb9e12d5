// Reading one weight (or eight consecutive ones) of a stored matrix on the device, exactly as
// kern::dequant_row does on the CPU (FORMAT.md §2): w = scale * (float(q) - zero), f16 widened,
// bf16 widened by a 16-bit shift (exact, the top half of the f32).
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_helpers.h"  // weight_at, weight_pack8, pack8_ok, bits_of (host and device)
