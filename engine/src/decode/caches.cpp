// PrefixCache, ResumeHandle and PrefixPool: prefill state reused across calls. Every reuse gives
// the bits a computation from scratch gives (batch-invariant kernels, FORMAT.md §1 depth upgrade).
#include <algorithm>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "decode/decode.h"
#include "forward/executor.h"

namespace tinyloop {

struct PrefixCache {
    const Model* model = nullptr;
    std::vector<int32_t> prefix;
    int loops = 0;
    int window = 0;
    std::unique_ptr<ExecSequence> seq;     // the prefix's cache on the back end the cache was made on
    std::vector<float> last_pass_states;  // [loops, d]: the last row's readout inputs (DecodeStart)
};

struct ResumeHandle {
    Model* model = nullptr;
    std::vector<int32_t> prompt;
    int loops = 0;                        // deepest depth computed
    std::unique_ptr<ExecSequence> seq;    // all max_loops layers allocated
    std::vector<float> h;                 // [n, d] state at depth `loops`
    std::vector<float> e;                 // [n, d] prelude output (input injection, §1a; else empty)
    std::vector<float> last_pass_states;  // [max_loops, d] readout inputs; rows 0..loops-1 valid
};

struct PrefixPool {
    Model* model = nullptr;
    int loops = 0;
    mutable std::shared_mutex mutex;
    std::vector<std::unique_ptr<PrefixCache>> entries;
};

namespace {

template <class T>
T& checked_ptr(T* p, const char* what) {
    if (!p) throw Error(ErrorCode::InvalidArgument, std::string(what) + ": must not be null");
    return *p;
}

void check_ids(const Model& m, const int32_t* ids, int n, const char* field) {
    if (n < 1) throw Error(ErrorCode::InvalidArgument, std::string(field) + ": length " + std::to_string(n) + " must be >= 1");
    if (n > m.max_seq_len)
        throw Error(ErrorCode::InvalidArgument, std::string(field) + ": length " + std::to_string(n) +
                                                    " exceeds max_seq_len " + std::to_string(m.max_seq_len));
    if (!ids) throw Error(ErrorCode::InvalidArgument, std::string(field) + ": must not be null");
    check_token_ids(ids, static_cast<size_t>(n), m.hp.vocab_size, field);
}

// Prefill `ids` at depth `loops` into `seq`, keeping the states h_loops in `h` and the last
// row's readout input per pass in last_pass_states. With input injection (FORMAT.md §1a) `e`
// receives the prelude outputs ([n, d]) when start_pass is 1 and supplies them to a depth upgrade;
// unused otherwise. With a coda (§1b) every pass's readout runs the coda over all rows (the last
// row's readout at pass l reads the others' pass-l coda), the last at `loops`: the cache keeps
// the coda keys/values of depth `loops`, recomputed from h_loops on a depth upgrade.
void prefill(const Model& m, ExecSequence& seq, const int32_t* ids, int n, int loops, int start_pass,
             const float* h_in, std::vector<float>& h, std::vector<float>& e, std::vector<float>& last_pass_states) {
    PassHook hook = last_row_hook(last_pass_states, m.hp.d_model);
    const bool inject = injects_input(m.hp);
    if (inject && start_pass <= 1) e.resize(static_cast<size_t>(n) * m.hp.d_model);
    h.resize(static_cast<size_t>(n) * m.hp.d_model);
    seq.run_passes({.tokens = ids, .n = n, .pos0 = 0, .first = start_pass, .last = loops, .h_in = h_in,
                    .e_in = inject && start_pass > 1 ? e.data() : nullptr, .out_h = h.data(),
                    .out_e = inject && start_pass <= 1 ? e.data() : nullptr, .on_readout = &hook});
}

bool starts_with(const int32_t* prompt, int prompt_len, const std::vector<int32_t>& prefix) {
    return static_cast<int>(prefix.size()) <= prompt_len && std::equal(prefix.begin(), prefix.end(), prompt);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

PrefixCache* create_prefix_cache(Model* model, const int32_t* prefix, int n, int loops, int cache_window) {
    const Model& m = checked(model);
    const std::unique_ptr<Executor> ex = run_executor(m, {ExecOp::CacheImport});
    check_ids(m, prefix, n, "prefix");
    if (cache_window < 0) throw Error(ErrorCode::InvalidArgument, "cache_window: must be >= 0");
    auto c = std::make_unique<PrefixCache>();
    c->model = &m;
    c->prefix.assign(prefix, prefix + n);
    c->loops = resolve_loops(m, loops);
    c->window = cache_window;
    c->seq = ex->sequence({.loops = c->loops, .capacity = n, .window = cache_window});
    c->last_pass_states.assign(static_cast<size_t>(c->loops) * m.hp.d_model, 0.0f);
    std::vector<float> h, e;
    prefill(m, *c->seq, prefix, n, c->loops, 1, nullptr, h, e, c->last_pass_states);
    return c.release();
}

void free_prefix_cache(PrefixCache* cache) { delete cache; }

size_t prefix_cache_bytes(const PrefixCache* cache) {
    const PrefixCache& c = checked_ptr(cache, "cache");
    return c.seq->cache_bytes() + c.last_pass_states.size() * sizeof(float) + c.prefix.size() * sizeof(int32_t);
}

int prefix_cache_length(const PrefixCache* cache) {
    return static_cast<int>(checked_ptr(cache, "cache").prefix.size());
}

GenerateResult generate_with_prefix(Model* model, const PrefixCache* cache, const int32_t* prompt, int prompt_len,
                                    const GenerateConfig& config, const GenerateOptions& options) {
    const Model& m = checked(model);
    const PrefixCache& c = checked_ptr(cache, "cache");
    if (c.model != &m) throw Error(ErrorCode::InvalidArgument, "cache: was made for another model");
    const int loops = resolve_loops(m, config.loops);
    if (loops != c.loops)
        throw Error(ErrorCode::InvalidArgument, "loops: " + std::to_string(loops) + " differs from the prefix cache's depth " +
                                                    std::to_string(c.loops));
    if (config.cache_window != c.window)
        throw Error(ErrorCode::InvalidArgument, "cache_window: " + std::to_string(config.cache_window) +
                                                    " differs from the prefix cache's " + std::to_string(c.window));
    if (!starts_with(prompt, prompt_len, c.prefix))
        throw Error(ErrorCode::InvalidArgument, "prompt: does not start with the prefix cache's " +
                                                    std::to_string(c.prefix.size()) + " tokens");
    DecodeStart start;
    start.from = c.seq.get();
    start.n_cached = static_cast<int>(c.prefix.size());
    start.last_pass_states = c.last_pass_states.data();
    return decode(m, prompt, prompt_len, config, options, &start);
}

// ---------------------------------------------------------------------------------------------

ResumeHandle* create_resume_handle(Model* model, const int32_t* prompt, int prompt_len, int loops) {
    const Model& m = checked(model);
    const std::unique_ptr<Executor> ex = run_executor(m, {ExecOp::CacheImport});
    check_ids(m, prompt, prompt_len, "prompt");
    auto r = std::make_unique<ResumeHandle>();
    r->model = model;
    r->prompt.assign(prompt, prompt + prompt_len);
    r->loops = resolve_loops(m, loops);
    r->seq = ex->sequence({.loops = m.hp.max_loops, .capacity = prompt_len});
    r->last_pass_states.assign(static_cast<size_t>(m.hp.max_loops) * m.hp.d_model, 0.0f);
    prefill(m, *r->seq, prompt, prompt_len, r->loops, 1, nullptr, r->h, r->e, r->last_pass_states);
    return r.release();
}

void free_resume_handle(ResumeHandle* handle) { delete handle; }

int resume_handle_loops(const ResumeHandle* handle) { return checked_ptr(handle, "handle").loops; }

size_t resume_handle_bytes(const ResumeHandle* handle) {
    const ResumeHandle& r = checked_ptr(handle, "handle");
    return r.seq->cache_bytes() + (r.h.size() + r.e.size() + r.last_pass_states.size()) * sizeof(float);
}

GenerateResult resume_generate(ResumeHandle* handle, const GenerateConfig& config, const GenerateOptions& options) {
    ResumeHandle& r = checked_ptr(handle, "handle");
    const Model& m = checked(r.model);
    if (config.cache_window != 0)
        throw Error(ErrorCode::InvalidArgument, "cache_window: must be 0 when resuming (the handle keeps every position)");
    const int loops = config.loops > 0 ? config.loops : r.loops;
    if (loops > m.hp.max_loops)
        throw Error(ErrorCode::InvalidArgument, "loops: " + std::to_string(loops) + " is outside [1, " +
                                                    std::to_string(m.hp.max_loops) + "]");
    if (loops > r.loops) {  // deepen: only passes r.loops+1 .. loops run
        const std::vector<float> h_in = r.h;
        prefill(m, *r.seq, r.prompt.data(), static_cast<int>(r.prompt.size()), loops, r.loops + 1, h_in.data(), r.h,
                r.e, r.last_pass_states);
        r.loops = loops;
    }
    GenerateConfig c = config;
    c.loops = loops;
    // §1b: a shallower run needs the prompt's coda keys/values of depth `loops`, computed from
    // its states at that depth, which the handle does not keep (only h at its deepest depth):
    // the prompt is computed again, exactly as generate would.
    if (loops < r.loops && m.hp.n_coda_blocks > 0) {
        const DecodeStart nothing;  // reuses nothing, on the executor of the caches' family
        return decode(m, r.prompt.data(), static_cast<int>(r.prompt.size()), c, options, &nothing);
    }
    DecodeStart start;
    start.from = r.seq.get();
    start.n_cached = static_cast<int>(r.prompt.size());
    start.last_pass_states = r.last_pass_states.data();
    return decode(m, r.prompt.data(), static_cast<int>(r.prompt.size()), c, options, &start);
}

// ---------------------------------------------------------------------------------------------

PrefixPool* create_prefix_pool(Model* model, int loops) {
    const Model& m = checked(model);
    run_executor(m, {ExecOp::CacheImport});  // refused here under backend cuda, not at the first add
    auto p = std::make_unique<PrefixPool>();
    p->model = model;
    p->loops = resolve_loops(m, loops);
    return p.release();
}

void free_prefix_pool(PrefixPool* pool) { delete pool; }

int prefix_pool_add(PrefixPool* pool, const int32_t* prefix, int n) {
    PrefixPool& p = checked_ptr(pool, "pool");
    std::unique_ptr<PrefixCache> c(create_prefix_cache(p.model, prefix, n, p.loops, 0));
    std::unique_lock lock(p.mutex);
    p.entries.push_back(std::move(c));
    return static_cast<int>(p.entries.size()) - 1;
}

size_t prefix_pool_bytes(const PrefixPool* pool) {
    const PrefixPool& p = checked_ptr(pool, "pool");
    std::shared_lock lock(p.mutex);
    size_t total = 0;
    for (const auto& e : p.entries) total += prefix_cache_bytes(e.get());
    return total;
}

GenerateResult generate_with_pool(PrefixPool* pool, const int32_t* prompt, int prompt_len, const GenerateConfig& config,
                                  const GenerateOptions& options, int* reused_tokens) {
    PrefixPool& p = checked_ptr(pool, "pool");
    GenerateConfig c = config;
    if (c.loops == 0) c.loops = p.loops;
    if (c.loops != p.loops)
        throw Error(ErrorCode::InvalidArgument, "loops: " + std::to_string(c.loops) + " differs from the pool's depth " +
                                                    std::to_string(p.loops));
    std::shared_lock lock(p.mutex);
    const PrefixCache* best = nullptr;
    if (c.cache_window == 0 && prompt != nullptr)
        for (const auto& e : p.entries)
            if (starts_with(prompt, prompt_len, e->prefix) && (!best || e->prefix.size() > best->prefix.size()))
                best = e.get();
    if (reused_tokens) *reused_tokens = best ? static_cast<int>(best->prefix.size()) : 0;
    if (!best) {
        const DecodeStart nothing;  // reuses nothing, on the executor of the pool's other calls
        return generate_from(checked(p.model), prompt, prompt_len, c, options, &nothing);
    }
    return generate_with_prefix(p.model, best, prompt, prompt_len, c, options);
}

}  // namespace tinyloop
