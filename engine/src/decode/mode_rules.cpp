// The decode modes' rules a front end applies before a run (tinyloop/mode_rules.h).
#include "tinyloop/mode_rules.h"

#include <string>

namespace tinyloop {

GenerateConfig mode_config(DecodeMode mode, const GenerateConfig& config, const Recommendation& rec) {
    GenerateConfig c = config;
    switch (mode) {
        case DecodeMode::Greedy:
            c.temperature = 0.0f;
            c.beam_size = 0;
            c.early_exit.patience = 0;
            break;
        case DecodeMode::Sample:
            if (!(c.temperature > 0.01f)) c.temperature = kSampleModeTemperature;
            c.beam_size = 0;
            c.early_exit.patience = 0;
            break;
        case DecodeMode::Beam:
            if (c.beam_size < 2) c.beam_size = kBeamModeWidth;
            break;
        case DecodeMode::EarlyExit:
            if (c.early_exit.patience < 1)
                c.early_exit.patience = rec.has_early_exit() ? rec.early_exit.patience : builtin_early_exit().early_exit.patience;
            c.beam_size = 0;
            break;
        case DecodeMode::Speculative:
        case DecodeMode::Tree:
        case DecodeMode::DraftModel:
            c.beam_size = 0;
            c.early_exit.patience = 0;
            break;
    }
    return c;
}

void validate_mode_speculation(const RunSpec& spec) {
    if (spec.mode != DecodeMode::Speculative && spec.mode != DecodeMode::Tree) return;
    const SpeculationPolicy& k = spec.speculation;
    const int verify = k.verify_loops > 0 ? k.verify_loops : spec.config.loops;
    if (verify > 0 && k.draft_loops > 0 && k.draft_loops >= verify)
        throw Error(ErrorCode::InvalidArgument, "draft_loops: " + std::to_string(k.draft_loops) +
                                                    " must be below the verify depth " + std::to_string(verify) +
                                                    (k.verify_loops > 0 ? " (verify_loops)" : " (loops)"));
    if (spec.mode == DecodeMode::Tree && k.draft_ahead > 8)
        throw Error(ErrorCode::InvalidArgument, "draft_ahead: " + std::to_string(k.draft_ahead) +
                                                    " is outside [1, 8] (tree: nodes run per cycle; 0 = the model's "
                                                    "recommendation, else 4)");
}

}  // namespace tinyloop
