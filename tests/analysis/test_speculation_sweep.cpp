// The speculation tuning sweep (tinyloop_analysis): its counts are those of the same runs made
// alone, every cell is timed over the repeats against greedy's repeats, "best" is only a cell
// faster than greedy beyond the noise, it cancels between runs, and it refuses a bad grid naming
// the field.
#include <atomic>

#include <tinyloop_analysis/speculation_sweep.h>
#include <gtest/gtest.h>

#include "analysis_test_util.h"

using namespace tinyloop::analysis;
using namespace analysis_test;

TEST(SpeculationSweep, CountsComeFromRealRuns) {
    tinyloop::Model* m_model = bundled();

    SweepSpec s;
    s.prompts = {"In the beginning", "And the earth was"};
    s.max_tokens = 10;
    s.verify_loops = 6;
    s.draft_loops = {1, 3, 6};  // 6 is not below the verify depth: skipped
    s.draft_ahead = {2, 4};
    s.branches = {0, 2};
    s.repeats = 3;
    int calls = 0, lastTotal = 0;
    const SweepResult r = run_sweep(m_model, s, nullptr, [&](int done, int total) {
        ++calls;
        EXPECT_EQ(done, calls);
        lastTotal = total;
    });
    EXPECT_EQ(r.cells_planned, 2 * 2 * 2);
    EXPECT_EQ(static_cast<int>(r.cells.size()), 8);
    EXPECT_EQ(lastTotal, 1 + 3 * (2 + 8 * 2));  // warm-up, then per repeat: baseline, cells
    EXPECT_EQ(r.baseline.samples.size(), size_t(3));
    EXPECT_EQ(calls, lastTotal);
    EXPECT_TRUE(!r.cancelled);
    int baseline_tokens = 0;
    for (const auto& t : r.baseline_tokens) baseline_tokens += static_cast<int>(t.size());
    for (const SweepCell& c : r.cells) {
        EXPECT_TRUE(c.error.empty()) << c.error.c_str();
        EXPECT_EQ(c.runs, 2);
        EXPECT_EQ(c.tokens, baseline_tokens);
        EXPECT_TRUE(c.equals_greedy);
        // the totals are the sums of the same runs made alone
        int drafted = 0, accepted = 0, tested = 0, cycles = 0, tokens = 0;
        for (size_t p = 0; p < s.prompts.size(); ++p) {
            ModeSpec m;
            m.run.mode = c.branches ? tinyloop::DecodeMode::Tree : tinyloop::DecodeMode::Speculative;
            m.run.config.max_tokens = s.max_tokens;
            m.run.speculation.draft_loops = c.draft_loops;
            m.run.speculation.verify_loops = 6;
            m.run.speculation.draft_ahead = c.draft_ahead;
            m.run.speculation.branches = c.branches ? c.branches : 2;
            const ModeRun run = run_mode(m_model, r.prompt_ids[p], m);
            drafted += run.stats.spec_drafted;
            accepted += run.stats.spec_accepted;
            tested += run.stats.spec_tested;
            cycles += run.stats.spec_cycles;
            tokens += run.stats.tokens_emitted;
        }
        EXPECT_EQ(c.drafted, drafted);
        EXPECT_EQ(c.accepted, accepted);
        EXPECT_EQ(c.tested, tested);
        EXPECT_EQ(c.cycles, cycles);
        EXPECT_EQ(c.tokens, tokens);
        EXPECT_TRUE(c.total_ms > 0);
        EXPECT_EQ(c.time.samples.size(), size_t(3));
        EXPECT_EQ(c.baseline.samples, r.baseline.samples);
        EXPECT_EQ(c.total_ms, c.time.median);
        const Speedup sp = c.speedup();
        EXPECT_LE(sp.min, sp.median);
        EXPECT_LE(sp.median, sp.max);
        EXPECT_EQ(sp.beyond_noise, c.time.max < c.baseline.min);
        // the prediction pools the two maps
        int n = 0, ok = 0;
        for (const AgreementMap& m : r.maps)
            for (int j = 1; j < m.positions(); ++j, ++n) ok += m.agrees(j, c.draft_loops);
        EXPECT_EQ(c.predicted_acceptance, double(ok) / n);
    }
    EXPECT_TRUE(r.fastest_cell() >= 0);
    const int best = r.best_cell();
    if (best < 0) {
        // no cell beat greedy beyond the noise: nothing may be called best, and the reason says so
        EXPECT_TRUE(r.best_spec().label.empty());
        EXPECT_TRUE(contains(r.no_best_reason(), "beyond the noise")) << r.no_best_reason();
    } else {
        const SweepCell& bc = r.cells[static_cast<size_t>(best)];
        EXPECT_TRUE(bc.speedup().beyond_noise);
        EXPECT_TRUE(r.no_best_reason().empty());
        const ModeSpec p = r.best_spec();
        EXPECT_EQ(p.run.speculation.draft_loops, bc.draft_loops);
        EXPECT_EQ(p.run.speculation.draft_ahead, bc.draft_ahead);
        EXPECT_EQ(p.run.speculation.verify_loops, 6);
        EXPECT_EQ(p.run.mode, bc.branches ? tinyloop::DecodeMode::Tree : tinyloop::DecodeMode::Speculative);
        EXPECT_EQ(p.run.config.max_tokens, s.max_tokens);
        EXPECT_TRUE(contains(p.label, "sweep best")) << p.label;
    }
    const nlohmann::json j = sweep_to_json(r);
    EXPECT_EQ(j["cells"].size(), size_t(8));
    EXPECT_EQ(j["cells"][0]["drafted"].get<int>(), r.cells[0].drafted);
    // one name per field: the codec's "branches" (K_branches is read on input only)
    for (size_t i = 0; i < r.cells.size(); ++i) {
        EXPECT_EQ(j["cells"][i]["branches"].get<int>(), r.cells[i].branches);
        EXPECT_FALSE(j["cells"][i].contains("K_branches"));
    }
    EXPECT_FALSE(j.contains("K_branches"));
}

TEST(SpeculationSweep, CancelsAndRefusesBadGrids) {
    tinyloop::Model* m_model = bundled();

    SweepSpec s;
    s.prompts = {"In the beginning"};
    s.max_tokens = 8;
    s.verify_loops = 4;
    s.draft_loops = {1, 2, 3};
    s.draft_ahead = {2, 3};
    std::atomic<bool> cancel{false};
    const SweepResult r = run_sweep(m_model, s, &cancel, [&](int done, int) {
        if (done == 4) cancel.store(true);
    });
    EXPECT_TRUE(r.cancelled);
    int runs = 0;
    for (const SweepCell& c : r.cells) runs += c.runs;
    EXPECT_EQ(runs, 2);  // the warm-up, the baseline, then two cells, then it stopped
    for (const SweepCell& c : r.cells) EXPECT_LE(c.time.samples.size(), size_t(1));  // the first repeat at most
    EXPECT_LT(r.best_cell(), 0);  // one timed run is never "beyond the noise"
    EXPECT_TRUE(contains(r.no_best_reason(), "beyond the noise")) << r.no_best_reason();
    SweepSpec bad = s;
    bad.draft_ahead = {0};
    try {
        run_sweep(m_model, bad);
        FAIL() << "draft_ahead 0 accepted";
    } catch (const tinyloop::Error& e) {
        EXPECT_TRUE(contains(e.what(), "draft_ahead")) << e.what();
    }
    bad = s;
    bad.draft_loops = {4, 5};
    EXPECT_THROW(run_sweep(m_model, bad), tinyloop::Error);
    bad = s;
    bad.repeats = 1;
    try {
        run_sweep(m_model, bad);
        FAIL() << "one repeat accepted";
    } catch (const tinyloop::Error& e) {
        EXPECT_TRUE(contains(e.what(), "repeats: 1 is outside [3, 20]")) << e.what();
    }
    bad = s;
    bad.prompts.clear();
    EXPECT_THROW(run_sweep(m_model, bad), tinyloop::Error);
}

TEST(SpeculationSweep, BestOnlyBeyondTheNoise) {
    // Hand-made cells, so the rule is checked without depending on this machine's noise.
    SweepResult r;
    r.verify_loops = 8;
    r.spec.max_tokens = 16;
    auto cell = [](int d, std::vector<double> ms, std::vector<double> greedy) {
        SweepCell c;
        c.draft_loops = d;
        c.draft_ahead = 4;
        c.runs = 1;
        c.time = summarize(std::move(ms));
        c.baseline = summarize(std::move(greedy));
        return c;
    };
    const std::vector<double> greedy = {10.0, 10.5, 11.0};
    r.cells = {cell(1, {5.0, 9.0, 16.0}, greedy),   // lucky median 1.17x, overlaps greedy
               cell(2, {9.0, 9.2, 9.4}, greedy),    // 1.14x, every repeat faster than greedy's
               cell(3, {12.0, 12.5, 13.0}, greedy)};  // slower
    EXPECT_EQ(r.fastest_cell(), 0);
    EXPECT_EQ(r.best_cell(), 1);
    EXPECT_EQ(r.best_spec().run.speculation.draft_loops, 2);
    r.cells.erase(r.cells.begin() + 1);
    EXPECT_EQ(r.best_cell(), -1);
    EXPECT_TRUE(r.best_spec().label.empty());
    EXPECT_TRUE(contains(r.no_best_reason(), "no setting is faster than greedy beyond the noise")) << r.no_best_reason();
}
