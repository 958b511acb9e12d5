// Finding a checkpoint's recommended settings (tinyloop::Recommendation), the analysis behind
// `tinyloop recommend` and the views' "Save as the model's recommendation". No Qt.
//
// Early exit: every policy of a grid (criterion x threshold x patience x min_L) scores a held-out
// text teacher-forced (tinyloop::score_early_exit); the chosen one has the lowest modelled cost
// per token (prelude + passes + head + a head per probe for the criteria that read the lens,
// from the hyperparameters and the exit depths: deterministic, no wall time) among those whose
// NLL is within `nll_tolerance` of the fixed default depth's.
// Speculation: the sweep (speculation_sweep.h) over chain and tree cells; the chosen cell of each
// kind has the highest measured wall speedup over greedy in the same run, among cells whose text
// equals greedy and that are faster than greedy beyond the noise. The modelled speedup, tokens
// per cycle x V / (K x D + V - D) passes from the measured acceptance, is reported beside it: it
// counts a batched verification as one pass and so over-rates long drafts on a CPU.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>
#include <tinyloop_analysis/speculation_sweep.h>

namespace tinyloop::analysis {

struct ExitCandidate {
    tinyloop::EarlyExitPolicy policy;  // the policy measured (patience >= 1, peek_every 1)
    double nll = 0;                  // per token
    double mean_depth = 0;           // over positions
    double relative_cost = 1;        // modelled multiply-adds per token over the fixed depth's
    std::vector<int> depth_counts;   // [depth-1]: positions that stopped there
};

struct ExitSearch {
    int loops = 0;                   // the fixed depth compared with (the model's default)
    double base_nll = 0;             // per token at that depth
    double nll_tolerance = 0.01;     // relative
    std::vector<ExitCandidate> candidates;
    int best = -1;                   // index into candidates; -1: none within the tolerance exits early
};

// Scores `tokens` (2 .. max_seq_len) at the default depth, then under every policy of the grid.
// Throws tinyloop::Error naming the field for a bad input.
ExitSearch search_exit_policy(tinyloop::Model* model, const std::vector<int32_t>& tokens, double nll_tolerance = 0.01,
                              const std::atomic<bool>* cancel = nullptr,
                              const std::function<void(int, int)>& progress = {});

// The modelled speedup of a sweep cell (see above); 0 for a cell without cycles.
double modelled_speedup(const SweepCell& cell, int verify_loops);
// Index of the chain (tree = false) or tree cell of `sweep` with the highest measured wall
// speedup among cells whose text equals greedy and that are faster than greedy beyond the noise
// of the same run; -1 if none. (The modelled speedup is reported beside it, not used: it
// over-rates long drafts on a CPU.)
int best_paying_cell(const SweepResult& sweep, bool tree);

// The Recommendation the two searches give (speculation part left empty when `sweep` is null or
// has no paying cell; early-exit part empty when `exits` is null or has no best).
tinyloop::Recommendation recommendation_from(const ExitSearch* exits, const SweepResult* sweep);

// {"early_exit": {...search, the chosen policy}, "speculation": {...chosen cells}}: the
// measurements a card or the metadata's "measured" key records.
nlohmann::json exit_search_to_json(const ExitSearch& s);
nlohmann::json speculation_choice_to_json(const SweepResult& sweep);

// The model file's metadata with "recommended" set to `rec` plus "measured": what
// write_model_metadata writes (`tinyloop recommend --write`, the views' save button).
std::string metadata_with_recommendation(const std::string& metadata_json, const tinyloop::Recommendation& rec,
                                         const nlohmann::json& measured);

}  // namespace tinyloop::analysis
