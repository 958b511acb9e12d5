// Back-end selection (LoadOptions.backend), the device probe's report, and the CUDA back end's
// ops (CudaOps, backend.h).
//
// A usable device is chosen for `cuda` and `auto`: the model's weights go to the device and
// the calls the CUDA executor runs go there (cuda_forward.cpp); what it lacks is refused in one
// place (executor.h: unsupported()) with backend cuda, never a silent CPU run.
#include "forward/cuda_backend.h"

namespace tinyloop {

#ifdef TINYLOOP_HAVE_CUDA

namespace {

// Probed once per process: on a GPU machine the first CUDA call creates a context (tenths of a
// second), and the answer does not change while the process runs.
const kern::cuda::DeviceProbe& cached_probe() {
    static const kern::cuda::DeviceProbe p = [] {
        try {
            return kern::cuda::probe_device();
        } catch (const std::exception& e) {
            kern::cuda::DeviceProbe q;
            q.reason = std::string("probe failed: ") + e.what();
            return q;
        }
    }();
    return p;
}

}  // namespace

bool cuda_built() { return true; }

BackendEntry cuda_backend_entry() {
    BackendEntry e;
    e.name = "cuda";
    const kern::cuda::DeviceProbe& p = cached_probe();
    if (!p.usable) {
        e.unavailable = "no CUDA device (" + p.reason + ")";
        return e;
    }
    e.make = [](const std::string&, kern::ThreadPool*) -> std::unique_ptr<BackendOps> {
        return std::make_unique<CudaOps>(cached_probe().device);
    };
    return e;
}

// ---- CudaOps ---------------------------------------------------------------------------------

namespace {

class DeviceMemory final : public BackendBuffer {
public:
    DeviceMemory(kern::cuda::Context& ctx, size_t bytes) : buf_(ctx, bytes) {}
    void* data() const override { return buf_.get(); }
    size_t size() const override { return buf_.size(); }

private:
    kern::cuda::DeviceBuffer buf_;
};

}  // namespace

namespace kc = kern::cuda;

CudaOps::CudaOps(int device) {
    with_cuda_errors("cuda back end", [&] { own_ = std::make_unique<kc::Context>(device); });
    ctx_ = own_.get();
}
CudaOps::~CudaOps() = default;

std::string CudaOps::name() const { return "cuda (" + cuda_device_summary() + ")"; }

std::unique_ptr<BackendBuffer> CudaOps::alloc(size_t bytes) {
    return with_cuda_errors("cuda alloc", [&]() -> std::unique_ptr<BackendBuffer> {
        return std::make_unique<DeviceMemory>(*ctx_, bytes);
    });
}
void CudaOps::upload(void* dst, const void* src, size_t bytes) { ctx_->upload(dst, src, bytes); }
void CudaOps::download(void* dst, const void* src, size_t bytes) { ctx_->download(dst, src, bytes); }
void CudaOps::copy(void* dst, const void* src, size_t bytes) { ctx_->copy(dst, src, bytes); }
void CudaOps::synchronize() { ctx_->synchronize(); }

void CudaOps::embedding(const kern::WeightView& E, const int32_t* ids, int n, float* out) {
    kc::embedding(*ctx_, E, ids, n, out);
}
void CudaOps::rmsnorm(const float* x, const float* g, int n, int d, float eps, float* y) {
    kc::rmsnorm(*ctx_, x, g, n, d, eps, y);
}
void CudaOps::matmul(const kern::WeightView& W, const float* x, int n, float* y) {
    if (gemm(n)) kc::gemm(*ctx_, W, x, n, y, gemm_scratch_, false, false);
    else kc::matmul(*ctx_, W, x, n, y);
}
void CudaOps::matmul_add(const kern::WeightView& W, const float* x, int n, float* y, float*) {
    if (gemm(n)) kc::gemm(*ctx_, W, x, n, y, gemm_scratch_, false, true);
    else kc::matmul(*ctx_, W, x, n, y, true);
}
void CudaOps::matmul_qkv(const kern::WeightView& Wq, const kern::WeightView& Wk, const kern::WeightView& Wv,
                         const float* x, int n, float* q, float* k, float* v) {
    if (gemm(n)) {
        matmul(Wq, x, n, q);
        matmul(Wk, x, n, k);
        matmul(Wv, x, n, v);
    } else {
        kc::matmul3(*ctx_, Wq, Wk, Wv, x, n, q, k, v);
    }
}
void CudaOps::matmul_swiglu(const kern::WeightView& Wg, const kern::WeightView& Wu, const float* x, int n, float* out,
                            float* tmp) {
    if (gemm(n)) {
        matmul(Wg, x, n, out);
        matmul(Wu, x, n, tmp);
        kc::silu_mul(*ctx_, out, tmp, out, static_cast<size_t>(n) * Wg.rows);
    } else {
        kc::matmul_swiglu(*ctx_, Wg, Wu, x, n, out);
    }
}
void CudaOps::rope(float* x, int n, int n_heads, int head_dim, const int* positions, float theta) {
    kc::rope(*ctx_, x, n, n_heads, head_dim, positions, theta);
}
void CudaOps::silu_mul(const float* gate, const float* up, float* out, size_t n) {
    kc::silu_mul(*ctx_, gate, up, out, n);
}
void CudaOps::add_inplace(float* y, const float* x, size_t n) { kc::add_inplace(*ctx_, y, x, n); }
void CudaOps::add_rows(float* y, const float* b, int n, int cols) { kc::add_rows(*ctx_, y, b, n, cols); }
void CudaOps::scale(float* y, float s, size_t n) { kc::scale(*ctx_, y, s, n); }
void CudaOps::concat_rows(float* out, const float* a, const float* b, int n, int da, int db) {
    kc::concat_rows(*ctx_, out, a, b, n, da, db);
}
void CudaOps::attention(const kern::AttentionArgs& a) { kc::attention(*ctx_, a); }
void CudaOps::argmax(const float* logits, int n_rows, int vocab, int n_valid, int* out) {
    kc::argmax(*ctx_, logits, n_rows, vocab, n_valid, out);
}

std::string cuda_device_summary() { return kern::cuda::describe(cached_probe()); }

BackendChoice choose_backend(Backend requested) {
    BackendChoice c;
    if (requested == Backend::Cpu) {
        c.note = "cpu: requested";
        return c;
    }
    const kern::cuda::DeviceProbe& p = cached_probe();
    if (!p.usable) {
        if (requested == Backend::Cuda)
            throw Error(ErrorCode::Backend, "backend cuda: no usable CUDA device (" + p.reason +
                                                "); use backend cpu or auto");
        c.note = "auto: no usable CUDA device (" + p.reason + "), using the CPU";
        return c;
    }
    c.cuda = true;
    c.device = p.device;
    c.note = std::string(requested == Backend::Cuda ? "cuda: requested" : "auto: CUDA device found") + ", " +
             kern::cuda::describe(p);
    return c;
}

#else

bool cuda_built() { return false; }

BackendEntry cuda_backend_entry() {
    BackendEntry e;
    e.name = "cuda";
    e.unavailable = "no CUDA back end in this build";
    return e;
}

std::string cuda_device_summary() { return "no CUDA back end in this build"; }

BackendChoice choose_backend(Backend requested) {
    BackendChoice c;
    switch (requested) {
        case Backend::Cuda:
            throw Error(ErrorCode::NotSupported,
                        "backend cuda: this build has no CUDA back end; use backend cpu or auto");
        case Backend::Auto:
            c.note = "auto: no CUDA back end in this build, using the CPU";
            break;
        case Backend::Cpu:
            c.note = "cpu: requested";
            break;
    }
    return c;
}

#endif

}  // namespace tinyloop
