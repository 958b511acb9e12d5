// The speculation tuning sweep (tinyloop_analysis): its counts are those of the same runs made
// alone, it cancels between runs, and it refuses a bad grid naming the field.
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
    s.maxTokens = 10;
    s.verifyLoops = 6;
    s.draftLoops = {1, 3, 6};  // 6 is not below the verify depth: skipped
    s.draftAhead = {2, 4};
    s.branches = {0, 2};
    int calls = 0, lastTotal = 0;
    const SweepResult r = runSweep(m_model, s, nullptr, [&](int done, int total) {
        ++calls;
        EXPECT_EQ(done, calls);
        lastTotal = total;
    });
    EXPECT_EQ(r.cellsPlanned, 2 * 2 * 2);
    EXPECT_EQ(static_cast<int>(r.cells.size()), 8);
    EXPECT_EQ(lastTotal, 2 + 8 * 2 + 2);  // baseline, cells, baseline again
    EXPECT_EQ(calls, lastTotal);
    EXPECT_TRUE(!r.cancelled);
    int baselineTokens = 0;
    for (const auto& t : r.baselineTokens) baselineTokens += static_cast<int>(t.size());
    for (const SweepCell& c : r.cells) {
        EXPECT_TRUE(c.error.empty()) << c.error.c_str();
        EXPECT_EQ(c.runs, 2);
        EXPECT_EQ(c.tokens, baselineTokens);
        EXPECT_TRUE(c.equalsGreedy);
        // the totals are the sums of the same runs made alone
        int drafted = 0, accepted = 0, tested = 0, cycles = 0, tokens = 0;
        for (size_t p = 0; p < s.prompts.size(); ++p) {
            ModeSpec m;
            m.run.mode = c.branches ? tinyloop::DecodeMode::Tree : tinyloop::DecodeMode::Speculative;
            m.run.config.max_tokens = s.maxTokens;
            m.run.speculation.draft_loops = c.draftLoops;
            m.run.speculation.verify_loops = 6;
            m.run.speculation.draft_ahead = c.draftAhead;
            m.run.speculation.branches = c.branches ? c.branches : 2;
            const ModeRun run = runMode(m_model, r.promptIds[p], m);
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
        EXPECT_TRUE(c.totalMs > 0);
        EXPECT_EQ(c.baselineMs, r.baselineMs[0] + r.baselineMs[1]);
        // the prediction pools the two maps
        int n = 0, ok = 0;
        for (const AgreementMap& m : r.maps)
            for (int j = 1; j < m.positions(); ++j, ++n) ok += m.agrees(j, c.draftLoops);
        EXPECT_EQ(c.predictedAcceptance, double(ok) / n);
    }
    const int best = r.bestCell();
    EXPECT_TRUE(best >= 0);
    const ModeSpec p = r.bestSpec();
    const SweepCell& bc = r.cells[static_cast<size_t>(best)];
    EXPECT_EQ(p.run.speculation.draft_loops, bc.draftLoops);
    EXPECT_EQ(p.run.speculation.draft_ahead, bc.draftAhead);
    EXPECT_EQ(p.run.speculation.verify_loops, 6);
    EXPECT_EQ(p.run.mode, bc.branches ? tinyloop::DecodeMode::Tree : tinyloop::DecodeMode::Speculative);
    EXPECT_EQ(p.run.config.max_tokens, s.maxTokens);
    EXPECT_TRUE(contains(p.label, "sweep best")) << p.label;
    const nlohmann::json j = sweepToJson(r);
    EXPECT_EQ(j["cells"].size(), size_t(8));
    EXPECT_EQ(j["cells"][0]["drafted"].get<int>(), r.cells[0].drafted);
}

TEST(SpeculationSweep, CancelsAndRefusesBadGrids) {
    tinyloop::Model* m_model = bundled();

    SweepSpec s;
    s.prompts = {"In the beginning"};
    s.maxTokens = 8;
    s.verifyLoops = 4;
    s.draftLoops = {1, 2, 3};
    s.draftAhead = {2, 3};
    std::atomic<bool> cancel{false};
    const SweepResult r = runSweep(m_model, s, &cancel, [&](int done, int) {
        if (done == 3) cancel.store(true);
    });
    EXPECT_TRUE(r.cancelled);
    int runs = 0;
    for (const SweepCell& c : r.cells) runs += c.runs;
    EXPECT_EQ(runs, 2);  // the baseline, then two cells, then it stopped
    SweepSpec bad = s;
    bad.draftAhead = {0};
    try {
        runSweep(m_model, bad);
        FAIL() << "draft_ahead 0 accepted";
    } catch (const tinyloop::Error& e) {
        EXPECT_TRUE(contains(e.what(), "draft_ahead")) << e.what();
    }
    bad = s;
    bad.draftLoops = {4, 5};
    EXPECT_THROW(runSweep(m_model, bad), tinyloop::Error);
    bad = s;
    bad.prompts.clear();
    EXPECT_THROW(runSweep(m_model, bad), tinyloop::Error);
}
