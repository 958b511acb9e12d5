// run_decode: the one place a decode mode becomes an engine call (tinyloop.h, "Decode modes").
#include <algorithm>

#include "model/model.h"
#include "decode/sampling.h"

namespace tinyloop {

namespace {

[[noreturn]] void bad(const std::string& m) { throw Error(ErrorCode::InvalidArgument, m); }

SpeculativeConfig chain_config(const GenerateConfig& c, const SpeculationPolicy& k) {
    // Sampling filters as plain sampling's: the config's top_k (greedy: unused, so off) and top_p.
    return {.max_tokens = c.max_tokens, .draft_loops = k.draft_loops, .verify_loops = k.verify_loops,
            .draft_ahead = k.draft_ahead, .temperature = c.temperature, .seed = c.sample_seed,
            .top_k = is_greedy(c.temperature) ? 0 : c.top_k, .top_p = c.top_p, .ignore_eos = c.ignore_eos};
}

TreeSpeculativeConfig tree_config(const GenerateConfig& c, const SpeculationPolicy& k) {
    return {.max_tokens = c.max_tokens, .draft_loops = k.draft_loops, .verify_loops = k.verify_loops,
            .draft_ahead = k.draft_ahead, .K_branches = k.branches, .temperature = c.temperature,
            .seed = c.sample_seed, .ignore_eos = c.ignore_eos};
}

}  // namespace

const char* decode_mode_name(DecodeMode mode) {
    switch (mode) {
        case DecodeMode::Greedy: return "greedy";
        case DecodeMode::Sample: return "sample";
        case DecodeMode::EarlyExit: return "early-exit";
        case DecodeMode::Beam: return "beam";
        case DecodeMode::Speculative: return "speculative";
        case DecodeMode::Tree: return "tree";
        case DecodeMode::DraftModel: return "draft-model";
        case DecodeMode::Pipelined: return "pipelined";
    }
    return "?";
}

bool self_speculative(DecodeMode mode) {
    return mode == DecodeMode::Speculative || mode == DecodeMode::Tree || mode == DecodeMode::Pipelined;
}

SpeculationPolicy resolved_speculation(const Model* model, const RunSpec& spec) {
    const Model& m = checked(model);
    SpeculationPolicy k = spec.speculation;
    k.kind = spec.mode == DecodeMode::Speculative || spec.mode == DecodeMode::Pipelined ? SpeculationKind::Chain
             : spec.mode == DecodeMode::Tree      ? SpeculationKind::Tree
             : spec.mode == DecodeMode::DraftModel ? SpeculationKind::DraftModel
                                                   : SpeculationKind::None;
    if (spec.mode == DecodeMode::DraftModel) {
        if (k.draft_loops == 0 && k.draft_model) k.draft_loops = resolve_loops(checked(k.draft_model), 0);
        return k;
    }
    // The user's knob, else the model's recommendation (model_recommendation), else the built-in.
    const SpeculationPolicy& rec = m.recommended.speculation(k.kind);
    if (k.verify_loops == 0) k.verify_loops = resolve_loops(m, spec.config.loops);
    const SpeculationPolicy builtin = builtin_speculation(k.kind, k.verify_loops);
    if (k.draft_loops == 0)
        k.draft_loops = rec.draft_loops > 0 && rec.draft_loops < k.verify_loops ? rec.draft_loops : builtin.draft_loops;
    if (k.draft_ahead == 0) k.draft_ahead = rec.draft_ahead > 0 ? rec.draft_ahead : builtin.draft_ahead;
    if (k.branches == 0) k.branches = m.recommended.tree.branches > 0 ? m.recommended.tree.branches : builtin.branches;
    return k;
}

SpeculationPolicy builtin_speculation(SpeculationKind kind, int verify_loops) {
    SpeculationPolicy k;
    k.kind = kind;
    k.verify_loops = verify_loops;
    k.draft_loops = std::max(1, std::min(2, verify_loops - 1));
    k.draft_ahead = 4;
    k.branches = 2;
    return k;
}

DecodeMode config_mode(const GenerateConfig& c) {
    if (c.beam_size >= 2) return DecodeMode::Beam;
    if (c.early_exit.patience > 0) return DecodeMode::EarlyExit;
    // A temperature outside [0, 0.01] (negative, NaN) is Sample's, whose validation refuses it;
    // Greedy would set it to 0.
    return c.temperature >= 0.0f && is_greedy(c.temperature) ? DecodeMode::Greedy : DecodeMode::Sample;
}

GenerateResult run_decode(Model* model, const int32_t* prompt, int prompt_len, const RunSpec& spec,
                          const GenerateOptions& options) {
    checked(model);
    GenerateConfig c = spec.config;
    const bool one_output = self_speculative(spec.mode) || spec.mode == DecodeMode::Greedy;
    if (one_output && c.num_return_sequences > 1)
        bad("num_return_sequences: " + std::to_string(c.num_return_sequences) + " needs sample or beam mode (" +
            decode_mode_name(spec.mode) + " returns one output; use 1)");
    // Speculation keeps per-pass keys/values (its configs have no kv_sharing to drop it into).
    if (!c.kv_sharing.exact() && self_speculative(spec.mode))
        bad("kv_sharing: " + kv_sharing_name(c.kv_sharing) + " runs with plain decoding; mode " +
            decode_mode_name(spec.mode) + " keeps per-pass (use per-pass)");
    switch (spec.mode) {
        case DecodeMode::Greedy:
            c.temperature = 0.0f;
            c.beam_size = 0;
            c.early_exit.patience = 0;
            return generate_ex(model, prompt, prompt_len, c, options);
        case DecodeMode::Sample:
            c.beam_size = 0;
            c.early_exit.patience = 0;
            return generate_ex(model, prompt, prompt_len, c, options);
        case DecodeMode::EarlyExit:
            if (c.early_exit.patience <= 0)
                bad("early_exit_patience: must be >= 1 in early-exit mode (0 disables early exit)");
            c.beam_size = 0;
            return generate_ex(model, prompt, prompt_len, c, options);
        case DecodeMode::Beam:
            if (c.beam_size < 2) bad("beam_size: must be >= 2 in beam mode");
            return generate_ex(model, prompt, prompt_len, c, options);
        case DecodeMode::Speculative:
            return generate_speculative_ex(model, prompt, prompt_len,
                                           chain_config(c, resolved_speculation(model, spec)), options);
        case DecodeMode::Tree:
            return generate_tree_speculative_ex(model, prompt, prompt_len,
                                                tree_config(c, resolved_speculation(model, spec)), options);
        case DecodeMode::Pipelined:
            return generate_pipelined_ex(model, prompt, prompt_len, chain_config(c, resolved_speculation(model, spec)),
                                         options);
        case DecodeMode::DraftModel: {
            DraftSpeculativeConfig dc;
            dc.gamma = spec.speculation.gamma;
            dc.draft_loops = spec.speculation.draft_loops;
            return draft_speculative_generate_ex(model, spec.speculation.draft_model, prompt, prompt_len, c, dc,
                                                 options);
        }
    }
    bad("mode: " + std::to_string(static_cast<int>(spec.mode)) + " is not a DecodeMode");
}

}  // namespace tinyloop
