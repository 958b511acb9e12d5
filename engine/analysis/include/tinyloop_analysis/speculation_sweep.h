// Speculation tuning sweep: speculation over a grid draft_loops x draft_ahead (x K_branches) on a
// prompt set, measured against greedy at the verify depth, next to what the agreement maps
// predict. Every run goes through tinyloop::run_decode (compare_modes.h's run_mode). No Qt.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>
#include <tinyloop_analysis/agreement_map.h>
#include <tinyloop_analysis/compare_modes.h>

namespace tinyloop::analysis {

// ---------------------------------------------------------------------------------------------
// Speculation tuning sweep
// ---------------------------------------------------------------------------------------------

struct SweepSpec {
    std::vector<std::string> prompts;
    int max_tokens = 24;
    int verify_loops = 0;               // 0 = the model's default depth
    std::vector<int> draft_loops = {1, 2, 3};
    std::vector<int> draft_ahead = {2, 4, 6};
    std::vector<int> branches = {0};   // 0 = chain speculation; K >= 1 = tree with K branches
};

struct SweepCell {
    int draft_loops = 0, draft_ahead = 0, branches = 0;
    int runs = 0;                      // prompts run for this cell
    int tokens = 0;                    // tokens emitted, summed over prompts
    int cycles = 0, drafted = 0, tested = 0, accepted = 0;
    double total_ms = 0;                // speculative wall time, summed over prompts
    double baseline_ms = 0;             // greedy at the verify depth, the same prompts (faster of two runs)
    bool equals_greedy = true;          // every prompt's text equals greedy at the verify depth
    double predicted_acceptance = 0;    // from the agreement maps (pooled over prompts)
    std::string error;

    double acceptance() const { return tested > 0 ? double(accepted) / tested : 0.0; }
    double measured_speedup() const { return total_ms > 0 ? baseline_ms / total_ms : 0.0; }
    double predicted_speedup(int verify_loops) const;
};

struct SweepResult {
    SweepSpec spec;
    int verify_loops = 0;
    std::vector<std::vector<int32_t>> prompt_ids;
    std::vector<std::vector<int32_t>> baseline_tokens;  // greedy continuation per prompt
    std::vector<double> baseline_ms;                    // per prompt
    std::vector<AgreementMap> maps;                    // per prompt, on the greedy continuation
    std::vector<SweepCell> cells;                      // grid order: branches, draft_loops, draft_ahead
    int cells_planned = 0;
    bool cancelled = false;

    int best_cell() const;  // highest measured speedup among cells without error; -1 if none
    // The best cell as a run: chain or tree speculation, greedy, at the sweep's max_tokens and
    // verify depth (label "sweep best chain 2->6 k=4"); an empty label when there is none.
    ModeSpec best_spec() const;
};

// Runs the grid: the greedy baseline per prompt, every cell on every prompt, the baseline again
// (each prompt keeps its faster baseline time). `progress(done, total)` is called after each run;
// `cancel` ends it between runs and inside a run at its next token. Cells whose draft depth is not
// below the verify depth are skipped (not planned). Throws tinyloop::Error on an empty prompt set
// or grid, or a value outside its range, naming the field.
SweepResult run_sweep(tinyloop::Model* model, const SweepSpec& spec, const std::atomic<bool>* cancel = nullptr,
                     const std::function<void(int, int)>& progress = {});

nlohmann::json sweep_to_json(const SweepResult& r);

}  // namespace tinyloop::analysis
