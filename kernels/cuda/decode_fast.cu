// The fast decode step's kernels (cuda_kernels.h, "the fast decode step"): fewer, fuller
// launches for one row, each a drop-in for a sequence of the reference ops.
//
//   fast_matmul          [rmsnorm ->] W x [+ y]           (the norm folded into its consumer;
//                                                           the residual into wo / down)
//   fast_matmul_swiglu   [rmsnorm ->] silu(G x) * (U x)
//   fast_qkv_rope_store  [rmsnorm ->] q, k, v = W x; RoPE on q and k; k, v into the cache
//   attention_split      flash-decoding: the row list cut into n_splits pieces, one block per
//                        (query, head, piece) with its partial softmax state, then a combine
//                        kernel (device_helpers.h's attn_combine) per (query, head)
//   fast_matmul_combined the combine folded into the product reading the attention (wo + the
//                        residual): each block combines the row into shared memory itself
//
// Bits: a folded norm computes rmsnorm_kernel's sequence (256 threads, the same strided sums
// and block_sum tree) into shared memory, and the products run matmul_rows.cuh's row_partials
// on it, so fast_matmul / fast_matmul_swiglu / fast_qkv_rope_store give the reference ops' bits
// (the op tests assert equality); RoPE reads the same host-computed cos/sin table as
// rope_store with the same rounded products. attention_split sums in another order than the
// reference attention: equal within float rounding, not bit for bit (compared to a tolerance).
//
// Programmatic dependent launch (pdl = true, sm_90 and later): the kernel is launched with
// cudaLaunchKernelEx and cudaLaunchAttributeProgrammaticStreamSerialization, so it may start
// while the previous kernel finishes; it waits at its top (cudaGridDependencySynchronize)
// before touching memory, and lets its own successor launch at once
// (cudaTriggerProgrammaticLaunchCompletion): the successor's wait still covers this kernel's
// completion and its writes. Captured into a graph, the attribute becomes a programmatic edge.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "kernels/cuda/matmul_rows.cuh"

namespace tinyloop::kern::cuda {

namespace {

constexpr int kWarps = 8;               // output rows per block, as matmul.cu
constexpr int kThreads = 32 * kWarps;   // 256: rmsnorm_kernel's block, so the norm's bits match
constexpr int kAttWarps = 4;            // attention_split: warps per (query, head, split) block

__device__ __forceinline__ void pdl_wait_and_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
    cudaTriggerProgrammaticLaunchCompletion();
#endif
}

// Row r of W into this SM's L1 ahead of its use: the weights never change during a step, so a
// kernel fetches its rows before it waits for its predecessor (PDL), and the loads after the
// wait hit L1 instead of paying an L2 or DRAM latency per pack (the first H200 profile: the
// products ran at 2-16% of the memory system). A hint only: no value depends on it.
__device__ __forceinline__ void prefetch_row(const WeightView& W, int r, int lane) {
#if defined(__CUDA_ARCH__)
    if (r < 0 || r >= W.rows) return;
    const int bits = W.type == WType::F32 ? 32 : (W.type == WType::F16 || W.type == WType::BF16) ? 16 : bits_of(W.type);
    const size_t row_bytes = static_cast<size_t>(W.cols) * bits / 8;
    const uint8_t* row = W.data + static_cast<size_t>(r) * row_bytes;
    for (size_t off = static_cast<size_t>(lane) * 128; off < row_bytes; off += 32 * 128)
        asm volatile("prefetch.global.L1 [%0];" ::"l"(row + off));
    if (bits < 16 && lane == 0 && W.group_size > 0) {
        const size_t g0 = static_cast<size_t>(r) * (W.cols / W.group_size);
        asm volatile("prefetch.global.L1 [%0];" ::"l"(W.scales + g0));
        asm volatile("prefetch.global.L1 [%0];" ::"l"(W.zeros + g0));
    }
#endif
}

// The product's input row in shared memory: x itself, or rmsnorm(x, g) computed as
// rmsnorm_kernel does (blockDim.x == 256). Block 0 also writes the normalized row to norm_out
// (when set), so the fused op leaves memory as the unfused pair would.
__device__ __forceinline__ void load_input(const float* x, const float* g, float eps, int d, float* norm_out,
                                           float* xs, float* red, int bx) {
    if (g) {
        float ss = 0.0f;
        for (int i = threadIdx.x; i < d; i += blockDim.x) ss = fmaf(x[i], x[i], ss);
        ss = block_sum(ss, red);
        const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
        const bool write = norm_out && bx == 0;
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            const float v = x[i] * inv * g[i];
            xs[i] = v;
            if (write) norm_out[i] = v;
        }
    } else {
        for (int i = threadIdx.x; i < d; i += blockDim.x) xs[i] = x[i];
    }
    __syncthreads();
}

// The product's input row combined from the split attention's states (one row: query 0), as
// attention_combine_kernel computes each element (device_helpers.h attn_combine); block 0
// writes it to out (when set). The per-(head, split) factors c = e^(m_s - M) and each head's
// denominator are the same for every element of the head: computed once into shared memory
// (cf, den) instead of per element, the numerators in attn_combine's order, the same bits (the
// maximum is exact in any order; a skipped split is marked c = -1, which e^x never gives).
__device__ __forceinline__ void load_combined(const float* pm, const float* pl, const float* pacc, int n_splits,
                                              int head_dim, int cols, float* out, float* xs, float* cf, float* den,
                                              int bx) {
    const int n_heads = cols / head_dim;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int h = warp; h < n_heads; h += warps) {
        const size_t base = static_cast<size_t>(h) * n_splits;
        float mx = -INFINITY;
        for (int s = lane; s < n_splits; s += 32)
            if (pl[base + s] > 0.0f && pm[base + s] > mx) mx = pm[base + s];
        mx = warp_max(mx);
        for (int s = lane; s < n_splits; s += 32)
            cf[base + s] = pl[base + s] > 0.0f ? expf(pm[base + s] - mx) : -1.0f;
        __syncwarp();
        if (lane == 0) {
            float d = 0.0f;
            for (int s = 0; s < n_splits; ++s) {
                if (!(pl[base + s] > 0.0f)) continue;
                d = fmaf(pl[base + s], cf[base + s], d);
            }
            den[h] = d;
        }
    }
    __syncthreads();
    const bool write = out && bx == 0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const int h = i / head_dim, d = i - h * head_dim;
        const size_t base = static_cast<size_t>(h) * n_splits;
        const float* acc = pacc + base * head_dim + d;
        float num = 0.0f;
#pragma unroll 8
        for (int s = 0; s < n_splits; ++s) {
            const float c = cf[base + s];
            if (c == -1.0f) continue;
            num = fmaf(acc[static_cast<size_t>(s) * head_dim], c, num);
        }
        const float v = den[h] > 0.0f ? num * (1.0f / den[h]) : 0.0f;
        xs[i] = v;
        if (write) out[i] = v;
    }
    __syncthreads();
}

enum Mode { kStore, kAccumulate, kSwiglu };

// One row (n_tok = 1) from the shared input row xs: y[r] = (W x)[r], += for kAccumulate,
// silu(W x) * (U x) for kSwiglu; warp w of the block computes row blockIdx.x * 8 + w.
template <bool kPack, int kMode, bool kEarlyY>
__device__ __forceinline__ void product_epilogue(const WeightView& W, const WeightView& U, const float* xs, float* y,
                                                 float y_old, int bx) {
    const int lane = threadIdx.x & 31;
    const int r = bx * kWarps + (threadIdx.x >> 5);
    if (r >= W.rows) return;
    float acc[1], acc_u[1];
    row_partials<1, kPack>(W, r, xs, 0, 1, lane, acc);
    if (kMode == kSwiglu) row_partials<1, kPack>(U, r, xs, 0, 1, lane, acc_u);
    const float s = warp_sum(acc[0]);
    float u = 0.0f;
    if (kMode == kSwiglu) u = warp_sum(acc_u[0]);
    if (lane == 0) {
        if (kMode == kStore) y[r] = s;
        else if (kMode == kAccumulate) y[r] = (kEarlyY ? y_old : y[r]) + s;
        else y[r] = s * u / (1.0f + expf(-s));
    }
}

// ---- the block bodies: each kernel below is one of these on blockIdx; the persistent step
// (persistent_step_kernel) runs the same bodies on virtual block indices (the same bits) ----

// One row (n_tok = 1): y[r] = (W x)[r], += for kAccumulate, silu(W x) * (U x) for kSwiglu.
// Virtual block bx computes rows bx * 8 + w.
template <bool kPack, int kMode>
__device__ __forceinline__ void matmul_body(const MatArgs& m, float* xs, float* red, int bx) {
    const int r = bx * kWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    // the residual read beside the input row's (one cache latency, not one after the product)
    const float y_old = kMode == kAccumulate && lane == 0 && r < m.W.rows ? m.y[r] : 0.0f;
    load_input(m.x, m.g, m.eps, m.W.cols, m.norm_out, xs, red, bx);
    product_epilogue<kPack, kMode, true>(m.W, m.U, xs, m.y, y_old, bx);
}

__device__ __forceinline__ void matmul_prefetch(const MatArgs& m, bool swiglu, int bx) {
    const int r = bx * kWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    prefetch_row(m.W, r, lane);
    if (swiglu) prefetch_row(m.U, r, lane);
}

// The split attention's combine as the product's input (kStore or kAccumulate). smem: the row
// (W.cols floats), then the combine's factors and denominators.
template <bool kPack, int kMode>
__device__ __forceinline__ void combined_body(const CombArgs& c, float* smem, int bx) {
    float* xs = smem;
    float* cf = xs + c.W.cols;                                                // [n_heads * n_splits]
    float* den = cf + static_cast<size_t>(c.W.cols / c.head_dim) * c.n_splits;  // [n_heads]
    load_combined(c.pm, c.pl, c.pacc, c.n_splits, c.head_dim, c.W.cols, c.att_out, xs, cf, den, bx);
    // the residual read at the end here: read early, ptxas spilled it (the audit's 16 bytes)
    product_epilogue<kPack, kMode, false>(c.W, c.W, xs, c.y, 0.0f, bx);
}

// q, k, v of one row with RoPE and the cache writes in the epilogue. Warp items, in order:
// q pairs (head h, i < hd/2: rows h*hd + i and h*hd + i + hd/2, both computed by the warp, then
// rotated), k pairs likewise (rotated, written to k and to the cache row), v rows (to v and
// to the cache row). RoPE is rope_store_kernel's: table (cos, sin) at [pos * hd/2 + i].
__device__ __forceinline__ void qkv_prefetch(const QkvArgs& a, int bx) {
    const int lane = threadIdx.x & 31;
    const int item = bx * kWarps + (threadIdx.x >> 5);
    const int hd = a.head_dim, half = hd / 2;
    const int nq = a.n_heads * half, nk = a.n_kv_heads * half;
    if (item < nq) {
        prefetch_row(a.wq, (item / half) * hd + item % half, lane);
        prefetch_row(a.wq, (item / half) * hd + item % half + half, lane);
    } else if (item < nq + nk) {
        prefetch_row(a.wk, ((item - nq) / half) * hd + (item - nq) % half, lane);
        prefetch_row(a.wk, ((item - nq) / half) * hd + (item - nq) % half + half, lane);
    } else {
        prefetch_row(a.wv, item - nq - nk, lane);
    }
}

template <bool kPack>
__device__ __forceinline__ void qkv_body(const QkvArgs& a, float* xs, float* red, int bx) {
    const int lane = threadIdx.x & 31;
    const int item = bx * kWarps + (threadIdx.x >> 5);
    const int hd = a.head_dim, half = hd / 2;
    const int nq = a.n_heads * half, nk = a.n_kv_heads * half, kv_row = a.n_kv_heads * hd;
    load_input(a.x, a.g, a.eps, a.wq.cols, a.norm_out, xs, red, bx);
    if (item >= nq + nk + kv_row) return;
    if (item < nq + nk) {
        const bool is_q = item < nq;
        const int j = is_q ? item : item - nq;
        const int h = j / half, i = j % half;
        const int r0 = h * hd + i, r1 = r0 + half;
        // one call per weight, not a selected copy of the view (which ptxas put on the stack)
        float acc0[1], acc1[1];
        if (is_q) {
            row_partials<1, kPack>(a.wq, r0, xs, 0, 1, lane, acc0);
            row_partials<1, kPack>(a.wq, r1, xs, 0, 1, lane, acc1);
        } else {
            row_partials<1, kPack>(a.wk, r0, xs, 0, 1, lane, acc0);
            row_partials<1, kPack>(a.wk, r1, xs, 0, 1, lane, acc1);
        }
        const float x0 = warp_sum(acc0[0]), x1 = warp_sum(acc1[0]);
        if (lane == 0) {
            const float2 cs = a.table[static_cast<size_t>(a.position[0]) * half + i];
            const float y0 = __fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y));
            const float y1 = __fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x));
            float* out = is_q ? a.q : a.k;
            out[r0] = y0;
            out[r1] = y1;
            if (!is_q) {
                const size_t crow = static_cast<size_t>(a.cache_row[0]) * kv_row;
                a.k_cache[crow + r0] = y0;
                a.k_cache[crow + r1] = y1;
            }
        }
    } else {
        const int r = item - nq - nk;
        float acc[1];
        row_partials<1, kPack>(a.wv, r, xs, 0, 1, lane, acc);
        const float s = warp_sum(acc[0]);
        if (lane == 0) {
            a.v[r] = s;
            a.v_cache[static_cast<size_t>(a.cache_row[0]) * kv_row + r] = s;
        }
    }
}

// The attention body's shared memory (per 128-thread group).
template <int DPL>
struct AttShared {
    float m[kAttWarps], l[kAttWarps];
    float acc[kAttWarps][32 * DPL];
};

// 128 threads (tid 0..127, four warps) of named barrier `bar` (bar.sync bar, 128: the whole
// block in attention_split_kernel, one half of the persistent step's 256-thread block).
__device__ __forceinline__ void group_sync(int bar) { asm volatile("bar.sync %0, 128;" ::"r"(bar) : "memory"); }

// Virtual block (bx, by) = (query t * n_heads + head h, split s): the split's entries of the
// row list, warp w taking entries b + w, b + w + 4, ... with an online softmax (the reference
// kernel's per-warp loop), the four warp states merged, and the split's state (max, sum,
// weighted values) written for the combine. An empty split writes (-inf, 0, 0).
template <int DPL>
__device__ __forceinline__ void attention_body(const AttArgs& x, AttShared<DPL>& sh, int tid, int bar, int bx,
                                               int by) {
    const AttentionArgs& a = x.a;
    const int n_splits = x.n_splits;
    const float scale = x.scale;
    const int t = bx / a.n_heads, h = bx % a.n_heads, sp = by;
    const int lane = tid & 31, warp = tid >> 5;
    const int hd = a.head_dim;
    const int kh = h / (a.n_heads / a.n_kv_heads);
    const size_t koff = static_cast<size_t>(kh) * hd;
    const float* q = a.q + (static_cast<size_t>(t) * a.n_heads + h) * hd;
    const int b0 = a.kv_begin[t], e0 = a.kv_end[t];
    const int nr = e0 > b0 ? e0 - b0 : 0;
    const int* extra = nullptr;
    int n_extra = 0;
    if (a.extra_offsets) {
        extra = a.extra_rows + a.extra_offsets[t];
        n_extra = a.extra_offsets[t + 1] - a.extra_offsets[t];
    }
    int b, e;
    split_range(nr + n_extra, n_splits, sp, &b, &e);

    float qv[DPL], acc[DPL];
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
        const int d = lane + 32 * j;
        qv[j] = d < hd ? q[d] : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    // unrolled: the next entry's K and V loads are issued beside this one's softmax step (the
    // same operations in the same order: the same bits)
#pragma unroll 2
    for (int i = b + warp; i < e; i += kAttWarps) {
        const int p = i < nr ? b0 + i : extra[i - nr];
        const float* kp = a.k + static_cast<size_t>(p) * a.kv_stride + koff;
        const float* vp = a.v + static_cast<size_t>(p) * a.kv_stride + koff;
        float part = 0.0f;
#pragma unroll
        for (int j = 0; j < DPL; ++j) {
            const int d = lane + 32 * j;
            if (d < hd) part = fmaf(qv[j], kp[d], part);
        }
        const float s = warp_sum(part) * scale;
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new), w = expf(s - m_new);
        l = l * corr + w;
#pragma unroll
        for (int j = 0; j < DPL; ++j) {
            const int d = lane + 32 * j;
            acc[j] = acc[j] * corr + (d < hd ? w * vp[d] : 0.0f);
        }
        m = m_new;
    }
    if (lane == 0) {
        sh.m[warp] = m;
        sh.l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < DPL; ++j) sh.acc[warp][lane + 32 * j] = acc[j];
    group_sync(bar);
    if (warp == 0) {
        float mx = -INFINITY;
        for (int w = 0; w < kAttWarps; ++w)
            if (sh.l[w] > 0.0f) mx = fmaxf(mx, sh.m[w]);
        float sum = 0.0f;
        float o[DPL];
#pragma unroll
        for (int j = 0; j < DPL; ++j) o[j] = 0.0f;
        for (int w = 0; w < kAttWarps; ++w) {
            if (!(sh.l[w] > 0.0f)) continue;  // a warp that saw no rows
            const float c = expf(sh.m[w] - mx);
            sum += sh.l[w] * c;
#pragma unroll
            for (int j = 0; j < DPL; ++j) o[j] += sh.acc[w][lane + 32 * j] * c;
        }
        const size_t slot = static_cast<size_t>(bx) * n_splits + sp;
        if (lane == 0) {
            x.pm[slot] = mx;
            x.pl[slot] = sum;
        }
#pragma unroll
        for (int j = 0; j < DPL; ++j) {
            const int d = lane + 32 * j;
            if (d < hd) x.pacc[slot * hd + d] = o[j];
        }
    }
    group_sync(bar);  // the shared state is free for the group's next block
}

// ---- the kernels ----

// One row (n_tok = 1): y[r] = (W x)[r], += for kAccumulate, silu(W x) * (U x) for kSwiglu.
template <bool kPack, int kMode>
__global__ void __launch_bounds__(kThreads) fast_matmul_kernel(const __grid_constant__ MatArgs m) {
    extern __shared__ float4 smem4[];
    __shared__ float red[32];
    matmul_prefetch(m, kMode == kSwiglu, blockIdx.x);
    pdl_wait_and_release();
    matmul_body<kPack, kMode>(m, reinterpret_cast<float*>(smem4), red, blockIdx.x);
}

// fast_matmul_kernel with the split attention's combine as its input (kStore or kAccumulate).
template <bool kPack, int kMode>
__global__ void __launch_bounds__(kThreads) fast_combined_matmul_kernel(const __grid_constant__ CombArgs c) {
    extern __shared__ float4 smem4[];
    prefetch_row(c.W, blockIdx.x * kWarps + (threadIdx.x >> 5), threadIdx.x & 31);
    pdl_wait_and_release();
    combined_body<kPack, kMode>(c, reinterpret_cast<float*>(smem4), blockIdx.x);
}

// __launch_bounds__(256, 2): without a minimum of blocks ptxas capped the vector path at 40
// registers and spilled (the audit's 8-byte stack); a decode step has ~1 block per SM anyway.
template <bool kPack>
__global__ void __launch_bounds__(kThreads, 2) fast_qkv_rope_store_kernel(const __grid_constant__ QkvArgs a) {
    extern __shared__ float4 smem4[];
    __shared__ float red[32];
    qkv_prefetch(a, blockIdx.x);
    pdl_wait_and_release();
    qkv_body<kPack>(a, reinterpret_cast<float*>(smem4), red, blockIdx.x);
}

// One block of four warps per (query t, head h, split s) of grid (n_tok * n_heads, n_splits).
template <int DPL>
__global__ void __launch_bounds__(32 * kAttWarps) attention_split_kernel(const __grid_constant__ AttArgs x) {
    __shared__ AttShared<DPL> sh;
    pdl_wait_and_release();
    attention_body<DPL>(x, sh, threadIdx.x, 1, blockIdx.x, blockIdx.y);
}

// ---- the persistent step ----

// Phase i's descriptor from the kernel's parameter into shared memory (uint4 words, one per
// thread of `from`..`from + words`): the phases' fields are then read at shared-memory latency,
// not as a chain of dependent constant-cache misses at the start of every phase.
__device__ __forceinline__ void stage_phase(const PhaseProgram& prog, int i, Phase* dst, int from) {
    constexpr int words = static_cast<int>(sizeof(Phase) / sizeof(uint4));
    const int t = static_cast<int>(threadIdx.x) - from;
    if (i < prog.n && t >= 0 && t < words)
        reinterpret_cast<uint4*>(dst)[t] = reinterpret_cast<const uint4*>(&prog.ph[i])[t];
}

// All blocks of the cooperative grid meet here: thread 0 of each block counts its arrival at
// barrier[0] (acquire-release: the block's writes, ordered before it by __syncthreads, go
// with it); the last to arrive resets the count and advances the generation barrier[1]
// (release), which the others wait for (acquire loads, bounded: a grid that is not co-resident
// traps instead of hanging). Meanwhile warp 1 stages the descriptor of phase `next` into
// `dst` (the slot phase next - 2 used, which every thread has left by the first
// __syncthreads).
__device__ __forceinline__ void grid_barrier(unsigned* barrier, const PhaseProgram& prog, int next, Phase* dst) {
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned gen, old;
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(gen) : "l"(barrier + 1) : "memory");
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(barrier) : "memory");
        if (old == gridDim.x - 1) {
            asm volatile("st.relaxed.gpu.global.u32 [%0], 0;" ::"l"(barrier) : "memory");
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(barrier + 1) : "memory");
        } else {
            unsigned now = gen;
            for (long long spins = 0; now == gen; ++spins) {
                if (spins > (1ll << 26)) __trap();  // seconds: a grid that is not co-resident
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(barrier + 1) : "memory");
            }
        }
    } else {
        stage_phase(prog, next, dst, 32);
    }
    __syncthreads();
}

// This block's weight rows of phase ph into L1 (a hint, as the kernels' prefetch before their
// PDL wait): issued before the barrier that precedes the phase.
__device__ __forceinline__ void phase_prefetch(const Phase& ph) {
    if (ph.kind == kPhaseAtt || ph.kind == kPhaseNop) return;
    for (int bx = blockIdx.x; bx < ph.blocks; bx += gridDim.x) {
        if (ph.kind == kPhaseMat) {
            const MatArgs& m = *reinterpret_cast<const MatArgs*>(ph.body);
            matmul_prefetch(m, ph.variant % 3 == kSwiglu, bx);
        } else if (ph.kind == kPhaseComb) {
            const CombArgs& c = *reinterpret_cast<const CombArgs*>(ph.body);
            prefetch_row(c.W, bx * kWarps + (threadIdx.x >> 5), threadIdx.x & 31);
        } else {
            qkv_prefetch(*reinterpret_cast<const QkvArgs*>(ph.body), bx);
        }
    }
}

template <int DPL>
__device__ __forceinline__ void attention_phase(const Phase& ph, unsigned char* att_smem) {
    // two groups of 128 threads, each an attention block of its own (named barriers 1 and 2)
    const int group = threadIdx.x >> 7, tid = threadIdx.x & 127;
    AttShared<DPL>& sh = reinterpret_cast<AttShared<DPL>*>(att_smem)[group];
    const AttArgs& x = *reinterpret_cast<const AttArgs*>(ph.body);
    for (int v = 2 * blockIdx.x + group; v < ph.blocks; v += 2 * gridDim.x)
        attention_body<DPL>(x, sh, tid, 1 + group, v % ph.grid_x, v / ph.grid_x);
}

// The recorded phases in order, each on every virtual block (block bx of the phase's kernel on
// physical block bx mod gridDim.x), a grid barrier between phases. 256 threads per block.
__global__ void __launch_bounds__(kThreads, 1) persistent_step_kernel(const __grid_constant__ PhaseProgram prog) {
    extern __shared__ float4 smem4[];
    __shared__ float red[32];
    __shared__ __align__(16) unsigned char att_smem[2 * sizeof(AttShared<8>)];
    __shared__ __align__(16) unsigned char sph_raw[2 * sizeof(Phase)];
    Phase* sph = reinterpret_cast<Phase*>(sph_raw);  // phase i's descriptor in sph[i % 2], staged ahead
    float* smem = reinterpret_cast<float*>(smem4);
    stage_phase(prog, 0, &sph[0], 0);
    stage_phase(prog, 1, &sph[1], 32);
    __syncthreads();
    for (int i = 0; i < prog.n; ++i) {
        const Phase& ph = sph[i & 1];
        if (prog.prefetch) phase_prefetch(ph);
        if (i > 0) grid_barrier(prog.barrier, prog, i + 1, &sph[(i + 1) & 1]);
        switch (ph.kind) {
            case kPhaseMat: {
                const MatArgs& m = *reinterpret_cast<const MatArgs*>(ph.body);
                for (int bx = blockIdx.x; bx < ph.blocks; bx += gridDim.x) {
                    switch (ph.variant) {
                        case 0: matmul_body<false, kStore>(m, smem, red, bx); break;
                        case 1: matmul_body<false, kAccumulate>(m, smem, red, bx); break;
                        case 2: matmul_body<false, kSwiglu>(m, smem, red, bx); break;
                        case 3: matmul_body<true, kStore>(m, smem, red, bx); break;
                        case 4: matmul_body<true, kAccumulate>(m, smem, red, bx); break;
                        default: matmul_body<true, kSwiglu>(m, smem, red, bx); break;
                    }
                    __syncthreads();  // the shared row is free for the next virtual block
                }
                break;
            }
            case kPhaseComb: {
                const CombArgs& c = *reinterpret_cast<const CombArgs*>(ph.body);
                for (int bx = blockIdx.x; bx < ph.blocks; bx += gridDim.x) {
                    switch (ph.variant) {
                        case 0: combined_body<false, kStore>(c, smem, bx); break;
                        case 1: combined_body<false, kAccumulate>(c, smem, bx); break;
                        case 3: combined_body<true, kStore>(c, smem, bx); break;
                        default: combined_body<true, kAccumulate>(c, smem, bx); break;
                    }
                    __syncthreads();
                }
                break;
            }
            case kPhaseQkv: {
                const QkvArgs& a = *reinterpret_cast<const QkvArgs*>(ph.body);
                for (int bx = blockIdx.x; bx < ph.blocks; bx += gridDim.x) {
                    if (ph.variant) qkv_body<true>(a, smem, red, bx);
                    else qkv_body<false>(a, smem, red, bx);
                    __syncthreads();
                }
                break;
            }
            case kPhaseNop: break;
            default:
                switch (ph.variant) {
                    case 1: attention_phase<1>(ph, att_smem); break;
                    case 2: attention_phase<2>(ph, att_smem); break;
                    case 4: attention_phase<4>(ph, att_smem); break;
                    default: attention_phase<8>(ph, att_smem); break;
                }
                break;
        }
    }
}

// One block per (query, head), one thread per output dimension: device_helpers.h's combine.
__global__ void __launch_bounds__(256) attention_combine_kernel(int n_splits, int head_dim, const float* pm,
                                                                const float* pl, const float* pacc, float* out) {
    pdl_wait_and_release();
    const int d = threadIdx.x;
    if (d >= head_dim) return;
    const size_t base = static_cast<size_t>(blockIdx.x) * n_splits;
    out[static_cast<size_t>(blockIdx.x) * head_dim + d] =
        attn_combine(pm + base, pl + base, pacc + base * head_dim + d, n_splits, head_dim);
}

// A launch with or without the programmatic-dependent-launch attribute.
template <class... KArgs, class... Args>
void launch_ex(Context& ctx, bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream_of(ctx);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = pdl ? attr : nullptr;
    cfg.numAttrs = pdl ? 1 : 0;
    TL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...));
}

// With the context's persistence on, the launch is recorded as a phase (run by the next
// cooperative launch, flush_phases) and true is returned; else nothing happens.
template <class Args>
bool record(Context& ctx, PhaseKind kind, int variant, dim3 grid, size_t smem, const Args& args) {
    static_assert(sizeof(Args) <= sizeof(Phase::body), "phase body");
    PhaseQueue& q = ctx.impl().phases;
    if (!q.on) return false;
    ctx.impl().rules.check(StreamOp::Launch);
    Phase ph;
    ph.kind = kind;
    ph.variant = variant;
    ph.blocks = static_cast<int>(grid.x * grid.y);
    ph.grid_x = static_cast<int>(grid.x);
    ph.smem_floats = static_cast<int>(smem / sizeof(float));
    std::memcpy(ph.body, &args, sizeof(Args));
    q.pending.push_back(ph);
    if (q.pending.size() == static_cast<size_t>(kMaxPhases)) flush_phases(ctx);
    return true;
}

bool vector_ok(const WeightView& W) { return pack8_ok(W) && reinterpret_cast<uintptr_t>(W.data) % 16 == 0; }

// Whether the unfused product's input (x, or the folded norm's output row) is 16-byte aligned:
// matmul's vector path needs it, and the fused kernel takes the path matmul would (its bits).
bool reference_input_aligned(const FoldedNorm& norm, const float* x) {
    const float* in = norm.g && norm.out ? norm.out : x;
    return reinterpret_cast<uintptr_t>(in) % 16 == 0;
}

void check_cols(const char* op, int cols) {
    if (cols < 1 || cols > kFastMaxCols)
        throw CudaError(std::string(op) + ": " + std::to_string(cols) + " columns is outside [1, " +
                            std::to_string(kFastMaxCols) + "] (the fast step's shared-memory input row)",
                        false);
}

template <int kMode>
void fast_product(Context& ctx, const FoldedNorm& norm, const WeightView& W, const WeightView& U, const float* x,
                  float* y, bool pdl) {
    if (W.rows <= 0) return;
    check_cols("fast_matmul", W.cols);
    const dim3 grid(blocks_for(static_cast<size_t>(W.rows), kWarps)), block(kThreads);
    const size_t smem = static_cast<size_t>(W.cols) * sizeof(float);
    // the vector path exactly when matmul would take it on the unfused op's input (the norm's
    // output row when folded); the kernel itself reads its shared copy, always aligned
    const bool pack = vector_ok(W) && (kMode != kSwiglu || vector_ok(U)) && reference_input_aligned(norm, x);
    const MatArgs m{W, U, x, norm.g, norm.eps, norm.out, y};
    if (record(ctx, kPhaseMat, (pack ? 3 : 0) + kMode, grid, smem, m)) return;
    if (pack) launch_ex(ctx, pdl, fast_matmul_kernel<true, kMode>, grid, block, smem, m);
    else launch_ex(ctx, pdl, fast_matmul_kernel<false, kMode>, grid, block, smem, m);
}

}  // namespace

void fast_matmul(Context& ctx, const FoldedNorm& norm, const WeightView& W, const float* x, float* y, bool accumulate,
                 bool pdl) {
    if (accumulate) fast_product<kAccumulate>(ctx, norm, W, W, x, y, pdl);
    else fast_product<kStore>(ctx, norm, W, W, x, y, pdl);
}

void fast_matmul_swiglu(Context& ctx, const FoldedNorm& norm, const WeightView& gate, const WeightView& up,
                        const float* x, float* out, bool pdl) {
    if (gate.rows != up.rows || gate.cols != up.cols)
        throw CudaError("fast_matmul_swiglu: gate and up differ in shape", false);
    fast_product<kSwiglu>(ctx, norm, gate, up, x, out, pdl);
}

bool fast_qkv_fits(const WeightView& Wq, const WeightView& Wk, const WeightView& Wv, int n_heads, int n_kv_heads,
                   int head_dim) {
    const bool shapes = head_dim >= 2 && head_dim % 2 == 0 && Wq.rows == n_heads * head_dim &&
                        Wk.rows == n_kv_heads * head_dim && Wv.rows == n_kv_heads * head_dim && Wq.cols == Wk.cols &&
                        Wq.cols == Wv.cols && Wq.cols >= 1 && Wq.cols <= kFastMaxCols;
    // one template for the three: the same vector/scalar choice matmul3 makes for each
    return shapes && (vector_ok(Wq) == vector_ok(Wk)) && (vector_ok(Wq) == vector_ok(Wv));
}

void fast_qkv_rope_store(Context& ctx, const FoldedNorm& norm, const WeightView& Wq, const WeightView& Wk,
                         const WeightView& Wv, const float* x, int n_heads, int n_kv_heads, int head_dim,
                         const int* position, const float* table, float* q, float* k, float* v, float* k_cache,
                         float* v_cache, const int* cache_row, bool pdl) {
    if (!fast_qkv_fits(Wq, Wk, Wv, n_heads, n_kv_heads, head_dim))
        throw CudaError("fast_qkv_rope_store: the q/k/v weights do not fit the fused kernel (fast_qkv_fits)", false);
    const QkvArgs a{Wq, Wk, Wv, x, norm.g, norm.eps, norm.out, n_heads, n_kv_heads, head_dim, position,
                    reinterpret_cast<const float2*>(table), q, k, v, k_cache, v_cache, cache_row};
    const size_t items = static_cast<size_t>(n_heads + n_kv_heads) * (head_dim / 2) +
                         static_cast<size_t>(n_kv_heads) * head_dim;
    const dim3 grid(blocks_for(items, kWarps)), block(kThreads);
    const size_t smem = static_cast<size_t>(Wq.cols) * sizeof(float);
    const bool pack = vector_ok(Wq) && reference_input_aligned(norm, x);
    if (record(ctx, kPhaseQkv, pack ? 1 : 0, grid, smem, a)) return;
    if (pack) launch_ex(ctx, pdl, fast_qkv_rope_store_kernel<true>, grid, block, smem, a);
    else launch_ex(ctx, pdl, fast_qkv_rope_store_kernel<false>, grid, block, smem, a);
}

int attention_splits(int n_heads) {
    if (n_heads < 1) return 1;
    const int s = (kAttentionMinBlocks + n_heads - 1) / n_heads;
    return s < 1 ? 1 : (s > kAttentionMaxSplits ? kAttentionMaxSplits : s);
}

size_t attention_split_floats(int n_tok, int n_heads, int head_dim, int n_splits) {
    return static_cast<size_t>(n_tok) * n_heads * n_splits * (static_cast<size_t>(head_dim) + 2);
}

SplitPartials attention_split_partials(Context& ctx, const AttentionArgs& a, int n_splits, float* partial,
                                       size_t partial_floats, bool pdl) {
    SplitPartials p;
    p.n_splits = n_splits;
    p.n_heads = a.n_heads;
    p.head_dim = a.head_dim;
    if (a.n_tok <= 0 || a.n_heads <= 0) return p;
    if (a.head_dim < 1 || a.head_dim > 256)
        throw CudaError("attention_split: head_dim " + std::to_string(a.head_dim) +
                            " is outside [1, 256] (the CUDA back end's limit)", false);
    if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
        throw CudaError("attention_split: n_heads must be a multiple of n_kv_heads", false);
    if (a.kq) throw CudaError("attention_split: the INT8 cache is not supported on the device", false);
    if (n_splits < 1 || n_splits > kAttentionMaxSplits)
        throw CudaError("attention_split: n_splits " + std::to_string(n_splits) + " is outside [1, " +
                            std::to_string(kAttentionMaxSplits) + "]", false);
    const size_t need = attention_split_floats(a.n_tok, a.n_heads, a.head_dim, n_splits);
    if (partial_floats < need)
        throw CudaError("attention_split: the partial buffer holds " + std::to_string(partial_floats) +
                            " floats, the call needs " + std::to_string(need), false);
    const size_t heads = static_cast<size_t>(a.n_tok) * a.n_heads;
    float* pm = partial;
    float* pl = pm + heads * n_splits;
    float* pacc = pl + heads * n_splits;
    p.m = pm;
    p.l = pl;
    p.acc = pacc;
    const AttArgs x{a, 1.0f / std::sqrt(static_cast<float>(a.head_dim)), n_splits, pm, pl, pacc};
    const dim3 grid(static_cast<unsigned>(heads), static_cast<unsigned>(n_splits)), block(32 * kAttWarps);
    const int dpl = a.head_dim <= 32 ? 1 : a.head_dim <= 64 ? 2 : a.head_dim <= 128 ? 4 : 8;
    if (record(ctx, kPhaseAtt, dpl, grid, 0, x)) return p;
    if (dpl == 1) launch_ex(ctx, pdl, attention_split_kernel<1>, grid, block, 0, x);
    else if (dpl == 2) launch_ex(ctx, pdl, attention_split_kernel<2>, grid, block, 0, x);
    else if (dpl == 4) launch_ex(ctx, pdl, attention_split_kernel<4>, grid, block, 0, x);
    else launch_ex(ctx, pdl, attention_split_kernel<8>, grid, block, 0, x);
    return p;
}

void attention_combine(Context& ctx, const SplitPartials& p, int n_tok, float* out, bool pdl) {
    if (n_tok <= 0 || p.n_heads <= 0 || !p.m) return;
    const unsigned threads = static_cast<unsigned>((p.head_dim + 31) / 32 * 32);
    launch_ex(ctx, pdl, attention_combine_kernel, dim3(static_cast<unsigned>(n_tok) * p.n_heads), dim3(threads), 0,
              p.n_splits, p.head_dim, p.m, p.l, p.acc, out);
}

void attention_split(Context& ctx, const AttentionArgs& a, int n_splits, float* partial, size_t partial_floats,
                     bool pdl) {
    const SplitPartials p = attention_split_partials(ctx, a, n_splits, partial, partial_floats, pdl);
    attention_combine(ctx, p, a.n_tok, a.out, pdl);
}

namespace {
size_t combined_smem(const SplitPartials& p, int cols) {
    return (static_cast<size_t>(cols) + static_cast<size_t>(p.n_heads) * (p.n_splits + 1)) * sizeof(float);
}
}  // namespace

bool fast_combined_fits(const SplitPartials& p, int cols) { return combined_smem(p, cols) <= 48 * 1024; }

void fast_matmul_combined(Context& ctx, const SplitPartials& p, float* att_out, const WeightView& W, float* y,
                          bool accumulate, bool pdl) {
    if (W.rows <= 0) return;
    check_cols("fast_matmul_combined", W.cols);
    if (!p.m || W.cols != p.n_heads * p.head_dim)
        throw CudaError("fast_matmul_combined: " + std::to_string(W.cols) + " columns, the attention row has " +
                            std::to_string(p.n_heads * p.head_dim), false);
    const dim3 grid(blocks_for(static_cast<size_t>(W.rows), kWarps)), block(kThreads);
    // the row, then the combine's factors (n_heads x n_splits) and denominators (n_heads)
    const size_t smem = combined_smem(p, W.cols);
    if (!fast_combined_fits(p, W.cols))
        throw CudaError("fast_matmul_combined: " + std::to_string(smem) + " bytes of shared memory exceed 48 KiB (" +
                            std::to_string(W.cols) + " columns, " + std::to_string(p.n_heads) + " heads x " +
                            std::to_string(p.n_splits) + " splits)", false);
    // matmul's path on the unfused input (the attention row, att_out)
    const bool pack = vector_ok(W) && (!att_out || reinterpret_cast<uintptr_t>(att_out) % 16 == 0);
    const CombArgs c{W, p.m, p.l, p.acc, p.n_splits, p.head_dim, att_out, y};
    if (record(ctx, kPhaseComb, (pack ? 3 : 0) + (accumulate ? kAccumulate : kStore), grid, smem, c)) return;
    if (accumulate) {
        if (pack) launch_ex(ctx, pdl, fast_combined_matmul_kernel<true, kAccumulate>, grid, block, smem, c);
        else launch_ex(ctx, pdl, fast_combined_matmul_kernel<false, kAccumulate>, grid, block, smem, c);
    } else {
        if (pack) launch_ex(ctx, pdl, fast_combined_matmul_kernel<true, kStore>, grid, block, smem, c);
        else launch_ex(ctx, pdl, fast_combined_matmul_kernel<false, kStore>, grid, block, smem, c);
    }
}

// ---- the persistent step: recording and the cooperative launch ----

void set_persist(Context& ctx, bool on) {
    Context::Impl& c = ctx.impl();
    PhaseQueue& q = c.phases;
    if (!on) {
        if (!q.pending.empty()) flush_phases(ctx);
        q.on = false;
        return;
    }
    if (q.on) return;
    c.rules.check(StreamOp::Alloc);  // the barrier's memory: not during capture
    int coop = 0;
    TL_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, c.device));
    if (!coop)
        throw CudaError("the persistent step needs cooperative launches, which this device does not support", false);
    if (!q.barrier) {
        TL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&q.barrier), 2 * sizeof(unsigned)));
        TL_CUDA_CHECK(cudaMemsetAsync(q.barrier, 0, 2 * sizeof(unsigned), c.stream));
        TL_CUDA_CHECK(cudaStreamSynchronize(c.stream));
    }
    q.on = true;
}

bool persist_on(const Context& ctx) { return ctx.impl().phases.on; }

size_t persist_launches(const Context& ctx) { return ctx.impl().phases.launches; }

void flush_phases(Context& ctx) {
    Context::Impl& c = ctx.impl();
    PhaseQueue& q = c.phases;
    if (q.pending.empty()) return;
    auto prog = std::make_unique<PhaseProgram>();
    size_t smem_floats = 0;
    int need = 1;
    for (const Phase& ph : q.pending) {
        smem_floats = std::max(smem_floats, static_cast<size_t>(ph.smem_floats));
        need = std::max(need, ph.kind == kPhaseAtt ? (ph.blocks + 1) / 2 : ph.blocks);
    }
    prog->n = static_cast<int>(q.pending.size());
    prog->barrier = q.barrier;
    prog->prefetch = 1;
    if (const char* e = std::getenv("TINYLOOP_CUDA_PERSIST_PREFETCH")) prog->prefetch = std::atoi(e) != 0;
    std::copy(q.pending.begin(), q.pending.end(), prog->ph);
    q.pending.clear();  // before the launch, which may throw
    const size_t smem = smem_floats * sizeof(float);
    if (smem > 48 * 1024)
        TL_CUDA_CHECK(cudaFuncSetAttribute(persistent_step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    // the cooperative grid: every block co-resident (the barrier waits for all of them); at most
    // TINYLOOP_CUDA_PERSIST_PER_SM blocks per multiprocessor (default 2: H200 run 8 measured 2
    // faster than 1 on every model), never more than the
    // largest phase needs
    int sms = 0, per_sm = 0;
    TL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c.device));
    TL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_step_kernel, kThreads, smem));
    if (per_sm < 1)
        throw CudaError("the persistent step: no block of " + std::to_string(kThreads) + " threads with " +
                            std::to_string(smem) + " bytes of shared memory fits a multiprocessor", false);
    int cap = 2;
    if (const char* e = std::getenv("TINYLOOP_CUDA_PERSIST_PER_SM")) cap = std::max(1, std::min(8, std::atoi(e)));
    const int grid = std::min(need, sms * std::min(per_sm, cap));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(grid));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c.stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    TL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, persistent_step_kernel, *prog));
    ++q.launches;
}

double persist_barrier_probe(Context& ctx, int per_sm, int reps) {
    PhaseQueue& q = ctx.impl().phases;
    if (!q.on) throw CudaError("persist_barrier_probe: the context's persistence is off (set_persist)", false);
    if (reps < 1) throw CudaError("persist_barrier_probe: reps must be >= 1", false);
    int sms = 0;
    TL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx.impl().device));
    const char* saved = std::getenv("TINYLOOP_CUDA_PERSIST_PER_SM");
    const std::string keep = saved ? saved : "";
    setenv("TINYLOOP_CUDA_PERSIST_PER_SM", std::to_string(per_sm).c_str(), 1);
    auto one = [&] {
        for (int i = 0; i < kMaxPhases; ++i) {
            Phase ph;
            ph.kind = kPhaseNop;
            ph.blocks = sms * per_sm;  // the whole grid
            q.pending.push_back(ph);
        }
        flush_phases(ctx);
    };
    one();  // warm: module load, the first launch
    ctx.synchronize();
    cudaEvent_t a = nullptr, b = nullptr;
    TL_CUDA_CHECK(cudaEventCreate(&a));
    TL_CUDA_CHECK(cudaEventCreate(&b));
    TL_CUDA_CHECK(cudaEventRecord(a, ctx.impl().stream));
    for (int r = 0; r < reps; ++r) one();
    TL_CUDA_CHECK(cudaEventRecord(b, ctx.impl().stream));
    TL_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0.0f;
    TL_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (saved) setenv("TINYLOOP_CUDA_PERSIST_PER_SM", keep.c_str(), 1);
    else unsetenv("TINYLOOP_CUDA_PERSIST_PER_SM");
    return 1000.0 * ms / (static_cast<double>(reps) * (kMaxPhases - 1));
}

// ---- the cluster barrier, timed alone ----
//
// A step run by one thread-block cluster (sm_90: up to 16 blocks, co-scheduled by the hardware)
// would meet at barrier.cluster between phases instead of the persistent kernel's grid barrier
// (H200 run 9: 1.6 us, most of the ~2.5 us a phase would have to take for 5,000 tok/s at d512).
// Before such a step is written, this measures its floor: `n` arrive-release / wait-acquire
// rounds of the whole cluster, nothing else.
__global__ void __launch_bounds__(kThreads) cluster_barrier_probe_kernel(int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    for (int i = 0; i < n; ++i) {
        asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
        asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    }
#else
    __trap();  // the PTX for older devices: the host refuses them before launching
#endif
}

double cluster_barrier_probe(Context& ctx, int cluster, int reps) {
    Context::Impl& c = ctx.impl();
    if (cluster < 2 || cluster > 16)
        throw CudaError("cluster_barrier_probe: cluster " + std::to_string(cluster) + " is outside [2, 16]", false);
    if (reps < 1) throw CudaError("cluster_barrier_probe: reps must be >= 1", false);
    int major = 0, clusters_ok = 0;
    TL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c.device));
    TL_CUDA_CHECK(cudaDeviceGetAttribute(&clusters_ok, cudaDevAttrClusterLaunch, c.device));
    if (major < 9 || !clusters_ok)
        throw CudaError("cluster_barrier_probe: thread-block clusters need compute capability 9.0 or later", false);
    if (cluster > 8)  // past the portable size: allowed per kernel, where the device has it
        TL_CUDA_CHECK(cudaFuncSetAttribute(cluster_barrier_probe_kernel,
                                           cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(cluster));
    cfg.blockDim = dim3(kThreads);
    cfg.stream = stream_of(ctx);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int fits = 0;
    TL_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&fits, cluster_barrier_probe_kernel, &cfg));
    if (fits < 1)
        throw CudaError("cluster_barrier_probe: no cluster of " + std::to_string(cluster) + " blocks of " +
                            std::to_string(kThreads) + " threads fits this device",
                        false);
    const int n = kMaxPhases;  // barriers per launch, as persist_barrier_probe's programs
    TL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, cluster_barrier_probe_kernel, n));  // warm
    ctx.synchronize();
    cudaEvent_t a = nullptr, b = nullptr;
    TL_CUDA_CHECK(cudaEventCreate(&a));
    TL_CUDA_CHECK(cudaEventCreate(&b));
    TL_CUDA_CHECK(cudaEventRecord(a, cfg.stream));
    for (int r = 0; r < reps; ++r) TL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, cluster_barrier_probe_kernel, n));
    TL_CUDA_CHECK(cudaEventRecord(b, cfg.stream));
    TL_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0.0f;
    TL_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return 1000.0 * ms / (static_cast<double>(reps) * n);
}

}  // namespace tinyloop::kern::cuda
