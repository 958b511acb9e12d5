// Choosing the back end at load (LoadOptions.backend) and turning CUDA failures into
// tinyloop::Error. The only engine file pair that knows whether CUDA was built in; it includes
// kernels/cuda/cuda_kernels.h (no CUDA header) and only when TINYLOOP_HAVE_CUDA is defined.
#pragma once

#include <memory>
#include <string>

#include "forward/backend.h"
#include "tinyloop/tinyloop.h"

#ifdef TINYLOOP_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace tinyloop {

struct BackendChoice {
    bool cuda = false;   // true: run on device `device`
    int device = -1;
    std::string note;    // why, for model_info().backend_note and `tinyloop info`
};

// auto: CUDA when a usable device exists and the engine can run on it, else the CPU, saying
// why ("auto: no usable CUDA device (cudaGetDeviceCount: cudaErrorInsufficientDriver (...)),
// using the CPU"). cpu: always the CPU. cuda: the device, or Error(Backend) naming the reason
// (Error(NotSupported) in a build without the CUDA back end).
BackendChoice choose_backend(Backend requested);

// Whether this build contains the CUDA back end (TINYLOOP_CUDA found nvcc).
bool cuda_built();

// The device probe in one line: "NVIDIA H200 (device 0, sm_90, ...)" or "no usable CUDA
// device (reason)" or "no CUDA back end in this build". Never throws.
std::string cuda_device_summary();

// The CUDA entry of backend_entries(): available when this build has the CUDA back end and
// the machine a usable device; else the reason ("no CUDA back end in this build", the probe's).
BackendEntry cuda_backend_entry();

// Runs fn and rethrows a kern::cuda::CudaError as Error(OutOfMemory) when the device ran out of
// memory, else Error(Backend), with `what` in front of the message.
template <class F>
auto with_cuda_errors(const char* what, F&& fn) -> decltype(fn()) {
#ifdef TINYLOOP_HAVE_CUDA
    try {
        return fn();
    } catch (const kern::cuda::CudaError& e) {
        if (e.out_of_memory())
            throw Error(ErrorCode::OutOfMemory, std::string(what) + ": out of device memory: " + e.what());
        throw Error(ErrorCode::Backend, std::string(what) + ": CUDA: " + e.what());
    }
#else
    (void)what;
    return fn();
#endif
}

#ifdef TINYLOOP_HAVE_CUDA
// The CUDA back end (backend.h): device memory and kernels/cuda's ops on one context's stream.
// The products run the batch-invariant kernels (decode, verification, the lens); with
// use_gemm(scratch, min_rows) set, calls of at least min_rows rows go through cuBLAS (large
// prefills; not batch-invariant). Fuses what the CPU runs as separate ops: q/k/v in one launch,
// the residual add into the product, SwiGLU into the gate/up product (the same bits).
class CudaOps final : public BackendOps {
public:
    explicit CudaOps(kern::cuda::Context& ctx) : ctx_(&ctx) {}
    // With a context of its own on `device` (the op tests).
    explicit CudaOps(int device);
    ~CudaOps() override;
    void use_gemm(float* scratch, int min_rows) {
        gemm_on_ = true;
        gemm_scratch_ = scratch;
        gemm_min_rows_ = min_rows;
    }
    void force_kernels(bool on) { force_kernels_ = on; }
    kern::cuda::Context& context() { return *ctx_; }

    std::string name() const override;
    std::unique_ptr<BackendBuffer> alloc(size_t bytes) override;
    void upload(void* dst, const void* src, size_t bytes) override;
    void download(void* dst, const void* src, size_t bytes) override;
    void copy(void* dst, const void* src, size_t bytes) override;
    void synchronize() override;
    void embedding(const kern::WeightView& E, const int32_t* ids, int n, float* out) override;
    void rmsnorm(const float* x, const float* g, int n, int d, float eps, float* y) override;
    void matmul(const kern::WeightView& W, const float* x, int n, float* y) override;
    void matmul_add(const kern::WeightView& W, const float* x, int n, float* y, float* tmp) override;
    void matmul_qkv(const kern::WeightView& Wq, const kern::WeightView& Wk, const kern::WeightView& Wv, const float* x,
                    int n, float* q, float* k, float* v) override;
    void matmul_swiglu(const kern::WeightView& Wg, const kern::WeightView& Wu, const float* x, int n, float* out,
                       float* tmp) override;
    void rope(float* x, int n, int n_heads, int head_dim, const int* positions, float theta) override;
    void silu_mul(const float* gate, const float* up, float* out, size_t n) override;
    void add_inplace(float* y, const float* x, size_t n) override;
    void add_rows(float* y, const float* b, int n, int cols) override;
    void scale(float* y, float s, size_t n) override;
    void concat_rows(float* out, const float* a, const float* b, int n, int da, int db) override;
    void attention(const kern::AttentionArgs& a) override;
    void argmax(const float* logits, int n_rows, int vocab, int n_valid, int* out) override;
    bool int8_activations(const kern::WeightView&) const override { return false; }

private:
    bool gemm(int n) const { return gemm_on_ && !force_kernels_ && n >= gemm_min_rows_; }
    std::unique_ptr<kern::cuda::Context> own_;
    kern::cuda::Context* ctx_;
    bool gemm_on_ = false;
    float* gemm_scratch_ = nullptr;  // null when every weight is f32 (cuBLAS reads those in place)
    int gemm_min_rows_ = 0;
    bool force_kernels_ = false;
};
#endif

}  // namespace tinyloop
