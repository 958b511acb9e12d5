// A hand-made speculation sweep cell for the tests that show a sweep without running one: its
// timed repeats (ms) against greedy's, 7 of 10 drafted tokens accepted.
#pragma once

#include <utility>
#include <vector>

#include <tinyloop_analysis/speculation_sweep.h>
#include <tinyloop_analysis/timing_stats.h>

namespace tltest {

inline tinyloop::analysis::SweepCell sweepCell(int d, int k, std::vector<double> ms, std::vector<double> greedy) {
    tinyloop::analysis::SweepCell c;
    c.draft_loops = d;
    c.draft_ahead = k;
    c.runs = 1;
    c.tokens = 8;
    c.tested = 10;
    c.accepted = 7;
    c.time = tinyloop::analysis::summarize(std::move(ms));
    c.baseline = tinyloop::analysis::summarize(std::move(greedy));
    c.total_ms = c.time.median;
    c.baseline_ms = c.baseline.median;
    return c;
}

}  // namespace tltest
