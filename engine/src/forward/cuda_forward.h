// The whole-model forward on the CUDA back end (FORMAT.md §1 on kernels/cuda/), for greedy
// decode and prefill: the model's weights uploaded once (CudaWeights), a session with
// the KV cache on the device (CudaSession), the decode step captured as a CUDA graph on its
// first use and replayed for every later token, no host synchronisation in a step other than
// reading the chosen token.
//
// Reached from the public API through load_model (backend cuda / auto on a usable device) and
// the CUDA executor (make_cuda_executor below, executor.h), which decode(), forward_logits /
// score, escalation and the lens run on; what it lacks is refused in one place (executor.h's
// table and unsupported()). Only defined in builds with the CUDA back end.
#pragma once

#ifdef TINYLOOP_HAVE_CUDA

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "forward/cuda_fast_path.h"
#include "forward/forward.h"
#include "kernels/cuda/byte_share.h"
#include "kernels/cuda/cuda_kernels.h"
#include "model/model.h"

namespace tinyloop {

class CudaSession;
class CudaOps;    // cuda_backend.h
class Executor;   // executor.h
class ExecBatch;  // executor.h

// The model's weights in device memory: the file's bytes uploaded as they are (quantized
// weights stay packed), every WeightView rebased onto the device copy. Immutable after
// construction; shareable by sessions on the same device. Throws Error(Backend/OutOfMemory).
class CudaWeights {
public:
    CudaWeights(const Model& m, int device);
    ~CudaWeights();
    CudaWeights(const CudaWeights&) = delete;
    CudaWeights& operator=(const CudaWeights&) = delete;

    const Model& model() const { return *m_; }
    int device() const { return device_; }
    size_t device_bytes() const;
    // Device bytes of the sessions on these weights now, the one kept for reuse included
    // (each CudaSession holds its share through a ByteShare, kept exact as its buffers grow).
    mutable std::atomic<size_t> session_bytes{0};

    kern::WeightView embed, head;
    const float* final_norm = nullptr;
    std::vector<LayerWeights> pre, loop, coda;  // device pointers (coda: §1b)
    kern::WeightView adapter;   // loop_input adapter (§1b): [d, 2d]
    kern::WeightView s0_table;  // a seeded state_init (§1b): every position's initial state, f32 [max_seq_len, d]
    // The model's layers as forward.cpp's run_layers reads them (device pointers).
    LayerStack stack() const;

private:
    friend class CudaSessionLease;
    const Model* m_;
    int device_;
    kern::cuda::DeviceBuffer file_;
    kern::cuda::DeviceBuffer s0_table_;
    // The last session a generate / score call finished with, kept for the next call (its
    // stream, buffers and captured decode step), so a call pays neither their set-up nor a
    // graph capture again. One at most; a call that finds it busy or unfit makes its own.
    mutable std::mutex pool_mu_;
    mutable std::unique_ptr<CudaSession> idle_;
};

struct CudaSessionOptions {
    int loops = 0;            // 1..max_loops; 0 = default_loops
    int capacity = 0;         // positions the KV cache holds; 0 = the model's max_seq_len
    int window = 0;           // cache_window (0 = attend to every earlier position)
    int gemm_min_tokens = 64; // prefill chunks with at least this many rows use cuBLAS
    bool use_graph = true;    // capture the decode step once and replay it
    // Cache rows past `capacity` that only laid-out rows (forward_rows, run_passes with rows)
    // write and read: tree speculation's candidates, whose rows follow the sequence's own
    // positions even when those reach max_seq_len. 0 .. 1024.
    int scratch_rows = 0;
    // The fast decode step's parts (cuda_fast_path.h); all off: the reference step. The engine's
    // calls (the CUDA executor) take them from TINYLOOP_CUDA_FAST.
    CudaFastPath fast;
    // The cache's rows: f32, or INT8 codes with one scale per (row, kv head) (kern::quantize_kv_row,
    // the CPU's kv_cache int8). An INT8 session runs the reference step (fuse, split and persist
    // off: the fused kernels write f32 rows); prefix imports (a forked beam's) and row copies copy
    // codes and scales between sessions of one cache type.
    KVCacheType kv_cache = KVCacheType::F32;
};

// Rows with explicit positions and attention ranges: speculative verification (a chain of
// drafted tokens) and tree verification (branches sharing a prefix, each row attending its
// range and then its path through the tree), as the CPU's Workspace rows/extras.
struct CudaRows {
    const int32_t* tokens = nullptr;     // n ids, validated by the caller
    int n = 0;                           // 1 .. the model's prefill_chunk
    const int* positions = nullptr;      // RoPE positions
    const int* cache_rows = nullptr;     // cache row each row's K/V go to (nullptr: = positions)
    const int* kv_begin = nullptr;       // each row attends cache rows [kv_begin, kv_end) ...
    const int* kv_end = nullptr;
    const int* extra_rows = nullptr;     // ... then extra_rows[extra_offsets[t] .. [t+1]) (or none)
    const int* extra_offsets = nullptr;  // n + 1 offsets
};

// One sequence's state on the device: KV cache, workspace, the captured decode step.
class CudaSession {
public:
    CudaSession(const CudaWeights& w, const CudaSessionOptions& o);
    ~CudaSession();
    CudaSession(const CudaSession&) = delete;
    CudaSession& operator=(const CudaSession&) = delete;

    // Runs tokens at positions pos() .. pos()+n-1 in chunks of the model's prefill_chunk and
    // returns the greedy choice after the last one. With `logits` non-null, the logits of every
    // row are copied there ([n, vocab], for tests).
    int32_t prefill(const int32_t* tokens, int n, std::vector<float>* logits = nullptr);
    // Feeds `token` at pos() and returns the greedy choice after it (one graph replay).
    int32_t decode(int32_t token);
    // Logits of the most recent row (downloaded; after a decode step with fast.pinned_logits,
    // read from the pinned copy the step made, without a download).
    std::vector<float> last_logits();
    // Runs the rows through every layer (writing their K/V at their cache rows) and returns
    // their logits [n, vocab]. Always the batch-invariant kernels (never cuBLAS), so a row's
    // logits are bit-identical to those of the same row run alone or as a decode step. Does
    // not move pos(); the caller sets it with set_pos() after accepting rows.
    void forward_rows(const CudaRows& rows, std::vector<float>& logits);
    // One row a pass at a time (the CUDA executor's ExecRow: early exit, score_early_exit,
    // early_exit_signals), the row's state in the session's h (row 0):
    //   row_begin      the token at `pos` through the embedding and the prelude (h_0)
    //   row_pass       pass `pass` over the state, its keys/values into the cache
    //   row_state      the state to host memory [d]; row_set_state from host memory
    //   row_logits     the head (final norm, head) of a host row [d] into out [vocab]
    //   row_propagate  early exit's state propagation (FORMAT.md §1): the keys/values of the
    //                  loop layers of passes exited+1 .. loops from the frozen state
    //   row_finish     the state's logits become last_logits(); pos() moves past the row
    // pos < capacity, 1 <= pass <= the session's loops (Error(InvalidArgument) otherwise).
    void row_begin(int32_t token, int pos);
    void row_pass(int pass);
    void row_state(float* h);
    void row_set_state(const float* h);
    void row_logits(const float* r, float* out);
    void row_propagate(int exited, int loops);
    void row_finish();
    // Passes first..last over n rows at positions pos0.. (the executor's run_passes: chain
    // self-speculation's draft and its verification from the draft's states). With first > 1 the
    // rows start from h_in (and e_in for an injecting model), host memory [n, d]; out_h / out_e
    // receive the rows' states and prelude outputs. n <= the prefill chunk, pos0 + n <= capacity,
    // 1 <= first <= last <= the session's loops (Error(InvalidArgument) otherwise). pos() moves
    // to pos0 + n; last_logits() then gives the last row's.
    // hook (optional): the rows' states after every pass, as (pass, hook_row0, h [n, d], n) in
    // host memory (the lens' readouts and a cache's last-row states; never on a coda model:
    // Error(Internal), the executor keeps such calls on the CPU).
    void run_passes(const int32_t* tokens, int n, int pos0, int first, int last, const float* h_in, const float* e_in,
                    float* out_h, float* out_e, const PassHook* hook = nullptr, int hook_row0 = 0);
    // run_passes over laid-out rows (tree speculation: each row its position, cache row, range
    // and extras, as forward_rows; tokens may be null when first > 1).
    void run_passes(const CudaRows& rows, int first, int last, const float* h_in, const float* e_in, float* out_h,
                    float* out_e);
    // The logits of rows row0 .. row0+n-1 of the last run_passes ([n, vocab], host memory).
    void rows_logits(int row0, int n, float* out);
    // One sweep of a wavefront (the executor's run_wave: pipelined self-speculation): n rows at
    // positions pos0.., row t running its one pass pass[t] (1..loops, non-increasing; rows at pass
    // 1 start from tokens[t] through the embedding and the prelude), their states h and prelude
    // outputs e in host memory ([n, d], in place); then the head on rows heads[0 .. n_heads) into
    // logits ([n_heads, vocab], host). The batch-invariant kernels: each row gets the bits it has
    // as a decode step. n <= the prefill chunk (Error(InvalidArgument) naming what is out of range).
    void run_wave(const int32_t* tokens, const int* pass, int n, int pos0, float* h, float* e, const int* heads,
                  int n_heads, float* logits);
    // The keys/values of cache row `from` copied to row `to` in every layer (an accepted tree
    // node's scratch row to its position). Both < capacity + scratch_rows.
    void copy_position(int from, int to);
    // Positions [0, n) of every layer of another session on the same weights (a prefix cache's,
    // a resume handle's: at least this session's layers) copied into this one's cache; pos()
    // becomes n. Then set_last_state(h) ([d], host) makes h the last row (last_logits: its head).
    void import_prefix(const CudaSession& src, int n);
    void set_last_state(const float* h);
    // `logits` ([vocab], host) become last_logits() (a forked beam's, taken from its parent).
    void set_last_logits(const float* logits);
    // Where the next prefill/decode writes (after a verification accepted some rows).
    void set_pos(int pos);
    int pos() const { return pos_; }
    // The session's device memory: its buffers and its context's (cuBLAS, once a prefill used it).
    size_t device_bytes() const;
    // Nodes of the captured decode step (its launches and copies per token); 0 before the first
    // graph-replayed decode.
    size_t step_nodes() const;
    // The options as resolved (loops and capacity never 0).
    const CudaSessionOptions& options() const;

private:
    struct Impl;
    struct LaidOut;  // laid-out rows on the device for one call (forward_rows, run_passes with rows)
    void account();  // the weights' session_bytes follow device_bytes()
    std::unique_ptr<Impl> impl_;
    int pos_ = 0;
};

// A session for one call: the weights' kept session when it fits `o` (same loops, window,
// product paths, capacity at least o's), reset to position 0; else a new one. Given back for the
// next call when the lease ends, unless the call is unwinding from an error.
class CudaSessionLease {
public:
    CudaSessionLease(const CudaWeights& w, const CudaSessionOptions& o);
    ~CudaSessionLease();
    CudaSessionLease(const CudaSessionLease&) = delete;
    CudaSessionLease& operator=(const CudaSessionLease&) = delete;
    CudaSession& operator*() const { return *s_; }
    CudaSession* operator->() const { return s_.get(); }
    bool reused() const { return reused_; }

private:
    const CudaWeights& w_;
    std::unique_ptr<CudaSession> s_;
    int uncaught_;
    bool reused_ = false;
};

// The CUDA executor (executor.h) on a model whose weights are on the device (m.cuda): decode
// sequences on device sessions, every row's logits of a sequence from one device prefill.
std::unique_ptr<Executor> make_cuda_executor(const Model& m);

// The batch engine on the device (executor.h ExecBatch, cuda_batch.cpp): several sequences' rows
// through the same passes in one run, each sequence's keys and values in pages of a device pool
// laid out as the host's KVPagePool (the pool keeps the page bookkeeping, the batch the rows).
std::unique_ptr<ExecBatch> make_cuda_batch(const CudaWeights& w);

// The rows' activations on the device, what a session and a batch each hold for up to `rows`
// rows: the state h, the block's scratch (forward.h BlockScratch: a, q, kk, vv, att, o_, g, u,
// and the adapter's input cat), the prelude output e_in (input injection, §1a) and the initial
// state s0 (the adapter, §1b; zeroed for a zero state_init, only read then).
struct CudaRowBuffers {
    kern::cuda::DeviceBuffer h, a, q, kk, vv, att, o_, g, u, e_in, cat, s0;
    void allocate(kern::cuda::Context& ctx, const HParams& hp, size_t rows);
    BlockScratch block_scratch() const {
        return BlockScratch{a.f32(), q.f32(), kk.f32(), vv.f32(), att.f32(), o_.f32(), g.f32(), u.f32(), cat.f32()};
    }
    size_t bytes() const;
};

// Pieces the session and the batch share, issued on ops' stream over device rows:
//   cuda_head           the head over n rows of x into out [n, vocab] (forward.h head_logits with
//                       the device copies of the head and the final norm)
//   cuda_initial_rows   the initial state of n rows at device positions pos for the loop_input
//                       adapter (§1b): the zero rows of s0 (written at allocation) or the seeded
//                       table's rows gathered by position into s0; null without the adapter
void cuda_head(CudaOps& ops, const CudaWeights& w, const float* x, int n, float* a, float* out);
const float* cuda_initial_rows(CudaOps& ops, const CudaWeights& w, const int* pos, int n, float* s0);

// Uploads the model's weights to `device` for load_model (backend cuda).
std::shared_ptr<const CudaWeights> upload_weights(const Model& m, int device);
// Device bytes the model holds: its weights plus the live sessions' buffers.
size_t cuda_model_bytes(const CudaWeights& w);

}  // namespace tinyloop

#endif  // TINYLOOP_HAVE_CUDA
