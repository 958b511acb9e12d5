// Compare decode modes (tinyloop_analysis) on the bundled model: the comparison equals each mode
// run alone, concurrently or one after another, and a mode the engine refuses keeps its error
// while the others run.
#include <tinyloop_analysis/compare_modes.h>
#include <gtest/gtest.h>

#include "analysis_test_util.h"
#include "test_util.h"

using namespace tinyloop::analysis;
using namespace analysis_test;

namespace {

void sameRun(const ModeRun& a, const ModeRun& b) {
    ASSERT_TRUE(a.error.empty()) << a.error;
    ASSERT_TRUE(b.error.empty()) << b.error;
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.text, b.text);
    EXPECT_EQ(a.stats.tokens_emitted, b.stats.tokens_emitted);
    EXPECT_EQ(a.stats.depth_per_token, b.stats.depth_per_token);
    EXPECT_EQ(a.mean_depth(), b.mean_depth());
    EXPECT_EQ(a.stats.stop_reason, b.stats.stop_reason);
    EXPECT_EQ(a.stats.spec_cycles, b.stats.spec_cycles);
    EXPECT_EQ(a.stats.spec_drafted, b.stats.spec_drafted);
    EXPECT_EQ(a.stats.spec_tested, b.stats.spec_tested);
    EXPECT_EQ(a.stats.spec_accepted, b.stats.spec_accepted);
    EXPECT_EQ(a.stats.spec_accept_hist, b.stats.spec_accept_hist);
}

}  // namespace

TEST(CompareModes, ComparisonEqualsEachModeAlone) {
    tinyloop::Model* m_model = bundled();

    const auto& hp = tinyloop::model_hparams(m_model);
    const std::vector<ModeSpec> modes = default_compare_modes(hp, 16);
    EXPECT_EQ(modes.size(), size_t(7));
    const std::string prompt = "And God said";
    int runs_done = 0;
    const CompareResult conc = run_comparison(m_model, prompt, modes, 1, true, 3);
    const CompareResult seq = run_comparison(m_model, prompt, modes, 1, false, 3, nullptr, [&](int) { ++runs_done; });
    EXPECT_TRUE(conc.concurrent && !seq.concurrent);
    EXPECT_EQ(runs_done, 7 * 3);  // every mode, every repeat
    for (const ModeRun& m : seq.runs) {
        EXPECT_EQ(m.time.samples.size(), size_t(3));  // each mode timed three times
        EXPECT_EQ(m.first_token.samples.size(), size_t(3));
        EXPECT_EQ(m.time.median, summarize(m.time.samples).median);
        EXPECT_DOUBLE_EQ(m.tokens_per_second(), m.stats.tokens_emitted * 1000.0 / m.time.median);
        EXPECT_LE(m.tokens_per_second_range().min, m.tokens_per_second_range().max);
    }
    const std::vector<int32_t> ids = prompt_ids(m_model, prompt);
    EXPECT_EQ(conc.prompt_ids, ids);
    for (size_t i = 0; i < modes.size(); ++i) {
        const ModeRun alone = run_mode(m_model, ids, modes[i]);
        sameRun(conc.runs[i], alone);
        sameRun(seq.runs[i], alone);
        EXPECT_TRUE(conc.runs[i].stats.tokens_emitted > 0);
    }
    // The divergence column: speculation (greedy) equals greedy at its verify depth, so it
    // never diverges from the "greedy L=8" baseline; the L=4 answer's divergence is where its
    // tokens first differ.
    EXPECT_EQ(conc.baseline, 1);
    EXPECT_EQ(conc.divergence[2], -1);
    EXPECT_EQ(conc.divergence[3], -1);
    EXPECT_EQ(conc.divergence[0], first_divergence(conc.runs[0].tokens, conc.runs[1].tokens));
    EXPECT_TRUE(conc.runs[2].speculative && conc.runs[2].stats.spec_tested > 0);
    // Early exit (hidden-state change below 0.1 and 0.2) uses fewer loops than the fixed depth.
    EXPECT_TRUE(conc.runs[4].mean_depth() < 8.0);
    EXPECT_TRUE(conc.runs[5].mean_depth() < 8.0);
    // Re-basing only recomputes the divergences.
    CompareResult r = conc;
    set_baseline(r, 0);
    EXPECT_EQ(r.divergence[0], -1);
    EXPECT_EQ(r.divergence[1], first_divergence(r.runs[1].tokens, r.runs[0].tokens));
    // The JSON export carries every run's text and counters.
    const nlohmann::json j = compare_to_json(conc);
    EXPECT_EQ(j["runs"].size(), modes.size());
    EXPECT_EQ(j["runs"][2]["stats"]["spec_accepted"].get<int>(), conc.runs[2].stats.spec_accepted);
    EXPECT_EQ(j["runs"][6]["text"].get<std::string>(), conc.runs[6].text);
}

TEST(CompareModes, RefusedModeKeepsItsError) {
    tinyloop::Model* m_model = bundled();

    ModeSpec bad;
    bad.label = "speculative 9->8";
    bad.run.mode = tinyloop::DecodeMode::Speculative;
    bad.run.config.max_tokens = 4;
    bad.run.speculation.draft_loops = 9;
    bad.run.speculation.verify_loops = 8;
    ModeSpec good;
    good.label = "greedy";
    good.run.config.max_tokens = 4;
    const CompareResult r = run_comparison(m_model, "In", {good, bad}, 0, true, 3);
    EXPECT_TRUE(r.runs[0].error.empty());
    EXPECT_EQ(r.runs[0].stats.tokens_emitted, 4);
    EXPECT_TRUE(contains(r.runs[1].error, "draft_loops")) << r.runs[1].error;
    EXPECT_EQ(rank_modes(r).order, std::vector<int>{0});  // a refused mode is not ranked
    EXPECT_THROW(run_comparison(m_model, "In", {good}, 0, false, 2), tinyloop::Error);  // a median needs 3
}

TEST(CompareModes, RankingSaysWhenTooCloseToRank) {
    CompareResult r;
    auto mode = [](const char* label, std::vector<double> ms) {
        ModeRun m;
        m.spec.label = label;
        m.stats.tokens_emitted = 10;
        m.time = summarize(std::move(ms));
        return m;
    };
    r.runs = {mode("slow", {30, 31, 32}), mode("fast", {10, 11, 12}), mode("fast too", {11.5, 12.5, 13})};
    const Ranking k = rank_modes(r);
    EXPECT_EQ(k.order, (std::vector<int>{1, 2, 0}));
    EXPECT_EQ(k.distinct_from_next, (std::vector<bool>{false, true, false}));
    const std::string s = ranking_sentence(r);
    EXPECT_TRUE(contains(s, "fast and fast too are too close to rank")) << s;
    EXPECT_TRUE(contains(s, "1 neighbouring pair")) << s;
    r.runs.erase(r.runs.begin() + 2);
    EXPECT_TRUE(contains(ranking_sentence(r), "fast is faster than slow beyond the noise")) << ranking_sentence(r);
}

// The mode rules are the engine's: run_mode is tinyloop::run_decode, refusals included.
TEST(CompareModes, RunModeIsTheEnginesRunDecode) {
    tinyloop::Model* m_model = bundled();
    const std::vector<int32_t> ids = prompt_ids(m_model, "In the beginning");
    ModeSpec tree;
    tree.run.mode = tinyloop::DecodeMode::Tree;
    tree.run.config.max_tokens = 8;
    tree.run.speculation.verify_loops = 6;
    tree.run.speculation.draft_loops = 2;
    const ModeRun got = run_mode(m_model, ids, tree);
    const tinyloop::GenerateResult want =
        tinyloop::run_decode(m_model, ids.data(), static_cast<int>(ids.size()), tree.run);
    EXPECT_EQ(got.tokens, continuationOf(want));
    EXPECT_EQ(got.stats.spec_accepted, want.stats.spec_accepted);
    EXPECT_EQ(got.loops, 6);
    EXPECT_TRUE(got.speculative);
    ModeSpec beam;
    beam.run.mode = tinyloop::DecodeMode::Beam;
    beam.run.config.beam_size = 1;
    try {
        run_mode(m_model, ids, beam);
        FAIL() << "beam_size 1 accepted in beam mode";
    } catch (const tinyloop::Error& e) {
        EXPECT_TRUE(contains(e.what(), "beam_size")) << e.what();
    }
}

TEST(CompareModes, DefaultsFollowTheModelsRecommendation) {
    // a file that recommends nothing (a random model): the generic set
    tinyloop::HParams hp;
    hp.default_loops = 4;
    hp.max_loops = 16;
    EXPECT_EQ(default_compare_modes(hp, 16).size(), size_t(7));
    tinyloop::ModelHandle plain_file =
        tinyloop::load_model_handle(tltest::write_random_model("compare_plain.tinyloop", tltest::small_hparams()));
    ASSERT_FALSE(tinyloop::model_recommendation(plain_file.get()).has_speculation());
    ASSERT_FALSE(tinyloop::model_recommendation(plain_file.get()).has_early_exit());
    EXPECT_EQ(default_compare_modes(plain_file.get(), 16).size(), size_t(7));

    // the bundled f32 file recommends early exit and speculation: its modes at its default depth
    tinyloop::Model* model = bundled();
    const tinyloop::Recommendation& rec = tinyloop::model_recommendation(model);
    ASSERT_TRUE(rec.has_speculation() && rec.has_early_exit());
    const int D = tinyloop::model_hparams(model).default_loops;
    const std::vector<ModeSpec> m = default_compare_modes(model, 16);
    ASSERT_EQ(m.size(), size_t(6));
    EXPECT_EQ(m[0].label, "greedy L=" + std::to_string(2 * D));
    EXPECT_EQ(m[1].label, "greedy L=" + std::to_string(D));  // the view's default baseline: what speculation verifies at
    EXPECT_EQ(m[2].run.mode, tinyloop::DecodeMode::Speculative);
    EXPECT_EQ(m[2].run.speculation.verify_loops, D);
    EXPECT_EQ(m[2].run.speculation.draft_loops, rec.chain.draft_loops);
    EXPECT_EQ(m[2].run.speculation.draft_ahead, rec.chain.draft_ahead);
    EXPECT_EQ(m[3].run.mode, tinyloop::DecodeMode::Tree);
    EXPECT_EQ(m[3].run.speculation.draft_ahead, rec.tree.draft_ahead);
    EXPECT_EQ(m[3].run.speculation.branches, rec.tree.branches);
    EXPECT_EQ(m[4].run.mode, tinyloop::DecodeMode::EarlyExit);
    EXPECT_EQ(m[4].run.config.loops, D);
    EXPECT_EQ(m[4].run.config.early_exit.min_L, rec.early_exit.min_L);
    EXPECT_FLOAT_EQ(m[4].run.config.early_exit.threshold, rec.early_exit.threshold);
    EXPECT_EQ(m[4].label, "early exit hidden_l2<0.5 (model's)");
    EXPECT_EQ(m[5].run.mode, tinyloop::DecodeMode::Sample);
    for (const ModeSpec& s : m) EXPECT_EQ(s.run.config.max_tokens, 16);
    for (int i : {2, 3}) EXPECT_NE(m[size_t(i)].label.find("(model's)"), std::string::npos);

    // its q8 file recommends early exit only: speculation with the built-in knobs, labelled as such
    tinyloop::ModelHandle q8 = tinyloop::load_model_handle(kQ8);
    ASSERT_FALSE(tinyloop::model_recommendation(q8.get()).has_speculation());
    const std::vector<ModeSpec> e = default_compare_modes(q8.get(), 16);
    EXPECT_EQ(e[2].label, "speculative 2->" + std::to_string(D) + ", 4 ahead");
    EXPECT_EQ(e[3].run.speculation.branches, 2);
    EXPECT_EQ(e[4].run.mode, tinyloop::DecodeMode::EarlyExit);
}
