// recommendation_search: the early-exit policy chosen on NLL within the tolerance and on modelled
// cost, the speculation cell on acceptance, and the metadata a save writes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <tinyloop/json.h>
#include <tinyloop_analysis/recommendation_search.h>

#include "analysis_test_util.h"

using namespace tinyloop::analysis;
using analysis_test::bundled;

TEST(RecommendationSearch, ChosenExitPolicyKeepsTheNllAndExitsEarly) {
    tinyloop::Model* m = bundled();
    const std::vector<int32_t> ids = tinyloop::tokenize(
        m, "And it came to pass, when the king heard the words of the book of the law, that he rent his clothes. "
           "And the king commanded Hilkiah the priest, and Ahikam the son of Shaphan, saying, Go ye.");
    const ExitSearch s = search_exit_policy(m, ids, 0.01);
    ASSERT_FALSE(s.candidates.empty());
    ASSERT_GE(s.best, 0);  // the bundled model exits early within 1%
    const ExitCandidate& c = s.candidates[static_cast<size_t>(s.best)];
    EXPECT_LE(c.nll, s.base_nll * 1.01);
    EXPECT_LT(c.mean_depth, s.loops);
    EXPECT_LT(c.relative_cost, 1.0);
    for (const ExitCandidate& o : s.candidates)  // nothing cheaper within the tolerance
        if (o.nll <= s.base_nll * 1.01 && o.mean_depth < s.loops) {
            EXPECT_GE(o.relative_cost, c.relative_cost - 0.01);
        }
    const tinyloop::Recommendation r = recommendation_from(&s, nullptr);
    EXPECT_EQ(r.early_exit.criterion, c.policy.criterion);
    EXPECT_FLOAT_EQ(r.early_exit.threshold, c.policy.threshold);
    EXPECT_EQ(r.early_exit.patience, c.policy.patience);
    EXPECT_EQ(r.early_exit.min_L, c.policy.min_L);
    EXPECT_FALSE(r.has_speculation());
    EXPECT_THROW(search_exit_policy(m, {ids[0]}, 0.01), tinyloop::Error);
    EXPECT_THROW(search_exit_policy(m, ids, 2.0), tinyloop::Error);
}

TEST(RecommendationSearch, SpeculationCellsRankByMeasuredSpeedupAndMustPay) {
    SweepResult sw;
    sw.verify_loops = 4;
    SweepCell slow_but_accepting;  // modelled well, but slower than greedy in the same run
    slow_but_accepting.draft_loops = 1, slow_but_accepting.draft_ahead = 4, slow_but_accepting.runs = 1;
    slow_but_accepting.tokens = 40, slow_but_accepting.cycles = 10;
    slow_but_accepting.baseline = summarize({10, 10.5, 9.5});  // three repeats each
    slow_but_accepting.time = summarize({20, 21, 19});
    SweepCell paying = slow_but_accepting;
    paying.draft_ahead = 2, paying.tokens = 25, paying.time = summarize({8, 8.5, 7.5});
    SweepCell modelled_best = paying;  // pays, modelled above `paying`, but measured slower than it
    modelled_best.draft_ahead = 3, modelled_best.tokens = 40, modelled_best.time = summarize({9, 9.2, 8.8});
    SweepCell noisy = paying;  // faster by its median, but its repeats overlap greedy's: not beyond the noise
    noisy.draft_ahead = 6, noisy.tokens = 40, noisy.time = summarize({5, 9, 12});
    SweepCell wrong = paying;  // pays the most, but its text differs from greedy
    wrong.draft_ahead = 3, wrong.equals_greedy = false, wrong.time = summarize({4, 4.1, 3.9});
    sw.cells = {slow_but_accepting, paying, wrong, noisy, modelled_best};
    EXPECT_NEAR(modelled_speedup(paying, 4), 2.5 * 4 / (2 * 1 + 3), 1e-9);
    EXPECT_GT(modelled_speedup(modelled_best, 4), modelled_speedup(paying, 4));
    EXPECT_EQ(best_paying_cell(sw, false), 1);
    EXPECT_EQ(best_paying_cell(sw, true), -1);
    const tinyloop::Recommendation r = recommendation_from(nullptr, &sw);
    EXPECT_EQ(r.chain.draft_loops, 1);
    EXPECT_EQ(r.chain.draft_ahead, 2);
    EXPECT_EQ(r.tree.branches, 0);
    EXPECT_FALSE(r.has_early_exit());
    sw.cells[1].time = summarize({9.5, 9.6, 9.4});  // now the modelled-best cell is also measured faster
    EXPECT_EQ(best_paying_cell(sw, false), 4);
}

TEST(RecommendationSearch, SavingReplacesOnlyThePartMeasured) {
    tinyloop::Recommendation exits;
    exits.early_exit.patience = 1;
    exits.early_exit.criterion = tinyloop::EarlyExitCriterion::KL;
    exits.early_exit.threshold = 0.1f;
    const std::string before = R"({"licence": "CC0", "recommended": {"speculation": {"draft_ahead": 3}}})";
    const nlohmann::json after = nlohmann::json::parse(metadata_with_recommendation(
        before, exits, {{"early_exit", {{"chosen", 1}, {"candidates", {1, 2, 3}}}}}));
    EXPECT_EQ(after["licence"], "CC0");
    EXPECT_EQ(after["recommended"]["speculation"]["draft_ahead"], 3);  // not measured now: kept
    EXPECT_EQ(after["recommended"]["early_exit"]["criterion"], "kl");
    EXPECT_EQ(after["recommended"]["measured"]["early_exit"]["chosen"], 1);
    EXPECT_FALSE(after["recommended"]["measured"]["early_exit"].contains("candidates"));  // the grid stays out
    const tinyloop::Recommendation back = tinyloop::recommendation_from_json(after["recommended"]);
    EXPECT_EQ(back.chain.draft_ahead, 3);
    EXPECT_EQ(back.early_exit.criterion, tinyloop::EarlyExitCriterion::KL);
}

TEST(RecommendationSearch, APartMeasuredWithNothingPayingRemovesTheStoredOne) {
    // `tinyloop quantize` copies IN's settings; a sweep on OUT that finds no paying cell must not
    // leave them in place (the CLI then says "none recommended").
    tinyloop::Recommendation exits_only;
    exits_only.early_exit.patience = 1;
    exits_only.early_exit.criterion = tinyloop::EarlyExitCriterion::HiddenL2;
    exits_only.early_exit.threshold = 0.5f;
    const std::string copied = R"({"recommended": {"speculation": {"draft_loops": 1, "draft_ahead": 6}}})";
    const nlohmann::json after = nlohmann::json::parse(metadata_with_recommendation(
        copied, exits_only, {{"speculation", {{"chain", nullptr}, {"tree", nullptr}}}, {"early_exit", {{"chosen", 1}}}}));
    EXPECT_FALSE(after["recommended"].contains("speculation"));
    EXPECT_TRUE(after["recommended"]["measured"]["speculation"]["chain"].is_null());
    EXPECT_FALSE(tinyloop::recommendation_from_json(after["recommended"]).has_speculation());
    // not measured: kept
    const nlohmann::json kept = nlohmann::json::parse(metadata_with_recommendation(copied, exits_only, {{"early_exit", {{"chosen", 1}}}}));
    EXPECT_EQ(kept["recommended"]["speculation"]["draft_ahead"], 6);
}
