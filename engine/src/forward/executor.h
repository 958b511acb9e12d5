// The executor: what a back end runs for a decode, scoring or speculation call, so that those
// calls are written once above it (docs/ARCHITECTURE.md, "One decode loop over an executor").
// The ops of backend.h are the per-kernel layer; an executor is the per-sequence layer on top:
// a sequence (its KV cache and rows on the back end), "run passes 1..L of the model's blocks
// (forward.h: block_desc's table, run_layers) over these rows with this cache", the head on the
// last row, and every row's logits of one sequence; beyond them the few primitives decoding needs
// (ExecSequence: passes p..q from kept per-row states, rows with their own positions and
// visibility, the logits of rows, a one-row stepper for early exit, a fork, a row copy, a
// prefix import; ExecBatch: several sequences' rows through the same passes). Decode, early exit,
// chain / tree / draft-model speculation, beam search, the prefix caches, the batch engine and
// the scoring family are written once over them. The CPU executor
// (executor_cpu.cpp) runs forward.cpp on CpuOps; the CUDA executor (cuda_forward.cpp) runs the
// same run_layers on CudaOps in a device session with its captured decode step.
//
// What a back end does not run yet is data (exec_supports' table) and is refused in one place
// (unsupported(), naming the operation and the back end). The rule of backend auto: a call states
// the ops it needs and choose_executor picks ONE back end for the whole call: the device when it
// runs every one of them, else the CPU for all of them (never the device for part of a call and
// the CPU for the rest, whose numerics differ). With backend cuda a needed op the device lacks is
// refused instead.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "forward/forward.h"

namespace tinyloop {

// The operations a call may need from a back end (beyond its ops in backend.h).
enum class ExecOp : int {
    Decode,            // prefill, one full-depth step per token, the head (generate, generate_stream)
    SequenceLogits,    // every row's logits of one sequence at a depth (forward_logits, score, lens, escalation)
    PassReadouts,      // per-pass hooks: the decoded row's readouts (GenerateOptions.lens), the rows' states
                       // (PassRun.on_state: the exit gate's trace during generate, exit_gate_per_pass)
    EarlyExit,         // steps that stop between passes (early exit, score_early_exit, early_exit_signals)
    PassStates,        // every pass's states of a sequence kept on the host for host forwards (the scoring
                       // lens' and escalation's CPU path)
    Int8Cache,         // kv_cache int8
    CacheImport,       // decoding from kept keys/values (prefix caches, resume handles, prefix pools)
    KVProvenance,      // GenerateOptions.kv_provenance
    BeamSearch,        // beam_size >= 2
    ChainSpeculation,  // chain self-speculation
    TreeSpeculation,   // tree self-speculation
    DraftSpeculation,  // draft-model speculation
    Batch,             // the continuous-batching engine
    HostForward,       // forward() on host memory (the CPU executor's own)
    // The model's math beyond FORMAT.md §1's pre-norm block (§1b), what model_math_ops lists:
    SandwichNorms,     // block sandwich_branch / sandwich_sum (block_desc's post norms)
    QkBias,            // q/k biases before RoPE
    EmbedScale,        // embedding times embed_scale
    PassNorm,          // a norm after every pass
    Coda,              // coda blocks after the last pass
    Adapter,           // loop_input adapter over [state; prelude output]
    StateInit,         // a seeded initial state
    ExitGate,          // the exit gate's per-pass probability
    KVSharing,         // kv_sharing other than per-pass (FORMAT.md §1c: the KV slot a pass reads and writes)
    PipelinedSpeculation,  // self-speculation pipelined over depth (ExecSequence::run_wave)
    Count
};
const char* exec_op_name(ExecOp op);

enum class ExecKind { Cpu, Cuda };
const char* exec_kind_name(ExecKind kind);  // "cpu", "cuda"

// The table: whether back end `kind` runs `op`. Compiled in every build (a build without CUDA
// still knows what the device would run, so the rule of auto is testable everywhere).
bool exec_supports(ExecKind kind, ExecOp op);

// THE place an operation a back end lacks is refused: Error(NotSupported) naming the operation
// and the back end.
[[noreturn]] void unsupported(ExecKind kind, ExecOp op);

// The table's pairs: whether back end `kind` runs ops a and b in one call (each of which it runs).
// The device runs a coda model's whole-sequence calls (decode, every row's logits at a depth) but
// not those that stop, read out or resume between passes (ExecOp::Coda with EarlyExit, the
// speculations, PassReadouts, CacheImport, ...). unsupported_together refuses such a pair:
// Error(NotSupported) naming both ("early exit (...) on a model with coda blocks (...)").
bool exec_supports_together(ExecKind kind, ExecOp a, ExecOp b);
[[noreturn]] void unsupported_together(ExecKind kind, ExecOp op, ExecOp with);

// The rule of backend auto (and cuda). on_device: the model's weights are on the device;
// device_required: the user asked for backend cuda. Returns the one back end that runs every op
// in `needs`, and every pair of them (the device when it can, else the CPU), or throws through
// unsupported() / unsupported_together() when the device is required and lacks one of them.
// run_executor adds the model's own math (model_math_ops) to a call's needs.
ExecKind choose_executor(bool on_device, bool device_required, const std::vector<ExecOp>& needs);

// The ops a model's math needs beyond §1's pre-norm block (FORMAT.md §1b; empty for version-1/2
// math): load_model asks choose_executor with them, so the back end chosen at load runs every
// block kind and pass feature of the file.
std::vector<ExecOp> model_math_ops(const HParams& hp);

// Where a sequence starts: its depth, the positions its cache holds and its attention window.
struct SequenceSpec {
    int loops = 1;
    int capacity = 0;
    int window = 0;
    KVCacheType kv_cache = KVCacheType::F32;
    KVSharing kv_sharing{};  // other than per-pass: the CPU's (ExecOp::KVSharing)
    int prompt = 0;        // positions kv_sharing computes exactly (the prompt)
};

// Rows with explicit positions and visibility (tree verification): row t sits at position pos[t],
// writes its keys/values to cache row cache_row[t] (a scratch row past the committed ones for a
// candidate), and attends the cache rows [0, visible_end[t]) and then
// extra_rows[extra_offsets[t] .. extra_offsets[t + 1]) (its ancestors, then itself), in that
// order. The sequence's cache window does not apply (the ranges are the rows').
struct RowLayout {
    std::vector<int> pos, cache_row, visible_end;
    std::vector<int> extra_rows, extra_offsets;  // extra_offsets: n + 1 entries, from 0
};

// Passes first..last of the model over n rows at positions pos0.. (ExecSequence::run_passes).
// With first = 1 the rows start from their tokens (embedding, prelude); with first > 1 they
// resume from their states after pass first - 1 (h_in, and e_in for a model that injects its
// input, FORMAT.md §1a/§1b), e.g. kept by an earlier call's out_h / out_e: self-speculation's
// verify continues the draft's passes. The cache must already hold every earlier layer's keys
// and values of those positions. All state pointers are host memory, [n, d], sized by the caller.
struct PassRun {
    const int32_t* tokens = nullptr;
    int n = 0;
    int pos0 = 0;
    int first = 1;
    int last = 0;  // 0: the sequence's loops (at most its loops: the cache holds that many passes)
    const float* h_in = nullptr;
    const float* e_in = nullptr;
    float* out_h = nullptr;  // receives the rows' states h_last (before a coda's readout, §1b)
    float* out_e = nullptr;  // receives the rows' prelude outputs (first = 1, injecting models)
    const PassHook* on_readout = nullptr;
    const PassHook* on_state = nullptr;  // sees the rows' states after every pass (PassReadouts' hooks)
    // When set, the rows' positions and visibility (pos0 is then unused). With a layout the
    // readouts are not reported (on_readout must be null).
    const RowLayout* layout = nullptr;
};

// One sweep of a wavefront (ExecSequence::run_wave, pipelined self-speculation): forward.h's
// WaveRows on the back end (n rows at consecutive positions pos0.., row t running its one pass
// pass[t], non-increasing; rows at pass 1 start from tokens[t]), states h and prelude outputs e
// in host memory ([n, d], in place), then the head on rows heads[0 .. n_heads) (indices into the
// rows, in that order; with a coda each row's readout runs first, writing its coda keys/values)
// into logits ([n_heads, vocab], host memory).
struct WaveRun {
    const int32_t* tokens = nullptr;
    const int* pass = nullptr;
    int n = 0;
    int pos0 = 0;
    float* h = nullptr;
    float* e = nullptr;
    const int* heads = nullptr;
    int n_heads = 0;
    float* logits = nullptr;
};

// One row, one pass at a time (early exit asks its criterion between passes): the row's state is
// held by the back end; state() brings it to host memory for the criterion.
class ExecRow {
public:
    virtual ~ExecRow() = default;
    // The row of `token` at `pos` through the embedding and the prelude: the state h_0.
    virtual void begin(int32_t token, int pos) = 0;
    // Pass `pass` over the row's state (h_{pass-1} -> h_pass), its keys/values into the cache.
    virtual void pass(int pass) = 0;
    // The row's state ([d], host memory; valid until the next call on the row).
    virtual const float* state() = 0;
    virtual void set_state(const float* h) = 0;
    // The readout input of a state h ([d]): h itself, or with a coda (§1b) the coda's output over
    // h, whose keys/values go into the cache (the last readout of a row is what later positions
    // read). Valid until the next call on the row.
    virtual const float* readout(const float* h) = 0;
    // logits [vocab] of a readout input.
    virtual void logits(const float* r, float* out) = 0;
    // Keys/values of the passes after `exited` (.. loops) from the row's frozen state (early
    // exit's state propagation, FORMAT.md §1).
    virtual void propagate(int exited, int loops) = 0;
    // Ends the row: its readout at the current state becomes the sequence's last row (what
    // last_logits reads).
    virtual void finish() = 0;
};

// One sequence on a back end: its KV cache and buffers. The primitives beyond run/last_logits
// have defaults that throw Internal: a back end that lacks them says so in exec_supports, so
// choose_executor never gives it a call that needs them.
class ExecSequence {
public:
    virtual ~ExecSequence() = default;
    virtual size_t cache_bytes() const = 0;
    virtual int capacity() const = 0;
    // Runs passes 1..loops of the model's blocks over tokens[0..n) at positions pos0.., writing
    // their keys/values into the sequence's cache; on_readout (PassReadouts) sees every pass.
    virtual void run(const int32_t* tokens, int n, int pos0, const PassHook* on_readout) = 0;
    // The logits of the last row run ([vocab], host memory).
    virtual void last_logits(float* out) = 0;
    // Passes first..last over rows (PassRun); the rows' readouts are then what logits() reads.
    virtual void run_passes(const PassRun& r);
    // One sweep of a wavefront (WaveRun; ExecOp::PipelinedSpeculation).
    virtual void run_wave(const WaveRun& r);
    // The logits of rows row0 .. row0+n-1 of the last run_passes/run ([n, vocab], host memory).
    virtual void logits(int row0, int n, float* out);
    // The sequence's one-row stepper (early exit); its finish() sets the last row.
    virtual ExecRow& row(int window);
    // A second sequence holding a copy of this one's cache and last rows (a beam whose cache
    // diverges from its parent's).
    virtual std::unique_ptr<ExecSequence> fork() const;
    // Copies the keys/values of cache row `from` to row `to` in every layer (an accepted tree
    // node's scratch row to its real position).
    virtual void copy_position(int from, int to);
    // Copies positions [0, n) of every layer of another sequence of this back end (a prefix
    // cache's, a resume handle's: f32 caches of at least this one's layers).
    virtual void import_prefix(const ExecSequence& src, int n);
    // A kept state ([d], the readout input of the row) as the last row, for last_logits (a
    // resume whose prompt is wholly cached: nothing runs).
    virtual void set_last_state(const float* h);
};

// One sequence's rows in a multi-sequence run (ExecBatch::run): BatchSeq's cache, tokens,
// positions, depth and window, and whether its last row's logits are wanted.
struct BatchPart {
    BatchSeq rows;
    bool logits = false;
};

// Several sequences on a back end at once (the batch engine, ExecOp::Batch): each sequence its
// own cache (a paged view over a KVPagePool the caller holds: pages are taken before a run) and
// positions; their rows run together through the same passes (the matmuls see every row, the
// attention reads each row's own cache). A sequence's rows give the bits a lone run of them gives
// (batch-invariant kernels), so the batch engine's tokens equal decode()'s. Scratch for one call
// at a time.
class ExecBatch {
public:
    virtual ~ExecBatch() = default;
    // Where the pools' rows live: true, the pool's host storage (the CPU); false, the back end's
    // own memory (a device batch): the engine then makes its pools as page bookkeeping only
    // (KVPagePool::allocate with host = false) and hands each to adopt() before any run reads it.
    virtual bool pages_on_host() const { return true; }
    // A new pool of the engine's: a back end with its own rows allocates them here (Error(OutOfMemory)
    // fails the admission that made the pool). The pool outlives every run that reads it.
    virtual void adopt(const KVPagePool& pool) { (void)pool; }
    // Runs every part's rows through passes 1..its depth (parts sorted by depth, deepest first),
    // then the head on the last row of each part with `logits` set: out receives those rows'
    // logits in the parts' order ([k, vocab], host memory, sized by the caller).
    virtual void run(const BatchPart* parts, int n, float* out) = 0;
    // The one-row stepper over one sequence's cache (early exit, whose passes depend on the row's
    // own probes); after its finish(), last_logits gives the row's logits ([vocab]).
    virtual ExecRow& row(KVCache& kv, int window) = 0;
    virtual void last_logits(float* out) = 0;
};

class Executor {
public:
    virtual ~Executor() = default;
    virtual ExecKind kind() const = 0;
    const char* name() const { return exec_kind_name(kind()); }
    bool supports(ExecOp op) const { return exec_supports(kind(), op); }
    // Throws through unsupported() when this back end does not run `op`.
    void require(ExecOp op) const {
        if (!supports(op)) unsupported(kind(), op);
    }
    virtual std::unique_ptr<ExecSequence> sequence(const SequenceSpec& spec) const = 0;
    // Every row's logits of tokens[0..n) run at depth `loops` in a fresh cache ([n, vocab]).
    virtual std::vector<float> sequence_logits(const int32_t* tokens, int n, int loops, KVCacheType kv_cache) const = 0;
    // Several sequences at once (ExecOp::Batch). The default throws Internal: a back end that
    // lacks it says so in exec_supports, so choose_executor never gives it the batch engine.
    virtual std::unique_ptr<ExecBatch> batch() const;
};

// The executor of a call on `m` that needs `needs`: choose_executor's back end.
std::unique_ptr<Executor> run_executor(const Model& m, const std::vector<ExecOp>& needs);

// For a call written on the host forward so far (score_kv_sharing's caches with a kv_sharing
// layout): chooses the executor for `needs` and checks it is the
// CPU's (with backend auto on a device, the whole call then runs on the CPU; with backend cuda,
// unsupported() refuses it).
void require_host(const Model& m, const std::vector<ExecOp>& needs);

std::unique_ptr<Executor> make_cpu_executor(const Model& m);

// The CPU's one-row stepper over a host cache (what CpuSequence::row and CpuBatch::row give), for
// score_kv_sharing's caches: h receives the row's state, window is its cache window.
std::unique_ptr<ExecRow> make_cpu_row(const Model& m, KVCache& kv, Workspace& ws, std::vector<float>& h, int window);

}  // namespace tinyloop
