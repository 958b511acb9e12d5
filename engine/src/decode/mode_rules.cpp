// The decode modes' rules a front end applies before a run (tinyloop/mode_rules.h).
#include "tinyloop/mode_rules.h"

#include <string>

#include <nlohmann/json.hpp>

#include "tinyloop/json.h"

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
        case DecodeMode::Pipelined:
            c.beam_size = 0;
            c.early_exit.patience = 0;
            break;
    }
    return c;
}

bool greedy_only(DecodeMode mode) {
    return mode == DecodeMode::Greedy || mode == DecodeMode::Tree;
}

bool mode_reports_lens(DecodeMode mode) { return mode != DecodeMode::Pipelined; }

void check_mode_temperature(DecodeMode mode, float t) {
    const std::string name = decode_mode_name(mode);
    const std::string num = nlohmann::json(json_float(t)).dump();
    const bool argmax = t >= 0.0f && t <= 0.01f;
    if (greedy_only(mode) && !argmax)
        throw Error(ErrorCode::InvalidArgument,
                    "temperature: " + num + " conflicts with mode " + name + " (" + name +
                        (mode != DecodeMode::Greedy ? " is greedy only; use speculative to sample with self-speculation)"
                                                    : " decoding is temperature 0)"));
    if (mode == DecodeMode::Sample && argmax)
        throw Error(ErrorCode::InvalidArgument,
                    "temperature: " + num + " is outside (0.01, inf) for mode sample (use greedy for argmax)");
}

void check_speculation_depths(int draft_loops, int verify_loops, int max_loops) {
    if (verify_loops < 2 || (max_loops > 0 && verify_loops > max_loops))
        throw Error(ErrorCode::InvalidArgument,
                    "verify_loops: " + std::to_string(verify_loops) + " is outside [2, " +
                        (max_loops > 0 ? std::to_string(max_loops) : std::string("max_loops")) + "]");
    if (draft_loops < 1 || draft_loops >= verify_loops)
        throw Error(ErrorCode::InvalidArgument, "draft_loops: " + std::to_string(draft_loops) +
                                                    " is outside [1, verify_loops - 1 = " +
                                                    std::to_string(verify_loops - 1) + "]");
}

void validate_mode_speculation(const RunSpec& spec) {
    if (!self_speculative(spec.mode)) return;
    const SpeculationPolicy& k = spec.speculation;
    const int verify = k.verify_loops > 0 ? k.verify_loops : spec.config.loops;
    // Only what is set: a verify depth or draft depth left at 0 is the resolver's to fill.
    if (verify > 0 && k.draft_loops > 0) check_speculation_depths(k.draft_loops, verify, 0);
    if (spec.mode == DecodeMode::Tree && k.draft_ahead > 8)
        throw Error(ErrorCode::InvalidArgument, "draft_ahead: " + std::to_string(k.draft_ahead) +
                                                    " is outside [1, 8] (tree: nodes run per cycle; 0 = the model's "
                                                    "recommendation, else 4)");
}

}  // namespace tinyloop
