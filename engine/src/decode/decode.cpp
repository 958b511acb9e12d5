#include "decode/decode.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "decode/early_exit.h"
#include "decode/emit.h"
#include "forward/cuda_forward.h"

namespace tinyloop {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// KV provenance (GenerateOptions::kv_provenance): marked at each place decode writes the cache,
// [layer][capacity] while decoding, trimmed to the positions the result holds at the end.
class ProvenanceRecorder {
public:
    ProvenanceRecorder(KVProvenance* out, const HParams& hp, const KVCache& kv) : out_(out), kv_(kv) {
        if (!out_) return;
        *out_ = KVProvenance{};
        out_->n_layers = kv.n_layers;
        out_->n_pre_blocks = hp.n_pre_blocks;
        out_->n_loop_layers = hp.n_loop_layers;
        out_->kv_bytes_allocated = kv.bytes();
        origin_.assign(static_cast<size_t>(kv.n_layers) * kv.capacity, KVOrigin::None);
    }
    // Layers [layer0, layer1) of positions [pos0, pos1).
    void mark(int layer0, int layer1, int pos0, int pos1, KVOrigin o) {
        if (!out_) return;
        for (int e = layer0; e < layer1; ++e)
            for (int p = pos0; p < pos1; ++p) origin_[static_cast<size_t>(e) * kv_.capacity + p] = o;
    }
    void finish(int n_positions) {
        if (!out_) return;
        out_->n_positions = n_positions;
        out_->origin.resize(static_cast<size_t>(kv_.n_layers) * n_positions);
        size_t written = 0;
        for (int e = 0; e < kv_.n_layers; ++e)
            for (int p = 0; p < n_positions; ++p) {
                const KVOrigin o = origin_[static_cast<size_t>(e) * kv_.capacity + p];
                out_->origin[static_cast<size_t>(e) * n_positions + p] = o;
                written += o != KVOrigin::None;
            }
        // per (layer, position) row: keys + values (+ scales for a quantized cache)
        const size_t rows = static_cast<size_t>(kv_.n_layers) * kv_.capacity;
        out_->kv_bytes_written = rows > 0 ? written * (out_->kv_bytes_allocated / rows) : 0;
    }

private:
    KVProvenance* out_;
    const KVCache& kv_;
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
    if (prompt_len > 0 && prompt == nullptr) throw Error(ErrorCode::InvalidArgument, "prompt: must not be null");
    for (int i = 0; i < prompt_len; ++i)
        if (prompt[i] < 0 || prompt[i] >= m.hp.vocab_size)
            throw Error(ErrorCode::InvalidArgument,
                        "prompt[" + std::to_string(i) + "]: token id " + std::to_string(prompt[i]) +
                            " is outside the vocabulary [0, " + std::to_string(m.hp.vocab_size) + ")");
}

GenerateResult decode(const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& config,
                      const GenerateOptions& options, const DecodeStart* start) {
    const auto t0 = Clock::now();
    validate_config(&m, prompt_len, config);
    check_prompt_ids(m, prompt, prompt_len);
    if (options.lens && (options.lens_top_k < 1 || options.lens_top_k > 64))
        throw Error(ErrorCode::InvalidArgument,
                    "lens_top_k: " + std::to_string(options.lens_top_k) + " is outside [1, 64]");

#ifdef TINYLOOP_HAVE_CUDA
    if (m.cuda) {
        const char* unrouted = cuda_unrouted_feature(config, options, start);
        if (!unrouted) return cuda_decode(m, prompt, prompt_len, config, options);
        require_cpu_backend(m, unrouted);  // backend cuda: refused, naming it; auto: on the CPU
    }
#endif
    if (start && config.num_return_sequences > 1)
        throw Error(ErrorCode::NotSupported, "num_return_sequences: several outputs do not run from a cache yet (use 1)");
    if (config.beam_size >= 2) {
        if (start) throw Error(ErrorCode::NotSupported, "beam_size: beam search does not run from a cache yet");
        if (options.kv_provenance)
            throw Error(ErrorCode::NotSupported, "kv_provenance: not reported by beam search (beam_size >= 2)");
        return decode_beam(m, prompt, prompt_len, config, options);
    }

    const HParams& hp = m.hp;
    const int V = hp.vocab_size;
    const int d = hp.d_model;
    const int loops = config.loops > 0 ? config.loops : hp.default_loops;
    const EarlyExitPolicy policy = effective_exit_policy(config.early_exit);

    GenerateResult res = prompt_result(prompt, prompt_len, config.max_tokens);
    GenerateStats& st = res.stats;

    if (start && config.kv_cache != KVCacheType::F32)
        throw Error(ErrorCode::NotSupported, "kv_cache: int8 needs its own prefill; prefix caches, resume handles "
                                             "and pools hold f32 keys and values (use kv_cache f32)");
    KVCache kv;
    kv.allocate(hp, exec_layers(hp, loops), prompt_len + config.max_tokens, config.kv_cache);
    st.kv_cache_bytes = kv.bytes();
    ProvenanceRecorder prov(options.kv_provenance, hp, kv);
    Workspace ws;
    std::vector<float> h, logits(static_cast<size_t>(V));

    // The readout inputs after every pass of the row that produces the next token (for the lens:
    // the states, or with a coda its outputs, FORMAT.md §1b).
    std::vector<float> pass_states;
    PassHook hook;
    if (options.lens) {
        pass_states.assign(static_cast<size_t>(loops) * d, 0.0f);
        hook = last_row_hook(pass_states, d);
    }

    if (config.max_tokens > 0) {
        int cached = 0;
        if (start && start->kv) {
            cached = std::min(start->n_cached, prompt_len);
            const size_t row_bytes = static_cast<size_t>(kv.row) * sizeof(float);
            for (int e = 0; e < kv.n_layers; ++e) {
                std::memcpy(kv.k_at(e, 0), start->kv->k_layer(e), row_bytes * cached);
                std::memcpy(kv.v_at(e, 0), start->kv->v_layer(e), row_bytes * cached);
            }
            prov.mark(0, kv.n_layers, 0, cached, KVOrigin::Reused);
        }
        if (cached == prompt_len && start->last_pass_states) {
            const float* last = start->last_pass_states + static_cast<size_t>(loops - 1) * d;
            h.assign(last, last + d);
            if (options.lens)
                std::copy(start->last_pass_states, start->last_pass_states + static_cast<size_t>(loops) * d,
                          pass_states.begin());
            compute_logits(m, h.data(), 1, logits.data(), ws);
        } else {
            ForwardArgs fa;
            fa.tokens = prompt + cached;
            fa.n = prompt_len - cached;
            fa.pos0 = cached;
            fa.loops = loops;
            fa.window = config.cache_window;
            fa.on_readout = options.lens ? &hook : nullptr;
            forward(m, kv, ws, fa, h);
            prov.mark(0, kv.n_layers, cached, prompt_len, KVOrigin::Computed);
            compute_logits(m, h.data() + static_cast<size_t>(fa.n - 1) * d, 1, logits.data(), ws);
        }
    }
    st.prefill_ms = ms_since(t0);

    TokenDecoder dec(m, config, res, options.on_token, options.observer, options.lens ? options.lens_top_k : 0, t0);
    // Grammar: the mask for the next token is computed right after the previous one is taken,
    // so a dead end is known before that token is reported (its event then flushes the text).
    if (dec.grammar.dead()) {
        st.stop_reason = StopReason::GRAMMAR_DEAD_END;
        dec.out.finish(loops);
        prov.finish(static_cast<int>(res.tokens.size()));
        return res;
    }
    int depth = loops;  // depth of the row that produced `logits`

    for (int i = 0; i < config.max_tokens; ++i) {
        const int position = prompt_len + i;
        if (!dec.step(logits.data(), {.depth = depth, .lens_states = options.lens ? pass_states.data() : nullptr}))
            break;
        const int32_t tok = res.tokens.back();

        // Advance: run the new token at its position.
        if (policy.enabled()) {
            depth = decode_step_adaptive(m, kv, ws, tok, position, loops, config.cache_window, policy, h,
                                         options.lens ? &hook : nullptr);
            // passes 1..depth ran; propagate_exited_state wrote the layers of the passes after it
            // gate_select computes every pass (Hugging Face's Ouro semantics): nothing is propagated
            const int ran = policy.criterion == EarlyExitCriterion::GateSelect ? kv.n_layers : exec_layers(hp, depth);
            prov.mark(0, ran, position, position + 1, KVOrigin::Computed);
            prov.mark(ran, kv.n_layers, position, position + 1, KVOrigin::Propagated);
        } else {
            ForwardArgs fa;
            fa.tokens = &res.tokens[static_cast<size_t>(position)];
            fa.n = 1;
            fa.pos0 = position;
            fa.loops = loops;
            fa.window = config.cache_window;
            fa.on_readout = options.lens ? &hook : nullptr;
            forward(m, kv, ws, fa, h);
            prov.mark(0, kv.n_layers, position, position + 1, KVOrigin::Computed);
            depth = loops;
        }
        compute_logits(m, h.data(), 1, logits.data(), ws);
    }
    dec.out.finish(loops);
    prov.finish(static_cast<int>(res.tokens.size()));
    return res;
}

}  // namespace tinyloop
