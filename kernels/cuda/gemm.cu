// The large prefill product through cuBLAS (cublasGemmEx, f32 in and out, f32 accumulate or
// TF32 tensor cores): y[t, r] = sum_c W[r, c] x[t, c]. CPU twin: kern::matmul_ref.
//
// cuBLAS reads f32 operands, so an f16 or quantized W is dequantized into the caller's scratch
// first (one matrix at a time: a transient, never a resident copy of the weights). The layout
// trick: row-major W [rows, cols] is column-major W^T, so Y^T = (W^T)^T X^T is one GEMM with
// op(A) = transpose. Not batch-invariant: the engine uses it for prefill chunks only.
#include "kernels/cuda/dequant.cuh"

namespace tinyloop::kern::cuda {

namespace {

__global__ void dequant_kernel(WeightView W, float* out) {
    const int r = blockIdx.x;
    float* o = out + static_cast<size_t>(r) * W.cols;
    for (int c = threadIdx.x; c < W.cols; c += blockDim.x) o[c] = weight_at(W, r, c);
}

}  // namespace

size_t gemm_scratch_bytes(const WeightView& W) {
    return W.type == WType::F32 ? 0 : static_cast<size_t>(W.rows) * W.cols * sizeof(float);
}

void gemm(Context& ctx, const WeightView& W, const float* x, int n_tok, float* y, float* scratch, bool tf32,
          bool accumulate) {
    if (n_tok <= 0 || W.rows <= 0) return;
    const float* a = reinterpret_cast<const float*>(W.data);
    if (W.type != WType::F32) {
        if (!scratch) throw CudaError("gemm: a " + std::to_string(gemm_scratch_bytes(W)) +
                                          "-byte scratch is needed for a non-f32 weight", false);
        dequant_kernel<<<W.rows, 256, 0, stream_of(ctx)>>>(W, scratch);
        TL_CUDA_LAUNCHED();
        a = scratch;
    }
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    TL_CUBLAS_CHECK(cublas().gemm_ex(cublas_handle(ctx), CUBLAS_OP_T, CUBLAS_OP_N, W.rows, n_tok, W.cols, &alpha, a,
                                     CUDA_R_32F, W.cols, x, CUDA_R_32F, W.cols, &beta, y, CUDA_R_32F, W.rows,
                                     tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace tinyloop::kern::cuda
