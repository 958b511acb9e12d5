// Internal to kernels/cuda: the error checks, the context's innards, small device helpers.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/capture_rules.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/phases.cuh"

namespace tinyloop::kern::cuda {

// Throws CudaError naming the call; out_of_memory() for cudaErrorMemoryAllocation. Clears the
// runtime's last error so a later check does not report it again.
[[noreturn]] void throw_cuda(cudaError_t e, const char* what, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* what, const char* file, int line);

#define TL_CUDA_CHECK(call)                                                      \
    do {                                                                         \
        const cudaError_t tl_e_ = (call);                                        \
        if (tl_e_ != cudaSuccess) ::tinyloop::kern::cuda::throw_cuda(tl_e_, #call, __FILE__, __LINE__); \
    } while (0)

#define TL_CUBLAS_CHECK(call)                                                    \
    do {                                                                         \
        const cublasStatus_t tl_s_ = (call);                                     \
        if (tl_s_ != CUBLAS_STATUS_SUCCESS) ::tinyloop::kern::cuda::throw_cublas(tl_s_, #call, __FILE__, __LINE__); \
    } while (0)

// After a <<<...>>> launch: a bad configuration or a missing kernel image surfaces here.
#define TL_CUDA_LAUNCHED() TL_CUDA_CHECK(cudaGetLastError())

// cuBLAS, opened on first use with dlopen (libcublas.so.<major>): a binary built with the CUDA
// back end neither needs cuBLAS installed nor pays for loading it (about 0.3 s per process
// start) unless it creates a Context. Throws CudaError when the library cannot be opened.
struct Cublas {
    cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
    cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
    cublasStatus_t (*set_workspace)(cublasHandle_t, void*, size_t) = nullptr;
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                              const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
    const char* (*status_name)(cublasStatus_t) = nullptr;
    const char* (*status_string)(cublasStatus_t) = nullptr;
};
const Cublas& cublas();

struct Context::Impl {
    int device = 0;
    cudaStream_t stream = nullptr;
    cublasHandle_t cublas = nullptr;  // created on the first gemm (cublas_handle)
    size_t cublas_bytes = 0;          // device memory cublasCreate took (measured), + the workspace
    DeviceBuffer cublas_workspace;    // cuBLAS's workspace, ours so that it is counted
    int* pinned = nullptr;            // 64 ints of page-locked staging for stage_ints
    float* pinned_floats = nullptr;   // page-locked staging for stage_floats (reserve_staged_floats)
    size_t pinned_floats_n = 0;
    CaptureRules<CudaError> rules;
    PhaseQueue phases;                // the persistent step's recording (set_persist)
    bool capturing() const { return rules.capturing(); }
};

// The context's cuBLAS handle, created on first use: a context that never runs a large
// prefill (the weights' upload, decode-only sessions) pays neither the library load nor its
// device memory. Refused during capture (it allocates and synchronises).
cublasHandle_t cublas_handle(Context& ctx);

struct Graph::Impl {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
};

// Launches the recorded phases (decode_fast.cu), if any, in cooperative launches on the stream.
void flush_phases(Context& ctx);

// The context's stream for a launch or a copy: the persistent step's recorded phases go first,
// so the stream sees every op in the order it was issued.
inline cudaStream_t stream_of(Context& ctx) {
    if (!ctx.impl().phases.pending.empty()) flush_phases(ctx);
    return ctx.impl().stream;
}

inline unsigned blocks_for(size_t n, unsigned threads) {
    return static_cast<unsigned>((n + threads - 1) / threads);
}

// f16 bits -> f32 on the device (exact, as kern::f16_to_f32).
__device__ __forceinline__ float h2f(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}

// Sum across a warp in one fixed butterfly order: every lane ends with the same bits.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum in a fixed order (warp butterflies, then warp 0 over the warp partials);
// every thread gets the result. `shared` holds >= 32 floats; blockDim.x a multiple of 32.
__device__ __forceinline__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float t = lane < nw ? shared[lane] : 0.0f;
    t = warp_sum(t);
    return t;
}

}  // namespace tinyloop::kern::cuda
