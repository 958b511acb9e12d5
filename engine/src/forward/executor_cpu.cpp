// The executor's table and rule (executor.h) and the CPU executor: forward.cpp's forward(),
// forward_batch and compute_logits on host memory, the numerics every CPU test and the golden
// transcript pin.
#include "forward/executor.h"

#include <algorithm>
#include <cstring>
#include <string>

#ifdef TINYLOOP_HAVE_CUDA
#include "forward/cuda_forward.h"
#endif

namespace tinyloop {

const char* exec_op_name(ExecOp op) {
    switch (op) {
        case ExecOp::Decode: return "decode (generate, generate_stream)";
        case ExecOp::SequenceLogits: return "forward_logits / score";
        case ExecOp::PassReadouts: return "per-pass hooks (the lens during generate, the exit gate's trace, exit_gate_per_pass)";
        case ExecOp::EarlyExit: return "early exit (decoding with it, score_early_exit, early_exit_signals)";
        case ExecOp::PassStates: return "per-pass states kept on the host (the scoring lens' and escalation's CPU path)";
        case ExecOp::Int8Cache: return "an INT8 KV cache (kv_cache int8)";
        case ExecOp::CacheImport: return "prefix caches, resume handles and prefix pools";
        case ExecOp::KVProvenance: return "kv_provenance";
        case ExecOp::BeamSearch: return "beam search (beam_size >= 2)";
        case ExecOp::ChainSpeculation: return "chain self-speculation";
        case ExecOp::TreeSpeculation: return "tree self-speculation";
        case ExecOp::DraftSpeculation: return "draft-model speculation";
        case ExecOp::Batch: return "the batch engine";
        case ExecOp::HostForward: return "this call (the host forward)";
        case ExecOp::SandwichNorms: return "sandwich norms (block sandwich_branch / sandwich_sum, FORMAT.md §1b)";
        case ExecOp::QkBias: return "qk_bias (FORMAT.md §1b)";
        case ExecOp::EmbedScale: return "embed_scale (FORMAT.md §1b)";
        case ExecOp::PassNorm: return "pass_norm (FORMAT.md §1b)";
        case ExecOp::Coda: return "coda blocks (FORMAT.md §1b)";
        case ExecOp::Adapter: return "the loop_input adapter (FORMAT.md §1b)";
        case ExecOp::StateInit: return "a seeded state_init (FORMAT.md §1b)";
        case ExecOp::ExitGate: return "the exit gate (FORMAT.md §1b)";
        case ExecOp::KVSharing: return "kv_sharing other than per-pass (FORMAT.md §1c)";
        case ExecOp::PipelinedSpeculation: return "pipelined self-speculation";
        case ExecOp::Count: break;
    }
    return "?";
}

const char* exec_kind_name(ExecKind kind) { return kind == ExecKind::Cuda ? "cuda" : "cpu"; }

bool exec_supports(ExecKind kind, ExecOp op) {
    if (kind == ExecKind::Cpu) return op != ExecOp::Count;
    // The CUDA executor (cuda_forward.cpp): a device session with an f32 cache, full-depth rows,
    // its one-row stepper (CudaSession::row_*: early exit between passes), passes p..q over rows
    // from given states, laid out or not (CudaSession::run_passes: chain and tree
    // self-speculation) and a row copy (copy_position: an accepted tree node to its position);
    // the rows' states after every pass (the lens during generate, a cache's last-row states:
    // downloaded per pass) and positions copied from a kept sequence (prefix caches, resume
    // handles, pools). Not PassStates: the scoring lens and escalation read "supports
    // PassStates" as "keeps every pass's states of a whole sequence on the host" and then run
    // host forwards (H200 run 12: refused under backend cuda); on the device they run a
    // sequence_logits per depth instead. Beam search forks a sequence as a new session with the
    // parent's positions copied in (CudaSession::import_prefix) and its last logits. KV provenance
    // is the decode loop's own record of what it ran (decode.cpp), whichever back end ran it. An
    // INT8 cache is the CPU's codes and scales (kern::cuda::rope_store_int8), its attention
    // the dequantized rows (kern::cuda::attention with kq), in the reference step. Draft-model
    // speculation runs two sequences (the draft's and the target's, both models on the device)
    // through run, run_passes and logits. Pipelined speculation's sweep is CudaSession::run_wave
    // (each row's keys and values into its own pass's layer). The batch engine's runs are
    // forward_batch on the device (cuda_batch.cpp: every sequence's rows through the same passes,
    // its keys and values in pages of a device pool laid out as the host's); not on a coda model.
    // The block kinds and pass features of FORMAT.md §1b are forward.cpp's run_layers on CudaOps
    // (sandwich norms, qk_bias, embed_scale, pass_norm, the adapter with its initial state gathered
    // from a table of every position's, cuda_forward.cpp); the exit gate is read on the host from
    // the states the row stepper and the per-pass hooks download. The coda runs after the last
    // pass of a whole-sequence call only (exec_supports_together).
    switch (op) {
        case ExecOp::Decode:
        case ExecOp::SequenceLogits:
        case ExecOp::EarlyExit:
        case ExecOp::ChainSpeculation:
        case ExecOp::TreeSpeculation:
        case ExecOp::PassReadouts:
        case ExecOp::CacheImport:
        case ExecOp::BeamSearch:
        case ExecOp::KVProvenance:
        case ExecOp::Int8Cache:
        case ExecOp::DraftSpeculation:
        case ExecOp::PipelinedSpeculation:
        case ExecOp::Batch:
        case ExecOp::SandwichNorms:
        case ExecOp::QkBias:
        case ExecOp::EmbedScale:
        case ExecOp::PassNorm:
        case ExecOp::Adapter:
        case ExecOp::StateInit:
        case ExecOp::ExitGate:
        case ExecOp::Coda: return true;
        default: return false;
    }
}

namespace {
// What a coda model's call may need on the device: its whole-sequence calls at one depth (decode,
// every row's logits: the coda over the last pass's states, its keys and values those of that
// depth) and the model's math. Not the calls that read out or stop between passes, or resume from
// kept states: there a position's coda keys and values are those of the depth it was read at
// (FORMAT.md §1b), which the device's sessions do not keep yet.
bool runs_beside_a_coda_on_the_device(ExecOp op) {
    switch (op) {
        case ExecOp::Decode:
        case ExecOp::SequenceLogits:
        case ExecOp::Int8Cache:     // the coda's layers are cache layers like the others
        case ExecOp::KVProvenance:  // the decode loop's own record
        case ExecOp::SandwichNorms:
        case ExecOp::QkBias:
        case ExecOp::EmbedScale:
        case ExecOp::PassNorm:
        case ExecOp::Coda:
        case ExecOp::Adapter:
        case ExecOp::StateInit:
        case ExecOp::ExitGate: return true;
        default: return false;
    }
}
}  // namespace

bool exec_supports_together(ExecKind kind, ExecOp a, ExecOp b) {
    if (kind == ExecKind::Cpu) return true;
    if (a == ExecOp::Coda) return runs_beside_a_coda_on_the_device(b);
    if (b == ExecOp::Coda) return runs_beside_a_coda_on_the_device(a);
    return true;
}

void unsupported_together(ExecKind kind, ExecOp op, ExecOp with) {
    throw Error(ErrorCode::NotSupported, std::string(exec_op_name(op)) + " on a model with " + exec_op_name(with) +
                                             ": does not run on the " + (kind == ExecKind::Cuda ? "CUDA" : "CPU") +
                                             " back end yet (backend cuda was asked for); use backend cpu or auto");
}

std::vector<ExecOp> model_math_ops(const HParams& hp) {
    std::vector<ExecOp> ops;
    if (block_desc(hp.block).post != PostNorm::None) ops.push_back(ExecOp::SandwichNorms);
    if (hp.qk_bias) ops.push_back(ExecOp::QkBias);
    if (hp.embed_scale != 1.0f) ops.push_back(ExecOp::EmbedScale);
    if (hp.pass_norm) ops.push_back(ExecOp::PassNorm);
    if (hp.n_coda_blocks != 0) ops.push_back(ExecOp::Coda);
    if (hp.loop_input == LoopInput::Adapter) ops.push_back(ExecOp::Adapter);
    if (hp.state_init.kind != StateInit::Kind::Zeros) ops.push_back(ExecOp::StateInit);
    if (hp.exit_gate) ops.push_back(ExecOp::ExitGate);
    return ops;
}

void unsupported(ExecKind kind, ExecOp op) {
    if (kind == ExecKind::Cuda)
        throw Error(ErrorCode::NotSupported, std::string(exec_op_name(op)) +
                                                 ": does not run on the CUDA back end yet (backend cuda was asked "
                                                 "for); use backend cpu or auto");
    throw Error(ErrorCode::NotSupported,
                std::string(exec_op_name(op)) + ": does not run on the " + exec_kind_name(kind) + " back end");
}

ExecKind choose_executor(bool on_device, bool device_required, const std::vector<ExecOp>& needs) {
    if (!on_device) return ExecKind::Cpu;
    for (ExecOp op : needs)
        if (!exec_supports(ExecKind::Cuda, op)) {
            if (device_required) unsupported(ExecKind::Cuda, op);
            return ExecKind::Cpu;  // auto: the whole call on the CPU
        }
    for (size_t i = 0; i < needs.size(); ++i)
        for (size_t j = i + 1; j < needs.size(); ++j)
            if (!exec_supports_together(ExecKind::Cuda, needs[i], needs[j])) {
                // named as the call's op "on a model with" the model's feature (model_math_ops come last)
                if (device_required) unsupported_together(ExecKind::Cuda, needs[i], needs[j]);
                return ExecKind::Cpu;
            }
    return ExecKind::Cuda;
}

namespace {
// A call's needs and the model's math (the pairs a back end runs only apart, exec_supports_together).
std::vector<ExecOp> with_model_math(const Model& m, std::vector<ExecOp> needs) {
    for (ExecOp op : model_math_ops(m.hp)) needs.push_back(op);
    return needs;
}
}  // namespace

void require_host(const Model& m, const std::vector<ExecOp>& needs) {
    const ExecKind k = choose_executor(m.cuda != nullptr, m.cuda_required, with_model_math(m, needs));
    // A call that says it runs on the host must name an op the device lacks.
    if (k != ExecKind::Cpu)
        throw Error(ErrorCode::Internal, "require_host: the call's ops all run on the device; route it there");
}

// The defaults of the primitives beyond run/last_logits: unreachable on a back end whose
// exec_supports row says it lacks the ops that need them (choose_executor routes such calls to the
// CPU, or refuses them under backend cuda).
namespace {
[[noreturn]] void lacks(const char* primitive) {
    throw Error(ErrorCode::Internal, std::string("ExecSequence::") + primitive +
                                         ": this back end's sequence does not run it (exec_supports must say so)");
}
}  // namespace
void ExecSequence::run_passes(const PassRun&) { lacks("run_passes"); }
void ExecSequence::logits(int, int, float*) { lacks("logits"); }
void ExecSequence::run_wave(const WaveRun&) { lacks("run_wave"); }
ExecRow& ExecSequence::row(int) { lacks("row"); }
void ExecSequence::import_prefix(const ExecSequence&, int) { lacks("import_prefix"); }
void ExecSequence::copy_position(int, int) { lacks("copy_position"); }
std::unique_ptr<ExecSequence> ExecSequence::fork() const { lacks("fork"); }
void ExecSequence::set_last_state(const float*) { lacks("set_last_state"); }
std::unique_ptr<ExecBatch> Executor::batch() const {
    throw Error(ErrorCode::Internal, std::string("Executor::batch: the ") + name() +
                                         " back end does not run it (exec_supports must say so)");
}

void propagate_exited_state(const Model& m, KVCache& kv, Workspace& ws, const float* h_e, const float* input, int pos,
                            int e, int loops) {
    if (e >= loops) return;
    if (!kv.takes_propagation(pos, e)) return;  // kv_sharing latest-m4 / compress (FORMAT.md §1c)
    const HParams& hp = m.hp;
    // FORMAT.md §1a/§1b: a deeper pass's input is the frozen state as that pass would take it in
    // (h_e + e_p with "add", adapter·[h_e; e_p] with "adapter"): the same for every pass > e.
    std::vector<float> injected;
    if (injects_input(hp)) {
        injected.assign(h_e, h_e + hp.d_model);
        inject_input(m, e + 1, injected.data(), input, 1, ws);
        h_e = injected.data();
    }
    CpuOps be(m.pool.get());
    for (int j = 0; j < hp.n_loop_layers; ++j) {
        propagated_kv(be, hp, m.loop[static_cast<size_t>(j)], h_e, &pos, ws.a.data(), ws.k.data(), ws.v.data());
        for (int l = e + 1; l <= loops; ++l) kv.store(loop_layer_index(hp, l, j), pos, ws.k.data(), ws.v.data());
    }
}

namespace {

// One row on host memory: forward.cpp's run_prelude / run_pass / readout_rows / compute_logits,
// the calls (and order) early exit has always made.
class CpuRow final : public ExecRow {
public:
    CpuRow(const Model& m, KVCache& kv, Workspace& ws, std::vector<float>& h, int window)
        : m_(m), kv_(kv), ws_(ws), h_(h), window_(window) {}
    void begin(int32_t token, int pos) override {
        const HParams& hp = m_.hp;
        pos_ = pos;
        ws_.reserve(hp, 1);
        set_rows(ws_, pos, 1, window_);
        h_.resize(static_cast<size_t>(hp.d_model));
        input_.resize(injects_input(hp) ? static_cast<size_t>(hp.d_model) : 0);  // §1a/§1b: the prelude output e
        run_prelude(m_, kv_, ws_, &token, 1, h_.data(), input_.data());
    }
    void pass(int pass) override { run_pass(m_, kv_, ws_, pass, h_.data(), input_.data(), 1); }
    const float* state() override { return h_.data(); }
    void set_state(const float* h) override {
        if (h != h_.data()) std::copy(h, h + m_.hp.d_model, h_.begin());
    }
    const float* readout(const float* h) override { return readout_rows(m_, kv_, ws_, h, 1, rbuf_); }
    void logits(const float* r, float* out) override { compute_logits(m_, r, 1, out, ws_); }
    void propagate(int exited, int loops) override {
        // rows set again: the readouts between passes may not touch them, but keep it explicit
        set_rows(ws_, pos_, 1, window_);
        propagate_exited_state(m_, kv_, ws_, h_.data(), input_.data(), pos_, exited, loops);
    }
    void finish() override {
        if (m_.hp.n_coda_blocks > 0) {
            readout(h_.data());
            h_.assign(rbuf_.begin(), rbuf_.end());
        }
    }

private:
    const Model& m_;
    KVCache& kv_;
    Workspace& ws_;
    std::vector<float>& h_;
    int window_;
    int pos_ = 0;
    std::vector<float> input_, rbuf_;
};

// The CPU sequence's host state.
struct HostSequence {
    KVCache kv;
    Workspace ws;
    std::vector<float> h;  // the readout inputs of the rows of the last run ([n, d])
    int last_row = 0;      // the row of h whose logits last_logits gives
};

class CpuSequence final : public ExecSequence {
public:
    CpuSequence(const Model& m, const SequenceSpec& s) : m_(m), spec_(s) {
        if (s.kv_sharing.exact()) st_.kv.allocate(m.hp, exec_layers(m.hp, s.loops), s.capacity, s.kv_cache);
        else st_.kv.allocate_shared(m.hp, exec_layers(m.hp, s.loops), s.capacity, s.kv_cache, s.kv_sharing, s.prompt);
    }
    struct NoCache {};  // fork(): the cache is copied in
    CpuSequence(const Model& m, const SequenceSpec& s, NoCache) : m_(m), spec_(s) {}
    size_t cache_bytes() const override { return st_.kv.bytes(); }
    int capacity() const override { return spec_.capacity; }
    void run(const int32_t* tokens, int n, int pos0, const PassHook* on_readout) override {
        ForwardArgs fa;
        fa.tokens = tokens;
        fa.n = n;
        fa.pos0 = pos0;
        fa.loops = spec_.loops;
        fa.window = spec_.window;
        fa.on_readout = on_readout;
        forward(m_, st_.kv, st_.ws, fa, st_.h);
        st_.last_row = n - 1;
    }
    void last_logits(float* out) override {
        compute_logits(m_, st_.h.data() + static_cast<size_t>(st_.last_row) * m_.hp.d_model, 1, out, st_.ws);
    }
    void run_passes(const PassRun& r) override {
        const int last = r.last > 0 ? r.last : spec_.loops;
        if (r.first < 1 || last > spec_.loops || (r.first > 1 && r.out_e))
            throw Error(ErrorCode::Internal, "run_passes: passes " + std::to_string(r.first) + ".." +
                                                 std::to_string(last) + " of a sequence of depth " +
                                                 std::to_string(spec_.loops));
        if (r.layout) {
            run_laid_out(r, last);
            return;
        }
        ForwardArgs fa;
        fa.tokens = r.tokens;
        fa.n = r.n;
        fa.pos0 = r.pos0;
        fa.loops = last;
        fa.window = spec_.window;
        fa.start_pass = r.first;
        fa.h_in = r.h_in;
        fa.e_in = r.e_in;
        fa.out_e = r.out_e;
        fa.on_readout = r.on_readout;
        fa.on_pass = r.on_state;
        // Without a coda the rows' readouts are their states: copied out after the forward, as
        // forward's out_state would (one copy either way).
        const bool coda = m_.hp.n_coda_blocks > 0;
        if (coda) fa.out_state = r.out_h;
        forward(m_, st_.kv, st_.ws, fa, st_.h);
        if (!coda && r.out_h) std::copy(st_.h.begin(), st_.h.begin() + static_cast<std::ptrdiff_t>(r.n) * m_.hp.d_model, r.out_h);
        st_.last_row = r.n - 1;
    }
    void logits(int row0, int n, float* out) override {
        compute_logits(m_, st_.h.data() + static_cast<size_t>(row0) * m_.hp.d_model, n, out, st_.ws);
    }
    void run_wave(const WaveRun& r) override {
        const int d = m_.hp.d_model;
        Workspace& ws = st_.ws;
        forward_wave(m_, st_.kv, ws, {.tokens = r.tokens, .pass = r.pass, .n = r.n, .pos0 = r.pos0,
                                      .window = spec_.window, .x = r.h, .e = r.e});
        if (r.n_heads == 0) return;
        st_.h.resize(static_cast<size_t>(r.n_heads) * d);
        for (int i = 0; i < r.n_heads; ++i) {
            const int t = r.heads[i];
            const float* src = r.h + static_cast<size_t>(t) * d;
            if (m_.hp.n_coda_blocks > 0) {  // the row's coda readout, its rows set alone (§1b)
                set_rows(ws, r.pos0 + t, 1, spec_.window);
                src = readout_rows(m_, st_.kv, ws, src, 1, rbuf_);
            }
            std::copy(src, src + d, st_.h.begin() + static_cast<std::ptrdiff_t>(i) * d);
        }
        st_.last_row = r.n_heads - 1;
        compute_logits(m_, st_.h.data(), r.n_heads, r.logits, ws);
    }
    std::unique_ptr<ExecSequence> fork() const override {
        // the cache and the last rows; the workspace is scratch, a fresh one serves
        auto f = std::make_unique<CpuSequence>(m_, spec_, NoCache{});
        f->st_.kv = st_.kv;
        f->st_.h = st_.h;
        f->st_.last_row = st_.last_row;
        return f;
    }
    void copy_position(int from, int to) override {
        KVCache& kv = st_.kv;
        if (kv.type() != KVCacheType::F32) throw Error(ErrorCode::Internal, "copy_position: an f32 cache only");
        const size_t row_bytes = static_cast<size_t>(kv.row) * sizeof(float);
        for (int e = 0; e < kv.n_layers; ++e) {
            std::memcpy(kv.k_at(e, to), kv.k_at(e, from), row_bytes);
            std::memcpy(kv.v_at(e, to), kv.v_at(e, from), row_bytes);
        }
    }
    ExecRow& row(int window) override {
        row_ = std::make_unique<CpuRow>(m_, st_.kv, st_.ws, st_.h, window);
        st_.last_row = 0;
        return *row_;
    }
    void import_prefix(const ExecSequence& from, int n) override {
        const auto* other = dynamic_cast<const CpuSequence*>(&from);
        if (!other) throw Error(ErrorCode::Internal, "import_prefix: the kept sequence is not the CPU's");
        const KVCache& src = other->st_.kv;
        KVCache& kv = st_.kv;
        if (kv.type() != KVCacheType::F32 || src.type() != KVCacheType::F32 || src.n_layers < kv.n_layers ||
            n > src.capacity || n > kv.capacity)
            throw Error(ErrorCode::Internal, "import_prefix: the kept cache does not fit the sequence");
        const size_t row_bytes = static_cast<size_t>(kv.row) * sizeof(float);
        for (int e = 0; e < kv.n_layers; ++e) {
            std::memcpy(kv.k_at(e, 0), src.k_layer(e), row_bytes * n);
            std::memcpy(kv.v_at(e, 0), src.v_layer(e), row_bytes * n);
        }
    }
    void set_last_state(const float* h) override {
        st_.h.assign(h, h + m_.hp.d_model);
        st_.last_row = 0;
    }

private:
    // run_passes over rows with their own positions and visibility (RowLayout): the prelude and
    // the passes one by one (run_prelude / run_pass) with the rows' attention set from the layout,
    // then the readout while it is still set (a node's coda reads its ancestors', §1b).
    void run_laid_out(const PassRun& r, int last) {
        const HParams& hp = m_.hp;
        const RowLayout& lay = *r.layout;
        const int n = r.n, d = hp.d_model;
        const size_t floats = static_cast<size_t>(n) * d;
        if (r.on_readout || r.on_state || static_cast<int>(lay.pos.size()) != n || static_cast<int>(lay.cache_row.size()) != n ||
            static_cast<int>(lay.visible_end.size()) != n || static_cast<int>(lay.extra_offsets.size()) != n + 1)
            throw Error(ErrorCode::Internal, "run_passes: a row layout needs n positions, rows, ends and n + 1 offsets");
        Workspace& ws = st_.ws;
        ws.reserve(hp, n);
        for (int t = 0; t < n; ++t) {
            ws.pos[t] = lay.pos[t];
            ws.row[t] = lay.cache_row[t];
            ws.kv_begin[t] = 0;
            ws.kv_end[t] = lay.visible_end[t];
        }
        ws.extra_rows = lay.extra_rows;
        ws.extra_offsets = lay.extra_offsets;
        const bool inject = injects_input(hp);
        x_.resize(floats);
        e_.resize(inject ? floats : 0);
        if (r.first <= 1) {
            run_prelude(m_, st_.kv, ws, r.tokens, n, x_.data(), e_.data());
            if (inject && r.out_e) std::copy(e_.begin(), e_.end(), r.out_e);
        } else {
            std::copy(r.h_in, r.h_in + floats, x_.begin());
            if (inject) std::copy(r.e_in, r.e_in + floats, e_.begin());
        }
        for (int pass = std::max(1, r.first); pass <= last; ++pass) run_pass(m_, st_.kv, ws, pass, x_.data(), e_.data(), n);
        if (r.out_h) std::copy(x_.begin(), x_.end(), r.out_h);
        const float* out = readout_rows(m_, st_.kv, ws, x_.data(), n, rbuf_);
        st_.h.assign(out, out + floats);
        st_.last_row = n - 1;
        ws.extra_offsets.clear();
    }

    const Model& m_;
    SequenceSpec spec_;
    HostSequence st_;
    std::vector<float> x_, e_, rbuf_;  // a laid-out run's rows: states, prelude outputs, readouts
    std::unique_ptr<CpuRow> row_;
};

// Several sequences' rows on host memory: forward_batch over their (paged) caches, the head
// over the wanted last rows in one compute_logits; early exit's rows through CpuRow over the same
// workspace. The calls (and order) the batch engine has always made.
class CpuBatch final : public ExecBatch {
public:
    explicit CpuBatch(const Model& m) : m_(m) {}
    void run(const BatchPart* parts, int n, float* out) override {
        const int d = m_.hp.d_model;
        seqs_.clear();
        for (int i = 0; i < n; ++i) {
            const KVCache* kv = parts[i].rows.kv;
            if (kv && kv->pool && !kv->pool->host_storage)
                throw Error(ErrorCode::Internal, "batch run: a page pool without host rows (another back end's)");
            seqs_.push_back(parts[i].rows);
        }
        forward_batch(m_, seqs_.data(), n, ws_, h_);
        int at = 0, k = 0;
        hrows_.clear();
        for (int i = 0; i < n; ++i) {
            at += parts[i].rows.n;
            if (!parts[i].logits) continue;
            hrows_.insert(hrows_.end(), h_.begin() + static_cast<std::ptrdiff_t>(at - 1) * d,
                          h_.begin() + static_cast<std::ptrdiff_t>(at) * d);
            ++k;
        }
        if (k > 0) compute_logits(m_, hrows_.data(), k, out, ws_);
    }
    ExecRow& row(KVCache& kv, int window) override {
        row_ = std::make_unique<CpuRow>(m_, kv, ws_, h_, window);
        return *row_;
    }
    void last_logits(float* out) override { compute_logits(m_, h_.data(), 1, out, ws_); }

private:
    const Model& m_;
    Workspace ws_;
    std::vector<float> h_, hrows_;
    std::vector<BatchSeq> seqs_;
    std::unique_ptr<CpuRow> row_;
};

class CpuExecutor final : public Executor {
public:
    explicit CpuExecutor(const Model& m) : m_(m) {}
    ExecKind kind() const override { return ExecKind::Cpu; }
    std::unique_ptr<ExecSequence> sequence(const SequenceSpec& spec) const override {
        return std::make_unique<CpuSequence>(m_, spec);
    }
    std::vector<float> sequence_logits(const int32_t* tokens, int n, int loops, KVCacheType kv_cache) const override {
        KVCache kv;
        kv.allocate(m_.hp, exec_layers(m_.hp, loops), n, kv_cache);
        Workspace ws;
        std::vector<float> h;
        ForwardArgs fa;
        fa.tokens = tokens;
        fa.n = n;
        fa.loops = loops;
        forward(m_, kv, ws, fa, h);
        std::vector<float> logits(static_cast<size_t>(n) * m_.hp.vocab_size);
        compute_logits(m_, h.data(), n, logits.data(), ws);
        return logits;
    }
    std::unique_ptr<ExecBatch> batch() const override { return std::make_unique<CpuBatch>(m_); }

private:
    const Model& m_;
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor(const Model& m) { return std::make_unique<CpuExecutor>(m); }

std::unique_ptr<ExecRow> make_cpu_row(const Model& m, KVCache& kv, Workspace& ws, std::vector<float>& h, int window) {
    return std::make_unique<CpuRow>(m, kv, ws, h, window);
}

std::unique_ptr<Executor> run_executor(const Model& m, const std::vector<ExecOp>& needs) {
    const ExecKind k = choose_executor(m.cuda != nullptr, m.cuda_required, with_model_math(m, needs));
#ifdef TINYLOOP_HAVE_CUDA
    if (k == ExecKind::Cuda) return make_cuda_executor(m);
#endif
    (void)k;
    return make_cpu_executor(m);
}

}  // namespace tinyloop
