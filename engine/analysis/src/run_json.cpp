#include <tinyloop_analysis/run_json.h>

#include <tinyloop_analysis/exit_calibration.h>

namespace tinyloop::analysis {

nlohmann::json config_to_json(const GenerateConfig& c) {
    return {{"max_tokens", c.max_tokens},
            {"loops", c.loops},
            {"temperature", c.temperature},
            {"top_k", c.top_k},
            {"top_p", c.top_p},
            {"min_p", c.min_p},
            {"sample_seed", c.sample_seed},
            {"repetition_penalty", c.repetition_penalty},
            {"frequency_penalty", c.frequency_penalty},
            {"presence_penalty", c.presence_penalty},
            {"ignore_eos", c.ignore_eos},
            {"beam_size", c.beam_size},
            {"early_exit_patience", c.early_exit_patience},
            {"early_exit_min_L", c.early_exit_min_L},
            {"early_exit_peek_every", c.early_exit_peek_every},
            {"early_exit_criterion", criterion_label(c.early_exit_criterion)},
            {"early_exit_threshold", c.early_exit_threshold},
            {"stop_sequences", c.stop_sequences.size()},
            {"stop_strings", c.stop_strings.size()},
            {"logit_bias", c.logit_bias.size()},
            {"grammar", c.grammar != nullptr}};
}

nlohmann::json run_spec_to_json(const RunSpec& spec) {
    nlohmann::json j = {{"mode", decode_mode_name(spec.mode)}, {"config", config_to_json(spec.config)}};
    const SpeculationKnobs& k = spec.speculation;
    if (spec.mode == DecodeMode::Speculative || spec.mode == DecodeMode::Tree)
        j["speculation"] = {{"verify_loops", k.verify_loops},
                            {"draft_loops", k.draft_loops},
                            {"draft_ahead", k.draft_ahead},
                            {"branches", k.branches}};
    else if (spec.mode == DecodeMode::DraftModel)
        j["speculation"] = {{"draft_loops", k.draft_loops}, {"gamma", k.gamma}};
    return j;
}

nlohmann::json stats_to_json(const GenerateStats& s) {
    return {{"prefill_ms", s.prefill_ms},
            {"first_token_ms", s.first_token_ms},
            {"decode_ms", s.decode_ms},
            {"total_ms", s.total_ms},
            {"prompt_tokens", s.prompt_tokens},
            {"tokens_emitted", s.tokens_emitted},
            {"stop_reason", stop_reason_name(s.stop_reason)},
            {"loops_used", s.loops_used},
            {"depth_per_token", s.depth_per_token},
            {"spec_cycles", s.spec_cycles},
            {"spec_drafted", s.spec_drafted},
            {"spec_tested", s.spec_tested},
            {"spec_accepted", s.spec_accepted},
            {"spec_accept_hist", s.spec_accept_hist},
            {"spec_acceptance_rate", s.spec_acceptance_rate()},
            {"draft_ms", s.draft_ms},
            {"verify_ms", s.verify_ms}};
}

}  // namespace tinyloop::analysis
