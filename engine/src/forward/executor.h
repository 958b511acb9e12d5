// The executor: what a back end runs for a decode, scoring or speculation call, so that those
// calls are written once above it (docs/ARCHITECTURE.md, "One decode loop over an executor").
// The ops of backend.h are the per-kernel layer; an executor is the per-sequence layer on top:
// a sequence (its KV cache and rows on the back end), "run passes 1..L of the model's blocks
// (forward.h: block_desc's table, run_layers) over these rows with this cache", the head on the
// last row, and every row's logits of one sequence. The CPU executor (executor_cpu.cpp) runs
// forward.cpp on CpuOps; the CUDA executor (cuda_forward.cpp) runs the same run_layers on CudaOps
// in a device session with its captured decode step.
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
    PassReadouts,      // the readout of the decoded row after every pass (GenerateOptions.lens)
    EarlyExit,         // steps that stop between passes (early exit, score_early_exit, early_exit_signals)
    PassStates,        // every pass's states of a sequence kept at once (exit_gate_per_pass, the lens' signals)
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

// The rule of backend auto (and cuda). on_device: the model's weights are on the device;
// device_required: the user asked for backend cuda. Returns the one back end that runs every op
// in `needs` (the device when it can, else the CPU), or throws through unsupported() when the
// device is required and lacks one of them.
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
    KVSharing kv_sharing;  // other than per-pass: the CPU's (ExecOp::KVSharing)
    int prompt = 0;        // positions kv_sharing computes exactly (the prompt)
};

// The CPU sequence's host state: the algorithms not yet written over the executor's primitives
// (early exit's step that stops between passes, a cache imported from a prefix) run on it once
// the run's executor is the CPU's.
struct HostSequence {
    KVCache kv;
    Workspace ws;
    std::vector<float> h;  // the states of the rows of the last run ([n, d])
    int last_row = 0;      // the row of h whose logits last_logits gives
};

// One sequence on a back end: its KV cache and buffers.
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
    // The CPU sequence's host state; nullptr on other back ends.
    virtual HostSequence* host() { return nullptr; }
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
};

// The executor of a call on `m` that needs `needs`: choose_executor's back end.
std::unique_ptr<Executor> run_executor(const Model& m, const std::vector<ExecOp>& needs);

// For a call written on the host forward so far (speculation, batch, beam, caches, the early-exit
// scoring): chooses the executor for `needs` and checks it is the CPU's (with backend auto on a
// device, the whole call then runs on the CPU; with backend cuda, unsupported() refuses it).
void require_host(const Model& m, const std::vector<ExecOp>& needs);

std::unique_ptr<Executor> make_cpu_executor(const Model& m);

}  // namespace tinyloop
