#include <tinyloop_analysis/step_mode.h>

#include <algorithm>

#include <tinyloop/json.h>

namespace tinyloop::analysis {

namespace {
[[noreturn]] void fail(const std::string& msg) {
    throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, msg);
}
}  // namespace

Stepper::Stepper(tinyloop::Model* model, std::vector<int32_t> prompt, const tinyloop::GenerateConfig& config,
                 int lens_top_k)
    : m_model(model), m_prompt(std::move(prompt)), m_config(config), m_lensTopK(lens_top_k) {
    if (m_config.beam_size >= 2) fail("beam_size: step mode decodes one sequence (0 or 1), got " + std::to_string(m_config.beam_size));
    if (lens_top_k < 1 || lens_top_k > 64) fail("lens_top_k: " + std::to_string(lens_top_k) + " is outside [1, 64]");
    tinyloop::validate_config(model, static_cast<int>(m_prompt.size()), m_config);
    if (m_config.max_tokens == 0) {
        m_finished = true;
        m_stopReason = "MAX_TOKENS";
    }
}

std::vector<int32_t> Stepper::continuation() const {
    std::vector<int32_t> out;
    out.reserve(m_steps.size());
    for (const StepRecord& s : m_steps) out.push_back(s.chosen);
    return out;
}

std::string Stepper::text() const {
    const std::vector<int32_t> c = continuation();
    return tinyloop::detokenize_text(m_model, c.data(), c.size());
}

const tinyloop::TokenEvent& Stepper::propose() {
    if (m_finished) fail("step: the run is finished (" + m_stopReason + ")");
    if (m_pending) return *m_pending;
    // origin = prompt + every token committed before m_origin
    std::vector<int32_t> origin = m_prompt;
    for (int i = 0; i < m_origin; ++i) origin.push_back(m_steps[static_cast<size_t>(i)].chosen);
    const int since = static_cast<int>(m_steps.size()) - m_origin;
    tinyloop::GenerateConfig cfg = m_config;
    cfg.max_tokens = since + 1;
    tinyloop::GenerateOptions opts;
    opts.lens = true;
    opts.lens_top_k = m_lensTopK;
    std::optional<tinyloop::TokenEvent> last;
    opts.observer = [&](const tinyloop::TokenEvent& ev) {
        // Only the new step needs its lens row; earlier ones are a replay of committed tokens.
        if (ev.index == since) last = ev;
        return true;
    };
    // Sample is plain decoding at the config's temperature (greedy at <= 0.01).
    const tinyloop::RunSpec spec{.mode = cfg.early_exit.patience > 0 ? tinyloop::DecodeMode::EarlyExit
                                                                     : tinyloop::DecodeMode::Sample,
                                 .config = cfg,
                                 .speculation = {}};
    tinyloop::GenerateResult r =
        tinyloop::run_decode(m_model, origin.data(), static_cast<int>(origin.size()), spec, opts);
    const int got = static_cast<int>(r.tokens.size()) - r.prompt_len;
    // The replay must reproduce the committed tokens since the origin (they were its proposals).
    for (int i = 0; i < std::min(got, since); ++i)
        if (r.tokens[static_cast<size_t>(r.prompt_len + i)] != m_steps[static_cast<size_t>(m_origin + i)].chosen)
            throw tinyloop::Error(tinyloop::ErrorCode::Internal,
                                  "step: the replay since the last override diverged at step " +
                                      std::to_string(m_origin + i));
    if (!last) {
        // The plain run ended before this step (cannot happen after an accepted proposal that did
        // not end it; kept as a clear error rather than a silent stop).
        m_finished = true;
        m_stopReason = tinyloop::stop_reason_name(r.stats.stop_reason);
        fail("step: the run ended before this step (" + m_stopReason + ")");
    }
    m_pending = std::move(last);
    m_pendingStop = r.stats.stop_reason;
    return *m_pending;
}

void Stepper::commit(int32_t token) {
    if (m_finished) fail("step: the run is finished (" + m_stopReason + ")");
    const auto& hp = tinyloop::model_hparams(m_model);
    tinyloop::check_token_id(token, hp.vocab_size, "token");
    propose();
    StepRecord rec;
    rec.proposal = *m_pending;
    rec.chosen = token;
    m_steps.push_back(std::move(rec));
    const bool took = token == m_pending->token;
    const tinyloop::StopReason stop = m_pendingStop;
    m_pending.reset();
    if (!took) m_origin = static_cast<int>(m_steps.size());
    if (took && stop != tinyloop::StopReason::MAX_TOKENS) {
        m_finished = true;
        m_stopReason = tinyloop::stop_reason_name(stop);
    } else if (!took && !m_config.ignore_eos && [&] {
                   const std::vector<int32_t> stops = tinyloop::stop_token_ids(m_model);
                   return std::find(stops.begin(), stops.end(), token) != stops.end();
               }()) {
        m_finished = true;
        m_stopReason = "EOS";
    } else if (static_cast<int>(m_steps.size()) >= m_config.max_tokens) {
        m_finished = true;
        m_stopReason = "MAX_TOKENS";
    }
}

nlohmann::json steps_to_json(const Stepper& s, const tinyloop::Model* model) {
    nlohmann::json steps = nlohmann::json::array();
    for (const StepRecord& r : s.steps()) {
        nlohmann::json lens = nlohmann::json::array();
        for (const tinyloop::LensDepth& d : r.proposal.lens)
            lens.push_back({{"depth", d.depth}, {"top_ids", d.top_ids}, {"top_probs", d.top_probs},
                            {"p_emitted", d.p_emitted}, {"entropy", d.entropy}});
        steps.push_back({{"proposed", r.proposal.token},
                         {"proposed_prob", r.proposal.prob},
                         {"depth", r.proposal.depth},
                         {"chosen", r.chosen},
                         {"chosen_text", tinyloop::detokenize_text(model, &r.chosen, 1)},
                         {"overridden", r.overridden()},
                         {"lens", lens}});
    }
    return {{"view", "step"},
            {"prompt_ids", s.prompt()},
            {"prompt_text", tinyloop::detokenize_text(model, s.prompt().data(), s.prompt().size())},
            {"config", config_to_json(s.config())},
            {"continuation_ids", s.continuation()},
            {"text", s.text()},
            {"finished", s.finished()},
            {"stop_reason", s.stop_reason()},
            {"steps", steps}};
}

}  // namespace tinyloop::analysis
