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

namespace {
// The CUDA entry with the fast step's ops on (and, with kPersist, recorded as phases).
template <bool kPersist>
std::unique_ptr<BackendOps> make_cuda_fast(const std::string&, kern::ThreadPool*) {
    auto ops = std::make_unique<CudaOps>(cached_probe().device);
    ops->set_fast(true, true, !kPersist && ops->context().compute_capability() >= 90);
    if (kPersist) kern::cuda::set_persist(ops->context(), true);
    return ops;
}
template <bool kPersist>
BackendEntry cuda_fast_entry(const char* name) {
    BackendEntry e = cuda_backend_entry();
    e.name = name;
    if (e.make) e.make = make_cuda_fast<kPersist>;
    return e;
}
}  // namespace

BackendEntry cuda_fast_backend_entry() { return cuda_fast_entry<false>("cuda-fast"); }
BackendEntry cuda_persist_backend_entry() { return cuda_fast_entry<true>("cuda-persist"); }

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
void CudaOps::upload(void* dst, const void* src, size_t bytes) {
    flush();
    ctx_->upload(dst, src, bytes);
}
void CudaOps::download(void* dst, const void* src, size_t bytes) {
    flush();
    ctx_->download(dst, src, bytes);
}
void CudaOps::copy(void* dst, const void* src, size_t bytes) {
    flush();
    ctx_->copy(dst, src, bytes);
}
void CudaOps::synchronize() {
    flush();
    ctx_->synchronize();
}

// ---- the fast step's deferral (set_fast) ----
//
// A deferred op is launched by the next op unless that op is its fusing consumer; every method
// of CudaOps starts with flush() or a consumer's check, so the stream sees the reference order
// of effects. The fused kernels write what the unfused ops would have written (the normalized
// row, k and v), so a later reader of those buffers sees the same memory.

void CudaOps::set_fast(bool fuse, bool split_attention, bool pdl) {
    flush();
    fuse_ = fuse;
    split_ = split_attention;
    pdl_ = pdl;
}

void CudaOps::flush() {
    if (comb_.on) {
        comb_.on = false;
        kc::attention_combine(*ctx_, comb_.p, 1, comb_.out, pdl_);
    }
    if (norm_.on) {
        norm_.on = false;
        kc::rmsnorm(*ctx_, norm_.x, norm_.g, 1, norm_.d, norm_.eps, norm_.y);
    }
    if (qkv_.on) {
        qkv_.on = false;
        const PendingQkv& p = qkv_.p;
        const float* x = p.x;
        if (p.norm.g) {
            kc::rmsnorm(*ctx_, p.x, p.norm.g, 1, p.wq.cols, p.norm.eps, p.norm.out);
            x = p.norm.out;
        }
        kc::matmul3(*ctx_, p.wq, p.wk, p.wv, x, 1, qkv_.q, qkv_.k, qkv_.v);
    }
}

bool CudaOps::fast_row(int n, const kern::WeightView& W) const {
    return fuse_ && n == 1 && !gemm(n) && W.cols >= 1 && W.cols <= kc::kFastMaxCols;
}

// The norm deferred for the product reading x (cols columns, writing out), folded: x becomes the
// norm's input. Anything else deferred is launched first; a product that would overwrite the
// norm's input while other blocks still read it is not fused.
kc::FoldedNorm CudaOps::fold(const float*& x, int cols, const float* out) {
    kc::FoldedNorm f;
    if (norm_.on && !qkv_.on && norm_.y == x && norm_.d == cols && out != norm_.x) {
        norm_.on = false;
        f.g = norm_.g;
        f.eps = norm_.eps;
        f.out = norm_.y;
        x = norm_.x;
        return f;
    }
    flush();
    return f;
}

void CudaOps::defer_combine(const kc::SplitPartials& p, float* out) {
    flush();
    if (!fuse_) {
        kc::attention_combine(*ctx_, p, 1, out, pdl_);
        return;
    }
    comb_.on = true;
    comb_.p = p;
    comb_.out = out;
}

// Whether the product reading x (cols columns) into y takes the deferred combine as its input
// (then launched by the caller with fast_matmul_combined).
bool CudaOps::take_combine(const float* x, int cols, const float* y) {
    if (comb_.on && !norm_.on && !qkv_.on && x == comb_.out && cols == comb_.p.n_heads * comb_.p.head_dim &&
        y != comb_.out && kc::fast_combined_fits(comb_.p, cols)) {
        comb_.on = false;
        return true;
    }
    return false;
}

bool CudaOps::take_qkv(const float* q, const float* k, const float* v, int n_heads, int n_kv_heads, int head_dim,
                       PendingQkv* out) {
    if (qkv_.on && !norm_.on && qkv_.q == q && qkv_.k == k && qkv_.v == v &&
        kc::fast_qkv_fits(qkv_.p.wq, qkv_.p.wk, qkv_.p.wv, n_heads, n_kv_heads, head_dim)) {
        qkv_.on = false;
        *out = qkv_.p;
        return true;
    }
    flush();
    return false;
}

void CudaOps::embedding(const kern::WeightView& E, const int32_t* ids, int n, float* out) {
    flush();
    kc::embedding(*ctx_, E, ids, n, out);
}
void CudaOps::rmsnorm(const float* x, const float* g, int n, int d, float eps, float* y) {
    flush();
    if (fuse_ && n == 1 && d >= 1 && d <= kc::kFastMaxCols && y != x) {
        norm_ = PendingNorm{true, x, g, d, eps, y};
        return;
    }
    kc::rmsnorm(*ctx_, x, g, n, d, eps, y);
}
void CudaOps::matmul(const kern::WeightView& W, const float* x, int n, float* y) {
    if (fast_row(n, W) && take_combine(x, W.cols, y)) {
        kc::fast_matmul_combined(*ctx_, comb_.p, comb_.out, W, y, false, pdl_);
        return;
    }
    if (fast_row(n, W)) {
        const kc::FoldedNorm f = fold(x, W.cols, y);
        kc::fast_matmul(*ctx_, f, W, x, y, false, pdl_);
        return;
    }
    flush();
    if (gemm(n)) kc::gemm(*ctx_, W, x, n, y, gemm_scratch_, false, false);
    else kc::matmul(*ctx_, W, x, n, y);
}
void CudaOps::matmul_add(const kern::WeightView& W, const float* x, int n, float* y, float*) {
    if (fast_row(n, W) && take_combine(x, W.cols, y)) {
        kc::fast_matmul_combined(*ctx_, comb_.p, comb_.out, W, y, true, pdl_);
        return;
    }
    if (fast_row(n, W)) {
        const kc::FoldedNorm f = fold(x, W.cols, y);
        kc::fast_matmul(*ctx_, f, W, x, y, true, pdl_);
        return;
    }
    flush();
    if (gemm(n)) kc::gemm(*ctx_, W, x, n, y, gemm_scratch_, false, true);
    else kc::matmul(*ctx_, W, x, n, y, true);
}
void CudaOps::matmul_qkv(const kern::WeightView& Wq, const kern::WeightView& Wk, const kern::WeightView& Wv,
                         const float* x, int n, float* q, float* k, float* v) {
    if (fast_row(n, Wq) && Wk.cols == Wq.cols && Wv.cols == Wq.cols) {
        // deferred whole: the session's cache side takes it (take_qkv) to fuse RoPE and the
        // cache writes; any other next op launches it as matmul3
        const float* in = x;
        const kc::FoldedNorm f = fold(in, Wq.cols, nullptr);
        if (f.g && (f.out == q || f.out == k || f.out == v)) {  // the norm's row must survive to the flush
            norm_ = PendingNorm{true, in, f.g, Wq.cols, f.eps, f.out};
            flush();
        } else {
            qkv_.on = true;
            qkv_.p.wq = Wq;
            qkv_.p.wk = Wk;
            qkv_.p.wv = Wv;
            qkv_.p.x = in;
            qkv_.p.norm = f;
            qkv_.q = q;
            qkv_.k = k;
            qkv_.v = v;
            return;
        }
    } else {
        flush();
    }
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
    if (fast_row(n, Wg) && Wu.rows == Wg.rows && Wu.cols == Wg.cols) {
        const kc::FoldedNorm f = fold(x, Wg.cols, out);
        kc::fast_matmul_swiglu(*ctx_, f, Wg, Wu, x, out, pdl_);
        return;
    }
    flush();
    if (gemm(n)) {
        matmul(Wg, x, n, out);
        matmul(Wu, x, n, tmp);
        kc::silu_mul(*ctx_, out, tmp, out, static_cast<size_t>(n) * Wg.rows);
    } else {
        kc::matmul_swiglu(*ctx_, Wg, Wu, x, n, out);
    }
}
void CudaOps::rope(float* x, int n, int n_heads, int head_dim, const int* positions, float theta) {
    flush();
    kc::rope(*ctx_, x, n, n_heads, head_dim, positions, theta);
}
void CudaOps::silu_mul(const float* gate, const float* up, float* out, size_t n) {
    flush();
    kc::silu_mul(*ctx_, gate, up, out, n);
}
void CudaOps::add_inplace(float* y, const float* x, size_t n) {
    flush();
    kc::add_inplace(*ctx_, y, x, n);
}
void CudaOps::add_rows(float* y, const float* b, int n, int cols) {
    flush();
    kc::add_rows(*ctx_, y, b, n, cols);
}
void CudaOps::scale(float* y, float s, size_t n) {
    flush();
    kc::scale(*ctx_, y, s, n);
}
void CudaOps::concat_rows(float* out, const float* a, const float* b, int n, int da, int db) {
    flush();
    kc::concat_rows(*ctx_, out, a, b, n, da, db);
}
void CudaOps::attention(const kern::AttentionArgs& a) {
    flush();
    if (!split_ || a.kq) {
        kc::attention(*ctx_, a);
        return;
    }
    const int splits = kc::attention_splits(a.n_heads);
    const size_t need = kc::attention_split_floats(a.n_tok, a.n_heads, a.head_dim, splits);
    if (partial_.size() < need * sizeof(float)) partial_ = kc::DeviceBuffer(*ctx_, need * sizeof(float));
    kc::attention_split(*ctx_, a, splits, partial_.f32(), partial_.size() / sizeof(float), pdl_);
}
void CudaOps::argmax(const float* logits, int n_rows, int vocab, int n_valid, int* out) {
    flush();
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

BackendEntry cuda_fast_backend_entry() {
    BackendEntry e = cuda_backend_entry();
    e.name = "cuda-fast";
    return e;
}

BackendEntry cuda_persist_backend_entry() {
    BackendEntry e = cuda_backend_entry();
    e.name = "cuda-persist";
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
