// Early-exit calibration, the data behind the calibration view (no Qt).
//
// One greedy run at full depth, then, over its tokens, every criterion's signal per pass
// (tinyloop::early_exit_signals: the values the adaptive decode compares with its threshold)
// and the lens argmax at every depth (tinyloop::forward_lens_logits). From those cached arrays
// any policy (criterion, threshold, patience, min_L, peek_every) is re-scored without running
// the model: the depth each emitted token's row would exit at, the token it would then emit,
// and whether that differs from the full-depth token (flagged). The prediction is exact for a
// row whose earlier positions ran every pass, i.e. the early-exit decode of that token in the
// full-depth run's context; later tokens of a free-running early-exit decode also see the
// propagated keys/values of earlier exits.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>

namespace tinyloop::analysis {

struct CalibData {
    std::vector<int32_t> tokens;  // prompt + the full-depth greedy continuation
    int prompt_len = 0;
    int loops = 0;
    std::vector<std::string> pieces;  // text of each token (U+FFFD for invalid bytes)
    tinyloop::ExitSignals exits;      // [criterion][position][pass-1]
    std::vector<int32_t> lens_argmax; // [position][depth-1]: greedy pick from the lens at depth
    int32_t argmax_at(int position, int depth) const {
        return lens_argmax[static_cast<size_t>(position) * loops + static_cast<size_t>(depth - 1)];
    }
    int emitted() const { return static_cast<int>(tokens.size()) - prompt_len; }
};

// Runs the model: greedy decode of `max_tokens` (2..1024) at depth `loops` (0 = default) from
// `prompt`, then the signals and the lens over prompt + output. Throws tinyloop::Error.
CalibData collect_calibration(tinyloop::Model* model, const std::vector<int32_t>& prompt, int max_tokens,
                              int loops, const std::atomic<bool>* cancel = nullptr);

// A calibration re-scores a tinyloop::EarlyExitPolicy (patience >= 1) with the engine's exit
// rule (tinyloop::exit_probe_at, exit_after_probe): the one decoding applies.
using tinyloop::EarlyExitPolicy;

// The value shown on the criterion's axis: the margin itself for LogitMargin (the engine keeps
// -margin so that smaller is more stable), the signal otherwise.
float display_signal(tinyloop::EarlyExitCriterion c, float engine_signal);
const char* criterion_label(tinyloop::EarlyExitCriterion c);  // "hidden_l2", "logit_margin", ...

struct CalibToken {
    int index = 0;          // among emitted tokens
    int row = 0;            // position of the row that produces it (prompt_len + index - 1)
    int exit_depth = 0;     // depth the row would stop at (loops: no exit)
    int32_t full_token = 0; // the full-depth token
    int32_t exit_token = 0; // the token the exit depth's lens picks
    bool flagged = false;   // exit_token != full_token
};

// Re-scores every emitted token but the first (which comes from the prompt, prefilled at full
// depth) under the policy. Throws tinyloop::Error for a policy field out of range.
std::vector<CalibToken> rescore_calibration(const CalibData& data, const EarlyExitPolicy& policy);

nlohmann::json calibration_json(const CalibData& data, const EarlyExitPolicy& policy,
                                const std::vector<CalibToken>& scored);

}  // namespace tinyloop::analysis
