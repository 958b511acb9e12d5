// Early-exit calibration (tinyloop_analysis): the flagged tokens are exactly those whose output
// changes when the engine decodes that token with early exit at the threshold (in the full-depth
// run's context), and the exit depth read off the cached traces is the depth the decode used.
#include <tinyloop_analysis/exit_calibration.h>
#include <gtest/gtest.h>

#include "analysis_test_util.h"

using namespace tinyloop::analysis;
using namespace analysis_test;
using C = tinyloop::EarlyExitCriterion;

TEST(ExitCalibration, FlagsEqualEarlyExitDecode) {
    tinyloop::Model* m = bundled();

    const auto prompt = tinyloop::tokenize(m, kPrompt);
    const CalibData d = collect_calibration(m, prompt, 20, 8);
    EXPECT_EQ(d.loops, 8);
    EXPECT_TRUE(d.emitted() >= 5);
    // The full-depth lens pick is the full-depth run's token.
    for (int i = 1; i < d.emitted(); ++i)
        EXPECT_EQ(d.argmax_at(d.prompt_len + i - 1, 8), d.tokens[static_cast<size_t>(d.prompt_len + i)]);
    struct Case {
        C c;
        float t;
    };
    const Case cases[] = {{C::HiddenL2, 0.15f}, {C::HiddenL2, 0.4f}, {C::KL, 0.05f},    {C::KL, 1.0f},
                          {C::LogitMargin, 1.0f}, {C::EntropyDelta, 0.3f}, {C::ArgmaxStable, 0.5f}};
    int flagged = 0, kept = 0;
    for (const Case& k : cases) {
        tinyloop::EarlyExitPolicy p;
        p.patience = 1;
        p.criterion = k.c;
        p.threshold = k.t;
        const std::vector<CalibToken> scored = rescore_calibration(d, p);
        EXPECT_EQ(static_cast<int>(scored.size()), d.emitted() - 1);
        for (const CalibToken& t : scored) {
            tinyloop::GenerateConfig c;
            c.loops = 8;
            c.max_tokens = 2;
            c.ignore_eos = true;
            c.early_exit.patience = p.patience;
            c.early_exit.min_L = p.min_L;
            c.early_exit.peek_every = p.peek_every;
            c.early_exit.criterion = k.c;
            c.early_exit.threshold = k.t;
            // prompt = everything before the row's token; the prefill gives that token, the
            // adaptive step on it gives the token under test
            const tinyloop::GenerateResult g = tinyloop::generate_ex(m, d.tokens.data(), t.row, c);
            EXPECT_EQ(g.tokens[static_cast<size_t>(t.row)], d.tokens[static_cast<size_t>(t.row)]);
            const int32_t decoded = g.tokens[static_cast<size_t>(t.row) + 1];
            EXPECT_EQ(g.stats.depth_per_token[1], t.exit_depth);
            EXPECT_EQ(decoded, t.exit_token);
            EXPECT_EQ(t.flagged, decoded != d.tokens[static_cast<size_t>(t.row) + 1]);
            flagged += t.flagged;
            kept += !t.flagged && t.exit_depth < 8;
        }
    }
    EXPECT_TRUE(flagged > 0) << "some threshold should change some token";
    EXPECT_TRUE(kept > 0) << "some token should exit early and keep its output";
    // Bad policy fields are refused with the field's name.
    tinyloop::EarlyExitPolicy bad;
    bad.patience = 1;
    bad.min_L = 99;
    try {
        rescore_calibration(d, bad);
        FAIL() << "min_L out of range accepted";
    } catch (const tinyloop::Error& e) {
        EXPECT_TRUE(contains(e.what(), "min_L"));
    }
}
