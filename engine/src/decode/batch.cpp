// Continuous batching (tinyloop.h, "Continuous batching"): a BatchEngine advances every active
// sequence by one token per step through one multi-sequence run of the executor (ExecBatch::run,
// executor.h), with chunked prefill of new requests mixed into the same run, and KV pages from a
// shared pool (its rows where the executor keeps them: host memory, or the device's for the
// CUDA batch). The executor is chosen once, for ExecOp::Batch and the model's math: a back end
// that lacks one is refused there under backend cuda, and backend auto runs the whole engine on
// the CPU.
//
// Each sequence's token choice and stop logic is decode()'s: one TokenDecoder (emit.h) per
// sequence runs the logits pipeline, the choice, the stop order and the callbacks. The
// forward rows are bit-identical to a lone decode's (batch-invariant kernels, attention by row
// list over pages), so a request's tokens equal generate()'s.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include "decode/decode.h"
#include "forward/executor.h"
#include "decode/early_exit.h"
#include "decode/emit.h"

namespace tinyloop {

namespace {

using Clock = std::chrono::steady_clock;

int type_index(KVCacheType t) { return t == KVCacheType::Int8 ? 1 : 0; }

struct Seq {
    uint64_t id = 0;
    BatchRequest req;
    int prompt_len = 0;
    int loops = 1;
    EarlyExitPolicy policy;
    int need_pages = 0;
    KVCache kv;
    int prefilled = 0;            // prompt tokens run so far
    bool has_logits = false;      // `logits` hold the next token's logits
    std::vector<float> logits;
    GenerateResult res;
    std::unique_ptr<TokenDecoder> dec;  // from admission on
    int depth = 0;                // depth of the row that produced `logits`
    Clock::time_point t0;
    std::string error;
    ErrorCode code = ErrorCode::Internal;
};

struct Finished {
    GenerateResult result;
    std::string error;
    ErrorCode code = ErrorCode::Internal;
};

}  // namespace

struct BatchEngine {
    Model* model = nullptr;
    BatchEngineOptions opt;

    mutable std::mutex mu;  // everything below up to `stepper` state
    uint64_t next_id = 1;
    std::deque<std::unique_ptr<Seq>> incoming;
    std::set<uint64_t> live;     // queued or active
    std::set<uint64_t> cancels;
    std::map<uint64_t, Finished> finished;
    int n_queued = 0, n_active = 0;
    BatchEngineStats counters;

    std::mutex step_mu;  // one stepper at a time; the state below belongs to it
    std::deque<std::unique_ptr<Seq>> waiting;
    std::vector<std::unique_ptr<Seq>> active;
    std::unique_ptr<KVPagePool> pools[2];
    int reserved[2] = {0, 0};
    std::unique_ptr<Executor> exec;   // choose_executor's back end for ExecOp::Batch
    std::unique_ptr<ExecBatch> multi;  // its multi-sequence run (the stepper's scratch)
    std::vector<float> lrows;
};

namespace {

void check_options(const BatchEngineOptions& o) {
    auto range = [](const char* name, long long v, long long lo, long long hi) {
        if (v < lo || v > hi)
            throw Error(ErrorCode::InvalidArgument, std::string(name) + ": " + std::to_string(v) + " is outside [" +
                                                        std::to_string(lo) + ", " + std::to_string(hi) + "]");
    };
    range("kv_pages", o.kv_pages, 1, 1 << 20);
    range("page_size", o.page_size, 1, 4096);
    range("max_batch", o.max_batch, 1, 4096);
    range("prefill_chunk", o.prefill_chunk, 1, 4096);
}

// The sequence's token choice, stop checks and callbacks for the logits in s.logits. Returns
// true when the sequence has finished.
bool emit(Seq& s) {
    s.has_logits = false;
    return !s.dec->step(s.logits.data(), {.depth = s.depth});
}

// Fills the result's closing fields (decode()'s epilogue).
void close_result(Seq& s) {
    GenerateStats& st = s.res.stats;
    if (s.dec) s.dec->out.finish(s.loops);
    else st.loops_used = s.loops;
    st.kv_cache_bytes = s.kv.pool ? s.kv.bytes() : 0;
    st.total_ms = ms_since(s.t0);
}

}  // namespace

BatchEngine* create_batch_engine(Model* model, const BatchEngineOptions& options) {
    const Model& m = checked(model);
    check_options(options);
    auto e = std::make_unique<BatchEngine>();
    e->model = model;
    e->opt = options;
    e->exec = run_executor(m, {ExecOp::Batch});
    e->multi = e->exec->batch();
    return e.release();
}

void free_batch_engine(BatchEngine* engine) { delete engine; }

uint64_t batch_submit(BatchEngine* engine, BatchRequest request) {
    if (!engine) throw Error(ErrorCode::InvalidArgument, "engine: must not be null");
    const Model& m = *engine->model;
    const int n = static_cast<int>(request.prompt.size());
    validate_config(engine->model, n, request.config);
    check_prompt_ids(m, request.prompt.data(), n);
    if (request.config.beam_size >= 2)
        throw Error(ErrorCode::NotSupported, "beam_size: the batch engine does not run beam search (use generate)");
    if (!request.config.kv_sharing.exact())
        throw Error(ErrorCode::NotSupported, "kv_sharing: the batch engine keeps per-pass keys and values (use generate "
                                             "for " + kv_sharing_name(request.config.kv_sharing) + ")");
    if (request.config.num_return_sequences > 1)
        throw Error(ErrorCode::NotSupported,
                    "num_return_sequences: the batch engine returns one output per request (use generate, or 1)");
    auto s = std::make_unique<Seq>();
    s->prompt_len = n;
    s->loops = resolve_loops(m, request.config.loops);
    s->policy = effective_exit_policy(request.config.early_exit);
    const int positions = n + request.config.max_tokens;
    s->need_pages = request.config.max_tokens > 0
                        ? pages_needed(exec_layers(m.hp, s->loops), positions, engine->opt.page_size)
                        : 0;
    if (s->need_pages > engine->opt.kv_pages)
        throw Error(ErrorCode::InvalidArgument,
                    "kv_pages: the request needs " + std::to_string(s->need_pages) + " pages of " +
                        std::to_string(engine->opt.page_size) + " positions (" + std::to_string(positions) +
                        " positions x " + std::to_string(exec_layers(m.hp, s->loops)) +
                        " execution layers) but the pool has " + std::to_string(engine->opt.kv_pages));
    s->req = std::move(request);
    std::lock_guard<std::mutex> lk(engine->mu);
    s->id = engine->next_id++;
    const uint64_t id = s->id;
    engine->live.insert(id);
    engine->incoming.push_back(std::move(s));
    ++engine->n_queued;
    return id;
}

bool batch_cancel(BatchEngine* engine, uint64_t id) {
    if (!engine) throw Error(ErrorCode::InvalidArgument, "engine: must not be null");
    std::lock_guard<std::mutex> lk(engine->mu);
    if (!engine->live.count(id)) return false;
    engine->cancels.insert(id);
    return true;
}

bool batch_done(const BatchEngine* engine, uint64_t id) {
    if (!engine) throw Error(ErrorCode::InvalidArgument, "engine: must not be null");
    std::lock_guard<std::mutex> lk(engine->mu);
    return engine->finished.count(id) > 0;
}

GenerateResult batch_result(BatchEngine* engine, uint64_t id) {
    if (!engine) throw Error(ErrorCode::InvalidArgument, "engine: must not be null");
    Finished f;
    {
        std::lock_guard<std::mutex> lk(engine->mu);
        auto it = engine->finished.find(id);
        if (it == engine->finished.end())
            throw Error(ErrorCode::InvalidArgument, "id: request " + std::to_string(id) +
                                                        (engine->live.count(id) ? " has not finished"
                                                                                : " is unknown or its result was taken"));
        f = std::move(it->second);
        engine->finished.erase(it);
    }
    if (!f.error.empty()) throw Error(f.code, f.error);
    return std::move(f.result);
}

BatchEngineStats batch_stats(const BatchEngine* engine) {
    if (!engine) throw Error(ErrorCode::InvalidArgument, "engine: must not be null");
    std::lock_guard<std::mutex> lk(engine->mu);
    BatchEngineStats s = engine->counters;
    s.queued = engine->n_queued;
    s.active = engine->n_active;
    s.finished = static_cast<int>(engine->finished.size());
    return s;
}

namespace {

// Moves a sequence to the finished map and tells its on_done (outside the lock).
void finish(BatchEngine& e, std::unique_ptr<Seq> s) {
    const int ti = type_index(s->req.config.kv_cache);
    close_result(*s);
    if (s->kv.pool) {
        s->kv.pool->release(s->kv);
        e.reserved[ti] -= s->need_pages;
    }
    auto on_done = std::move(s->req.on_done);
    Finished f;
    f.result = std::move(s->res);
    f.error = s->error;
    f.code = s->code;
    const uint64_t id = s->id;
    GenerateResult copy;
    if (on_done) copy = f.result;
    int free_pages = 0;
    for (const auto& p : e.pools)
        if (p) free_pages += p->n_free();
    {
        std::lock_guard<std::mutex> lk(e.mu);
        e.live.erase(id);
        e.cancels.erase(id);
        e.finished[id] = std::move(f);
        e.counters.pages_free = free_pages;  // before on_done: a caller told "done" sees its pages back
    }
    if (on_done) on_done(id, copy, s->error);
}

// Admits the head of the queue when a batch slot and its pages are free. Returns false when it
// must wait.
bool admit_one(BatchEngine& e) {
    const Model& m = *e.model;
    Seq& s = *e.waiting.front();
    const int ti = type_index(s.req.config.kv_cache);
    if (s.need_pages > 0) {
        if (!e.pools[ti]) {
            auto pool = std::make_unique<KVPagePool>();
            pool->allocate(m.hp, s.req.config.kv_cache, e.opt.kv_pages, e.opt.page_size, e.multi->pages_on_host());
            e.multi->adopt(*pool);  // a device batch's rows (its memory)
            e.pools[ti] = std::move(pool);
            std::lock_guard<std::mutex> lk(e.mu);
            e.counters.pages_total += e.opt.kv_pages;
            e.counters.pool_bytes += e.pools[ti]->storage.bytes();
        }
        if (e.reserved[ti] + s.need_pages > e.opt.kv_pages) return false;
        e.reserved[ti] += s.need_pages;
        e.pools[ti]->attach(s.kv, exec_layers(m.hp, s.loops), s.prompt_len + s.req.config.max_tokens);
    }
    std::unique_ptr<Seq> sp = std::move(e.waiting.front());
    e.waiting.pop_front();
    s.t0 = Clock::now();
    s.res = prompt_result(s.req.prompt.data(), s.prompt_len, s.req.config.max_tokens);
    s.logits.assign(static_cast<size_t>(m.hp.vocab_size), 0.0f);
    s.depth = s.loops;
    bool done_now = s.req.config.max_tokens == 0;
    if (!done_now) {
        s.dec = std::make_unique<TokenDecoder>(m, s.req.config, s.res, s.req.on_token, s.req.observer, 0, s.t0);
        if (s.dec->grammar.dead()) {
            s.res.stats.stop_reason = StopReason::GRAMMAR_DEAD_END;
            done_now = true;
        }
    }
    {
        std::lock_guard<std::mutex> lk(e.mu);
        --e.n_queued;
        if (!done_now) ++e.n_active;
    }
    if (done_now) finish(e, std::move(sp));
    else e.active.push_back(std::move(sp));
    return true;
}

// Moves new submissions to the queue and ends the cancelled requests: a queued one with no
// tokens, an active one with what it has.
void take_submissions(BatchEngine& e) {
    std::set<uint64_t> cancels;
    {
        std::lock_guard<std::mutex> lk(e.mu);
        while (!e.incoming.empty()) {
            e.waiting.push_back(std::move(e.incoming.front()));
            e.incoming.pop_front();
        }
        cancels = e.cancels;
    }
    for (auto it = e.waiting.begin(); it != e.waiting.end();) {
        if (cancels.count((*it)->id)) {
            std::unique_ptr<Seq> s = std::move(*it);
            it = e.waiting.erase(it);
            s->t0 = Clock::now();
            s->res = prompt_result(s->req.prompt.data(), s->prompt_len, 0);
            s->res.stats.stop_reason = StopReason::CALLBACK_ABORT;
            {
                std::lock_guard<std::mutex> lk(e.mu);
                --e.n_queued;
            }
            finish(e, std::move(s));
        } else {
            ++it;
        }
    }
    for (size_t i = 0; i < e.active.size();) {
        if (cancels.count(e.active[i]->id)) {
            std::unique_ptr<Seq> s = std::move(e.active[i]);
            e.active.erase(e.active.begin() + static_cast<std::ptrdiff_t>(i));
            s->res.stats.stop_reason = StopReason::CALLBACK_ABORT;
            {
                std::lock_guard<std::mutex> lk(e.mu);
                --e.n_active;
            }
            finish(e, std::move(s));
        } else {
            ++i;
        }
    }
}

// Admits queued requests while a batch slot and their pages are free.
void admit_waiting(BatchEngine& e) {
    while (!e.waiting.empty() && static_cast<int>(e.active.size()) < e.opt.max_batch) {
        try {
            if (!admit_one(e)) break;
        } catch (const Error& err) {  // the pool could not be allocated: fail this request
            std::unique_ptr<Seq> s = std::move(e.waiting.front());
            e.waiting.pop_front();
            s->error = err.what();
            s->code = err.code();
            {
                std::lock_guard<std::mutex> lk(e.mu);
                --e.n_queued;
            }
            finish(e, std::move(s));
        }
    }
}

}  // namespace

int batch_step(BatchEngine* engine) {
    if (!engine) throw Error(ErrorCode::InvalidArgument, "engine: must not be null");
    BatchEngine& e = *engine;
    const Model& m = *e.model;
    const int V = m.hp.vocab_size;
    std::lock_guard<std::mutex> step_lock(e.step_mu);

    take_submissions(e);
    admit_waiting(e);

    // The step's rows: one per decoding sequence (early exit apart), then prompt chunks.
    struct Entry {
        Seq* s;
        BatchPart p;  // p.logits: this entry's last row gives the sequence's next-token logits
    };
    std::vector<Entry> entries;
    std::vector<Seq*> adaptive;
    int budget = e.opt.prefill_chunk;
    for (auto& sp : e.active) {
        Seq& s = *sp;
        if (s.has_logits) continue;
        if (s.req.hold && s.req.hold()) continue;
        if (s.prefilled < s.prompt_len) {
            if (budget == 0) continue;
            const int k = std::min(budget, s.prompt_len - s.prefilled);
            budget -= k;
            Entry en{&s, {.rows = {}, .logits = s.prefilled + k == s.prompt_len}};
            en.p.rows.tokens = s.req.prompt.data() + s.prefilled;
            en.p.rows.n = k;
            en.p.rows.pos0 = s.prefilled;
            entries.push_back(en);
            s.prefilled += k;
        } else if (s.policy.enabled()) {
            adaptive.push_back(&s);
        } else {
            Entry en{&s, {.rows = {}, .logits = true}};
            en.p.rows.pos0 = static_cast<int>(s.res.tokens.size()) - 1;
            en.p.rows.tokens = &s.res.tokens.back();
            en.p.rows.n = 1;
            entries.push_back(en);
        }
    }
    for (Entry& en : entries) {
        en.p.rows.kv = &en.s->kv;
        en.p.rows.loops = en.s->loops;
        en.p.rows.window = en.s->req.config.cache_window;
        en.s->kv.pool->ensure(en.s->kv, en.p.rows.pos0 + en.p.rows.n);
    }
    std::stable_sort(entries.begin(), entries.end(),
                     [](const Entry& a, const Entry& b) { return a.p.rows.loops > b.p.rows.loops; });

    std::vector<Seq*> ready;
    long long rows = 0;
    if (!entries.empty()) {
        std::vector<BatchPart> parts;
        int n_out = 0;
        for (const Entry& en : entries) {
            parts.push_back(en.p);
            rows += en.p.rows.n;
            n_out += en.p.logits ? 1 : 0;
        }
        e.lrows.resize(static_cast<size_t>(n_out) * V);
        e.multi->run(parts.data(), static_cast<int>(parts.size()), e.lrows.data());
        if (n_out > 0) {
            int k = 0;
            for (const Entry& en : entries) {
                if (!en.p.logits) continue;
                Seq& s = *en.s;
                std::copy(e.lrows.begin() + static_cast<std::ptrdiff_t>(k) * V,
                          e.lrows.begin() + static_cast<std::ptrdiff_t>(k + 1) * V, s.logits.begin());
                s.depth = s.loops;
                if (s.res.stats.tokens_emitted == 0) s.res.stats.prefill_ms = ms_since(s.t0);
                s.has_logits = true;
                ready.push_back(&s);
                ++k;
            }
        }
    }
    // Early exit: one sequence at a time (its passes depend on its own probes).
    for (Seq* sp : adaptive) {
        Seq& s = *sp;
        const int pos = static_cast<int>(s.res.tokens.size()) - 1;
        s.kv.pool->ensure(s.kv, pos + 1);
        // the early-exit step written once (early_exit_step) on the executor's row over this sequence's pages
        ExecRow& row = e.multi->row(s.kv, s.req.config.cache_window);
        s.depth = early_exit_step(m, row, s.res.tokens.back(), pos, s.loops, s.policy, nullptr);
        e.multi->last_logits(s.logits.data());
        s.has_logits = true;
        ready.push_back(&s);
        ++rows;
    }

    // Tokens, stops and callbacks, in admission order.
    std::vector<Seq*> done;
    for (auto& sp : e.active) {
        Seq& s = *sp;
        if (!s.has_logits) continue;
        try {
            if (emit(s)) done.push_back(&s);
        } catch (const Error& err) {
            s.error = err.what();
            s.code = err.code();
            done.push_back(&s);
        } catch (const std::exception& ex) {
            s.error = std::string("callback: ") + ex.what();
            done.push_back(&s);
        }
    }
    for (Seq* dp : done) {
        auto it = std::find_if(e.active.begin(), e.active.end(), [&](const std::unique_ptr<Seq>& p) { return p.get() == dp; });
        std::unique_ptr<Seq> s = std::move(*it);
        e.active.erase(it);
        {
            std::lock_guard<std::mutex> lk(e.mu);
            --e.n_active;
        }
        finish(e, std::move(s));
    }

    std::lock_guard<std::mutex> lk(e.mu);
    ++e.counters.steps;
    e.counters.rows += rows;
    e.counters.max_active = std::max(e.counters.max_active, static_cast<int>(entries.size() + adaptive.size()));
    int free_pages = 0;
    for (const auto& p : e.pools)
        if (p) free_pages += p->n_free();
    e.counters.pages_free = free_pages;
    return e.n_queued + e.n_active;
}

void batch_run_until_idle(BatchEngine* engine) {
    while (batch_step(engine) > 0) {
    }
}

}  // namespace tinyloop
