// BF16 weights times bf16-rounded activations with AVX512-BF16's vdpbf16ps: the opt-in fast path
// of bf16 matrices (TINYLOOP_BF16_DOT=1 at start-up, or set_bf16_dot; kernels.h says what it
// trades). Built with -mavx512bf16 and called only after bf16_dot_active() checked the CPU.
#include "kernels/cpu/simd.h"  // V::hsum, the kernels' one reduction order (and GCC 12's pragmas)

#include "kernels/cpu/cpu_internal.h"

namespace tinyloop::kern::detail {

// y[t*W.rows + r] for r in [r0, r1), every t < n_tok: sum_c bf16(x[t, c]) * W[r, c], the column
// pairs of each 32-column block through vdpbf16ps into 16 f32 lanes, the lanes then summed; the
// columns past the last whole block in scalar code. xb: [n_tok, W.cols] bf16 activations.
namespace {

// NR rows (1 or 2) x up to 8 tokens per tile. One row for a few tokens (decode: the accumulators
// and the weights stay in registers); two rows for a prompt, where each activation load then
// serves both rows. A file-local template (anonymous namespace): nothing shared with other TUs.
template <int NR>
void rows_tile(const uint16_t* w0, int cols, int rows_total, const uint16_t* xb, int n_tok, float* y, int r) {
    constexpr int kTok = 8;
    const int full = cols / 32 * 32;
    const uint16_t* wr[NR];
    for (int i = 0; i < NR; ++i) wr[i] = w0 + static_cast<size_t>(r + i) * cols;
    for (int t0 = 0; t0 < n_tok; t0 += kTok) {
        const int nt = n_tok - t0 < kTok ? n_tok - t0 : kTok;  // no std:: templates here (cpu_internal.h)
        const uint16_t* x0 = xb + static_cast<size_t>(t0) * cols;
        __m512 acc[NR][kTok];
        for (int i = 0; i < NR; ++i)
            for (int k = 0; k < kTok; ++k) acc[i][k] = _mm512_setzero_ps();
        for (int c = 0; c < full; c += 32) {
            __m512bh wv[NR];
            for (int i = 0; i < NR; ++i) wv[i] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(wr[i] + c));
            for (int k = 0; k < kTok; ++k)
                if (k < nt) {
                    const __m512bh xv =
                        reinterpret_cast<__m512bh>(_mm512_loadu_si512(x0 + static_cast<size_t>(k) * cols + c));
                    for (int i = 0; i < NR; ++i) acc[i][k] = _mm512_dpbf16_ps(acc[i][k], wv[i], xv);
                }
        }
        for (int k = 0; k < nt; ++k) {
            const uint16_t* xt = x0 + static_cast<size_t>(k) * cols;
            for (int i = 0; i < NR; ++i) {
                float s = V::hsum(acc[i][k]);
                for (int c = full; c < cols; ++c) s += bf16_to_f32(wr[i][c]) * bf16_to_f32(xt[c]);
                y[static_cast<size_t>(t0 + k) * rows_total + r + i] = s;
            }
        }
    }
}

}  // namespace

void matmul_rows_bf16dot(const WeightView& W, const uint16_t* xb, int n_tok, float* y, int r0, int r1) {
    const uint16_t* w0 = reinterpret_cast<const uint16_t*>(W.data);
    int r = r0;
    if (n_tok > 2)
        for (; r + 2 <= r1; r += 2) rows_tile<2>(w0, W.cols, W.rows, xb, n_tok, y, r);
    for (; r < r1; ++r) rows_tile<1>(w0, W.cols, W.rows, xb, n_tok, y, r);
}

}  // namespace tinyloop::kern::detail
