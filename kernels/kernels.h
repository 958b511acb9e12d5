// The numeric operations behind one small interface (docs/ARCHITECTURE.md, "kernels/").
//
// Every op here has a plain scalar reference (`*_ref`) and a fast version chosen at run time
// by the CPU's features (AVX-512, AVX2, scalar). Contract shared by all of them:
//
//   * Batch invariance: an output row's bits do not depend on how many rows are computed in
//     the same call, nor on the thread count. Prefill, single-token decode and speculative
//     verification therefore agree bit for bit.
//   * Quantized weights are dequantized inside the kernel, never expanded in memory.
//   * Shapes are checked by the caller (the engine), not here.
//
// Nothing in kernels/ includes engine headers, Qt or CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>

namespace tinyloop::kern {

enum class WType { F32, F16, Q8, Q4, Q2, BF16 };

inline int wtype_bits(WType t) {
    switch (t) {
        case WType::F32: return 32;
        case WType::F16: return 16;
        case WType::BF16: return 16;
        case WType::Q8: return 8;
        case WType::Q4: return 4;
        case WType::Q2: return 2;
    }
    return 0;
}

// The float kinds: stored values, no groups (F32, F16, BF16); the others are group-quantized.
inline bool wtype_is_float(WType t) { return t == WType::F32 || t == WType::F16 || t == WType::BF16; }

// A weight matrix [rows, cols] as stored in the file (FORMAT.md §2). For F32/F16/BF16, `data` is
// row-major values. For Q8/Q4/Q2, `data` holds each row's codes packed into cols*bits/8 bytes
// (lower index in lower bits), `scales`/`zeros` are rows x (cols/group_size) f16 values, and
// w = scale * (q - zero).
struct WeightView {
    WType type = WType::F32;
    int rows = 0;
    int cols = 0;
    int group_size = 0;
    const uint8_t* data = nullptr;
    const uint16_t* scales = nullptr;
    const uint16_t* zeros = nullptr;
    // Optional, Q8/Q4 only: the same codes and f16 parameters repacked into row panels by
    // i8_pack_panels (below), owned by whoever owns `data`. Where set and the CPU runs the
    // AVX-512 VNNI level, the int8-activation matmul reads the panels instead of `data`.
    const uint8_t* panels = nullptr;
    // Optional, F32/BF16 only: the values repacked into float panels by f32_pack_panels (below),
    // owned by whoever owns `data`. Where set, matmul reads them instead of `data` (every level).
    const uint8_t* fpanels = nullptr;
};

// IEEE binary16 <-> binary32 (round to nearest even; inf/nan preserved).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// bfloat16 is the top 16 bits of a binary32: widening is exact (a shift), so a bf16 weight
// multiplies exactly as the f32 value it stands for.
inline float bf16_to_f32(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}
// Round to nearest even on the dropped 16 bits (what PyTorch's .to(torch.bfloat16) does); a NaN
// stays a (quiet) NaN, an overflow becomes inf.
inline uint16_t f32_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

// Persistent worker threads. parallel_for runs fn(task) for task in [0, n_tasks) spread over
// the workers and the calling thread, and returns when all are done. Calls from several
// threads at once are serialised (one job at a time). No thread is created per call.
class ThreadPool {
public:
    explicit ThreadPool(int n_threads);  // n_threads >= 1 (1 = run inline)
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;
    int size() const;
    void parallel_for(int n_tasks, const std::function<void(int task)>& fn);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Which SIMD level the dispatcher chose: "avx512", "avx2" or "scalar"; "avx512-novnni" is the
// AVX-512 level without AVX512-VNNI (the int8 matmul then uses maddubs instead of vpdpbusd).
const char* simd_level();
// Force a level for tests/benchmarks ("avx512", "avx512-novnni", "avx2", "scalar"); returns
// false when the CPU lacks it. Not thread-safe: call before work starts.
bool force_simd_level(const char* level);
// The environment variable TINYLOOP_SIMD=scalar|avx2|avx512-novnni|avx512 caps the levels for
// the whole process, as if the CPU had nothing above that one (the default level, the levels
// force_simd_level accepts, the VNNI panel and AMX kernels all follow it). An unknown name or a
// level this CPU lacks is refused: the message (naming the variable, the value and what this CPU
// has) is returned here, nullptr otherwise; the levels are then the hardware's, and load_model
// throws it.
const char* simd_request_error();

// y[t*rows + r] = sum_c W[r, c] * x[t*cols + c]  for t < n_tok, r < rows.
// x: [n_tok, cols] f32, y: [n_tok, rows] f32. pool may be nullptr (single thread).
void matmul(const WeightView& W, const float* x, int n_tok, float* y, ThreadPool* pool);
void matmul_ref(const WeightView& W, const float* x, int n_tok, float* y);

// int8 activations (matmul_int8.cpp). For Q8 and Q4 weights (group_size 32, 64 or 128),
// matmul quantizes each row of x once per call, per 32-column block b, symmetrically:
//   dx_b = max_c |x_c| / 127,  xq_c = round_half_even(x_c * (127 / max|x|)) in [-127, 127]
// and computes y[t, r] = sum_b dx_b * sum_{c in b} W[r, c] * xq_c with an exact integer dot per
// block (VNNI vpdpbusd where the CPU has it). A row's quantization depends on that row only, so
// batch invariance holds. This is the default; set_int8_activations(false) (or the environment
// variable TINYLOOP_INT8_ACT=0 at start-up) selects the float-activation kernels instead, whose
// reference is matmul_ref. Not thread-safe: call before work starts.
void set_int8_activations(bool on);
bool int8_activations();
// Whether matmul takes the int8-activation path for W (the switch is on and W is Q8/Q4 with a
// group_size of 32, 64 or 128).
bool uses_int8_activations(const WeightView& W);
// One row of x ([cols], cols a multiple of 32) as above: q[cols] codes, dx[cols / 32] scales.
// A block holding a NaN or an infinity gets dx = NaN and zero codes (the product is then NaN, as
// with float activations).
void quantize_row_int8(const float* x, int cols, int8_t* q, float* dx);
// The int8-activation product in double: x quantized with quantize_row_int8, W dequantized as
// dequant_row, y[t, r] = sum_b dx_b * sum_{c in b} W[r, c] * xq_c.
void matmul_int8_ref(const WeightView& W, const float* x, int n_tok, float* y);

// Row panels for the int8-activation matmul (matmul_int8.cpp): 16 rows interleaved so that one
// int32 SIMD lane holds one row (vpdpbusd with one broadcast activation word serves 16 rows), the
// layout llama.cpp's and oneDNN's int8 GEMMs pack their weights into. Bytes needed for W's
// panels; 0 when this CPU's kernels would not use them (no AVX512-VNNI, or W not Q8/Q4 with a
// group_size of 32, 64 or 128).
size_t i8_panel_bytes(const WeightView& W);
// Writes W's panels to out (i8_panel_bytes(W) bytes, 64-byte aligned).
void i8_pack_panels(const WeightView& W, uint8_t* out);
// The panel kernel's exact arithmetic in scalar code (the bit-for-bit reference of the tests):
// per (t, r), blocks b in order, in float with fused multiply-adds,
//   acc = fma(float(D_b), s_g * dx_b, acc);  acc = fma(m_g, dsx_b, acc)
// with D_b the exact integer dot of the block's codes and xq, m_g = -(z_g * s_g), dsx_b = dx_b * S_b.
void matmul_i8_panel_ref(const WeightView& W, const float* x, int n_tok, float* y);
// Whether calls over panels with 16 tokens or more use AMX tiles (AMX-INT8, granted by Linux,
// TINYLOOP_AMX not 0 at start-up): the same bits as the VNNI panel kernel, faster on prompts.
bool int8_amx_active();

// Float panels (matmul.cpp, "Float panels"): an F32 or BF16 matrix's values in panels of 16
// rows, [panel][column][16 rows], in the stored type (the last panel zero-padded), so that one
// AVX-512 lane holds one output row and a broadcast activation serves 16 rows. Where
// W.fpanels is set, matmul computes every output as fused-multiply-add chains over blocks of
// 128 columns in order, the blocks' sums added in order (matmul_f32_panel_ref), the same bits for
// any token count, thread count and SIMD level. Bytes needed for W's panels; 0 when W is not F32/BF16 or the environment variable
// TINYLOOP_F32_PANELS=0 was set at start-up (then matmul keeps the row-major kernels).
size_t f32_panel_bytes(const WeightView& W);
// Writes W's panels to out (f32_panel_bytes(W) bytes, or the same size computed with the
// switch on; 64-byte alignment advised).
void f32_pack_panels(const WeightView& W, uint8_t* out);
// Whether f32_panel_bytes packs (the TINYLOOP_F32_PANELS switch); set_f32_panels for tests.
// Not thread-safe: call before work starts.
void set_f32_panels(bool on);
bool f32_panels();
// The panel kernel's order in scalar code, from W.data (the bit-for-bit reference of the tests):
// y[t, r] = acc after acc = +0; for c = 0 .. cols-1: acc = fma(W[r, c], x[t, c], acc), W[r, c]
// widened exactly (bf16: a shift).
void matmul_f32_panel_ref(const WeightView& W, const float* x, int n_tok, float* y);

// bf16 activations for BF16 weights (opt-in; off by default): with set_bf16_dot(true), or the
// environment variable TINYLOOP_BF16_DOT=1 at start-up, on a CPU with AVX512-BF16 (and
// TINYLOOP_SIMD not below avx512), matmul of a BF16 W rounds each activation to bf16 (nearest
// even, f32_to_bf16) and multiplies with vdpbf16ps: y[t, r] = sum_c bf16(x[t, c]) * W[r, c] in
// f32. Faster (the products of two 8-bit significands, two per lane and instruction), but no
// longer the bits of the widened f32 matrix that the default path keeps (activations lose 16
// bits: ~1e-3 relative on a product). Without the CPU feature the switch changes nothing.
// Not thread-safe: call before work starts.
void set_bf16_dot(bool on);
bool bf16_dot();
// Whether matmul of a BF16 W takes the vdpbf16ps kernel now (the switch and the CPU).
bool bf16_dot_active();
// How many matmul calls took it in this process (for tests: that it ran).
uint64_t bf16_dot_call_count();

// out[c] = W[row, c] (dequantized), c < cols.
void dequant_row(const WeightView& W, int row, float* out);

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * g, per row t of length d. y may alias x.
void rmsnorm(const float* x, const float* g, int n_tok, int d, float eps, float* y);
void rmsnorm_ref(const float* x, const float* g, int n_tok, int d, float eps, float* y);

// In place: for each token t (at absolute position positions[t]) and each head, rotate the pair
// (i, i + head_dim/2) by angle positions[t] * theta^(-2i/head_dim). x: [n_tok, n_heads*head_dim].
void rope(float* x, int n_tok, int n_heads, int head_dim, const int* positions, float theta);
void rope_ref(float* x, int n_tok, int n_heads, int head_dim, const int* positions, float theta);

// out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + exp(-x)).
void silu_mul(const float* gate, const float* up, float* out, size_t n);
void silu_mul_ref(const float* gate, const float* up, float* out, size_t n);

// y[i] += x[i]
void add_inplace(float* y, const float* x, size_t n);

// Causal attention over a KV cache layer.
//   q:   [n_tok, n_heads, head_dim]
//   k,v: cache rows, row p at k + p*kv_stride, holding [n_kv_heads, head_dim]
//   query t attends cache rows [kv_begin[t], kv_end[t]) (end exclusive, begin < end)
//   query head h reads kv head h / (n_heads / n_kv_heads)
//   out: [n_tok, n_heads, head_dim]
// scores = q.k / sqrt(head_dim), softmax over the rows, out = sum p * v. Each (t, h) is computed
// independently with a fixed reduction order (batch-invariant).
struct AttentionArgs {
    const float* q = nullptr;
    int n_tok = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int head_dim = 0;
    const float* k = nullptr;
    const float* v = nullptr;
    int kv_stride = 0;
    const int* kv_begin = nullptr;
    const int* kv_end = nullptr;
    float* out = nullptr;
    // Tree attention (optional): after its range, query t also attends the rows
    // extra_rows[extra_offsets[t] .. extra_offsets[t+1]) in that order (n_tok + 1 offsets).
    // A query whose range and extras list the same rows as a plain range gets the same bits.
    const int* extra_rows = nullptr;
    const int* extra_offsets = nullptr;
    // INT8 cache (optional): when kq != nullptr the keys and values are int8 codes kq/vq laid out
    // like k/v (row p at p*kv_stride), each (row, kv head) with its own scale at
    // ks/vs[p*scale_stride + kv_head]: key = ks * kq, value = vs * vq. k and v are then unused.
    const int8_t* kq = nullptr;
    const int8_t* vq = nullptr;
    const float* ks = nullptr;
    const float* vs = nullptr;
    int scale_stride = 0;
};
void attention(const AttentionArgs& a, ThreadPool* pool);
void attention_ref(const AttentionArgs& a);

// Symmetric INT8 quantization of one cache row, per head: s_h = max|x_h| / 127 (0 when x_h is
// all zeros), q = round(x / s_h) in [-127, 127]. x: [n_heads, head_dim]; codes likewise;
// scales: [n_heads]. dequant: x' = s_h * q, |x - x'| <= s_h / 2.
void quantize_kv_row(const float* x, int n_heads, int head_dim, int8_t* codes, float* scales);
void dequantize_kv_row(const int8_t* codes, const float* scales, int n_heads, int head_dim, float* x);

}  // namespace tinyloop::kern
