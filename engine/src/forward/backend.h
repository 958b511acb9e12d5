// The back-end interface behind the one forward (docs/ARCHITECTURE.md, "Numerics"; ggml's
// back-end vtable is the model). A back end owns memory the ops read and write and implements
// the same ops on it: the CPU back end through kernels/cpu's dispatcher (its IsaTable), the CUDA
// back end through kernels/cuda (cuda_backend.h). The forward (forward.cpp: block_forward,
// run_layers) is written once against this interface; what only CUDA has (device residency of
// the weights, the captured decode step) stays in cuda_forward.cpp.
//
// Every pointer an op takes lives in the back end's memory (host memory for the CPU, device
// memory for CUDA); WeightView / AttentionArgs describe that memory. Ops may run asynchronously
// until download() or synchronize(). Shapes are checked by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace tinyloop {

// Host helpers of the greedy pick, shared by CpuOps::argmax and the logits pipeline above
// (decode/sampling.h): the lowest index of the maximum (NaN never wins), and logits[n_ids ..
// vocab) set to -inf (a padded vocabulary).
int32_t argmax(const float* logits, int vocab);
void mask_undecodable(float* logits, int vocab, int n_ids);

// Memory owned by a back end; freed by the destructor.
class BackendBuffer {
public:
    virtual ~BackendBuffer() = default;
    virtual void* data() const = 0;
    virtual size_t size() const = 0;
    float* f32() const { return static_cast<float*>(data()); }
    int* i32() const { return static_cast<int*>(data()); }
};

class BackendOps {
public:
    virtual ~BackendOps() = default;
    // "cpu (avx512, 2 threads)", "cuda (NVIDIA H200 ...)".
    virtual std::string name() const = 0;

    // ---- memory ----
    // Throws Error(OutOfMemory) when the back end cannot give `bytes`.
    virtual std::unique_ptr<BackendBuffer> alloc(size_t bytes) = 0;
    // Host <-> back-end copies; both return once the host side may be reused / holds the data.
    virtual void upload(void* dst, const void* src, size_t bytes) = 0;
    virtual void download(void* dst, const void* src, size_t bytes) = 0;
    // Copy inside the back end's memory (asynchronous where the back end is).
    virtual void copy(void* dst, const void* src, size_t bytes) = 0;
    // Waits for every op issued so far.
    virtual void synchronize() {}

    // ---- ops (kernels.h states each one's math) ----
    // out[t] = dequantized row ids[t] of E.
    virtual void embedding(const kern::WeightView& E, const int32_t* ids, int n, float* out) = 0;
    virtual void rmsnorm(const float* x, const float* g, int n, int d, float eps, float* y) = 0;
    // y = W x over n rows.
    virtual void matmul(const kern::WeightView& W, const float* x, int n, float* y) = 0;
    // y += W x (the residual add); tmp: [n, W.rows] scratch the back end may use.
    virtual void matmul_add(const kern::WeightView& W, const float* x, int n, float* y, float* tmp) = 0;
    // q = Wq x, k = Wk x, v = Wv x (one launch where the back end fuses them).
    virtual void matmul_qkv(const kern::WeightView& Wq, const kern::WeightView& Wk, const kern::WeightView& Wv,
                            const float* x, int n, float* q, float* k, float* v) = 0;
    // out = silu(Wg x) * (Wu x); tmp: [n, Wu.rows] scratch.
    virtual void matmul_swiglu(const kern::WeightView& Wg, const kern::WeightView& Wu, const float* x, int n,
                               float* out, float* tmp) = 0;
    virtual void rope(float* x, int n, int n_heads, int head_dim, const int* positions, float theta) = 0;
    virtual void silu_mul(const float* gate, const float* up, float* out, size_t n) = 0;
    virtual void add_inplace(float* y, const float* x, size_t n) = 0;
    // y[t, c] += b[c] for t < n, c < cols (qk_bias, FORMAT.md §1b).
    virtual void add_rows(float* y, const float* b, int n, int cols) = 0;
    // y[i] *= s for i < n (embed_scale, §1b).
    virtual void scale(float* y, float s, size_t n) = 0;
    // out[t] = concat(a[t], b[t]) for t < n: out is [n, da + db] (the adapter's input, §1b).
    virtual void concat_rows(float* out, const float* a, const float* b, int n, int da, int db) = 0;
    virtual void attention(const kern::AttentionArgs& a) = 0;
    // out[t] = the lowest index of the maximum of logits[t, 0 .. n_valid) (the greedy pick).
    virtual void argmax(const float* logits, int n_rows, int vocab, int n_valid, int* out) = 0;
    // Whether matmul quantizes activations to int8 for W (kernels.h; the CPU's default for Q8/Q4),
    // so that tests compare it with matmul_int8_ref rather than matmul_ref.
    virtual bool int8_activations(const kern::WeightView& W) const = 0;
};

// The CPU back end: host memory, kernels/cpu's ops at the dispatcher's SIMD level, spread over
// `pool` (nullptr: the calling thread only). Cheap to make; holds no state of its own.
class CpuOps final : public BackendOps {
public:
    explicit CpuOps(kern::ThreadPool* pool) : pool_(pool) {}
    std::string name() const override;
    std::unique_ptr<BackendBuffer> alloc(size_t bytes) override;
    void upload(void* dst, const void* src, size_t bytes) override;
    void download(void* dst, const void* src, size_t bytes) override;
    void copy(void* dst, const void* src, size_t bytes) override;
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
    bool int8_activations(const kern::WeightView& W) const override;

private:
    kern::ThreadPool* pool_;
};

// The back ends this build and machine offer, for the op test table: one CPU back end per SIMD
// level the CPU has (selecting it forces that level, process-wide, until the next select), and
// CUDA when a usable device is present. A back end that is not available says why.
struct BackendEntry {
    std::string name;               // "cpu-scalar", "cpu-avx2", "cpu-avx512", "cuda"
    std::string unavailable;        // empty when it can run here; else the reason
    // Makes the back end (forcing the SIMD level for a CPU entry). Only when available.
    std::unique_ptr<BackendOps> (*make)(const std::string& name, kern::ThreadPool* pool) = nullptr;
};
std::vector<BackendEntry> backend_entries();

}  // namespace tinyloop
