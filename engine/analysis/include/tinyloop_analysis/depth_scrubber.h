// The computation behind the depth scrubber, the draft-agreement map and the speculation tuning
// sweep (issue 8). No Qt: the tests check these results, the views only draw them.
//
//  * DepthScrubber answers one prompt at any loop depth through a ResumeHandle, so moving the
//    slider never recomputes the prompt (deeper: only the new passes run; shallower: free).
//  * AgreementMap: for each emitted position, the lens argmax at every depth and the first depth
//    whose argmax equals the final depth's. A greedy drafter at depth D proposes exactly the lens
//    argmax at D (the weights are shared, so the state after D passes is the D-loop model's), so
//    the map predicts what self-speculation D -> final will accept.
//  * runSweep: speculation over a grid draft_loops x draft_ahead (x K_branches) on a prompt set,
//    measured against greedy at the verify depth, next to what the map predicts.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>

#include "main/preset_store.h"

namespace tlui {

// ---------------------------------------------------------------------------------------------
// Token diff (LCS) between two answers
// ---------------------------------------------------------------------------------------------

struct DiffOp {
    enum Kind { Same, Removed, Added };
    Kind kind = Same;
    int32_t token = 0;
};
// Shortest edit script turning `from` into `to` (longest common subsequence; ties keep removals
// before additions). Same + Removed replays `from`; Same + Added replays `to`.
std::vector<DiffOp> diffTokens(const std::vector<int32_t>& from, const std::vector<int32_t>& to);

// ---------------------------------------------------------------------------------------------
// Depth scrubber
// ---------------------------------------------------------------------------------------------

struct ScrubAnswer {
    int depth = 0;
    std::vector<int32_t> tokens;  // continuation
    std::string text;
    tinyloop::GenerateStats stats;
    int handleLoopsBefore = 0;    // deepest prompt depth computed before this answer
    int handleLoopsAfter = 0;     // ... and after (grows only when the answer went deeper)
    double ms = 0;                // wall time of resume_generate
};

class DepthScrubber {
public:
    // Prefills `prompt` once at `startDepth` (create_resume_handle). `config` is the decode config
    // every answer uses, with loops replaced by the slider's depth. Throws tinyloop::Error.
    DepthScrubber(tinyloop::Model* model, std::vector<int32_t> prompt, const tinyloop::GenerateConfig& config,
                  int startDepth);
    ~DepthScrubber();
    DepthScrubber(const DepthScrubber&) = delete;
    DepthScrubber& operator=(const DepthScrubber&) = delete;

    // Answers at `depth` (1..max_loops) through resume_generate; throws tinyloop::Error naming
    // the depth when it is out of range.
    ScrubAnswer answer(int depth);
    int handleLoops() const;
    size_t handleBytes() const;
    const std::vector<int32_t>& prompt() const { return m_prompt; }
    const tinyloop::GenerateConfig& config() const { return m_config; }

private:
    tinyloop::Model* m_model;
    std::vector<int32_t> m_prompt;
    tinyloop::GenerateConfig m_config;
    tinyloop::ResumeHandle* m_handle = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Draft-agreement map
// ---------------------------------------------------------------------------------------------

struct AgreementMap {
    int finalDepth = 0;
    std::vector<int32_t> prompt;
    std::vector<int32_t> continuation;           // the tokens the map is read on
    std::vector<std::vector<int32_t>> argmax;    // [j][d-1]: lens argmax predicting continuation[j]
    std::vector<int> firstAgree;                 // [j]: first d with argmax[j][d-1] == argmax[j][final-1]

    int positions() const { return static_cast<int>(argmax.size()); }
    bool agrees(int j, int depth) const {
        return argmax[static_cast<size_t>(j)][static_cast<size_t>(depth - 1)] ==
               argmax[static_cast<size_t>(j)][static_cast<size_t>(finalDepth - 1)];
    }
};

// From a hand-built (or computed) argmax table [positions][depths]; the last column is the final
// depth. Throws std::invalid_argument on a ragged or empty row.
AgreementMap agreementFromArgmax(const std::vector<std::vector<int32_t>>& argmax);

// The map over `continuation` after `prompt` at `finalDepth` (score_logit_lens, top 1): row j is
// the lens at position prompt.size() - 1 + j, which predicts continuation[j].
AgreementMap buildAgreementMap(tinyloop::Model* model, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& continuation, int finalDepth);

// The acceptance a greedy drafter at `draftDepth` would get: the fraction of positions j >= 1
// (position 0 comes from the prompt's prefill and is never drafted) whose argmax at draftDepth
// equals the final one. 0 when there are no such positions.
double predictedAcceptance(const AgreementMap& map, int draftDepth);

// Self-speculation replayed on the map (chain, greedy): cycles of up to draftAhead drafts, each
// accepting the leading agreements, a rejection adding the verifier's token, all accepted adding
// none (the engine's rule). `maxTokens` caps emission as the engine does (0: the map's length).
struct ChainReplay {
    int cycles = 0;
    int drafted = 0;
    int accepted = 0;
    int emitted = 0;
    double acceptance() const { return drafted > 0 ? double(accepted) / drafted : 0.0; }
};
ChainReplay replayChain(const AgreementMap& map, int draftDepth, int draftAhead, int maxTokens = 0);

// Speedup over greedy at verifyDepth that per-token acceptance `alpha` predicts, counting loop
// passes: a cycle drafts k tokens at draftDepth passes each and verifies them in one batched
// forward of verifyDepth - draftDepth passes (priced as one token: decode is memory-bound), and
// emits (1 - alpha^k) / (1 - alpha) tokens on average (k when alpha = 1).
double predictedSpeedup(double alpha, int draftDepth, int verifyDepth, int draftAhead);

// ---------------------------------------------------------------------------------------------
// Speculation tuning sweep
// ---------------------------------------------------------------------------------------------

struct SweepSpec {
    std::vector<std::string> prompts;
    int maxTokens = 24;
    int verifyLoops = 0;               // 0 = the model's default depth
    std::vector<int> draftLoops = {1, 2, 3};
    std::vector<int> draftAhead = {2, 4, 6};
    std::vector<int> branches = {0};   // 0 = chain speculation; K >= 1 = tree with K branches
};

struct SweepCell {
    int draftLoops = 0, draftAhead = 0, branches = 0;
    int runs = 0;                      // prompts run for this cell
    int tokens = 0;                    // tokens emitted, summed over prompts
    int cycles = 0, drafted = 0, tested = 0, accepted = 0;
    double totalMs = 0;                // speculative wall time, summed over prompts
    double baselineMs = 0;             // greedy at the verify depth, the same prompts (faster of two runs)
    bool equalsGreedy = true;          // every prompt's text equals greedy at the verify depth
    double predictedAcceptance = 0;    // from the agreement maps (pooled over prompts)
    std::string error;

    double acceptance() const { return tested > 0 ? double(accepted) / tested : 0.0; }
    double measuredSpeedup() const { return totalMs > 0 ? baselineMs / totalMs : 0.0; }
    double predictedSpeedup(int verifyLoops) const;
};

struct SweepResult {
    SweepSpec spec;
    int verifyLoops = 0;
    std::vector<std::vector<int32_t>> promptIds;
    std::vector<std::vector<int32_t>> baselineTokens;  // greedy continuation per prompt
    std::vector<double> baselineMs;                    // per prompt
    std::vector<AgreementMap> maps;                    // per prompt, on the greedy continuation
    std::vector<SweepCell> cells;                      // grid order: branches, draftLoops, draftAhead
    int cellsPlanned = 0;
    bool cancelled = false;

    int bestCell() const;  // highest measured speedup among cells without error; -1 if none
    Preset bestPreset() const;  // the best cell as a preset (mode, max_tokens, knobs)
};

// Runs the grid: the greedy baseline per prompt, every cell on every prompt, the baseline again
// (each prompt keeps its faster baseline time). `progress(done, total)` is called after each run;
// `cancel` ends it between runs and inside a run at its next token. Cells whose draft depth is not
// below the verify depth are skipped (not planned). Throws tinyloop::Error on an empty prompt set
// or grid, or a value outside its range, naming the field.
SweepResult runSweep(tinyloop::Model* model, const SweepSpec& spec, const std::atomic<bool>* cancel = nullptr,
                     const std::function<void(int, int)>& progress = {});

nlohmann::json agreementToJson(const AgreementMap& m);
nlohmann::json sweepToJson(const SweepResult& r);

}  // namespace tlui
