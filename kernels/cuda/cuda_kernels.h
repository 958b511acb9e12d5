// The CUDA back end's kernels behind one small host interface (docs/ARCHITECTURE.md, "kernels/").
//
// Basic usage:
//
//     using namespace tinyloop::kern::cuda;
//     DeviceProbe p = probe_device();          // never throws; p.usable, p.reason
//     Context ctx(p.device);                   // a stream and a cuBLAS handle on that device
//     DeviceBuffer x(ctx, n * sizeof(float));  // device memory, freed by the destructor
//     ctx.upload(x.get(), host, n * sizeof(float));
//     rmsnorm(ctx, x.f32(), g, n_tok, d, eps, y);
//     ctx.download(host, y, bytes);            // waits for the stream
//
// This header shows no CUDA type: the engine and the tests include it with a plain C++
// compiler. Every pointer an op takes is a device address (WeightView / AttentionArgs from
// kernels.h describe device memory here); every op is asynchronous on the context's stream.
//
// Errors: every CUDA or cuBLAS failure throws CudaError (what() names the call and the CUDA
// error); out_of_memory() is true for an allocation the device cannot satisfy, so the engine
// turns it into Error(OutOfMemory) rather than crashing. Kernels here never include engine
// headers; the engine converts CudaError into tinyloop::Error (engine/src/forward/cuda_backend.cpp).
//
// Numerics: the same contracts as the CPU ops in kernels.h. matmul, attention, rmsnorm, rope,
// silu_mul, lens and argmax compute each output row with one fixed reduction order whatever
// the number of rows in the call (batch invariance: decode and verification agree bit for bit
// on this back end). gemm (cuBLAS) does not promise that and is meant for large prefills only.
//
// Threads: a Context (its stream and cuBLAS handle) belongs to one thread at a time; device
// buffers may be shared read-only between contexts on the same device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/kernels.h"

namespace tinyloop::kern::cuda {

// A CUDA runtime, cuBLAS or launch failure. what() names the call and the error.
class CudaError : public std::runtime_error {
public:
    CudaError(const std::string& message, bool out_of_memory)
        : std::runtime_error(message), oom_(out_of_memory) {}
    bool out_of_memory() const noexcept { return oom_; }

private:
    bool oom_;
};

// What the machine offers. Never throws; `reason` says why a device is not usable, e.g.
// "cudaGetDeviceCount: cudaErrorInsufficientDriver (CUDA driver version is insufficient for
// CUDA runtime version)".
struct DeviceProbe {
    bool usable = false;
    int device_count = 0;
    int device = -1;             // the device chosen (the first usable one)
    std::string name;            // e.g. "NVIDIA H200"
    int cc_major = 0, cc_minor = 0;
    size_t total_bytes = 0;      // device memory
    size_t free_bytes = 0;
    int runtime_version = 0;     // cudaRuntimeGetVersion
    int driver_version = 0;      // cudaDriverGetVersion (0 when no driver)
    std::string reason;          // empty when usable
};
DeviceProbe probe_device();
// One line for a person: "NVIDIA H200 (sm_90, 140 GiB, driver 13.0)" or the reason.
std::string describe(const DeviceProbe& p);

// Device memory currently held through DeviceBuffer on all devices (for vram_usage_bytes).
size_t device_bytes_in_use();
// cudaMemGetInfo's free bytes on `device` (what the whole process, the driver included, left).
size_t device_free_bytes(int device);

class Context;

// Owned device memory (cudaMalloc / cudaFree). Throws CudaError (out_of_memory()) when the
// device cannot give `bytes`. Zero bytes is a valid empty buffer.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(Context& ctx, size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& o) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void* get() const { return ptr_; }
    float* f32() const { return static_cast<float*>(ptr_); }
    int* i32() const { return static_cast<int*>(ptr_); }
    size_t size() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
    int device_ = 0;
};

// A captured sequence of launches on a context's stream, replayed with one launch.
class Graph {
public:
    Graph();
    ~Graph();
    Graph(Graph&&) noexcept;
    Graph& operator=(Graph&&) noexcept;
    bool empty() const;
    // The recording's nodes (kernels, copies): a decode step's launches per token.
    size_t nodes() const;
    struct Impl;
    std::unique_ptr<Impl> impl;
};

// A device, one stream on it, a cuBLAS handle, and pinned host staging for small reads.
class Context {
public:
    explicit Context(int device = 0);  // throws CudaError (no such device, no driver, ...)
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    int device() const;
    // The device's compute capability, major * 10 + minor (90 on an H100/H200).
    int compute_capability() const;
    // Device memory this context holds outside DeviceBuffers it was given: cuBLAS's handle
    // (measured with cudaMemGetInfo around cublasCreate) and its workspace; 0 until the first
    // gemm. Part of device_bytes_in_use().
    size_t device_bytes() const;
    // Copies on the stream. upload returns once `src` may be reused (it synchronises);
    // download returns once `dst` holds the data.
    void upload(void* dst, const void* src, size_t bytes);
    void download(void* dst, const void* src, size_t bytes);
    void memset(void* dst, int byte, size_t bytes);
    // Device-to-device copy on the stream (asynchronous; may be captured in a graph).
    void copy(void* dst, const void* src, size_t bytes);
    // Copies `n` ints from device to the context's pinned staging area, asynchronously (may be
    // captured); read them with staged() after synchronize(). n <= 64.
    void stage_ints(const int* src, int n);
    const int* staged() const;
    // Page-locked host memory for n floats (grown, never shrunk; not during capture: it
    // allocates), then stage_floats copies n <= that many floats from the device into it
    // asynchronously (may be captured: the fast step's logits, read with staged_floats() after
    // synchronize() without a second download).
    void reserve_staged_floats(size_t n);
    void stage_floats(const float* src, size_t n);
    const float* staged_floats() const;
    // Waits for every launch so far; throws the first asynchronous error.
    void synchronize();

    // Graph capture: every op issued between begin_capture and end_capture is recorded, not
    // run; launch(g) runs the recording once.
    void begin_capture();
    Graph end_capture();
    void launch(const Graph& g);

    struct Impl;
    Impl& impl() const { return *impl_; }

private:
    std::unique_ptr<Impl> impl_;
};

// ---- the ops (device pointers; asynchronous on ctx's stream) -------------------------------

// out[t, :] = dequantized row ids[t] of E (an id outside [0, E.rows) gives a row of NaN).
void embedding(Context& ctx, const WeightView& E, const int* ids, int n_tok, float* out);

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * g, per row t of length d. y may alias x.
void rmsnorm(Context& ctx, const float* x, const float* g, int n_tok, int d, float eps, float* y);

// In place, as kern::rope (half-split pairs (i, i + head_dim/2), angle p * theta^(-2i/hd),
// cos/sin from double rounded to float, two products and one add without fma): the CPU's
// sequence, so equal to it bit for bit wherever the device's double cos/sin round alike.
void rope(Context& ctx, float* x, int n_tok, int n_heads, int head_dim, const int* positions, float theta);

// out[i] = silu(gate[i]) * up[i]; y[i] += x[i].
void silu_mul(Context& ctx, const float* gate, const float* up, float* out, size_t n);
void add_inplace(Context& ctx, float* y, const float* x, size_t n);
// FORMAT.md §1b's row ops (rows.cu): y[t, c] += b[c]; y[i] *= s; out[t] = concat(a[t], b[t]).
void add_rows(Context& ctx, float* y, const float* b, int n, int cols);
void scale(Context& ctx, float* y, float s, size_t n);
void concat_rows(Context& ctx, float* out, const float* a, const float* b, int n, int da, int db);

// Attention as kern::attention (AttentionArgs with device pointers, tree extras included):
// each (t, h) one fixed order over its row list. head_dim <= 256.
void attention(Context& ctx, const AttentionArgs& a);

// y[t, r] = sum_c W[r, c] x[t, c], W dequantized inside the kernel (FORMAT.md §2): the
// batch-invariant product for decode and verification (any n_tok; meant for n_tok <= ~64).
// accumulate: y[t, r] += the product instead (the residual add fused: add_inplace's bits).
void matmul(Context& ctx, const WeightView& W, const float* x, int n_tok, float* y, bool accumulate = false);

// ya = A x, yb = B x, yc = C x in one launch (the q, k, v projections): the same bits as three
// matmul calls. A, B, C have the same number of columns.
void matmul3(Context& ctx, const WeightView& A, const WeightView& B, const WeightView& C, const float* x, int n_tok,
             float* ya, float* yb, float* yc);

// out[t, r] = silu(gate x[t])[r] * (up x[t])[r] in one launch: the same bits as two matmul
// calls and silu_mul. gate and up have the same shape.
void matmul_swiglu(Context& ctx, const WeightView& gate, const WeightView& up, const float* x, int n_tok, float* out);

// The same product through cublasGemmEx (f32 in, f32 accumulate) for large prefills. A
// quantized or f16 W is dequantized into `scratch` (rows*cols floats, the caller's, reused
// per matrix) first; an f32 W is used in place. Not batch-invariant. tf32: allow TF32 tensor
// cores (faster, ~1e-3 relative error). accumulate: y += the product (beta = 1).
void gemm(Context& ctx, const WeightView& W, const float* x, int n_tok, float* y, float* scratch,
          bool tf32 = false, bool accumulate = false);
// Bytes of scratch gemm needs for W (0 for f32).
size_t gemm_scratch_bytes(const WeightView& W);

// The lens on the device, per row t of logits [n_rows, vocab]: softmax (temperature 1),
// top-k ids and probabilities (ties: lower id first), the entropy in nats, and the probability
// of emitted[t] (-1 or out of range: 0). Outputs: top_ids/top_probs [n_rows, k], entropy and
// p_emitted [n_rows]. emitted may be nullptr. 1 <= k <= 64.
void lens_topk(Context& ctx, const float* logits, int n_rows, int vocab, int k, const int* emitted,
               int* top_ids, float* top_probs, float* entropy, float* p_emitted);

// out[t] = the lowest index of the maximum of logits[t, 0 .. vocab) (NaN skipped; all NaN: 0),
// as the CPU's argmax after mask_undecodable: ids >= n_valid (the padded vocabulary) read -inf.
void argmax(Context& ctx, const float* logits, int n_rows, int vocab, int n_valid, int* out);

// dst_base[dst_rows[i], :] = src[i, :] for i < n, rows of row_floats (K/V into the cache at
// positions held in device memory).
void store_rows(Context& ctx, const float* src, int n, int row_floats, float* dst_base, const int* dst_rows);

// rope on q [n_tok, n_heads*hd] and k [n_tok, n_kv_heads*hd] in place, then k and v rows into
// the cache at dst_rows, in one launch. The cos/sin come from `table` (device memory holding
// rope_table(n_pos, head_dim, theta) of device_helpers.h, every position < n_pos): the CPU's
// kern::rope_ref bit for bit (the same float cos/sin, the same two rounded products).
void rope_store(Context& ctx, float* q, float* k, const float* v, int n_tok, int n_heads, int n_kv_heads, int head_dim,
                const int* positions, const float* table, float* k_cache, float* v_cache, const int* dst_rows);

// rope_store for the INT8 KV cache: the same rotation (none when table is null; q may then be
// null), then each (row, kv head) of k and v quantized as kern::quantize_kv_row: codes into row
// dst_rows[t] of the layer's k_codes / v_codes ([rows, n_kv_heads * head_dim] int8), scales into
// k_scales / v_scales at [dst_rows[t] * n_kv_heads + head]. attention() reads them through
// AttentionArgs' kq / vq / ks / vs (scale_stride n_kv_heads).
void rope_store_int8(Context& ctx, float* q, float* k, const float* v, int n_tok, int n_heads, int n_kv_heads,
                     int head_dim, const int* positions, const float* table, int8_t* k_codes, int8_t* v_codes,
                     float* k_scales, float* v_scales, const int* dst_rows);

// The rows of a batch over paged caches (the batch engine's pools) at execution layer `layer`,
// one block per row t: dst[t] = the storage row of position pos[t], and rows[off[t] + i] = the
// storage row of position begin[t] + i for i < off[t + 1] - off[t] (t's attention list in the
// order of its range, so attention() over the list gives the range's bits). Row t's page table
// is tables + table_at[t] ([layers, blocks[t]]; device_helpers.h paged_row). All device memory;
// every page the positions need already taken.
void paged_rows(Context& ctx, const int* tables, const int* table_at, const int* blocks, int page_size, int layer,
                const int* pos, const int* begin, const int* off, int n, int* dst, int* rows);

// One decode step's bookkeeping on the device (single sequence): ids[0] = chosen[0];
// pos[0] += 1; kv_end[0] = pos[0] + 1; kv_begin[0] = window ? max(0, pos[0] + 1 - window) : 0.
void advance(Context& ctx, const int* chosen, int* ids, int* pos, int* kv_begin, int* kv_end, int window);

// ---- the fast decode step (decode_fast.cu): one row, fewer and fuller launches --------------
//
// Each op below replaces a sequence of the reference ops above for one row (n_tok = 1) and,
// except attention_split, gives its bits: the CUDA session's fast step (CudaSessionOptions's
// fast switches, cuda_forward.h) runs them; the reference ops stay the default and the
// comparison. pdl: launch with programmatic dependent launch (sm_90+; the kernel waits for its
// predecessor at its top, so the launch itself overlaps the predecessor's tail).

// A product's input row as the fused kernels read it: rmsnorm(x, g, eps) when g is set (the
// norm folded into its consumer, rmsnorm's bits), else x. out (optional): block 0 writes the
// normalized row there too, so memory holds what the unfused rmsnorm would have left.
struct FoldedNorm {
    const float* g = nullptr;
    float eps = 0.0f;
    float* out = nullptr;
};
// The fused products keep their input row in shared memory: at most this many columns.
constexpr int kFastMaxCols = 8192;

// y = W in (+ y when accumulate: the residual add), one row. matmul's bits. W.cols <= kFastMaxCols.
void fast_matmul(Context& ctx, const FoldedNorm& norm, const WeightView& W, const float* x, float* y, bool accumulate,
                 bool pdl);
// out = silu(gate in) * (up in), one row: matmul_swiglu's bits.
void fast_matmul_swiglu(Context& ctx, const FoldedNorm& norm, const WeightView& gate, const WeightView& up,
                        const float* x, float* out, bool pdl);
// Whether fast_qkv_rope_store takes these weights: q/k/v rows n_heads*hd / n_kv_heads*hd, one
// column count <= kFastMaxCols, hd even, and the same vector/scalar read path for the three.
bool fast_qkv_fits(const WeightView& Wq, const WeightView& Wk, const WeightView& Wv, int n_heads, int n_kv_heads,
                   int head_dim);
// q, k, v = W in for one row, RoPE on q and k from `table` (rope_table) at position[0], k and v
// into the layer's cache at row cache_row[0] (and into k, v): matmul3 then rope_store, the same
// bits, in one launch.
void fast_qkv_rope_store(Context& ctx, const FoldedNorm& norm, const WeightView& Wq, const WeightView& Wk,
                         const WeightView& Wv, const float* x, int n_heads, int n_kv_heads, int head_dim,
                         const int* position, const float* table, float* q, float* k, float* v, float* k_cache,
                         float* v_cache, const int* cache_row, bool pdl);

// Flash-decoding attention: as attention() (any n_tok, ranges and tree extras; f32 cache), each
// (query, head)'s row list cut into n_splits pieces (split_range), one block per piece with its
// partial softmax state in `partial`, then one combine launch (attn_combine). Equal to
// attention() within float rounding (another summation order); batch-invariant like it (a
// row's bits depend only on its row list and n_splits). partial: attention_split_floats(...)
// floats of device memory.
// blocks a single-row decode should spread over (256 was tried on the H200: attention_split
// 8.3 -> 6.4 us, but the combine folded into wo 7.4 -> 9.5 us and short contexts slower: a loss)
constexpr int kAttentionMinBlocks = 128;
constexpr int kAttentionMaxSplits = 64;
// ceil(kAttentionMinBlocks / n_heads), within [1, kAttentionMaxSplits].
int attention_splits(int n_heads);
size_t attention_split_floats(int n_tok, int n_heads, int head_dim, int n_splits);
void attention_split(Context& ctx, const AttentionArgs& a, int n_splits, float* partial, size_t partial_floats,
                     bool pdl);
// attention_split's two halves, so that the fast step can fold the combine into the product that
// reads the attention (wo): the splits' states (device pointers into `partial`) ...
struct SplitPartials {
    const float* m = nullptr;    // [n_tok * n_heads, n_splits]
    const float* l = nullptr;    // [n_tok * n_heads, n_splits]
    const float* acc = nullptr;  // [n_tok * n_heads, n_splits, head_dim]
    int n_splits = 0, n_heads = 0, head_dim = 0;
};
SplitPartials attention_split_partials(Context& ctx, const AttentionArgs& a, int n_splits, float* partial,
                                       size_t partial_floats, bool pdl);
// ... then the combine launch (out [n_tok, n_heads * head_dim]) ...
void attention_combine(Context& ctx, const SplitPartials& p, int n_tok, float* out, bool pdl);
// ... or, for one row, y (+)= W combine(p) in one launch: the combined row (attention_combine's
// bits, written to att_out as well when set) as the product's input; the bits of
// attention_combine then fast_matmul. W.cols == n_heads * head_dim <= kFastMaxCols.
void fast_matmul_combined(Context& ctx, const SplitPartials& p, float* att_out, const WeightView& W, float* y,
                          bool accumulate, bool pdl);
// Whether fast_matmul_combined's shared memory (the row, then n_heads x (n_splits + 1) factors)
// fits the 48 KiB a launch gets without opting in; else the combine is launched on its own.
bool fast_combined_fits(const SplitPartials& p, int cols);

// The persistent step (phases.cuh): with it on, the five fast launches above are recorded as
// phases of one cooperative kernel, launched at the next other use of the context's stream (a
// launch, a copy, a synchronisation, the end of a capture), each phase the same block body as
// its kernel (the same bits), a grid barrier between phases. Turning it on allocates (not
// during capture) and throws CudaError on a device without cooperative launches; off flushes.
void set_persist(Context& ctx, bool on);
bool persist_on(const Context& ctx);
// Cooperative launches issued by the context so far.
size_t persist_launches(const Context& ctx);
// Microseconds per grid barrier of the persistent kernel alone (programs of kMaxPhases empty
// phases on a full grid of per_sm blocks per multiprocessor, reps launches timed with events).
double persist_barrier_probe(Context& ctx, int per_sm, int reps);
// Microseconds per barrier.cluster round of one thread-block cluster of `cluster` blocks (2..16;
// over 8 only where the device allows non-portable sizes) of 256 threads, alone (kMaxPhases
// rounds per launch, reps launches timed with events): the floor of a step run by one cluster.
// Throws CudaError (not fatal) below compute capability 9.0 or where no such cluster fits.
double cluster_barrier_probe(Context& ctx, int cluster, int reps);

}  // namespace tinyloop::kern::cuda
