// Compute against quality (tinyloop_analysis): every point is the scoring API's figure (and the
// speculative run's counts) run directly.
#include <tinyloop_analysis/compute_quality.h>
#include <gtest/gtest.h>

#include "analysis_test_util.h"

using namespace tinyloop::analysis;
using namespace analysis_test;
using C = tinyloop::EarlyExitCriterion;

TEST(ComputeQuality, PointsEqualScoringApi) {
    tinyloop::Model* m = bundled();

    const auto text = tinyloop::tokenize(m, "In the beginning God created the heaven and the earth. And the earth "
                                            "was without form, and void.");
    const int n = static_cast<int>(text.size());
    ComputeSettings s;
    s.depths = {1, 2, 4, 6};
    s.exit_loops = 6;
    s.exits = {exit_setting(C::HiddenL2, 0.2f), exit_setting(C::KL, 0.1f), exit_setting(C::LogitMargin, 2.0f)};
    s.verify_loops = 4;
    s.specs = {spec_setting(1, 4), spec_setting(2, 3)};
    s.prompt_tokens = 6;
    s.decode_tokens = 12;
    int calls = 0;
    const auto pts = compute_vs_quality(m, text, s, [&](int, int, const std::string&) { ++calls; });
    EXPECT_EQ(static_cast<int>(pts.size()), 4 + 3 + 2);
    EXPECT_TRUE(calls >= 9);
    for (int i = 0; i < 4; ++i) {
        const auto r = tinyloop::score(m, text.data(), n, s.depths[static_cast<size_t>(i)]);
        EXPECT_EQ(pts[static_cast<size_t>(i)].nll, r.total_nll / (n - 1));
        EXPECT_EQ(pts[static_cast<size_t>(i)].mean_depth, double(s.depths[static_cast<size_t>(i)]));
        EXPECT_TRUE(pts[static_cast<size_t>(i)].ms_per_token > 0);
    }
    for (const ComputePoint& p : pts) {  // every time is the median of the default three repeats
        EXPECT_EQ(p.ms.samples.size(), size_t(kDefaultRepeats));
        EXPECT_EQ(p.ms_per_token, p.ms.median);
        EXPECT_LE(p.ms.min, p.ms.median);
        EXPECT_LE(p.ms.median, p.ms.max);
    }
    ComputeSettings once = s;
    once.repeats = 1;
    EXPECT_THROW(compute_vs_quality(m, text, once), tinyloop::Error);
    for (int i = 0; i < 3; ++i) {
        tinyloop::GenerateConfig c;
        c.loops = 6;
        c.early_exit.patience = 1;
        c.early_exit.min_L = 2;
        c.early_exit.criterion = s.exits[static_cast<size_t>(i)].criterion;
        c.early_exit.threshold = s.exits[static_cast<size_t>(i)].threshold;
        std::vector<int> depth;
        const auto r = tinyloop::score_early_exit(m, text.data(), n, c, &depth);
        double sum = 0;
        for (int p = 0; p + 1 < n; ++p) sum += depth[static_cast<size_t>(p)];
        const ComputePoint& pt = pts[static_cast<size_t>(4 + i)];
        EXPECT_EQ(pt.nll, r.total_nll / (n - 1));
        EXPECT_EQ(pt.mean_depth, sum / (n - 1));
        EXPECT_TRUE(pt.mean_depth <= 6.0);
    }
    const auto rv = tinyloop::score(m, text.data(), n, 4);
    for (int i = 0; i < 2; ++i) {
        tinyloop::SpeculativeConfig sc;
        sc.max_tokens = 12;
        sc.draft_loops = s.specs[static_cast<size_t>(i)].draft_loops;
        sc.draft_ahead = s.specs[static_cast<size_t>(i)].draft_ahead;
        sc.verify_loops = 4;
        sc.ignore_eos = true;
        const auto g = tinyloop::generate_speculative_ex(m, text.data(), 6, sc);
        const ComputePoint& pt = pts[static_cast<size_t>(7 + i)];
        EXPECT_EQ(pt.series, std::string("speculative"));
        EXPECT_EQ(pt.nll, rv.total_nll / (n - 1));
        EXPECT_EQ(pt.mean_depth, 4.0 * g.stats.spec_drafted / (g.stats.tokens_emitted - 1));
        EXPECT_EQ(pt.acceptance, g.stats.spec_acceptance_rate());
    }
    const nlohmann::json j = compute_json(pts, n);
    EXPECT_EQ(j["points"].size(), pts.size());
    try {
        compute_vs_quality(m, std::vector<int32_t>{5}, s);
        FAIL() << "a one-token text accepted";
    } catch (const tinyloop::Error& e) {
        EXPECT_TRUE(contains(e.what(), "text"));
    }
}
