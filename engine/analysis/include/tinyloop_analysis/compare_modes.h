// Compare decode modes: one decode mode with its settings as data (a labelled tinyloop::RunSpec),
// one engine call per mode (tinyloop::run_decode, which owns the mode rules), and the side-by-side
// comparison of several modes on one prompt (one after another by default, or concurrently on the
// one Model), each timed over repeats (timing_stats.h). No Qt: tests/analysis checks these results, the workbench's view only draws them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>
#include <tinyloop_analysis/timing_stats.h>

namespace tinyloop::analysis {

// One decode mode and its settings, as the engine takes them (mode, GenerateConfig, speculation
// knobs), with the label the view shows ("greedy L=4").
struct ModeSpec {
    std::string label;
    tinyloop::RunSpec run;
};

// The comparison's default set for hyperparameters: at the default depth D (8 when they name none),
// greedy at 2D and at D, and from D >= 2 chain, tree and pipelined self-speculation verified at D
// with the engine's built-in knobs (builtin_speculation), then early exit (hidden_l2 below 0.1 and
// 0.2), sampling with a seed. Depths are clamped to max_loops.
std::vector<ModeSpec> default_compare_modes(const tinyloop::HParams& hp, int max_tokens);
// The default set on a loaded model. When its file recommends early exit or speculation
// (model_recommendation): the modes as the file says they pay, at its default depth D — greedy
// at 2D and at D (the second mode, the view's default baseline), chain and tree self-speculation
// verified at D and pipelined self-speculation with the chain's knobs, with the knobs the
// engine's resolver (resolve_run) gives (the file's, else the built-in ones), early exit with its policy (when the file has one), sampling. Otherwise the
// set above for its hyperparameters.
std::vector<ModeSpec> default_compare_modes(const tinyloop::Model* model, int max_tokens);

// What one mode produced.
struct ModeRun {
    ModeSpec spec;
    std::vector<int32_t> tokens;  // the continuation only
    std::string text;
    tinyloop::GenerateStats stats;  // the first repeat's (the runs are deterministic)
    Timing time;                    // total_ms of every repeat
    Timing first_token;             // first_token_ms of every repeat
    int loops = 0;                // the depth asked for (verify depth when speculating)
    bool speculative = false;
    std::string error;            // non-empty: the engine refused the mode (message)

    double mean_depth() const;     // mean of depth_per_token (0 when no tokens)
    double tokens_per_second() const;  // emitted tokens / total_ms (the median repeat when timed)
    Rate tokens_per_second_range() const;  // over the repeats (median, slowest, fastest)
    Timing ms_per_token() const;        // total_ms / emitted tokens, per repeat: what a ranking compares
};

// Runs one mode through tinyloop::run_decode (the engine applies the mode's rules). Throws
// tinyloop::Error on a refused config. `options` is passed through (observer, lens).
ModeRun run_mode(tinyloop::Model* model, const std::vector<int32_t>& prompt, const ModeSpec& spec,
                const tinyloop::GenerateOptions& options = {});

// The prompt as the workbench feeds it: tokenized; an empty prompt starts from BOS/EOS.
std::vector<int32_t> prompt_ids(const tinyloop::Model* model, const std::string& text);

// Index of the first token where `a` and `b` differ; -1 when equal (same length, same ids).
int first_divergence(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

struct CompareResult {
    std::string prompt;
    std::vector<int32_t> prompt_ids;
    std::vector<ModeRun> runs;
    int baseline = 0;                 // index into runs
    bool concurrent = false;
    int repeats = 1;
    double wall_ms = 0;                // the whole comparison, wall clock
    std::vector<int> divergence;      // per run: first_divergence(run, baseline)
};

// Runs every mode on one prompt `repeats` times ([kMinRepeats, kMaxRepeats], else tinyloop::Error
// naming "repeats"): one after another (the honest default: concurrent runs share the cores and
// read several times slower), or concurrently (one std::thread per mode on the one Model, each
// repeat a round). Repeats go round the modes, so a drift of the machine's speed hits them alike.
// A mode the engine refuses keeps its error in ModeRun::error; the others still run.
// `cancel` (optional) stops every run at its next token; `on_done(i)` (optional, any thread) is
// called as each run of mode i ends (modes x repeats calls).
CompareResult run_comparison(tinyloop::Model* model, const std::string& prompt,
                            const std::vector<ModeSpec>& modes, int baseline, bool concurrent, int repeats,
                            const std::atomic<bool>* cancel = nullptr,
                            const std::function<void(int)>& on_done = {});
// The modes that finished, fastest first by median ms per token, with which neighbours are too
// close to rank (timing_stats.h); and that as one line for the view's status.
Ranking rank_modes(const CompareResult& r);
std::string ranking_sentence(const CompareResult& r);
// Re-computes divergence against a new baseline.
void set_baseline(CompareResult& r, int baseline);

nlohmann::json mode_spec_to_json(const ModeSpec& m);
nlohmann::json compare_to_json(const CompareResult& r);

}  // namespace tinyloop::analysis
