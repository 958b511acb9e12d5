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
// "cuda-fast": the same device with the fast decode step's ops on (CudaOps::set_fast with fuse,
// split and pdl), for the op table to compare with "cuda".
BackendEntry cuda_fast_backend_entry();
// "cuda-persist": cuda-fast's ops recorded as phases of one cooperative kernel
// (kern::cuda::set_persist), launched when the table reads a result: the same bits as cuda-fast.
BackendEntry cuda_persist_backend_entry();

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

    // The fast step's product side (cuda_fast_path.h: fuse, split, pdl). With fuse, one-row
    // calls run decode_fast.cu's kernels: an rmsnorm is deferred and folded into the product
    // that reads its output (any other op launches it first), and a one-row q/k/v product is
    // deferred for the session's cache side to fuse with RoPE and the cache writes
    // (take_qkv); the bits are the reference ops'. With split, attention() is flash-decoding.
    void set_fast(bool fuse, bool split_attention, bool pdl);
    // Launches whatever is deferred (a norm, a q/k/v product) as the reference ops would.
    void flush();
    struct PendingQkv {
        kern::WeightView wq, wk, wv;
        const float* x = nullptr;       // the product's input (the norm's input when folded)
        kern::cuda::FoldedNorm norm;    // g == nullptr: no norm folded
    };
    // The deferred one-row q/k/v product writing q, k, v, handed over (true) for the caller to
    // launch fused (kern::cuda::fast_qkv_rope_store); false (after launching it as the
    // reference ops) when none matches or the weights do not fit the fused kernel.
    bool take_qkv(const float* q, const float* k, const float* v, int n_heads, int n_kv_heads, int head_dim,
                  PendingQkv* out);
    // The combine of a one-row split attention (its partial states launched), deferred into the
    // product that reads `out` (wo: kern::cuda::fast_matmul_combined); any other next op
    // launches it as attention_combine. Only with fuse.
    void defer_combine(const kern::cuda::SplitPartials& p, float* out);
    bool pdl() const { return pdl_; }

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
    // the fast step (set_fast)
    bool fuse_ = false, split_ = false, pdl_ = false;
    struct PendingNorm {
        bool on = false;
        const float* x = nullptr;
        const float* g = nullptr;
        int d = 0;
        float eps = 0;
        float* y = nullptr;
    } norm_;
    struct {
        bool on = false;
        PendingQkv p;
        float *q = nullptr, *k = nullptr, *v = nullptr;
    } qkv_;
    struct {
        bool on = false;
        kern::cuda::SplitPartials p;
        float* out = nullptr;
    } comb_;
    kern::cuda::DeviceBuffer partial_;  // attention()'s split states (the op table's calls)
    bool take_combine(const float* x, int cols, const float* y);
    bool fast_row(int n, const kern::WeightView& W) const;
    kern::cuda::FoldedNorm fold(const float*& x, int cols, const float* out);
};
#endif

}  // namespace tinyloop
