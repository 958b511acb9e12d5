// Private to kernels/cpu: the per-instruction-set entry points and the dispatcher's choice.
//
// Each SIMD level fills one IsaTable. The *_avx512.cpp / *_avx2.cpp files that implement them are
// compiled with those instruction sets enabled, so nothing in them may be reached before the
// run-time CPU check (dispatch.cpp) has allowed it. They also avoid the standard library's
// templates: an out-of-line copy of, say, std::vector<float>::resize compiled with AVX-512 could
// be the one the linker keeps for the whole program.
#pragma once

#include "kernels/kernels.h"

namespace tinyloop::kern::detail {

enum class Simd : int { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// The level in use (detected once; force_simd_level may override it).
Simd active_simd();

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
};

const IsaTable& isa_scalar();
const IsaTable& isa_avx2();    // only call when the CPU has AVX2+FMA+F16C
const IsaTable& isa_avx512();  // only call when the CPU has AVX-512 F/BW/VL/DQ
const IsaTable& active_isa();

// For each of the 32 positions of a 32-column block, the column (within the block) whose
// activation the SIMD code multiplies there; nullptr means the natural order.
const int* matmul_block_perm(WType type, Simd level);

// The scalar-level entries (also the building blocks of the scalar table).
void matmul_rows_scalar(const WeightView& W, const float* x, int n_tok, float* y, int r0, int r1);
void rmsnorm_scalar(const float* x, const float* g, int n_tok, int d, float eps, float* y);
void rope_token_scalar(float* x, int n_heads, int head_dim, const float* cs, const float* sn);
void silu_mul_scalar(const float* gate, const float* up, float* out, size_t n);
void add_inplace_scalar(float* y, const float* x, size_t n);
void attend_one_scalar(const float* q, const float* k, const float* v, int kv_stride, int head_dim,
                       int b, int e, const int* extra, int n_extra, float scale, float* scratch,
                       float* out);

}  // namespace tinyloop::kern::detail
