// The batch engine's paged caches on the device (kern::cuda::paged_rows, cuda_kernels.h): per
// row of a batch, its store row and its attention list at one execution layer, expanded from the
// rows' page tables (device_helpers.h paged_row, host-tested against KVCache::phys). The
// attention then reads the list as the CPU's batch reads its storage-row lists (forward.cpp
// attend_rows): the same rows in the same order as the range a lone sequence reads.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_helpers.h"

namespace tinyloop::kern::cuda {

namespace {

__global__ void paged_rows_kernel(const int* tables, const int* table_at, const int* blocks, int page_size, int layer,
                                  const int* pos, const int* begin, const int* off, int* dst, int* rows) {
    const int t = blockIdx.x;
    const int* table = tables + table_at[t];
    const int nb = blocks[t];
    if (threadIdx.x == 0) dst[t] = paged_row(table, nb, page_size, layer, pos[t]);
    const int b = begin[t], o0 = off[t], n = off[t + 1] - o0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) rows[o0 + i] = paged_row(table, nb, page_size, layer, b + i);
}

}  // namespace

void paged_rows(Context& ctx, const int* tables, const int* table_at, const int* blocks, int page_size, int layer,
                const int* pos, const int* begin, const int* off, int n, int* dst, int* rows) {
    if (n <= 0) return;
    if (page_size < 1) throw CudaError("paged_rows: page_size must be >= 1", false);
    paged_rows_kernel<<<n, 128, 0, stream_of(ctx)>>>(tables, table_at, blocks, page_size, layer, pos, begin, off, dst,
                                                      rows);
    TL_CUDA_LAUNCHED();
}

}  // namespace tinyloop::kern::cuda
