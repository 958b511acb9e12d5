// Selecting the best (value, index) pair across a block: larger value first, lower index on
// ties, NaN never chosen. The result is a selection under a total order, so it does not depend
// on the reduction order at all.
#pragma once

#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_helpers.h"  // Best, better (host and device)

namespace tinyloop::kern::cuda {

// Every thread passes its candidate; every thread gets the block's best. `sv`/`si` hold >= 32.
__device__ __forceinline__ Best block_best(Best c, float* sv, int* si) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, c.v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, c.i, o);
        if (oi != INT_MAX && better(ov, oi, c)) c = {ov, oi};
    }
    __syncthreads();
    if (lane == 0) {
        sv[warp] = c.v;
        si[warp] = c.i;
    }
    __syncthreads();
    Best r{-INFINITY, INT_MAX};
    for (int w = 0; w < nw; ++w)
        if (si[w] != INT_MAX && better(sv[w], si[w], r)) r = {sv[w], si[w]};
    return r;
}

}  // namespace tinyloop::kern::cuda
