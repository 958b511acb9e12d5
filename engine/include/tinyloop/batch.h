// TinyLoop public API, continuous batching (BatchEngine).
// Part of tinyloop/tinyloop.h, which includes every part: include that one.
#pragma once

// GenerateConfig, GenerateResult, GenerateOptions, TokenEvent: tinyloop.h includes this part
// after them, and this include brings them in when the part is included first.
#include "tinyloop/tinyloop.h"

namespace tinyloop {

// ---------------------------------------------------------------------------------------------
// Continuous batching
// ---------------------------------------------------------------------------------------------
//
// A BatchEngine accepts requests at any time and advances every active sequence together, one
// decode step per iteration (iteration-level scheduling): each step runs one batched forward
// whose matmuls take all the sequences' rows at once (each weight read once per step), with at
// most prefill_chunk prompt tokens of newly admitted requests mixed in, so a long prompt does
// not stall the running sequences. Each sequence has its own config, stop policy, callbacks and
// KV pages from a shared pool (one pool per KV type, f32 and int8, allocated on first use).
// The kernels are batch-invariant, so every request's tokens equal generate()'s for it alone.
// Early exit (early_exit_patience > 0) runs its decode steps one sequence at a time (its
// prompt still prefills batched); beam search is refused.
//
// Pages: a request is admitted once the pool can reserve pages for its whole length
// (prompt + max_tokens positions at every execution layer of its depth), so a running
// sequence never waits; until then it waits in the queue (first in, first out). A request that
// could not fit even in an empty pool is refused by batch_submit (InvalidArgument naming
// kv_pages). Pages return to the pool when a request finishes.
//
// Threads: batch_submit, batch_cancel, batch_result, batch_stats may be called from any thread;
// batch_step / batch_run_until_idle from one thread at a time (they serialise). Callbacks run on
// the stepping thread with no engine lock held (they may submit or cancel).
struct BatchEngineOptions {
    int kv_pages = 2048;       // pages per KV type in the pool, 1..1048576
    int page_size = 16;        // positions per page (one execution layer), 1..4096
    int max_batch = 64;        // sequences advanced together, 1..4096
    int prefill_chunk = 64;    // prompt tokens prefilled per step over all new requests, 1..4096
};

struct BatchRequest {
    std::vector<int32_t> prompt;
    GenerateConfig config;
    GenerateTokenCallback on_token;  // as generate_stream's; return false to stop (CALLBACK_ABORT)
    TokenObserver observer;          // TokenEvents without lens rows; return false to stop
    // Optional back-pressure: while it returns true the request is skipped by the steps (it keeps
    // its pages and state; the others go on). Called on the stepping thread.
    std::function<bool()> hold;
    // Called once when the request ends (result ready, error empty) or fails (error set).
    std::function<void(uint64_t id, const GenerateResult& result, const std::string& error)> on_done;
};

struct BatchEngineStats {
    int queued = 0;           // submitted, waiting for pages or a batch slot
    int active = 0;           // prefilling or decoding
    int finished = 0;         // results not yet taken
    int pages_total = 0;      // per pool that exists (f32 + int8)
    int pages_free = 0;
    size_t pool_bytes = 0;    // bytes of the pools' storage
    long long steps = 0;      // iterations run
    long long rows = 0;       // forward rows run (decode + prefill)
    int max_active = 0;       // most sequences advanced in one step
};

struct BatchEngine;
// Throws InvalidArgument naming the option and its range.
BatchEngine* create_batch_engine(Model* model, const BatchEngineOptions& options = {});
// nullptr is a no-op. Requests still running are dropped.
void free_batch_engine(BatchEngine* engine);
template <>
struct Deleter<BatchEngine> {
    void operator()(BatchEngine* engine) const noexcept { free_batch_engine(engine); }
};
// Validates the request (as generate would, plus the pool's size) and queues it; returns its id.
uint64_t batch_submit(BatchEngine* engine, BatchRequest request);
// One iteration: admit what fits, one batched forward, one token per decoding sequence.
// Returns the number of requests still queued or active.
int batch_step(BatchEngine* engine);
// Steps until nothing is queued or active.
void batch_run_until_idle(BatchEngine* engine);
// Stops a queued or active request at the next step (stop reason CALLBACK_ABORT; the tokens
// emitted so far are kept). Returns false when the id is unknown or already finished.
bool batch_cancel(BatchEngine* engine, uint64_t id);
// True once the request has finished (its result can be taken).
bool batch_done(const BatchEngine* engine, uint64_t id);
// Takes a finished request's result (once). Throws InvalidArgument when the id is unknown, not
// finished or already taken, and the request's own Error when it failed.
GenerateResult batch_result(BatchEngine* engine, uint64_t id);
BatchEngineStats batch_stats(const BatchEngine* engine);

}  // namespace tinyloop
