// Speculation tuning sweep: speculation over a grid draft_loops x draft_ahead (x branches) on a
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
#include <tinyloop_analysis/timing_stats.h>

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
    int repeats = kDefaultRepeats;     // timed repeats of the whole grid, [kMinRepeats, kMaxRepeats]
};

struct SweepCell {
    int draft_loops = 0, draft_ahead = 0, branches = 0;
    int runs = 0;                      // prompts run for this cell (first repeat)
    int tokens = 0;                    // tokens emitted, summed over prompts (first repeat)
    int cycles = 0, drafted = 0, tested = 0, accepted = 0;  // first repeat (the runs are deterministic)
    Timing time;                       // per complete repeat: speculative ms summed over every prompt
    Timing baseline;                   // greedy at the verify depth, the same repeats, summed over every prompt
    double total_ms = 0;               // time.median
    double baseline_ms = 0;            // baseline.median
    bool equals_greedy = true;         // every prompt's text equals greedy at the verify depth
    double predicted_acceptance = 0;   // from the agreement maps (pooled over prompts)
    std::string error;

    double acceptance() const { return tested > 0 ? double(accepted) / tested : 0.0; }
    // Median speedup over greedy, its range over the repeats, and whether it is beyond the noise
    // (every repeat of the cell faster than every repeat of greedy; timing_stats.h).
    Speedup speedup() const { return speedup_over(baseline, time); }
    double measured_speedup() const { return speedup().median; }
    double predicted_speedup(int verify_loops) const;
};

struct SweepResult {
    SweepSpec spec;
    int verify_loops = 0;
    std::vector<std::vector<int32_t>> prompt_ids;
    std::vector<std::vector<int32_t>> baseline_tokens;  // greedy continuation per prompt
    std::vector<double> baseline_ms;                    // per prompt, median over the repeats
    Timing baseline;                                    // per complete repeat, summed over every prompt
    std::vector<AgreementMap> maps;                    // per prompt, on the greedy continuation
    std::vector<SweepCell> cells;                      // grid order: branches, draft_loops, draft_ahead
    int cells_planned = 0;
    bool cancelled = false;

    // Highest median speedup among finished cells without error (-1 if none), whether or not it
    // beats greedy beyond the noise.
    int fastest_cell() const;
    // The fastest cell when it is faster than greedy beyond the noise; -1 otherwise (then no cell
    // may be called "best" or saved as one).
    int best_cell() const;
    // Why there is no best cell, in words ("" when there is one).
    std::string no_best_reason() const;
    // The best cell as a run: chain or tree speculation, greedy, at the sweep's max_tokens and
    // verify depth (label "sweep best chain 2->6 k=4"); an empty label when there is none.
    ModeSpec best_spec() const;
};

// Runs the grid, one run at a time: an untimed warm-up, then `repeats` times over the greedy
// baseline on every prompt and every cell on every prompt (repeats interleave, so a drift of the
// machine's speed hits greedy and the cells alike). `progress(done, total)` is called after each run;
// `cancel` ends it between runs and inside a run at its next token. Cells whose draft depth is not
// below the verify depth are skipped (not planned). Throws tinyloop::Error on an empty prompt set
// or grid, or a value outside its range, naming the field.
SweepResult run_sweep(tinyloop::Model* model, const SweepSpec& spec, const std::atomic<bool>* cancel = nullptr,
                     const std::function<void(int, int)>& progress = {});

nlohmann::json sweep_to_json(const SweepResult& r);

}  // namespace tinyloop::analysis
