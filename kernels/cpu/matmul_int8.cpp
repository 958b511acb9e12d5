// y = W x with int8 activations, for Q8 and Q4 weights (math and switch: kernels.h).
//
// Per token, per 32-column block b of x: dx_b = max|x| / 127, xq = round_half_even(x * 127/max|x|).
// With W[r, c] = s_g * (q_c - z_g) (g the group of column c, m_g = -(z_g * s_g) in float):
//
//   y[t, r] = sum_b dx_b * sum_{c in b} s_g (q_c - z_g) xq_c
//           = sum_b (s_g dx_b) D_b  +  sum_b m_g (dx_b S_b),   D_b = sum q_c xq_c,  S_b = sum xq_c
//
// D_b is an exact integer dot of unsigned codes and signed activations (vpdpbusd); S_b and
// dsx_b = dx_b S_b are computed once per token here, so the zero points cost one fma per 16
// blocks. matmul_int8_ref evaluates the first line in double. The SIMD kernels
// (matmul_int8_simd.h) accumulate, per (row, token), one float vector in a fixed order: chunk by
// chunk fma(D * s, dx, acc), then the zero-point terms, then one horizontal sum; nothing depends
// on the row tile, the token tile, the thread split or the other rows of x (batch invariance).
//
// Row panels (i8_pack_panels; used where the model loader packed them and the CPU runs the
// AVX-512 VNNI level): rows in panels of 16, the last one padded with zero codes and parameters.
// For P panels, nb blocks of 32 columns and ng groups, the bytes are
//   codes:  [P][nb][block]: Q8 block = 8 x 64 bytes, byte 64 k + 4 i + j = code of row 16 p + i,
//           column 32 b + 4 k + j (k < 8); Q4 block = 4 x 64 bytes, byte 64 k + 4 i + j holds
//           column 32 b + 8 k + j in its low nibble and column 32 b + 8 k + 4 + j in its high one;
//   params: [P][ng] x 64 bytes: the 16 rows' f16 scales, then their 16 f16 zeros.
// The same bytes as the row-major file layout, reordered (Q4 nibbles regrouped), so a decoded
// token reads as many bytes from either. The panel kernel keeps one float accumulator per
// (row, token) in a lane and adds, block by block, fma(D_b, s_g dx_b) and fma(m_g, dsx_b)
// (matmul_i8_panel_ref): a different rounding order from the chunk kernels, equally batch
// invariant.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/cpu/cpu_internal.h"

namespace tinyloop::kern {
namespace detail {
namespace {

std::atomic<bool> g_int8_act{[] {
    const char* e = std::getenv("TINYLOOP_INT8_ACT");
    return !(e != nullptr && std::strcmp(e, "0") == 0);
}()};

// Rows per thread-pool task: a multiple of 4 (the row tile), about 4 tasks per thread.
int rows_per_task_i8(int rows, int threads) {
    int chunk = (rows + 4 * threads - 1) / (4 * threads);
    chunk = (chunk + 3) / 4 * 4;
    return std::max(chunk, 8);
}

uint32_t code_i8(const uint8_t* row, bool q4, int c) {
    return q4 ? (row[c >> 1] >> ((c & 1) * 4)) & 0xfu : row[c];
}

// Per-block (32 columns) scale s and offset m = -(z * s) of one row, as the SIMD path computes them.
void block_params(const WeightView& W, int r, float* s, float* m) {
    const int ng = W.cols / W.group_size, bpg = W.group_size / 32;
    for (int g = 0; g < ng; ++g) {
        const size_t gi = static_cast<size_t>(r) * ng + g;
        const float sg = f16_to_f32(W.scales[gi]), zg = f16_to_f32(W.zeros[gi]);
        const float mg = -(zg * sg);
        for (int k = 0; k < bpg; ++k) {
            s[g * bpg + k] = sg;
            m[g * bpg + k] = mg;
        }
    }
}

// Calls of at least this many tokens take the AMX kernel where amx_usable() (the same bits as
// the VNNI panel kernel; below it the padding of a 16-token tile costs more than AMX saves).
constexpr int kAmxMinTokens = 16;

// Rows per task for the panel kernel: whole panels, about 4 tasks per thread.
int rows_per_task_panels(int rows, int threads) {
    const int panels = (rows + 15) / 16;
    const int per = std::max(1, (panels + 4 * threads - 1) / (4 * threads));
    return per * 16;
}

// Calls that took the AMX kernel: a test's evidence that AMX ran (amx_call_count).
std::atomic<uint64_t> g_amx_calls{0};

std::atomic<bool> g_panels{[] {
    const char* e = std::getenv("TINYLOOP_I8_PANELS");
    return !(e != nullptr && std::strcmp(e, "0") == 0);
}()};

}  // namespace

I8Layout i8_layout(WType type, Simd level) {
    I8Layout l;
    const bool q4 = type == WType::Q4;
    switch (level) {
        case Simd::Avx512:
            l.chunk_cols = q4 ? 128 : 64;
            l.lanes = 16;
            break;
        case Simd::Avx2:
            l.chunk_cols = q4 ? 64 : 32;
            l.lanes = 8;
            break;
        case Simd::Scalar:
            return l;  // natural order, no edx
    }
    l.cols_per_lane = q4 ? 8 : 4;
    l.q4_split = q4;
    return l;
}

// Scalar level: per (row, token), blocks in order: acc += (s_b * dx_b) * D_b, then the zero-point
// terms acc += m_b * dsx_b in block order.
void matmul_rows_i8_scalar(const WeightView& W, const ActI8& a, int n_tok, float* y, int r0, int r1) {
    const bool q4 = W.type == WType::Q4;
    const int cols = W.cols, nb = cols / 32;
    const size_t row_bytes = q4 ? static_cast<size_t>(cols) / 2 : static_cast<size_t>(cols);
    thread_local std::vector<float> s, m;
    thread_local std::vector<int32_t> codes;
    if (s.size() < static_cast<size_t>(nb)) {
        s.resize(nb);
        m.resize(nb);
    }
    if (codes.size() < static_cast<size_t>(cols)) codes.resize(cols);
    for (int r = r0; r < r1; ++r) {
        block_params(W, r, s.data(), m.data());
        const uint8_t* row = W.data + static_cast<size_t>(r) * row_bytes;
        for (int c = 0; c < cols; ++c) codes[c] = static_cast<int32_t>(code_i8(row, q4, c));
        for (int t = 0; t < n_tok; ++t) {
            const int8_t* xq = a.q + static_cast<size_t>(t) * a.q_stride;
            const float* dx = a.dx + static_cast<size_t>(t) * a.s_stride;
            const float* dsx = a.dsx + static_cast<size_t>(t) * a.s_stride;
            float acc = 0.0f;
            for (int b = 0; b < nb; ++b) {
                int32_t d = 0;
                for (int c = b * 32; c < b * 32 + 32; ++c) d += codes[c] * xq[c];
                acc += (s[b] * dx[b]) * static_cast<float>(d);
            }
            for (int b = 0; b < nb; ++b) acc += m[b] * dsx[b];
            y[static_cast<size_t>(t) * W.rows + r] = acc;
        }
    }
}

void quantize_row_i8_scalar(const float* x, int cols, int8_t* q, float* dx, float* dsx) {
    quantize_row_int8(x, cols, q, dx);
    for (int b = 0; b * 32 < cols; ++b) {
        int32_t sum = 0;
        for (int i = 0; i < 32; ++i) sum += q[b * 32 + i];
        dsx[b] = dx[b] * static_cast<float>(sum);
    }
}

bool amx_usable() {
    static const bool ok = [] {
        const char* e = std::getenv("TINYLOOP_AMX");
        if (e != nullptr && std::strcmp(e, "0") == 0) return false;
#if defined(__x86_64__) && defined(__linux__)
        if (!cpu_has_avx512_level() || !cpu_has_avx512_vnni()) return false;
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
        if ((d & (1u << 24)) == 0 || (d & (1u << 25)) == 0) return false;  // AMX-TILE, AMX-INT8
        // Linux hands out the 8 KiB tile state only on request (ARCH_REQ_XCOMP_PERM, XTILEDATA).
        return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
        return false;
#endif
    }();
    return ok;
}

}  // namespace detail

void set_int8_activations(bool on) { detail::g_int8_act.store(on, std::memory_order_relaxed); }
bool int8_activations() { return detail::g_int8_act.load(std::memory_order_relaxed); }

bool uses_int8_activations(const WeightView& W) {
    // FORMAT.md's group sizes (the SIMD kernels rely on 1, 2 or 4 blocks per group); others take
    // the float path.
    return int8_activations() && (W.type == WType::Q8 || W.type == WType::Q4) &&
           (W.group_size == 32 || W.group_size == 64 || W.group_size == 128) && W.cols % W.group_size == 0;
}

void quantize_row_int8(const float* x, int cols, int8_t* q, float* dx) {
    for (int b = 0; b * 32 < cols; ++b) {
        const float* xb = x + b * 32;
        int8_t* qb = q + b * 32;
        float amax = 0.0f;
        bool finite = true;
        for (int i = 0; i < 32; ++i) {
            finite = finite && std::isfinite(xb[i]);
            amax = std::max(amax, std::fabs(xb[i]));
        }
        if (!finite) {
            dx[b] = std::numeric_limits<float>::quiet_NaN();
            std::memset(qb, 0, 32);
            continue;
        }
        dx[b] = amax / 127.0f;
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
#if defined(__SSE2__)
        // cvtps rounds half to even (the default MXCSR mode), like nearbyint; |x * inv| <= 127.
        const __m128 vi = _mm_set1_ps(inv);
        for (int i = 0; i < 32; i += 16) {
            const __m128i a = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(xb + i), vi));
            const __m128i b4 = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(xb + i + 4), vi));
            const __m128i c = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(xb + i + 8), vi));
            const __m128i d = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(xb + i + 12), vi));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + i),
                             _mm_packs_epi16(_mm_packs_epi32(a, b4), _mm_packs_epi32(c, d)));
        }
#else
        for (int i = 0; i < 32; ++i) qb[i] = static_cast<int8_t>(std::nearbyint(xb[i] * inv));
#endif
    }
}

void matmul_int8_ref(const WeightView& W, const float* x, int n_tok, float* y) {
    const int cols = W.cols, nb = cols / 32;
    std::vector<int8_t> q(static_cast<size_t>(cols));
    std::vector<float> dx(static_cast<size_t>(nb)), w(static_cast<size_t>(cols));
    std::vector<double> acc(static_cast<size_t>(n_tok) * W.rows, 0.0);
    for (int t = 0; t < n_tok; ++t) {
        quantize_row_int8(x + static_cast<size_t>(t) * cols, cols, q.data(), dx.data());
        for (int r = 0; r < W.rows; ++r) {
            dequant_row(W, r, w.data());
            double sum = 0.0;
            for (int b = 0; b < nb; ++b) {
                double s = 0.0;
                for (int c = b * 32; c < b * 32 + 32; ++c) s += static_cast<double>(w[c]) * q[c];
                sum += static_cast<double>(dx[b]) * s;
            }
            y[static_cast<size_t>(t) * W.rows + r] = static_cast<float>(sum);
        }
    }
}

bool int8_amx_active() { return detail::amx_usable(); }

uint64_t detail::amx_call_count() { return detail::g_amx_calls.load(std::memory_order_relaxed); }

size_t i8_panel_bytes(const WeightView& W) {
    if (!detail::g_panels.load(std::memory_order_relaxed) || !detail::cpu_has_avx512_level() ||
        !detail::cpu_has_avx512_vnni())
        return 0;
    if ((W.type != WType::Q8 && W.type != WType::Q4) || W.rows <= 0 || W.cols <= 0 ||
        (W.group_size != 32 && W.group_size != 64 && W.group_size != 128) || W.cols % W.group_size != 0)
        return 0;
    const size_t panels = (static_cast<size_t>(W.rows) + 15) / 16;
    return detail::i8_panel_code_bytes(W) + panels * (static_cast<size_t>(W.cols) / W.group_size) * 64;
}

void i8_pack_panels(const WeightView& W, uint8_t* out) {
    const bool q4 = W.type == WType::Q4;
    const int cols = W.cols, nb = cols / 32, ng = cols / W.group_size;
    const size_t panels = (static_cast<size_t>(W.rows) + 15) / 16;
    const size_t block_bytes = q4 ? 256 : 512;
    const size_t row_bytes = q4 ? static_cast<size_t>(cols) / 2 : static_cast<size_t>(cols);
    uint8_t* codes = out;
    uint8_t* params = out + detail::i8_panel_code_bytes(W);
    std::memset(out, 0, detail::i8_panel_code_bytes(W) + panels * static_cast<size_t>(ng) * 64);
    for (int r = 0; r < W.rows; ++r) {
        const size_t p = static_cast<size_t>(r) / 16;
        const int i = r % 16;
        const uint8_t* row = W.data + static_cast<size_t>(r) * row_bytes;
        for (int b = 0; b < nb; ++b) {
            uint8_t* blk = codes + (p * nb + b) * block_bytes;
            if (!q4) {
                for (int k = 0; k < 8; ++k) {
                    for (int j = 0; j < 4; ++j) blk[64 * k + 4 * i + j] = row[32 * b + 4 * k + j];
                }
            } else {
                for (int k = 0; k < 4; ++k) {
                    for (int j = 0; j < 4; ++j) {
                        const uint32_t lo = detail::code_i8(row, true, 32 * b + 8 * k + j);
                        const uint32_t hi = detail::code_i8(row, true, 32 * b + 8 * k + 4 + j);
                        blk[64 * k + 4 * i + j] = static_cast<uint8_t>(lo | (hi << 4));
                    }
                }
            }
        }
        for (int g = 0; g < ng; ++g) {
            uint8_t* pg = params + (p * ng + g) * 64;
            const size_t gi = static_cast<size_t>(r) * ng + g;
            std::memcpy(pg + 2 * i, &W.scales[gi], 2);
            std::memcpy(pg + 32 + 2 * i, &W.zeros[gi], 2);
        }
    }
}

void matmul_i8_panel_ref(const WeightView& W, const float* x, int n_tok, float* y) {
    const bool q4 = W.type == WType::Q4;
    const int cols = W.cols, nb = cols / 32;
    const size_t row_bytes = q4 ? static_cast<size_t>(cols) / 2 : static_cast<size_t>(cols);
    std::vector<int8_t> q(static_cast<size_t>(cols));
    std::vector<float> dx(static_cast<size_t>(nb)), dsx(static_cast<size_t>(nb)), s(nb), m(nb);
    for (int t = 0; t < n_tok; ++t) {
        quantize_row_int8(x + static_cast<size_t>(t) * cols, cols, q.data(), dx.data());
        for (int b = 0; b < nb; ++b) {
            int32_t sum = 0;
            for (int c = b * 32; c < b * 32 + 32; ++c) sum += q[c];
            dsx[b] = dx[b] * static_cast<float>(sum);
        }
        for (int r = 0; r < W.rows; ++r) {
            detail::block_params(W, r, s.data(), m.data());
            const uint8_t* row = W.data + static_cast<size_t>(r) * row_bytes;
            float acc = 0.0f;
            for (int b = 0; b < nb; ++b) {
                int32_t d = 0;
                for (int c = b * 32; c < b * 32 + 32; ++c)
                    d += static_cast<int32_t>(detail::code_i8(row, q4, c)) * q[c];
                acc = std::fma(static_cast<float>(d), s[b] * dx[b], acc);
                acc = std::fma(m[b], dsx[b], acc);
            }
            y[static_cast<size_t>(t) * W.rows + r] = acc;
        }
    }
}

namespace detail {

// Quantizes x in the active level's layout and runs the level's int8 kernel over the rows.
void matmul_int8_act(const WeightView& W, const float* x, int n_tok, float* y, ThreadPool* pool) {
    const Simd level = active_simd();
    const IsaTable& isa = active_isa();
    const bool panels = W.panels != nullptr && level == Simd::Avx512 && isa.matmul_rows_i8_panels != nullptr &&
                        avx512_vnni_active();
    const I8Layout lay = panels ? i8_layout(W.type, Simd::Scalar) : i8_layout(W.type, level);
    const int cols = W.cols, nb = cols / 32;
    const int n_chunks = (cols + lay.chunk_cols - 1) / lay.chunk_cols;
    const size_t q_stride = static_cast<size_t>(n_chunks) * lay.chunk_cols;
    const size_t e_stride = static_cast<size_t>(n_chunks) * lay.lanes;
    const size_t s_stride = (static_cast<size_t>(nb) + 15) / 16 * 16 + 16;

    // Per-call buffers, kept per thread (no allocation once grown).
    thread_local std::vector<int8_t> qbuf, nat;
    thread_local std::vector<float> edx, dx, dsx;
    const size_t nt = static_cast<size_t>(n_tok);
    if (qbuf.size() < nt * q_stride) qbuf.resize(nt * q_stride);
    if (edx.size() < nt * e_stride) edx.resize(nt * e_stride);
    if (dx.size() < nt * s_stride) {
        dx.resize(nt * s_stride);
        dsx.resize(nt * s_stride);
    }
    if (nat.size() < static_cast<size_t>(cols)) nat.resize(cols);

    for (size_t t = 0; t < nt; ++t) {
        int8_t* qt = qbuf.data() + t * q_stride;
        float* dxt = dx.data() + t * s_stride;
        float* dsxt = dsx.data() + t * s_stride;
        int8_t* target = lay.q4_split ? nat.data() : qt;
        isa.quantize_row_i8(x + t * cols, cols, target, dxt, dsxt);
        std::fill(dxt + nb, dxt + s_stride, 0.0f);
        std::fill(dsxt + nb, dsxt + s_stride, 0.0f);
        if (lay.q4_split) {  // per chunk: even columns, then odd columns
            std::memset(qt, 0, q_stride);
            for (int c0 = 0; c0 < cols; c0 += lay.chunk_cols) {
                const int n = std::min(lay.chunk_cols, cols - c0);
                int8_t* dst = qt + c0;
                for (int i = 0; i < n / 2; ++i) {
                    dst[i] = target[c0 + 2 * i];
                    dst[lay.chunk_cols / 2 + i] = target[c0 + 2 * i + 1];
                }
            }
        } else if (q_stride > static_cast<size_t>(cols)) {
            std::memset(qt + cols, 0, q_stride - cols);
        }
        if (lay.lanes > 0) {
            float* et = edx.data() + t * e_stride;
            for (int k = 0; k < n_chunks; ++k) {
                const int b0 = k * lay.chunk_cols / 32;
                for (int j = 0; j < lay.lanes; ++j) {
                    const int b = b0 + j * lay.cols_per_lane / 32;
                    et[static_cast<size_t>(k) * lay.lanes + j] = b < nb ? dxt[b] : 0.0f;
                }
            }
        }
    }
    ActI8 a;
    a.q = qbuf.data();
    a.edx = edx.data();
    a.dx = dx.data();
    a.dsx = dsx.data();
    a.q_stride = q_stride;
    a.e_stride = e_stride;
    a.s_stride = s_stride;

    const int threads = pool ? pool->size() : 1;
    const double work = static_cast<double>(W.rows) * W.cols * n_tok;
    // Many tokens: the AMX kernel (same bits), its activations regrouped into B tiles.
    const bool amx = panels && n_tok >= kAmxMinTokens && amx_usable();
    if (amx) g_amx_calls.fetch_add(1, std::memory_order_relaxed);
    thread_local std::vector<int8_t> bq;
    thread_local std::vector<float> dxv, dsxv;
    if (amx) {
        const size_t n_tiles = (nt + 15) / 16;
        if (bq.size() < n_tiles * nb * 512) bq.resize(n_tiles * nb * 512);
        if (dxv.size() < n_tiles * nb * 16) {
            dxv.resize(n_tiles * nb * 16);
            dsxv.resize(n_tiles * nb * 16);
        }
        for (size_t t = nt; t < n_tiles * 16; ++t) {  // the last tile's tokens past n_tok: zeros
            const size_t tile = t / 16, n = t % 16;
            for (int b = 0; b < nb; ++b) {
                const size_t tb = tile * nb + b;
                for (int k = 0; k < 8; ++k) std::memset(bq.data() + tb * 512 + 64 * k + 4 * n, 0, 4);
                dxv[tb * 16 + n] = 0.0f;
                dsxv[tb * 16 + n] = 0.0f;
            }
        }
        for (size_t t = 0; t < nt; ++t) {
            const int8_t* xq = qbuf.data() + t * q_stride;
            const size_t tile = t / 16, n = t % 16;
            for (int b = 0; b < nb; ++b) {
                const size_t tb = tile * nb + b;
                int8_t* dst = bq.data() + tb * 512 + 4 * n;
                for (int k = 0; k < 8; ++k) std::memcpy(dst + 64 * k, xq + 32 * b + 4 * k, 4);
                dxv[tb * 16 + n] = dx[t * s_stride + b];
                dsxv[tb * 16 + n] = dsx[t * s_stride + b];
            }
        }
        a.bq = bq.data();
        a.dxv = dxv.data();
        a.dsxv = dsxv.data();
    }
    const auto run = panels ? isa.matmul_rows_i8_panels : isa.matmul_rows_i8;
    const bool one = threads == 1 || work < 64.0 * 1024 || W.rows < 16;
    const int chunk = one ? W.rows : panels ? rows_per_task_panels(W.rows, threads) : rows_per_task_i8(W.rows, threads);
    const int n_tasks = (W.rows + chunk - 1) / chunk;
    // The AMX kernel's per-task scratch (its panel's unpacked rows), 64-byte aligned.
    thread_local std::vector<uint8_t> amx_scratch;
    const size_t scratch_each = amx ? (amx_scratch_bytes(W) + 63) / 64 * 64 : 0;
    if (amx && amx_scratch.size() < scratch_each * n_tasks + 64) amx_scratch.resize(scratch_each * n_tasks + 64);
    uint8_t* scratch0 = amx_scratch.data() + (64 - reinterpret_cast<uintptr_t>(amx_scratch.data()) % 64) % 64;
    const auto task_fn = [&](int task) {
        const int r0 = task * chunk, r1 = std::min(W.rows, r0 + chunk);
        if (amx) {
            matmul_rows_i8_amx(W, a, n_tok, y, r0, r1, scratch0 + scratch_each * task);
        } else {
            run(W, a, n_tok, y, r0, r1);
        }
    };
    if (one) {
        task_fn(0);
        return;
    }
    pool->parallel_for(n_tasks, task_fn);
}

}  // namespace detail
}  // namespace tinyloop::kern
