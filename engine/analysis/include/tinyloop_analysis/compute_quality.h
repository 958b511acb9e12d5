// Compute against quality, the data behind its view (no Qt): for one text, each setting's mean
// NLL per token (teacher-forced, through the scoring API) against the compute it spends.
//
//   fixed depth d        score(text, d): NLL; compute d loop passes per token
//   early exit (c, t)    score_early_exit(text, config): NLL; compute = mean depth_used over the
//                        positions that predict a token
//   speculative (D, K)   lossless at temperature 0, so its quality is score(text, V); compute =
//                        loop passes per decoded token of a real speculative run
//                        from the text's first tokens (verification runs every drafted row
//                        through all V passes: V * spec_drafted / (emitted - 1))
// Each setting also gets decode time per token (ms) from real greedy decodes of the same
// length from the same prompt (tinyloop::run_decode: Greedy, EarlyExit or Speculative), repeated
// (median and range, timing_stats.h), so the chart can use time instead of passes on its x axis.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>
#include <tinyloop_analysis/timing_stats.h>

namespace tinyloop::analysis {

struct ComputeSettings {
    std::vector<int> depths;                  // fixed depths, each 1..max_loops
    int exit_loops = 0;                       // early exit's full depth (0 = default)
    // early-exit runs at exit_loops, one engine policy each (exit_setting: patience 1, min_L 2
    // capped at exit_loops, peek every pass)
    std::vector<tinyloop::EarlyExitPolicy> exits;
    int verify_loops = 0;                     // speculative verify depth (0 = default)
    // chain self-speculation at verify_loops, one engine policy each (spec_setting: draft depth,
    // draft_ahead; the verify depth is verify_loops)
    std::vector<tinyloop::SpeculationPolicy> specs;
    int prompt_tokens = 8;   // decodes (time, speculation) start from the text's first tokens
    int decode_tokens = 32;  // ... and emit this many (2..1024)
    int repeats = kDefaultRepeats;  // timed decodes per setting, [kMinRepeats, kMaxRepeats]
};

// The policies the sweep runs, from the knobs it varies.
tinyloop::EarlyExitPolicy exit_setting(tinyloop::EarlyExitCriterion criterion, float threshold);
tinyloop::SpeculationPolicy spec_setting(int draft_loops, int draft_ahead);

struct ComputePoint {
    std::string series;        // "fixed depth", "early exit <criterion>", "speculative"
    std::string label;         // e.g. "L=4", "kl<0.1", "D2 K4 V4"
    double mean_depth = 0;     // loop passes per token
    double nll = 0;            // mean NLL per scored token, nats
    double ms_per_token = 0;   // decode time per token after the first: the median repeat
    Timing ms;                 // that time over every repeat (median, min, max)
    int scored_tokens = 0;
    double acceptance = -1;    // speculative: spec_acceptance_rate; -1 otherwise
};

// Default settings for a model: depths 1..max(default, 8) capped at max_loops, four thresholds
// of three criteria, speculative drafts at depths 1..3 below the default depth.
ComputeSettings default_compute_settings(const tinyloop::HParams& hp);

using ComputeProgress = std::function<void(int done, int total, const std::string& what)>;

// Throws tinyloop::Error (a text under two tokens, a setting out of range).
std::vector<ComputePoint> compute_vs_quality(tinyloop::Model* model, const std::vector<int32_t>& text,
                                             const ComputeSettings& s, const ComputeProgress& progress = {},
                                             const std::atomic<bool>* cancel = nullptr);

nlohmann::json compute_json(const std::vector<ComputePoint>& points, int text_tokens);

}  // namespace tinyloop::analysis
