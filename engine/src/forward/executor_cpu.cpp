// The executor's table and rule (executor.h) and the CPU executor: forward.cpp's forward() and
// compute_logits on host memory, the numerics every CPU test and the golden transcript pin.
#include "forward/executor.h"

#include <string>

#ifdef TINYLOOP_HAVE_CUDA
#include "forward/cuda_forward.h"
#endif

namespace tinyloop {

const char* exec_op_name(ExecOp op) {
    switch (op) {
        case ExecOp::Decode: return "decode (generate, generate_stream)";
        case ExecOp::SequenceLogits: return "forward_logits / score";
        case ExecOp::PassReadouts: return "the lens (GenerateOptions.lens)";
        case ExecOp::EarlyExit: return "early exit (decoding with it, score_early_exit, early_exit_signals)";
        case ExecOp::PassStates: return "per-pass states (exit_gate_per_pass, the lens' signals)";
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
        case ExecOp::Count: break;
    }
    return "?";
}

const char* exec_kind_name(ExecKind kind) { return kind == ExecKind::Cuda ? "cuda" : "cpu"; }

bool exec_supports(ExecKind kind, ExecOp op) {
    if (kind == ExecKind::Cpu) return op != ExecOp::Count;
    // The CUDA executor (cuda_forward.cpp): a device session with an f32 cache, full-depth rows.
    switch (op) {
        case ExecOp::Decode:
        case ExecOp::SequenceLogits: return true;
        default: return false;
    }
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
    return ExecKind::Cuda;
}

void require_host(const Model& m, const std::vector<ExecOp>& needs) {
    const ExecKind k = choose_executor(m.cuda != nullptr, m.cuda_required, needs);
    // A call that says it runs on the host must name an op the device lacks.
    if (k != ExecKind::Cpu)
        throw Error(ErrorCode::Internal, "require_host: the call's ops all run on the device; route it there");
}

namespace {

class CpuSequence final : public ExecSequence {
public:
    CpuSequence(const Model& m, const SequenceSpec& s) : m_(m), spec_(s) {
        if (s.kv_sharing.exact()) st_.kv.allocate(m.hp, exec_layers(m.hp, s.loops), s.capacity, s.kv_cache);
        else st_.kv.allocate_shared(m.hp, exec_layers(m.hp, s.loops), s.capacity, s.kv_cache, s.kv_sharing, s.prompt);
    }
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
    HostSequence* host() override { return &st_; }

private:
    const Model& m_;
    SequenceSpec spec_;
    HostSequence st_;
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

private:
    const Model& m_;
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor(const Model& m) { return std::make_unique<CpuExecutor>(m); }

std::unique_ptr<Executor> run_executor(const Model& m, const std::vector<ExecOp>& needs) {
    const ExecKind k = choose_executor(m.cuda != nullptr, m.cuda_required, needs);
#ifdef TINYLOOP_HAVE_CUDA
    if (k == ExecKind::Cuda) return make_cuda_executor(m);
#endif
    (void)k;
    return make_cpu_executor(m);
}

}  // namespace tinyloop
