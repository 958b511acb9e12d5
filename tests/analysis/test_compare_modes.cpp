// Compare decode modes (tinyloop_analysis) on the bundled model: the comparison equals each mode
// run alone, concurrently or one after another, and a mode the engine refuses keeps its error
// while the others run.
#include <tinyloop_analysis/compare_modes.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

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
    EXPECT_EQ(modes.size(), size_t(8));
    const std::string prompt = "And God said";
    int runs_done = 0;
    const CompareResult conc = run_comparison(m_model, prompt, modes, 1, true, 3);
    const CompareResult seq = run_comparison(m_model, prompt, modes, 1, false, 3, nullptr, [&](int) { ++runs_done; });
    EXPECT_TRUE(conc.concurrent && !seq.concurrent);
    EXPECT_EQ(runs_done, 8 * 3);  // every mode, every repeat
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
    // The modes run at the model's own depth D (greedy also at 2D): the baseline is greedy at D.
    const int D = hp.default_loops;
    EXPECT_EQ(modes[0].label, "greedy L=" + std::to_string(2 * D));
    EXPECT_EQ(modes[1].label, "greedy L=" + std::to_string(D));
    for (size_t i = 1; i < modes.size(); ++i) EXPECT_EQ(conc.runs[i].loops, D) << modes[i].label;
    // The divergence column: speculation (greedy) equals greedy at its verify depth, so it
    // never diverges from the "greedy L=D" baseline; the 2D answer's divergence is where its
    // tokens first differ.
    EXPECT_EQ(conc.baseline, 1);
    EXPECT_EQ(conc.divergence[2], -1);
    EXPECT_EQ(conc.divergence[3], -1);
    EXPECT_EQ(conc.divergence[0], first_divergence(conc.runs[0].tokens, conc.runs[1].tokens));
    EXPECT_TRUE(conc.runs[2].speculative && conc.runs[2].stats.spec_tested > 0);
    // Pipelined over depth (the chain's knobs): greedy's tokens at D, in weight sweeps that carry
    // the next token's draft.
    EXPECT_EQ(modes[4].run.mode, tinyloop::DecodeMode::Pipelined);
    EXPECT_EQ(modes[4].label, "pipelined " + std::to_string(modes[2].run.speculation.draft_loops) + "->" + std::to_string(D));
    EXPECT_EQ(conc.divergence[4], -1);
    EXPECT_TRUE(conc.runs[4].speculative);
    EXPECT_GT(conc.runs[4].stats.spec_sweeps, 0);
    EXPECT_EQ(conc.runs[4].stats.tokens_emitted, conc.runs[1].stats.tokens_emitted);
    // Early exit (hidden-state change below 0.1 and 0.2) runs at most the depth D, and at the looser
    // threshold fewer passes (at D = 4 the bundled model's states change by more than 0.1 per pass).
    EXPECT_LE(conc.runs[5].mean_depth(), D);
    EXPECT_LT(conc.runs[6].mean_depth(), D);
    // Re-basing only recomputes the divergences.
    CompareResult r = conc;
    set_baseline(r, 0);
    EXPECT_EQ(r.divergence[0], -1);
    EXPECT_EQ(r.divergence[1], first_divergence(r.runs[1].tokens, r.runs[0].tokens));
    // The JSON export carries every run's text and counters.
    const nlohmann::json j = compare_to_json(conc);
    EXPECT_EQ(j["runs"].size(), modes.size());
    EXPECT_EQ(j["runs"][2]["stats"]["spec_accepted"].get<int>(), conc.runs[2].stats.spec_accepted);
    EXPECT_EQ(j["runs"][7]["text"].get<std::string>(), conc.runs[7].text);
    EXPECT_EQ(j["runs"][4]["mode"]["mode"].get<std::string>(), "pipelined");
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
    EXPECT_EQ(default_compare_modes(hp, 16).size(), size_t(8));
    tinyloop::ModelHandle plain_file =
        tinyloop::load_model_handle(tltest::write_random_model("compare_plain.tinyloop", tltest::small_hparams()));
    ASSERT_FALSE(tinyloop::model_recommendation(plain_file.get()).has_speculation());
    ASSERT_FALSE(tinyloop::model_recommendation(plain_file.get()).has_early_exit());
    EXPECT_EQ(default_compare_modes(plain_file.get(), 16).size(), size_t(8));

    // a file that recommends nothing runs at its own default depth, not a fixed one (Huginn: 32 steps)
    tinyloop::HParams huginn = hp;
    huginn.default_loops = 32;
    huginn.max_loops = 128;
    const std::vector<ModeSpec> h = default_compare_modes(huginn, 16);
    ASSERT_EQ(h.size(), size_t(8));
    EXPECT_EQ(h[0].label, "greedy L=64");
    EXPECT_EQ(h[0].run.config.loops, 64);
    EXPECT_EQ(h[1].label, "greedy L=32");
    for (size_t i = 1; i < h.size(); ++i) EXPECT_EQ(h[i].run.config.loops, 32) << h[i].label;
    EXPECT_EQ(h[2].run.speculation.verify_loops, 32);
    EXPECT_EQ(h[3].run.speculation.verify_loops, 32);
    EXPECT_EQ(h[4].run.mode, tinyloop::DecodeMode::Pipelined);
    EXPECT_EQ(h[4].run.speculation.verify_loops, 32);
    EXPECT_EQ(h[4].run.speculation.draft_loops, h[2].run.speculation.draft_loops);

    // the bundled f32 file recommends early exit and speculation: its modes at its default depth
    tinyloop::Model* model = bundled();
    const tinyloop::Recommendation& rec = tinyloop::model_recommendation(model);
    ASSERT_TRUE(rec.has_speculation() && rec.has_early_exit());
    const int D = tinyloop::model_hparams(model).default_loops;
    const std::vector<ModeSpec> m = default_compare_modes(model, 16);
    ASSERT_EQ(m.size(), size_t(7));
    EXPECT_EQ(m[0].label, "greedy L=" + std::to_string(2 * D));
    EXPECT_EQ(m[1].label, "greedy L=" + std::to_string(D));  // the view's default baseline: what speculation verifies at
    EXPECT_EQ(m[2].run.mode, tinyloop::DecodeMode::Speculative);
    EXPECT_EQ(m[2].run.speculation.verify_loops, D);
    EXPECT_EQ(m[2].run.speculation.draft_loops, rec.chain.draft_loops);
    EXPECT_EQ(m[2].run.speculation.draft_ahead, rec.chain.draft_ahead);
    EXPECT_EQ(m[3].run.mode, tinyloop::DecodeMode::Tree);
    EXPECT_EQ(m[3].run.speculation.draft_ahead, rec.tree.draft_ahead);
    EXPECT_EQ(m[3].run.speculation.branches, rec.tree.branches);
    EXPECT_EQ(m[4].run.mode, tinyloop::DecodeMode::Pipelined);
    EXPECT_EQ(m[4].run.speculation.verify_loops, D);
    EXPECT_EQ(m[4].run.speculation.draft_loops, rec.chain.draft_loops);
    EXPECT_EQ(m[4].label, "pipelined " + std::to_string(rec.chain.draft_loops) + "->" + std::to_string(D) + " (model's)");
    EXPECT_EQ(m[5].run.mode, tinyloop::DecodeMode::EarlyExit);
    EXPECT_EQ(m[5].run.config.loops, D);
    EXPECT_EQ(m[5].run.config.early_exit.min_L, rec.early_exit.min_L);
    EXPECT_FLOAT_EQ(m[5].run.config.early_exit.threshold, rec.early_exit.threshold);
    EXPECT_EQ(m[5].label, "early exit hidden_l2<0.5 (model's)");
    EXPECT_EQ(m[6].run.mode, tinyloop::DecodeMode::Sample);
    for (const ModeSpec& s : m) EXPECT_EQ(s.run.config.max_tokens, 16);
    for (int i : {2, 3, 4}) EXPECT_NE(m[size_t(i)].label.find("(model's)"), std::string::npos);

    // its q8 file recommends early exit only: speculation with the built-in knobs, labelled as such
    tinyloop::ModelHandle q8 = tinyloop::load_model_handle(kQ8);
    ASSERT_FALSE(tinyloop::model_recommendation(q8.get()).has_speculation());
    const std::vector<ModeSpec> e = default_compare_modes(q8.get(), 16);
    EXPECT_EQ(e[2].label, "speculative 2->" + std::to_string(D) + ", 4 ahead");
    EXPECT_EQ(e[3].run.speculation.branches, 2);
    EXPECT_EQ(e[4].label, "pipelined 2->" + std::to_string(D));
    EXPECT_EQ(e[5].run.mode, tinyloop::DecodeMode::EarlyExit);
}

// A model with the learned exit gate (Ouro) gets early exit by the gate, both semantics, at its
// default depth, before the sampling row; the threshold is the engine's resolution: the
// checkpoint's own config (metadata.source.config.early_exit_threshold) when it has one, else the
// built-in. Both rows run.
TEST(CompareModes, GatedModelComparesTheExitGate) {
    tinyloop::HParams hp = tltest::small_hparams();
    hp.exit_gate = true;
    hp.default_loops = 4;
    hp.max_loops = 8;
    for (const char* meta : {"{}", R"({"source": {"format": "hf", "config": {"early_exit_threshold": 0.7}}})"}) {
        tinyloop::ModelSpec spec = tinyloop::random_model_spec(hp, 11, tinyloop::DType::F32);
        spec.metadata_json = meta;
        const std::string path = tltest::temp_path("compare_gate.tinyloop");
        tinyloop::save_model(path, spec);
        tinyloop::ModelHandle model = tinyloop::load_model_handle(path);
        const std::vector<ModeSpec> m = default_compare_modes(model.get(), 8);
        ASSERT_EQ(m.size(), size_t(10));
        const float q = std::string(meta) == "{}" ? tinyloop::builtin_early_exit().early_exit.threshold : 0.7f;
        const tinyloop::EarlyExitCriterion want[] = {tinyloop::EarlyExitCriterion::GateStop,
                                                     tinyloop::EarlyExitCriterion::GateSelect};
        for (int k = 0; k < 2; ++k) {
            const ModeSpec& g = m[size_t(7 + k)];
            EXPECT_EQ(g.run.mode, tinyloop::DecodeMode::EarlyExit);
            EXPECT_EQ(g.run.config.loops, 4);
            EXPECT_EQ(g.run.config.early_exit.criterion, want[k]);
            EXPECT_FLOAT_EQ(g.run.config.early_exit.threshold, q) << meta;
            EXPECT_GT(g.run.config.early_exit.patience, 0);
        }
        EXPECT_EQ(m[7].label, std::string("early exit gate_stop q=") + (q == 0.7f ? "0.7" : "0.05"));
        EXPECT_EQ(m.back().run.mode, tinyloop::DecodeMode::Sample);
        // the resolver's rule behind those rows: the checkpoint's q as the model's, a user's q kept
        tinyloop::GenerateConfig c;
        c.early_exit.criterion = tinyloop::EarlyExitCriterion::GateSelect;
        std::vector<std::pair<std::string, std::string>> source;
        const tinyloop::GenerateConfig r1 = tinyloop::resolve_early_exit(model.get(), c, {"early_exit_criterion"}, &source);
        EXPECT_FLOAT_EQ(r1.early_exit.threshold, q);
        const auto from = std::find(source.begin(), source.end(),
                                    std::make_pair(std::string("early_exit_threshold"), std::string(q == 0.7f ? "model" : "built-in")));
        EXPECT_NE(from, source.end()) << meta;
        c.early_exit.threshold = 0.9f;
        EXPECT_FLOAT_EQ(tinyloop::resolve_early_exit(model.get(), c, {"early_exit_criterion", "early_exit_threshold"})
                            .early_exit.threshold, 0.9f);
        c.early_exit.criterion = tinyloop::EarlyExitCriterion::HiddenL2;  // not a gate: the built-in threshold
        EXPECT_FLOAT_EQ(tinyloop::resolve_early_exit(model.get(), c, {"early_exit_criterion"}).early_exit.threshold,
                        tinyloop::builtin_early_exit().early_exit.threshold);
        const CompareResult r = run_comparison(model.get(), "ab", {m[7], m[8]}, 0, false, kMinRepeats);
        for (const ModeRun& run : r.runs) {
            ASSERT_TRUE(run.error.empty()) << run.error;
            EXPECT_GT(run.stats.tokens_emitted, 0);
            EXPECT_LE(run.mean_depth(), 4.0);
        }
    }
}
