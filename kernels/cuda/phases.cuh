// The persistent decode step's phases (decode_fast.cu, "persist"): with a context's persistence on
// (set_persist), each fast-step launch (fast_matmul, fast_matmul_swiglu, fast_qkv_rope_store,
// attention_split_partials, fast_matmul_combined) is recorded as a Phase instead of launched,
// and the recorded phases run in one cooperative kernel, one phase after another with a grid
// barrier between them, at the next other use of the stream (stream_of flushes). Each phase
// runs the same block body as its kernel on every virtual block (the same bits): the layers'
// ~80 launches of a d512 decode step become one.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace tinyloop::kern::cuda {

// q, k, v of one row with RoPE and the cache writes (fast_qkv_rope_store's arguments).
struct QkvArgs {
    WeightView wq, wk, wv;
    const float* x;
    const float* g;
    float eps;
    float* norm_out;
    int n_heads, n_kv_heads, head_dim;
    const int* position;  // [1], device
    const float2* table;
    float *q, *k, *v;
    float *k_cache, *v_cache;  // the layer's cache; the row goes to cache_row[0]
    const int* cache_row;
};

// fast_matmul / fast_matmul_swiglu: y (+)= W [rmsnorm] x, or silu(W x) * (U x).
struct MatArgs {
    WeightView W, U;
    const float* x;
    const float* g;
    float eps;
    float* norm_out;
    float* y;
};

// fast_matmul_combined: y (+)= W combine(pm, pl, pacc).
struct CombArgs {
    WeightView W;
    const float *pm, *pl, *pacc;
    int n_splits, head_dim;
    float* att_out;
    float* y;
};

// attention_split_partials: the splits' partial softmax states.
struct AttArgs {
    AttentionArgs a;
    float scale;
    int n_splits;
    float *pm, *pl, *pacc;
};

// kPhaseNop: nothing (persist_barrier_probe times the barriers alone).
enum PhaseKind : int { kPhaseMat = 0, kPhaseComb = 1, kPhaseQkv = 2, kPhaseAtt = 3, kPhaseNop = 4 };

// One recorded launch. `variant`: kPhaseMat: pack * 3 + mode (store, accumulate, swiglu);
// kPhaseComb: pack * 3 + mode (store, accumulate); kPhaseQkv: pack; kPhaseAtt: values per lane
// (1, 2, 4, 8). blocks: the kernel's grid (x * y, y = the splits for attention); grid_x its x.
struct alignas(16) Phase {
    int kind = 0, variant = 0, blocks = 0, grid_x = 0;
    int smem_floats = 0;  // the kernel's dynamic shared memory, in floats
    int pad_[3] = {0, 0, 0};
    alignas(16) unsigned char body[sizeof(QkvArgs) > sizeof(AttArgs) ? sizeof(QkvArgs) : sizeof(AttArgs)];
};
static_assert(sizeof(MatArgs) <= sizeof(Phase::body) && sizeof(CombArgs) <= sizeof(Phase::body), "phase body");

// Phases per cooperative launch: the program is the kernel's parameter (at most 32,764 bytes on
// sm_70 and later); a longer step is cut into several launches (stream order between them).
constexpr int kMaxPhases = 96;

struct PhaseProgram {
    int n = 0;
    unsigned* barrier = nullptr;  // [2]: arrivals, generation (device memory, zeroed once)
    int prefetch = 1;             // each block's next weight rows into L1 before the barrier
    Phase ph[kMaxPhases];
};

// The context's recording (Context::Impl::phases).
struct PhaseQueue {
    bool on = false;              // set_persist(ctx, true)
    int blocks = 0;               // the cooperative grid: multiprocessors x co-resident blocks
    unsigned* barrier = nullptr;  // owned: cudaMalloc'd by set_persist, freed by the context
    std::vector<Phase> pending;
    size_t launches = 0;          // cooperative launches issued (tests, reports)
};

}  // namespace tinyloop::kern::cuda
