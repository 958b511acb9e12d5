// y = W x for every token, W in any stored dtype (FORMAT.md §2).
//
//   y[t, r] = sum_c W[r, c] * x[t, c],  W[r, c] = scale[r, g] * (q[r, c] - zero[r, g]),
//   g = c / group_size  (F32/F16/BF16: W[r, c] is the stored value, widened exactly).
//
// BF16 weights are widened to f32 (a 16-bit shift, exact) and take the F32 kernels' very
// sequence of fmas, so a bf16 matrix gives the same bits as the f32 matrix of its widened values:
// activations stay f32, nothing is rounded that the f32 path does not round.
//
// matmul_ref: dequantize each row exactly as dequant_row does, then sum in double.
// matmul: the SIMD kernels (matmul_simd.h) over chunks of rows on the thread pool. Every y[t, r]
// is produced by one fixed sequence of operations (lane k % width accumulates column k in order,
// then one fixed horizontal sum) whatever n_tok, the token tile, the row chunk or the thread
// count, so decode, prefill and verification agree bit for bit.
//
// Float panels (F32 and BF16 matrices whose view has `fpanels`, packed at load by the model
// loader; the default where TINYLOOP_F32_PANELS is not 0): the values repacked [panel][k][16]
// in the stored type, panel p holding rows 16p .. 16p+15 (the last one zero-padded), one vector
// lane per output row. Every output is then a fused-multiply-add chain over each block of
// B = kFPanelBlock (128) columns in order, the blocks' sums added in order,
//
//   for b = 0, B, 2B, ..:  acc = +0;  for k = b .. min(cols, b + B) - 1:  acc = fma(W[r, k], x[t, k], acc);
//                          tot = (b == 0) ? acc : tot + acc
//   y[t, r] = tot
//
// (matmul_f32_panel_ref), with no horizontal sum: the same bits for one token or many, any tile,
// any thread split (threads take whole panels), and at every level — AVX-512 (one zmm per
// panel), AVX2 (two ymm halves) and scalar (std::fma) alike. BF16 panels hold bf16 and widen
// them in registers by the shift, so a bf16 matrix still gives the bits of its widened f32
// matrix. The trade against the row-major kernels above: a second copy of these matrices in
// memory (as llama.cpp's repacked CPU buffers) and other rounding (chains of 128 instead of lane
// sums and a horizontal sum), in return for no horizontal sums and one weight load per 12 tokens.
// Why blocks: one chain over all columns rounded up to 3.7x more than the row-major kernels on a
// non-settling looped model (issue 36: the published-code peer test's Huginn at 32 passes, 7.87e-5
// from float64 against 2.02e-5 row-major); blocks of 128 gave 3.06e-5 and cost no measurable speed.
// F16 matrices keep the row-major kernels. The opt-in TINYLOOP_BF16_DOT path comes first.
//
// Q8/Q4 weights take the int8-activation path (matmul_int8.cpp) unless set_int8_activations(false)
// selected these float-activation kernels; matmul_ref is the reference of the float path only.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/cpu_internal.h"

namespace tinyloop::kern {
namespace detail {
namespace {

uint32_t code_at(const uint8_t* row, int bits, int c) {
    switch (bits) {
        case 8: return row[c];
        case 4: return (row[c >> 1] >> ((c & 1) * 4)) & 0xfu;
        default: return (row[c >> 2] >> ((c & 3) * 2)) & 0x3u;
    }
}

// Dequantizes columns [c0, c0 + n) of one row (n within one group for quantized types).
void dequant_span(const WeightView& W, int row, int c0, int n, float* out) {
    const size_t rr = static_cast<size_t>(row);
    switch (W.type) {
        case WType::F32: {
            std::memcpy(out, W.data + (rr * W.cols + c0) * 4, static_cast<size_t>(n) * 4);
            return;
        }
        case WType::F16: {
            const uint16_t* p = reinterpret_cast<const uint16_t*>(W.data) + rr * W.cols + c0;
            for (int i = 0; i < n; ++i) out[i] = f16_to_f32(p[i]);
            return;
        }
        case WType::BF16: {
            const uint16_t* p = reinterpret_cast<const uint16_t*>(W.data) + rr * W.cols + c0;
            for (int i = 0; i < n; ++i) out[i] = bf16_to_f32(p[i]);
            return;
        }
        default: break;
    }
    const int bits = wtype_bits(W.type);
    const uint8_t* codes = W.data + rr * static_cast<size_t>(W.cols) * bits / 8;
    const size_t gi = rr * (W.cols / W.group_size) + c0 / W.group_size;
    const float s = f16_to_f32(W.scales[gi]), z = f16_to_f32(W.zeros[gi]);
    for (int i = 0; i < n; ++i) {
        out[i] = s * (static_cast<float>(code_at(codes, bits, c0 + i)) - z);
    }
}

// Column permutations of a 32-column block: position j of the SIMD block multiplies x[perm[j]].
struct Perms {
    int q4_512[32], q4_256[32], q2[32];
    Perms() {
        for (int i = 0; i < 16; ++i) {
            q4_512[i] = 2 * i;       // low nibbles of bytes 0..15
            q4_512[16 + i] = 2 * i + 1;  // high nibbles
        }
        for (int h = 0; h < 2; ++h) {
            for (int i = 0; i < 8; ++i) {
                q4_256[16 * h + i] = 16 * h + 2 * i;
                q4_256[16 * h + 8 + i] = 16 * h + 2 * i + 1;
            }
        }
        for (int k = 0; k < 4; ++k) {
            for (int i = 0; i < 8; ++i) q2[8 * k + i] = 4 * i + k;  // 2-bit plane k of bytes 0..7
        }
    }
};
const Perms& perms() {
    static const Perms p;
    return p;
}

// Rows per thread-pool task: a multiple of 4 (the row tile), about 4 tasks per thread.
int rows_per_task(int rows, int threads) {
    int chunk = (rows + 4 * threads - 1) / (4 * threads);
    chunk = (chunk + 3) / 4 * 4;
    return std::max(chunk, 8);
}

}  // namespace

const int* matmul_block_perm(WType type, Simd level) {
    if (level == Simd::Scalar) return nullptr;
    if (type == WType::Q4) return level == Simd::Avx512 ? perms().q4_512 : perms().q4_256;
    if (type == WType::Q2) return perms().q2;
    return nullptr;
}

// Scalar level: dequantize one 32-column chunk at a time into a small buffer, then eight lane
// accumulators per token (lane = column % 8) and a fixed pairwise sum. Same sequence for any
// number of tokens.
void matmul_rows_scalar(const WeightView& W, const float* x, int n_tok, float* y, int r0, int r1) {
    constexpr int kChunk = 32, kTok = 4;
    const int cols = W.cols;
    // A chunk never straddles two groups (group sizes outside FORMAT.md's 32/64/128 included).
    const int chunk = wtype_is_float(W.type) ? kChunk : std::gcd(kChunk, W.group_size);
    float w[kChunk];
    for (int t0 = 0; t0 < n_tok; t0 += kTok) {
        const int nt = std::min(kTok, n_tok - t0);
        for (int r = r0; r < r1; ++r) {
            float acc[kTok][8] = {};
            for (int c0 = 0; c0 < cols; c0 += chunk) {
                const int n = std::min(chunk, cols - c0);
                dequant_span(W, r, c0, n, w);
                for (int j = 0; j < nt; ++j) {
                    const float* xj = x + static_cast<size_t>(t0 + j) * cols + c0;
                    for (int i = 0; i < n; ++i) acc[j][(c0 + i) & 7] += w[i] * xj[i];
                }
            }
            for (int j = 0; j < nt; ++j) {
                const float* a = acc[j];
                y[static_cast<size_t>(t0 + j) * W.rows + r] =
                    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
            }
        }
    }
}

// The float panel kernel at the scalar level: the documented chain with std::fma.
void matmul_rows_fpanels_scalar(const WeightView& W, const float* x, int n_tok, float* y, int r0, int r1) {
    const int cols = W.cols;
    const size_t pstride = static_cast<size_t>(cols) * 16;
    for (int p = r0 / 16; p * 16 < r1; ++p) {
        const int nr = std::min(16, W.rows - p * 16);
        for (int t = 0; t < n_tok; ++t) {
            const float* xt = x + static_cast<size_t>(t) * cols;
            float tot[16] = {};
            for (int k0 = 0; k0 < cols; k0 += kFPanelBlock) {
                float acc[16] = {};
                for (int k = k0; k < std::min(cols, k0 + kFPanelBlock); ++k) {
                    const size_t at = static_cast<size_t>(p) * pstride + static_cast<size_t>(k) * 16;
                    for (int l = 0; l < 16; ++l) {
                        const float w = W.type == WType::BF16
                                            ? bf16_to_f32(reinterpret_cast<const uint16_t*>(W.fpanels)[at + l])
                                            : reinterpret_cast<const float*>(W.fpanels)[at + l];
                        acc[l] = std::fma(w, xt[k], acc[l]);
                    }
                }
                for (int l = 0; l < 16; ++l) tot[l] = k0 == 0 ? acc[l] : tot[l] + acc[l];
            }
            for (int l = 0; l < nr; ++l) y[static_cast<size_t>(t) * W.rows + p * 16 + l] = tot[l];
        }
    }
}

namespace {
std::atomic<bool> g_f32_panels{[] {
    const char* e = std::getenv("TINYLOOP_F32_PANELS");
    return !(e != nullptr && std::strcmp(e, "0") == 0);
}()};

// Rows per task for the float panels: whole panels, about 4 tasks per thread.
int rows_per_task_fpanels(int rows, int threads) {
    const int panels = (rows + 15) / 16;
    const int per = std::max(1, (panels + 4 * threads - 1) / (4 * threads));
    return per * 16;
}
}  // namespace

}  // namespace detail

void set_f32_panels(bool on) { detail::g_f32_panels.store(on, std::memory_order_relaxed); }
bool f32_panels() { return detail::g_f32_panels.load(std::memory_order_relaxed); }

size_t f32_panel_bytes(const WeightView& W) {
    if (!f32_panels() || (W.type != WType::F32 && W.type != WType::BF16) || W.rows <= 0 || W.cols <= 0) return 0;
    const size_t panels = (static_cast<size_t>(W.rows) + 15) / 16;
    return panels * 16 * static_cast<size_t>(W.cols) * (W.type == WType::BF16 ? 2 : 4);
}

namespace {
template <typename E>
void pack_float_panels(const E* src, int rows, int cols, E* out) {
    const size_t c = static_cast<size_t>(cols);
    std::memset(out, 0, (static_cast<size_t>(rows) + 15) / 16 * 16 * c * sizeof(E));
    for (int r = 0; r < rows; ++r) {
        const E* s = src + static_cast<size_t>(r) * c;
        E* d = out + static_cast<size_t>(r / 16) * c * 16 + r % 16;
        for (size_t k = 0; k < c; ++k) d[k * 16] = s[k];
    }
}
}  // namespace

void f32_pack_panels(const WeightView& W, uint8_t* out) {
    if (W.type == WType::BF16) {
        pack_float_panels(reinterpret_cast<const uint16_t*>(W.data), W.rows, W.cols, reinterpret_cast<uint16_t*>(out));
    } else {
        pack_float_panels(reinterpret_cast<const float*>(W.data), W.rows, W.cols, reinterpret_cast<float*>(out));
    }
}

void matmul_f32_panel_ref(const WeightView& W, const float* x, int n_tok, float* y) {
    std::vector<float> w(static_cast<size_t>(W.cols));
    for (int r = 0; r < W.rows; ++r) {
        dequant_row(W, r, w.data());
        for (int t = 0; t < n_tok; ++t) {
            const float* xt = x + static_cast<size_t>(t) * W.cols;
            // blocks of kFPanelBlock columns, each its own fma chain from 0, their sums added in order
            float tot = 0.0f;
            for (int c0 = 0; c0 < W.cols; c0 += kFPanelBlock) {
                float acc = 0.0f;
                const int c1 = std::min(W.cols, c0 + kFPanelBlock);
                for (int c = c0; c < c1; ++c) acc = std::fma(w[c], xt[c], acc);
                tot = c0 == 0 ? acc : tot + acc;
            }
            y[static_cast<size_t>(t) * W.rows + r] = tot;
        }
    }
}

void dequant_row(const WeightView& W, int row, float* out) {
    if (wtype_is_float(W.type)) {
        detail::dequant_span(W, row, 0, W.cols, out);
        return;
    }
    for (int c0 = 0; c0 < W.cols; c0 += W.group_size) {
        detail::dequant_span(W, row, c0, W.group_size, out + c0);
    }
}

void matmul_ref(const WeightView& W, const float* x, int n_tok, float* y) {
    std::vector<float> w(static_cast<size_t>(W.cols));
    for (int r = 0; r < W.rows; ++r) {
        dequant_row(W, r, w.data());
        for (int t = 0; t < n_tok; ++t) {
            const float* xt = x + static_cast<size_t>(t) * W.cols;
            double s = 0.0;
            for (int c = 0; c < W.cols; ++c) s += static_cast<double>(w[c]) * xt[c];
            y[static_cast<size_t>(t) * W.rows + r] = static_cast<float>(s);
        }
    }
}

namespace detail {
namespace {

// run(r0, r1) over rows [0, rows): on this thread when the call is small (one thread, under 64 Ki
// multiply-adds, or rows <= small_rows), else on the pool in tasks of `chunk` rows. The one split
// of the float, bf16-dot and float-panel kernels (each passes its own chunk and small_rows).
template <class Run>
void over_rows(ThreadPool* pool, const WeightView& W, int n_tok, int small_rows, int (*chunk_of)(int, int), Run run) {
    const int threads = pool ? pool->size() : 1;
    const double work = static_cast<double>(W.rows) * W.cols * n_tok;
    if (threads == 1 || work < 64.0 * 1024 || W.rows <= small_rows) {
        run(0, W.rows);
        return;
    }
    const int chunk = chunk_of(W.rows, threads);
    const int n_tasks = (W.rows + chunk - 1) / chunk;
    pool->parallel_for(n_tasks, [&](int task) {
        const int r0 = task * chunk;
        run(r0, std::min(W.rows, r0 + chunk));
    });
}

std::atomic<bool> g_bf16_dot{[] {
    const char* e = std::getenv("TINYLOOP_BF16_DOT");
    return e != nullptr && std::strcmp(e, "1") == 0;
}()};
std::atomic<uint64_t> g_bf16_dot_calls{0};

// bf16 activations, then rows over the pool as the float kernels split them.
void matmul_bf16_dot(const WeightView& W, const float* x, int n_tok, float* y, ThreadPool* pool) {
    thread_local std::vector<uint16_t> xb;
    const size_t n = static_cast<size_t>(n_tok) * W.cols;
    if (xb.size() < n) xb.resize(n);
    for (size_t i = 0; i < n; ++i) xb[i] = f32_to_bf16(x[i]);
    g_bf16_dot_calls.fetch_add(1, std::memory_order_relaxed);
    const uint16_t* xp = xb.data();
    over_rows(pool, W, n_tok, 15, rows_per_task, [&](int r0, int r1) { matmul_rows_bf16dot(W, xp, n_tok, y, r0, r1); });
}

}  // namespace

bool bf16_dot_usable() {
    static const bool hw = __builtin_cpu_supports("avx512bf16");
    return g_bf16_dot.load(std::memory_order_relaxed) && hw && active_simd() == Simd::Avx512;
}

}  // namespace detail

void set_bf16_dot(bool on) { detail::g_bf16_dot.store(on, std::memory_order_relaxed); }
bool bf16_dot() { return detail::g_bf16_dot.load(std::memory_order_relaxed); }
bool bf16_dot_active() { return detail::bf16_dot_usable(); }
uint64_t bf16_dot_call_count() { return detail::g_bf16_dot_calls.load(std::memory_order_relaxed); }

void matmul(const WeightView& W, const float* x, int n_tok, float* y, ThreadPool* pool) {
    if (n_tok <= 0 || W.rows <= 0) return;
    if (uses_int8_activations(W)) {
        detail::matmul_int8_act(W, x, n_tok, y, pool);
        return;
    }
    if (W.type == WType::BF16 && detail::bf16_dot_usable()) {
        detail::matmul_bf16_dot(W, x, n_tok, y, pool);
        return;
    }
    if (W.fpanels != nullptr && (W.type == WType::F32 || W.type == WType::BF16)) {
        const detail::IsaTable& isa = detail::active_isa();
        // The activations in the kernel's token tiles (cpu_internal.h), once per call for all
        // threads: a tile's broadcasts of one column are then adjacent.
        const int tt = detail::fpanel_token_tile(detail::active_simd());
        thread_local std::vector<float> packed;
        if (tt > 1 && n_tok > 1) {
            const size_t cols = static_cast<size_t>(W.cols);
            if (packed.size() < static_cast<size_t>(n_tok) * cols) packed.resize(static_cast<size_t>(n_tok) * cols);
            for (int t = 0; t < n_tok; t += tt) {
                const int T = std::min(tt, n_tok - t);
                float* out = packed.data() + static_cast<size_t>(t) * cols;
                const float* xt = x + static_cast<size_t>(t) * cols;
                for (size_t k = 0; k < cols; ++k) {
                    for (int j = 0; j < T; ++j) out[k * T + j] = xt[static_cast<size_t>(j) * cols + k];
                }
            }
            x = packed.data();
        }
        detail::over_rows(pool, W, n_tok, 16, detail::rows_per_task_fpanels,
                          [&](int r0, int r1) { isa.matmul_rows_fpanels(W, x, n_tok, y, r0, r1); });
        return;
    }
    // The SIMD kernels work in 32-column blocks inside a group; any other group size (the loader
    // refuses them, but the kernels should not misbehave) takes the scalar path.
    const bool quant = !wtype_is_float(W.type);
    const bool simd_ok = !quant || (W.group_size > 0 && W.group_size % 32 == 0);
    const detail::Simd level = simd_ok ? detail::active_simd() : detail::Simd::Scalar;
    const detail::IsaTable& isa = simd_ok ? detail::active_isa() : detail::isa_scalar();

    // Put each 32-column block of x in the order the codes unpack in (once per call, per token).
    const float* xs = x;
    thread_local std::vector<float> permuted;
    if (const int* perm = detail::matmul_block_perm(W.type, level)) {
        const size_t n = static_cast<size_t>(n_tok) * W.cols;
        if (permuted.size() < n) permuted.resize(n);
        for (size_t b = 0; b < n; b += 32) {
            for (int j = 0; j < 32; ++j) permuted[b + j] = x[b + perm[j]];
        }
        xs = permuted.data();
    }

    detail::over_rows(pool, W, n_tok, 15, detail::rows_per_task,
                      [&](int r0, int r1) { isa.matmul_rows(W, xs, n_tok, y, r0, r1); });
}

}  // namespace tinyloop::kern
