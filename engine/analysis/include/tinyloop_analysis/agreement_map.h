// Draft-agreement map: for each emitted position, the lens argmax at every depth and the first
// depth whose argmax equals the final depth's. A greedy drafter at depth D proposes exactly the
// lens argmax at D (the weights are shared, so the state after D passes is the D-loop model's), so
// the map predicts what self-speculation D -> final will accept. No Qt.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>

namespace tinyloop::analysis {

// ---------------------------------------------------------------------------------------------
// Draft-agreement map
// ---------------------------------------------------------------------------------------------

struct AgreementMap {
    int final_depth = 0;
    std::vector<int32_t> prompt;
    std::vector<int32_t> continuation;           // the tokens the map is read on
    std::vector<std::vector<int32_t>> argmax;    // [j][d-1]: lens argmax predicting continuation[j]
    std::vector<int> first_agree;                 // [j]: first d with argmax[j][d-1] == argmax[j][final-1]

    int positions() const { return static_cast<int>(argmax.size()); }
    bool agrees(int j, int depth) const {
        return argmax[static_cast<size_t>(j)][static_cast<size_t>(depth - 1)] ==
               argmax[static_cast<size_t>(j)][static_cast<size_t>(final_depth - 1)];
    }
};

// From a hand-built (or computed) argmax table [positions][depths]; the last column is the final
// depth. Throws std::invalid_argument on a ragged or empty row.
AgreementMap agreement_from_argmax(const std::vector<std::vector<int32_t>>& argmax);

// The map over `continuation` after `prompt` at `final_depth` (score_logit_lens, top 1): row j is
// the lens at position prompt.size() - 1 + j, which predicts continuation[j].
AgreementMap build_agreement_map(tinyloop::Model* model, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& continuation, int final_depth);

// The acceptance a greedy drafter at `draft_depth` would get: the fraction of positions j >= 1
// (position 0 comes from the prompt's prefill and is never drafted) whose argmax at draft_depth
// equals the final one. 0 when there are no such positions.
double predicted_acceptance(const AgreementMap& map, int draft_depth);

// Self-speculation replayed on the map (chain, greedy): cycles of up to draft_ahead drafts, each
// accepting the leading agreements, a rejection adding the verifier's token, all accepted adding
// none (the engine's rule). `max_tokens` caps emission as the engine does (0: the map's length).
struct ChainReplay {
    int cycles = 0;
    int drafted = 0;
    int accepted = 0;
    int emitted = 0;
    double acceptance() const { return drafted > 0 ? double(accepted) / drafted : 0.0; }
};
ChainReplay replay_chain(const AgreementMap& map, int draft_depth, int draft_ahead, int max_tokens = 0);

// Speedup over greedy at verify_depth that per-token acceptance `alpha` predicts, counting loop
// passes: a cycle drafts k tokens at draft_depth passes each and verifies them in one batched
// forward of verify_depth - draft_depth passes (priced as one token: decode is memory-bound), and
// emits (1 - alpha^k) / (1 - alpha) tokens on average (k when alpha = 1).
double predicted_speedup(double alpha, int draft_depth, int verify_depth, int draft_ahead);

nlohmann::json agreement_to_json(const AgreementMap& m);

}  // namespace tinyloop::analysis
