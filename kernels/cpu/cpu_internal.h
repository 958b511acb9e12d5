// Private to kernels/cpu: the per-instruction-set entry points and the dispatcher's choice.
//
// Each SIMD level fills one IsaTable. The *_avx512.cpp / *_avx2.cpp files that implement them are
// compiled with those instruction sets enabled, so nothing in them may be reached before the
// run-time CPU check (dispatch.cpp) has allowed it. They also avoid the standard library's
// templates: an out-of-line copy of, say, std::vector<float>::resize compiled with AVX-512 could
// be the one the linker keeps for the whole program.
#pragma once

#include <string>

#include "kernels/kernels.h"

namespace tinyloop::kern {
// Columns per block of a float-panel output's sum (matmul_fpanel_simd.h, matmul_f32_panel_ref):
// each block one fma chain from 0, the blocks' sums added in order.
constexpr int kFPanelBlock = 128;
}  // namespace tinyloop::kern

namespace tinyloop::kern::detail {

enum class Simd : int { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// The level in use (detected once; force_simd_level may override it).
Simd active_simd();

// Quantized activations for the int8 matmul, one record per token t (see kernels.h for the math):
//   q   + t*q_stride: codes in chunks of I8Layout::chunk_cols columns (zero padded); for Q4 with
//         q4_split, a chunk holds its even columns and then its odd ones (the order low and high
//         nibbles unpack in);
//   edx + t*e_stride: per chunk, `lanes` floats: dx of the block SIMD lane j covers, i.e. block
//         j*cols_per_lane/32 of the chunk (zero past the last block);
//   dx, dsx + t*s_stride: dx_b and dx_b * sum of block b's codes, zero padded to s_stride.
struct ActI8 {
    const int8_t* q = nullptr;
    const float* edx = nullptr;
    const float* dx = nullptr;
    const float* dsx = nullptr;
    size_t q_stride = 0, e_stride = 0, s_stride = 0;
    // The AMX panel kernel's activations (matmul_i8_amx.cpp), tokens in tiles of 16 (the last one
    // padded with zero codes and scales): per (tile, block) a 512-byte B tile, 8 rows x 64 bytes,
    // byte 64 k + 4 n + j = code of token n at the block's column 4 k + j; and per
    // (tile, block) 16 floats dx and 16 floats dsx, one per token.
    const int8_t* bq = nullptr;
    const float* dxv = nullptr;
    const float* dsxv = nullptr;
};
struct I8Layout {
    int chunk_cols = 32;    // columns per chunk (the SIMD kernel's step)
    int lanes = 0;          // int32 lanes per chunk (0: no edx, the scalar kernel)
    int cols_per_lane = 0;  // columns one int32 lane sums
    bool q4_split = false;  // chunk = even columns, then odd columns
};
struct IsaTable {
    // y[t*W.rows + r] for r in [r0, r1), all t < n_tok. For Q8/Q4/Q2, x has been permuted per
    // 32-column block with matmul_block_perm(type, level) (the order the codes unpack in).
    void (*matmul_rows)(const WeightView& W, const float* x, int n_tok, float* y, int r0, int r1);
    void (*rmsnorm)(const float* x, const float* g, int n_tok, int d, float eps, float* y);
    // Rotates one token's heads with precomputed cos/sin (head_dim/2 each).
    void (*rope_token)(float* x, int n_heads, int head_dim, const float* cs, const float* sn);
    void (*silu_mul)(const float* gate, const float* up, float* out, size_t n);
    void (*add_inplace)(float* y, const float* x, size_t n);
    // One (query, head): out = softmax(scale * q.k_p) . v_p over the cache rows b, b+1, .., e-1
    // and then extra[0 .. n_extra) (tree attention), in that order; scratch holds
    // (e - b) + n_extra floats plus one vector. No rows at all: out = 0.
    void (*attend_one)(const float* q, const float* k, const float* v, int kv_stride, int head_dim,
                       int b, int e, const int* extra, int n_extra, float scale, float* scratch,
                       float* out);
    // Several queries of one head at once (attention_simd.h, attend_multi_simd): queries j < nq over
    // rows [b, e[j]) (each e[j] > b, no extras), each output bit-identical to attend_one's;
    // returns false, doing nothing, where the level cannot (head_dim), nullptr at the scalar level.
    bool (*attend_multi)(const float* const* q, const float* k, const float* v, int kv_stride, int head_dim, int b,
                         const int* e, int nq, float scale, float* const* scratch, float* const* out);
    // int8 activations (matmul_int8.cpp): y[t*W.rows + r] for r in [r0, r1), all t < n_tok, W
    // Q8 or Q4, x quantized into `a` in the layout i8_layout(W.type, level) gives.
    void (*matmul_rows_i8)(const WeightView& W, const ActI8& a, int n_tok, float* y, int r0, int r1);
    // The same over W.panels (matmul_i8_panel_simd.h), x quantized in natural column order (the
    // scalar level's layout), r0 a multiple of 16; nullptr where the level has none (it needs
    // AVX512-VNNI: matmul_int8_act checks avx512_vnni_active()).
    void (*matmul_rows_i8_panels)(const WeightView& W, const ActI8& a, int n_tok, float* y, int r0, int r1);
    // quantize_row_int8 (the same codes and dx, bit for bit) plus dsx_b = dx_b * sum of block b's codes.
    void (*quantize_row_i8)(const float* x, int cols, int8_t* q, float* dx, float* dsx);
    // F32/BF16 over W.fpanels (matmul_fpanel_simd.h; matmul.cpp, "Float panels"): y[t*W.rows + r]
    // for r in [r0, r1), all t < n_tok, r0 a multiple of 16 and r1 one too or W.rows. x packed in
    // tiles of fpanel_token_tile(level) tokens (below).
    void (*matmul_rows_fpanels)(const WeightView& W, const float* x, int n_tok, float* y, int r0, int r1);
};

I8Layout i8_layout(WType type, Simd level);
// Tokens per tile of the float panel kernel at a level (matmul_fpanel_simd.h, kPanelTok; 1: the
// scalar kernel). matmul hands it x with each tile of that many tokens (the last one shorter)
// interleaved: the tile at token t starts at t * cols and holds x[t + j, k] at k * T + j (with
// T = 1, or one token, that is x itself).
inline int fpanel_token_tile(Simd level) { return level == Simd::Avx512 ? 12 : level == Simd::Avx2 ? 6 : 1; }
void matmul_rows_i8_scalar(const WeightView& W, const ActI8& a, int n_tok, float* y, int r0, int r1);
void quantize_row_i8_scalar(const float* x, int cols, int8_t* q, float* dx, float* dsx);
// matmul's int8-activation path (uses_int8_activations(W) is true).
void matmul_int8_act(const WeightView& W, const float* x, int n_tok, float* y, ThreadPool* pool);
// Whether the CPU has AVX512-VNNI and TINYLOOP_SIMD allows it (not avx512-novnni or lower;
// dispatch.cpp). avx512_vnni_active() adds that the level was not forced to "avx512-novnni".
bool cpu_has_avx512_vnni();
// Row-panel layout (matmul_int8.cpp, i8_pack_panels): bytes of W's panel codes, after which come
// the per-(panel, group) parameters; the one place the packer and both panel kernels take it from.
inline size_t i8_panel_code_bytes(const WeightView& W) {
    const size_t panels = (static_cast<size_t>(W.rows) + 15) / 16;
    return panels * (static_cast<size_t>(W.cols) / 32) * (W.type == WType::Q4 ? 256 : 512);
}
// Whether the CPU runs the AVX-512 level at all (F/BW/VL/DQ, dispatch.cpp), within TINYLOOP_SIMD.
bool cpu_has_avx512_level();
// What a CPU offers, for simd_request_refusal.
struct CpuLevels {
    bool avx2 = false, avx512 = false, vnni = false;
};
// Why TINYLOOP_SIMD=value cannot be honoured on a CPU with `have` ("" when it can): an unknown
// name, or a level the CPU lacks, named with the levels it has. dispatch.cpp applies it to this
// CPU once; it takes the CPU as an argument so that a test can ask about another one.
std::string simd_request_refusal(const char* value, const CpuLevels& have);
// Whether the int8 panel kernel may use AMX tiles for calls of many tokens: the CPU has AMX-TILE
// and AMX-INT8, Linux granted this process the tile state, and TINYLOOP_AMX is not 0 (checked
// once). The AMX kernel computes each block's integer dot exactly, as vpdpbusd does, and then the
// same float sequence: its outputs are bit-identical to the VNNI panel kernel's.
bool amx_usable();
// How many int8 matmul calls took the AMX kernel in this process (for tests: that AMX ran).
uint64_t amx_call_count();
// Rows [r0, r1) over W.panels (parameters) and W.data (codes) with AMX; a.bq/dxv/dsxv filled;
// scratch: amx_scratch_bytes(W) bytes, 64-byte aligned, for this call alone.
void matmul_rows_i8_amx(const WeightView& W, const ActI8& a, int n_tok, float* y, int r0, int r1,
                        uint8_t* scratch);
inline size_t amx_scratch_bytes(const WeightView& W) {
    return 16 * static_cast<size_t>(W.cols) + static_cast<size_t>(W.cols / W.group_size) * 32 * sizeof(float);
}
bool avx512_vnni_active();

const IsaTable& isa_scalar();
const IsaTable& isa_avx2();    // only call when the CPU has AVX2+FMA+F16C
const IsaTable& isa_avx512();  // only call when the CPU has AVX-512 F/BW/VL/DQ
const IsaTable& active_isa();

// For each of the 32 positions of a 32-column block, the column (within the block) whose
// activation the SIMD code multiplies there; nullptr means the natural order.
const int* matmul_block_perm(WType type, Simd level);

// The scalar-level entries (also the building blocks of the scalar table).
void matmul_rows_scalar(const WeightView& W, const float* x, int n_tok, float* y, int r0, int r1);
void matmul_rows_fpanels_scalar(const WeightView& W, const float* x, int n_tok, float* y, int r0, int r1);
void rmsnorm_scalar(const float* x, const float* g, int n_tok, int d, float eps, float* y);
void rope_token_scalar(float* x, int n_heads, int head_dim, const float* cs, const float* sn);
void silu_mul_scalar(const float* gate, const float* up, float* out, size_t n);
void add_inplace_scalar(float* y, const float* x, size_t n);
void attend_one_scalar(const float* q, const float* k, const float* v, int kv_stride, int head_dim,
                       int b, int e, const int* extra, int n_extra, float scale, float* scratch,
                       float* out);

// AVX512-BF16 (matmul_bf16dot_avx512bf16.cpp): rows [r0, r1) of a BF16 W times xb, the
// activations already rounded to bf16 ([n_tok, W.cols]); see set_bf16_dot in kernels.h.
void matmul_rows_bf16dot(const WeightView& W, const uint16_t* xb, int n_tok, float* y, int r0, int r1);
// The switch and a CPU (within TINYLOOP_SIMD's cap) with AVX512-BF16: matmul takes the kernel above.
bool bf16_dot_usable();

}  // namespace tinyloop::kern::detail
