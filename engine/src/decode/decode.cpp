#include "decode/decode.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "decode/early_exit.h"
#include "decode/emit.h"
#include "forward/executor.h"

namespace tinyloop {

namespace {

using Clock = std::chrono::steady_clock;

// KV provenance (GenerateOptions::kv_provenance): marked at each place decode writes the cache,
// [layer][capacity] while decoding, trimmed to the positions the result holds at the end.
class ProvenanceRecorder {
public:
    // The sequence's cache: n_layers execution layers of `capacity` positions, `bytes` in all.
    ProvenanceRecorder(KVProvenance* out, const HParams& hp, int n_layers, int capacity, size_t bytes)
        : out_(out), n_layers_(n_layers), capacity_(capacity) {
        if (!out_) return;
        *out_ = KVProvenance{};
        out_->n_layers = n_layers;
        out_->n_pre_blocks = hp.n_pre_blocks;
        out_->n_loop_layers = hp.n_loop_layers;
        out_->kv_bytes_allocated = bytes;
        origin_.assign(static_cast<size_t>(n_layers) * capacity, KVOrigin::None);
    }
    // Layers [layer0, layer1) of positions [pos0, pos1).
    void mark(int layer0, int layer1, int pos0, int pos1, KVOrigin o) {
        if (!out_) return;
        for (int e = layer0; e < layer1; ++e)
            for (int p = pos0; p < pos1; ++p) origin_[static_cast<size_t>(e) * capacity_ + p] = o;
    }
    void finish(int n_positions) {
        if (!out_) return;
        out_->n_positions = n_positions;
        out_->origin.resize(static_cast<size_t>(n_layers_) * n_positions);
        size_t written = 0;
        for (int e = 0; e < n_layers_; ++e)
            for (int p = 0; p < n_positions; ++p) {
                const KVOrigin o = origin_[static_cast<size_t>(e) * capacity_ + p];
                out_->origin[static_cast<size_t>(e) * n_positions + p] = o;
                written += o != KVOrigin::None;
            }
        // per (layer, position) row: keys + values (+ scales for a quantized cache)
        const size_t rows = static_cast<size_t>(n_layers_) * capacity_;
        out_->kv_bytes_written = rows > 0 ? written * (out_->kv_bytes_allocated / rows) : 0;
    }

private:
    KVProvenance* out_;
    int n_layers_, capacity_;
    std::vector<KVOrigin> origin_;
};

}  // namespace

const char* kv_origin_name(KVOrigin o) {
    switch (o) {
        case KVOrigin::None: return "none";
        case KVOrigin::Computed: return "computed";
        case KVOrigin::Propagated: return "propagated";
        case KVOrigin::Reused: return "reused";
    }
    return "?";
}

void check_prompt_ids(const Model& m, const int32_t* prompt, int prompt_len) {
    check_token_ids(prompt, static_cast<size_t>(std::max(prompt_len, 0)), m.hp.vocab_size, "prompt");
}

GenerateResult decode(const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& config,
                      const GenerateOptions& options, const DecodeStart* start) {
    const auto t0 = Clock::now();
    validate_config(&m, prompt_len, config);
    check_prompt_ids(m, prompt, prompt_len);
    if (options.lens && (options.lens_top_k < 1 || options.lens_top_k > 64))
        throw Error(ErrorCode::InvalidArgument,
                    "lens_top_k: " + std::to_string(options.lens_top_k) + " is outside [1, 64]");

    const bool reuses = start && start->from;
    if (reuses && config.num_return_sequences > 1)
        throw Error(ErrorCode::NotSupported, "num_return_sequences: several outputs do not run from a cache yet (use 1)");
    const EarlyExitPolicy policy = effective_exit_policy(config.early_exit);
    // The call's one back end (executor.h, the rule of auto), from every op it needs.
    std::vector<ExecOp> needs{ExecOp::Decode};
    if (config.beam_size >= 2) needs.push_back(ExecOp::BeamSearch);
    if (policy.enabled()) needs.push_back(ExecOp::EarlyExit);
    if (options.lens) needs.push_back(ExecOp::PassReadouts);
    // A model with the exit gate, watched by an observer: the gate of the row behind every token
    // (TokenEvent::exit_gate), from the rows' states after every pass (run_passes' on_state: the
    // per-pass hook the lens during generate uses too).
    const bool record_gate = m.hp.exit_gate && static_cast<bool>(options.observer);
    if (record_gate) needs.push_back(ExecOp::PassReadouts);
    if (options.kv_provenance) needs.push_back(ExecOp::KVProvenance);
    if (config.kv_cache != KVCacheType::F32) needs.push_back(ExecOp::Int8Cache);
    if (start) needs.push_back(ExecOp::CacheImport);
    if (!config.kv_sharing.exact()) {
        needs.push_back(ExecOp::KVSharing);
        if (start)
            throw Error(ErrorCode::NotSupported, "kv_sharing: " + kv_sharing_name(config.kv_sharing) +
                                                     " needs its own prefill; prefix caches, resume handles and pools "
                                                     "hold per-pass keys and values (use kv_sharing per-pass)");
    }
    if (config.beam_size >= 2) {
        if (reuses) throw Error(ErrorCode::NotSupported, "beam_size: beam search does not run from a cache yet");
        if (options.kv_provenance)
            throw Error(ErrorCode::NotSupported, "kv_provenance: not reported by beam search (beam_size >= 2)");
        return decode_beam(*run_executor(m, needs), m, prompt, prompt_len, config, options);
    }
    const std::unique_ptr<Executor> ex = run_executor(m, needs);

    const HParams& hp = m.hp;
    const int V = hp.vocab_size;
    const int d = hp.d_model;
    const int loops = resolve_loops(m, config.loops);

    GenerateResult res = prompt_result(prompt, prompt_len, config.max_tokens);
    GenerateStats& st = res.stats;

    if (reuses && config.kv_cache != KVCacheType::F32)
        throw Error(ErrorCode::NotSupported, "kv_cache: int8 needs its own prefill; prefix caches, resume handles "
                                             "and pools hold f32 keys and values (use kv_cache f32)");
    // A sequence holds the prompt and every generated token (the device's at most max_seq_len).
    const int capacity = ex->kind() == ExecKind::Cpu ? prompt_len + config.max_tokens
                                                     : std::max(1, std::min(m.max_seq_len, prompt_len + config.max_tokens));
    const std::unique_ptr<ExecSequence> seq =
        ex->sequence({.loops = loops, .capacity = capacity, .window = config.cache_window, .kv_cache = config.kv_cache,
                      .kv_sharing = config.kv_sharing, .prompt = prompt_len});
    st.kv_cache_bytes = seq->cache_bytes();
    // On the device, prefill_ms is the prompt's forward alone: a new session's set-up (stream,
    // buffers, graph capture; a kept session has none) is not in it. The CPU's stays as it was.
    const auto t_prefill = ex->kind() == ExecKind::Cpu ? t0 : std::chrono::steady_clock::now();
    const int n_layers = exec_layers(hp, loops);
    ProvenanceRecorder prov(options.kv_provenance, hp, n_layers, capacity, seq->cache_bytes());
    std::vector<float> logits(static_cast<size_t>(V));

    // The readout inputs after every pass of the row that produces the next token (for the lens:
    // the states, or with a coda its outputs, FORMAT.md §1b).
    std::vector<float> pass_states;
    PassHook hook;
    if (options.lens) {
        pass_states.assign(static_cast<size_t>(loops) * d, 0.0f);
        hook = last_row_hook(pass_states, d);
    }
    GateTrace gate;
    const PassHook gate_hook = record_gate ? gate_trace_hook(m, gate) : PassHook{};
    // Passes 1..loops over tokens at pos0.. (with the gate recorded, through run_passes' on_state).
    auto run_rows = [&](const int32_t* tokens, int n, int pos0) {
        const PassHook* readouts = options.lens ? &hook : nullptr;
        if (!record_gate) return seq->run(tokens, n, pos0, readouts);
        gate.clear();
        seq->run_passes({.tokens = tokens, .n = n, .pos0 = pos0, .on_readout = readouts, .on_state = &gate_hook});
    };

    if (config.max_tokens > 0) {
        int cached = 0;
        if (start && start->from) {
            cached = std::min(start->n_cached, prompt_len);
            seq->import_prefix(*start->from, cached);
            prov.mark(0, n_layers, 0, cached, KVOrigin::Reused);
        }
        if (start && cached == prompt_len && start->last_pass_states) {
            seq->set_last_state(start->last_pass_states + static_cast<size_t>(loops - 1) * d);
            if (options.lens)
                std::copy(start->last_pass_states, start->last_pass_states + static_cast<size_t>(loops) * d,
                          pass_states.begin());
        } else {
            run_rows(prompt + cached, prompt_len - cached, cached);
            prov.mark(0, n_layers, cached, prompt_len, KVOrigin::Computed);
        }
        seq->last_logits(logits.data());
    }
    st.prefill_ms = ms_since(t_prefill);
    // kv_sharing compress folded the prompt's per-pass rows into its slots (FORMAT.md §1c): the
    // cache the decode holds from here on.
    st.kv_cache_bytes = seq->cache_bytes();

    TokenDecoder dec(m, config, res, options.on_token, options.observer, options.lens ? options.lens_top_k : 0, t0);
    auto finish = [&] {
        dec.out.finish(loops);
        prov.finish(static_cast<int>(res.tokens.size()));
    };
    // Grammar: the mask for the next token is computed right after the previous one is taken,
    // so a dead end is known before that token is reported (its event then flushes the text).
    if (dec.grammar.dead()) {
        st.stop_reason = StopReason::GRAMMAR_DEAD_END;
        finish();
        return res;
    }
    int depth = loops;  // depth of the row that produced `logits`

    for (int i = 0; i < config.max_tokens; ++i) {
        const int position = prompt_len + i;
        if (!dec.step(logits.data(), {.depth = depth,
                                      .lens_states = options.lens ? pass_states.data() : nullptr,
                                      .exit_gate = record_gate ? &gate : nullptr}))
            break;
        if (position >= seq->capacity()) break;
        const int32_t tok = res.tokens.back();

        // Advance: run the new token at its position.
        if (policy.enabled()) {
            depth = early_exit_step(m, seq->row(config.cache_window), tok, position, loops, policy,
                                    options.lens ? &hook : nullptr, record_gate ? &gate : nullptr);
            // passes 1..depth ran; the row's propagation wrote the layers of the passes after it
            // gate_select computes every pass (Hugging Face's Ouro semantics): nothing is propagated
            const int ran = policy.criterion == EarlyExitCriterion::GateSelect ? n_layers : exec_layers(hp, depth);
            prov.mark(0, ran, position, position + 1, KVOrigin::Computed);
            prov.mark(ran, n_layers, position, position + 1, KVOrigin::Propagated);
        } else {
            run_rows(&res.tokens[static_cast<size_t>(position)], 1, position);
            prov.mark(0, n_layers, position, position + 1, KVOrigin::Computed);
            depth = loops;
        }
        seq->last_logits(logits.data());
    }
    finish();
    return res;
}

}  // namespace tinyloop
