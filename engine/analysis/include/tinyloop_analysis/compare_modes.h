// Compare decode modes: one decode mode with its settings as data (a labelled tinyloop::RunSpec),
// one engine call per mode (tinyloop::run_decode, which owns the mode rules), and the side-by-side
// comparison of several modes on one prompt (run concurrently on the one Model, or one after
// another). No Qt: tests/analysis checks these results, the workbench's view only draws them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>

namespace tinyloop::analysis {

// One decode mode and its settings, as the engine takes them (mode, GenerateConfig, speculation
// knobs), with the label the view shows ("greedy L=4").
struct ModeSpec {
    std::string label;
    tinyloop::RunSpec run;
};

// The comparison's default set on a model: greedy at 4 and 8 loops, speculative 2->8, tree 2->8
// (K=2), early exit at two thresholds, sampling with a seed. Depths are clamped to max_loops.
std::vector<ModeSpec> default_compare_modes(const tinyloop::HParams& hp, int max_tokens);

// What one mode produced.
struct ModeRun {
    ModeSpec spec;
    std::vector<int32_t> tokens;  // the continuation only
    std::string text;
    tinyloop::GenerateStats stats;
    int loops = 0;                // the depth asked for (verify depth when speculating)
    bool speculative = false;
    std::string error;            // non-empty: the engine refused the mode (message)

    double mean_depth() const;     // mean of depth_per_token (0 when no tokens)
    double tokens_per_second() const;  // emitted tokens / total_ms
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
    double wall_ms = 0;                // the whole comparison, wall clock
    std::vector<int> divergence;      // per run: first_divergence(run, baseline)
};

// Runs every mode on one prompt, concurrently (one std::thread per mode on the one Model) or one
// after another. A mode the engine refuses keeps its error in ModeRun::error; the others still run.
// `cancel` (optional) stops every run at its next token; `on_done(i)` (optional, any thread) is
// called as each mode ends.
CompareResult run_comparison(tinyloop::Model* model, const std::string& prompt,
                            const std::vector<ModeSpec>& modes, int baseline, bool concurrent,
                            const std::atomic<bool>* cancel = nullptr,
                            const std::function<void(int)>& on_done = {});
// Re-computes divergence against a new baseline.
void set_baseline(CompareResult& r, int baseline);

nlohmann::json mode_spec_to_json(const ModeSpec& m);
nlohmann::json compare_to_json(const CompareResult& r);

}  // namespace tinyloop::analysis
