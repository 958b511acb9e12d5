// The int8 panel matmul with AMX tiles, for calls of many tokens (prompts, batched decode steps).
// Built with the AMX flags (kernels/CMakeLists.txt); reached only when amx_usable() (matmul_int8.cpp).
//
// Per 16-row panel and 32-column block, one TDPBUSD multiplies the A tile (16 rows x 32 unsigned
// codes: Q8 straight from the row-major file codes, Q4 unpacked to a byte each) by the B
// tile (the same 32 columns of 16 tokens, signed, in the 4-byte groups TDPBUSD wants: ActI8::bq)
// into C (16 rows x 16 tokens of exact int32 block dots D_b). Per (row, token) the float sequence
// is the VNNI panel kernel's: acc = fma(float(D_b), s_g * dx_b, acc); acc = fma(m_g, dsx_b, acc),
// with the accumulators held one vector per row (lanes = tokens; s * dx and the fmas round the same
// either way), so the outputs are those of matmul_i8_panel_ref bit for bit. Like the other
// SIMD files it avoids the standard library's templates (cpu_internal.h).
#include <immintrin.h>

#include <cstring>

// GCC 12 warns that the _mm512_undefined_ps() inside _mm512_cvtph_ps/_mm512_cvtepi32_ps "may be
// used uninitialized" here (a false positive of the intrinsics' self-initialisation idiom).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "kernels/cpu/cpu_internal.h"

namespace tinyloop::kern::detail {
namespace {

struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// tmm0, tmm1: C (16 rows x 16 int32); tmm2, tmm3: A (16 x 32 bytes); tmm4, tmm5: B (8 x 64
// bytes). Even blocks use the first of each pair, odd blocks the second, so block b + 1's product
// runs on the tile unit while block b's result is stored and folded.
void configure_tiles() {
    TileConfig c;
    c.rows[0] = c.rows[1] = 16;
    c.colsb[0] = c.colsb[1] = 64;
    c.rows[2] = c.rows[3] = 16;
    c.colsb[2] = c.colsb[3] = 32;
    c.rows[4] = c.rows[5] = 8;
    c.colsb[4] = c.colsb[5] = 64;
    // GCC's _tile_loadconfig tells the compiler it reads 8 bytes, so the stores above could be
    // dropped as dead (they were, at -O2: a zero config and SIGILL); a memory barrier keeps them.
    __asm__ __volatile__("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
}

// C[c] = A[a] x B[b], A from arow (stride astride), B from bt. GCC's tile intrinsics paste their
// tile numbers into the assembly text, so they must be literal: a macro, not a template.
#define TL_AMX_PRODUCT(c, a, b, arow, astride, bt) \
    do {                                           \
        _tile_loadd(a, (arow), (astride));         \
        _tile_loadd(b, (bt), 64);                  \
        _tile_zero(c);                             \
        _tile_dpbusd(c, a, b);                     \
    } while (0)

// One block's D (cbuf: 16 rows x 16 tokens) folded into acc (16 row vectors over the tokens).
inline void fold(const int32_t* cbuf, const float* s, const float* m, const float* dxv, const float* dsxv,
                 __m512* acc) {
    const __m512 dx = _mm512_loadu_ps(dxv), dsx = _mm512_loadu_ps(dsxv);
    for (int r = 0; r < 16; ++r) {
        const __m512 d = _mm512_cvtepi32_ps(_mm512_load_si512(cbuf + 16 * r));
        acc[r] = _mm512_fmadd_ps(d, _mm512_mul_ps(_mm512_set1_ps(s[r]), dx), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(m[r]), dsx, acc[r]);
    }
}

}  // namespace

void matmul_rows_i8_amx(const WeightView& W, const ActI8& a, int n_tok, float* y, int r0, int r1,
                        uint8_t* scratch) {
    const bool q4 = W.type == WType::Q4;
    const int cols = W.cols, nb = cols / 32, ng = cols / W.group_size, bpg = W.group_size / 32;
    const size_t row_bytes = q4 ? static_cast<size_t>(cols) / 2 : static_cast<size_t>(cols);
    const uint8_t* params = W.panels + i8_panel_code_bytes(W);
    const int n_tiles = (n_tok + 15) / 16;
    const size_t tstep = static_cast<size_t>(nb) * 512;
    // scratch: the panel's A rows (16 x cols bytes), then per group 16 scales and 16 offsets.
    float* sm = reinterpret_cast<float*>(scratch + 16 * static_cast<size_t>(cols));
    // Another AMX user in this process (llama.cpp's ggml, oneDNN under PyTorch) may have configured
    // this thread's tiles once and rely on that: keep its configuration and give it back at the
    // end (releasing instead made llama.cpp's next tile load fault with SIGILL in one process).
    TileConfig saved;
    _tile_storeconfig(&saved);
    __asm__ __volatile__("" : : "r"(&saved) : "memory");
    configure_tiles();
    alignas(64) int32_t cbuf[2][256];
    for (int p = r0 / 16; p * 16 < r1; ++p) {
        const int row0 = p * 16;
        const int nrows = W.rows - row0 < 16 ? W.rows - row0 : 16;
        const uint8_t* codes = W.data + static_cast<size_t>(row0) * row_bytes;
        // A rows: Q8 full panels straight from the file's codes; Q4 unpacked to one byte a column
        // and a partial last panel (zero rows) into scratch.
        const uint8_t* arows = codes;
        long astride = static_cast<long>(row_bytes);
        if (q4 || nrows < 16) {
            const __m128i low4 = _mm_set1_epi8(15);
            for (int i = 0; i < 16; ++i) {
                uint8_t* dst = scratch + static_cast<size_t>(i) * cols;
                if (i >= nrows) {
                    std::memset(dst, 0, static_cast<size_t>(cols));
                } else if (!q4) {
                    std::memcpy(dst, codes + i * row_bytes, static_cast<size_t>(cols));
                } else {
                    // byte c/2: column c in its low nibble if c is even. Four blocks (64 bytes) at a
                    // time: nibbles interleaved per 128-bit lane, then each block's two halves joined.
                    const __m512i low4z = _mm512_set1_epi8(15);
                    const __m512i join01 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
                    const __m512i join23 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
                    int b = 0;
                    for (; b + 4 <= nb; b += 4) {
                        const __m512i v = _mm512_loadu_si512(codes + i * row_bytes + 16 * b);
                        const __m512i lo = _mm512_and_si512(v, low4z), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4z);
                        const __m512i ul = _mm512_unpacklo_epi8(lo, hi), uh = _mm512_unpackhi_epi8(lo, hi);
                        _mm512_storeu_si512(dst + 32 * b, _mm512_permutex2var_epi64(ul, join01, uh));
                        _mm512_storeu_si512(dst + 32 * b + 64, _mm512_permutex2var_epi64(ul, join23, uh));
                    }
                    for (; b < nb; ++b) {
                        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i * row_bytes + 16 * b));
                        const __m128i lo = _mm_and_si128(v, low4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), low4);
                        _mm_store_si128(reinterpret_cast<__m128i*>(dst + 32 * b), _mm_unpacklo_epi8(lo, hi));
                        _mm_store_si128(reinterpret_cast<__m128i*>(dst + 32 * b + 16), _mm_unpackhi_epi8(lo, hi));
                    }
                }
            }
            arows = scratch;
            astride = cols;
        }
        for (int g = 0; g < ng; ++g) {  // f32 scales and offsets m = -(z * s), as the VNNI kernel
            const uint8_t* pr = params + (static_cast<size_t>(p) * ng + g) * 64;
            const __m512 sv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pr)));
            const __m512 zv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pr + 32)));
            _mm512_store_ps(sm + 32 * g, sv);
            _mm512_store_ps(sm + 32 * g + 16, _mm512_xor_ps(_mm512_mul_ps(zv, sv), _mm512_set1_ps(-0.0f)));
        }
        for (int t = 0; t < n_tiles; ++t) {
            __m512 acc[16];
            for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
            const int8_t* bt = a.bq + static_cast<size_t>(t) * tstep;
            const float* dxv = a.dxv + static_cast<size_t>(t) * nb * 16;
            const float* dsxv = a.dsxv + static_cast<size_t>(t) * nb * 16;
            TL_AMX_PRODUCT(0, 2, 4, arows, astride, bt);
            for (int b = 0; b < nb; ++b) {
                const float* s = sm + 32 * (b / bpg);
                if ((b & 1) == 0) {
                    if (b + 1 < nb) TL_AMX_PRODUCT(1, 3, 5, arows + 32 * (b + 1), astride, bt + 512 * (b + 1));
                    _tile_stored(0, cbuf[0], 64);
                } else {
                    if (b + 1 < nb) TL_AMX_PRODUCT(0, 2, 4, arows + 32 * (b + 1), astride, bt + 512 * (b + 1));
                    _tile_stored(1, cbuf[1], 64);
                }
                fold(cbuf[b & 1], s, s + 16, dxv + 16 * b, dsxv + 16 * b, acc);
            }
            // acc[r] lane n = y for token 16 t + n, row row0 + r.
            alignas(64) float out[16][16];
            for (int r = 0; r < 16; ++r) _mm512_store_ps(out[r], acc[r]);
            for (int n = 0; n < 16; ++n) {
                const int tok = 16 * t + n;
                if (tok >= n_tok) break;
                float* yr = y + static_cast<size_t>(tok) * W.rows + row0;
                for (int r = 0; r < nrows; ++r) yr[r] = out[r][n];
            }
        }
    }
    if (saved.palette != 0) {
        __asm__ __volatile__("" : : "r"(&saved) : "memory");
        _tile_loadconfig(&saved);
    } else {
        _tile_release();
    }
}

}  // namespace tinyloop::kern::detail
