// Step mode: generate one token at a time, show that step's lens row, let the person
// take the sampled token or any other candidate, and continue. No Qt.
//
// How a step is computed, with the public engine API only: the continuation since the last
// override ("origin": the prompt plus every token committed up to and including the last one
// that differed from the engine's proposal) is regenerated with tinyloop::run_decode (Sample, or EarlyExit when the config has early exit), one token longer
// than before, so the RNG, the penalties and early exit see exactly what a plain run from the
// origin sees; the last TokenEvent is the proposal (token, probability, depth, lens row). Taking
// the proposal every time is therefore a plain generation, token for token, greedy or sampled
// with a seed. An override moves the origin to after the chosen token (the seed restarts there).
// A step costs a decode of the tokens since the origin: fine for the short texts step mode is for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>

namespace tinyloop::analysis {

struct StepRecord {
    tinyloop::TokenEvent proposal;  // what the engine sampled, with its lens row
    int32_t chosen = 0;             // what the person took
    bool overridden() const { return chosen != proposal.token; }
};

class Stepper {
public:
    // `config` is the decode config (greedy, sampling with seed, early exit; beam is refused);
    // max_tokens caps the steps. Throws tinyloop::Error on a config the engine refuses.
    Stepper(tinyloop::Model* model, std::vector<int32_t> prompt, const tinyloop::GenerateConfig& config,
            int lens_top_k = 8);

    // The engine's proposal for the next token (computed once per step, then cached).
    // Throws tinyloop::Error when finished().
    const tinyloop::TokenEvent& propose();
    // Takes `token` (any id in the vocabulary) as the next token. Throws tinyloop::Error naming
    // the id when it is outside the vocabulary or when finished().
    void commit(int32_t token);
    void accept_proposal() { commit(propose().token); }

    // True once max_tokens are committed, or the proposal that was taken ended the run (EOS,
    // stop sequence/string, grammar) as it would have ended a plain run.
    bool finished() const { return m_finished; }
    std::string stop_reason() const { return m_stopReason; }

    const std::vector<int32_t>& prompt() const { return m_prompt; }
    std::vector<int32_t> continuation() const;  // committed tokens
    std::string text() const;                   // detokenize_text of the continuation
    const std::vector<StepRecord>& steps() const { return m_steps; }
    int origin_steps() const { return m_origin; }  // steps committed before the current origin
    const tinyloop::GenerateConfig& config() const { return m_config; }

private:
    tinyloop::Model* m_model;
    std::vector<int32_t> m_prompt;
    tinyloop::GenerateConfig m_config;
    int m_lensTopK;
    std::vector<StepRecord> m_steps;
    int m_origin = 0;  // index into m_steps where the current origin begins
    std::optional<tinyloop::TokenEvent> m_pending;
    tinyloop::StopReason m_pendingStop = tinyloop::StopReason::MAX_TOKENS;
    bool m_finished = false;
    std::string m_stopReason;
};

nlohmann::json steps_to_json(const Stepper& s, const tinyloop::Model* model);

}  // namespace tinyloop::analysis
