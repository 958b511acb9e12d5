// The CPU back end (backend.h): host memory and kernels/cpu's ops, plus the list of back ends the
// op test table runs.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "forward/backend.h"
#include "forward/cuda_backend.h"

namespace tinyloop {

void mask_undecodable(float* logits, int vocab, int n_ids) {
    for (int i = std::max(0, n_ids); i < vocab; ++i) logits[i] = -std::numeric_limits<float>::infinity();
}

int32_t argmax(const float* logits, int vocab) {
    int32_t best = 0;
    float bv = -std::numeric_limits<float>::infinity();
    bool found = false;
    for (int i = 0; i < vocab; ++i) {
        const float x = logits[i];
        if (std::isnan(x)) continue;
        if (!found || x > bv) {
            bv = x;
            best = i;
            found = true;
        }
    }
    return best;
}

namespace {

class HostBuffer final : public BackendBuffer {
public:
    explicit HostBuffer(size_t bytes) : bytes_(bytes) {
        if (bytes == 0) return;
        ptr_ = static_cast<uint8_t*>(::operator new(bytes, std::align_val_t{64}, std::nothrow));
        if (!ptr_)
            throw Error(ErrorCode::OutOfMemory, "cpu back end: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    ~HostBuffer() override {
        if (ptr_) ::operator delete(ptr_, std::align_val_t{64});
    }
    HostBuffer(const HostBuffer&) = delete;
    HostBuffer& operator=(const HostBuffer&) = delete;
    void* data() const override { return ptr_; }
    size_t size() const override { return bytes_; }

private:
    uint8_t* ptr_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace

std::string CpuOps::name() const {
    return std::string("cpu (") + kern::simd_level() + ", " + std::to_string(pool_ ? pool_->size() : 1) + " threads)";
}

std::unique_ptr<BackendBuffer> CpuOps::alloc(size_t bytes) { return std::make_unique<HostBuffer>(bytes); }
void CpuOps::upload(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
}
void CpuOps::download(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
}
void CpuOps::copy(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memmove(dst, src, bytes);
}

void CpuOps::embedding(const kern::WeightView& E, const int32_t* ids, int n, float* out) {
    for (int t = 0; t < n; ++t) kern::dequant_row(E, ids[t], out + static_cast<size_t>(t) * E.cols);
}
void CpuOps::rmsnorm(const float* x, const float* g, int n, int d, float eps, float* y) {
    kern::rmsnorm(x, g, n, d, eps, y);
}
void CpuOps::matmul(const kern::WeightView& W, const float* x, int n, float* y) { kern::matmul(W, x, n, y, pool_); }
void CpuOps::matmul_add(const kern::WeightView& W, const float* x, int n, float* y, float* tmp) {
    kern::matmul(W, x, n, tmp, pool_);
    kern::add_inplace(y, tmp, static_cast<size_t>(n) * W.rows);
}
void CpuOps::matmul_qkv(const kern::WeightView& Wq, const kern::WeightView& Wk, const kern::WeightView& Wv,
                        const float* x, int n, float* q, float* k, float* v) {
    kern::matmul(Wq, x, n, q, pool_);
    kern::matmul(Wk, x, n, k, pool_);
    kern::matmul(Wv, x, n, v, pool_);
}
void CpuOps::matmul_swiglu(const kern::WeightView& Wg, const kern::WeightView& Wu, const float* x, int n, float* out,
                           float* tmp) {
    kern::matmul(Wg, x, n, out, pool_);
    kern::matmul(Wu, x, n, tmp, pool_);
    kern::silu_mul(out, tmp, out, static_cast<size_t>(n) * Wg.rows);
}
void CpuOps::rope(float* x, int n, int n_heads, int head_dim, const int* positions, float theta) {
    kern::rope(x, n, n_heads, head_dim, positions, theta);
}
void CpuOps::silu_mul(const float* gate, const float* up, float* out, size_t n) { kern::silu_mul(gate, up, out, n); }
void CpuOps::add_inplace(float* y, const float* x, size_t n) { kern::add_inplace(y, x, n); }
// The three §1b ops touch O(n·d) floats once per block or pass: plain loops, no SIMD dispatch.
void CpuOps::add_rows(float* y, const float* b, int n, int cols) {
    for (int t = 0; t < n; ++t) {
        float* r = y + static_cast<size_t>(t) * cols;
        for (int c = 0; c < cols; ++c) r[c] += b[c];
    }
}
void CpuOps::scale(float* y, float s, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] *= s;
}
void CpuOps::concat_rows(float* out, const float* a, const float* b, int n, int da, int db) {
    for (int t = 0; t < n; ++t) {
        float* o = out + static_cast<size_t>(t) * (da + db);
        std::memcpy(o, a + static_cast<size_t>(t) * da, static_cast<size_t>(da) * sizeof(float));
        std::memcpy(o + da, b + static_cast<size_t>(t) * db, static_cast<size_t>(db) * sizeof(float));
    }
}
void CpuOps::attention(const kern::AttentionArgs& a) { kern::attention(a, pool_); }
void CpuOps::argmax(const float* logits, int n_rows, int vocab, int n_valid, int* out) {
    std::vector<float> row(static_cast<size_t>(vocab));
    for (int t = 0; t < n_rows; ++t) {
        std::memcpy(row.data(), logits + static_cast<size_t>(t) * vocab, row.size() * sizeof(float));
        mask_undecodable(row.data(), vocab, n_valid);
        out[t] = tinyloop::argmax(row.data(), vocab);
    }
}
bool CpuOps::int8_activations(const kern::WeightView& W) const { return kern::uses_int8_activations(W); }

std::vector<BackendEntry> backend_entries() {
    std::vector<BackendEntry> out;
    const std::string saved = kern::simd_level();
    auto make_cpu = [](const std::string& name, kern::ThreadPool* pool) -> std::unique_ptr<BackendOps> {
        if (!kern::force_simd_level(name.c_str() + 4))
            throw Error(ErrorCode::Backend, name + ": this CPU does not have that SIMD level");
        return std::make_unique<CpuOps>(pool);
    };
    for (const char* level : {"scalar", "avx2", "avx512-novnni", "avx512"}) {
        BackendEntry e;
        e.name = std::string("cpu-") + level;
        if (kern::force_simd_level(level)) e.make = make_cpu;
        else if (const char* cap = std::getenv("TINYLOOP_SIMD"); cap != nullptr && *cap != '\0' && !kern::simd_request_error())
            e.unavailable = std::string("TINYLOOP_SIMD=") + cap + " rules out " + level;
        else e.unavailable = std::string("this CPU has no ") + level;
        out.push_back(e);
    }
    kern::force_simd_level(saved.c_str());
    out.push_back(cuda_backend_entry());
    out.push_back(cuda_fast_backend_entry());
    out.push_back(cuda_persist_backend_entry());
    return out;
}

}  // namespace tinyloop
