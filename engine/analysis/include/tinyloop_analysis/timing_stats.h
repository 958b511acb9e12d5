// Honest timings: a measurement repeated a few times, its median and its spread, and the one rule
// the views use to say that one setting is faster than another (or too close to call). No Qt:
// the workbench's timing views (compare modes, speculation sweep, compute against quality) draw
// what this computes, and tests/analysis checks the rule.
//
// The rule ("distinguishable"): A is faster than B beyond the noise when A's slowest run is
// faster than B's fastest run, i.e. the ranges [min, max] of the repeats do not overlap, and both
// were measured at least kMinRepeats times (one lucky run proves nothing). With three repeats that
// is a conservative test; when the ranges overlap the views say "too close to rank" rather than
// pick a winner.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tinyloop::analysis {

// Repeats of one timed measurement: the views default to this many, and accept [kMinRepeats,
// kMaxRepeats] (a median needs three).
inline constexpr int kDefaultRepeats = 3;
inline constexpr int kMinRepeats = 3;
inline constexpr int kMaxRepeats = 20;

// Throws tinyloop::Error naming `field` when `repeats` is outside [kMinRepeats, kMaxRepeats].
void check_repeats(int repeats, const char* field = "repeats");

// One measurement (milliseconds, or any "smaller is faster" quantity) repeated.
struct Timing {
    std::vector<double> samples;  // in the order measured
    double median = 0;            // middle sample (mean of the two middle ones for an even count)
    double min = 0, max = 0;      // the spread: fastest and slowest repeat

    bool empty() const { return samples.empty(); }
    double spread() const { return max - min; }
    // Spread as a fraction of the median (0 when the median is 0).
    double relative_spread() const { return median > 0 ? (max - min) / median : 0.0; }
};

// Median, min and max of `samples` (all zero when empty).
Timing summarize(std::vector<double> samples);

// A throughput (per second) from a time in ms: the median maps to the median, the fastest time to
// the highest rate; `count` units per measurement (tokens). Zero where a time is not positive.
struct Rate {
    double median = 0, min = 0, max = 0;
};
Rate rate_per_second(const Timing& ms, double count);

// A is faster than B beyond the noise: every repeat of A took less than every repeat of B
// (a.max < b.min), each measured at least kMinRepeats times. False otherwise.
bool faster_beyond_noise(const Timing& a, const Timing& b);

// Neither is faster beyond the noise (the ranges overlap), or one of them is empty.
bool too_close_to_rank(const Timing& a, const Timing& b);

// A ratio of two repeated times (speedup = baseline / candidate): its median and the range the
// repeats allow (baseline.min / candidate.max .. baseline.max / candidate.min).
struct Speedup {
    double median = 0, min = 0, max = 0;
    bool beyond_noise = false;  // candidate faster than baseline beyond the noise
};
Speedup speedup_over(const Timing& baseline, const Timing& candidate);

// Orders measurements fastest first by median and says, for each neighbour pair in that order,
// whether they are distinguishable. `order[i]` indexes `timings`; `distinct_from_next[i]` is
// faster_beyond_noise(order[i], order[i + 1]) (the last entry is false). Empty timings go last.
struct Ranking {
    std::vector<int> order;
    std::vector<bool> distinct_from_next;
    // True when every neighbour pair is distinguishable (a full ranking holds).
    bool fully_ranked() const;
};
Ranking rank_fastest_first(const std::vector<Timing>& timings);

// One line for a person: "A is faster than B beyond the noise (3 repeats: 1.20..1.31 ms against
// 1.45..1.60 ms)" or "A and B are too close to rank: their ranges overlap (...)". `unit` follows
// the numbers ("ms").
std::string compare_sentence(const std::string& a_label, const Timing& a, const std::string& b_label,
                             const Timing& b, const std::string& unit = "ms");

// {"median", "min", "max", "samples"} for the views' JSON exports.
nlohmann::json timing_to_json(const Timing& t);

}  // namespace tinyloop::analysis
