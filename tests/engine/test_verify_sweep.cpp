// Verification in one weight sweep: the forced-draft hook (GenerateOptions::forced_draft) that
// gives random weights a chosen acceptance rate without ever emitting a token the verifier did not
// choose, and measure_sweep_cost, the per-row-count cost of a verify pass.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.h"

using namespace tinyloop;

namespace {

HParams sweep_hparams() {
    HParams hp = tltest::small_hparams();
    hp.max_loops = 8;
    hp.default_loops = 6;
    return hp;
}

const std::string& f32_path() {
    static const std::string p = tltest::write_random_model("sweep-f32.tinyloop", sweep_hparams(), 41);
    return p;
}

// Q4 weights: the int8 kernel's multi-row tiles (2, 3, 4 .. 8 rows) against its one-row tile.
const std::string& q4_path() {
    static const std::string p = tltest::write_random_model("sweep-q4.tinyloop", sweep_hparams(), 43, DType::Q4);
    return p;
}

struct Counts {
    int accepted = 0, rejected = 0, cycles = 0, tokens = 0;
    double acceptance() const { return accepted + rejected > 0 ? double(accepted) / (accepted + rejected) : 0.0; }
};

// Chain (tree when K_branches > 0) with the hook over `prompts`; every output must equal plain
// greedy decoding; returns the counts (rejections: the verifier's corrections after the first token).
Counts forced_run(Model* m, const std::vector<std::vector<int32_t>>& prompts, double rate, int draft_loops, int ahead,
                  int branches, bool reference_is_greedy = true) {
    Counts c;
    std::mt19937_64 g(5);
    for (size_t i = 0; i < prompts.size(); ++i) {
        const auto& p = prompts[i];
        const int n = static_cast<int>(p.size());
        GenerateConfig gc;
        gc.max_tokens = 24;
        gc.loops = 6;
        gc.ignore_eos = true;
        const GenerateResult plain = generate_ex(m, p.data(), n, gc);
        ForcedDraft fd;
        fd.rate = rate;
        fd.seed = 100 + i;
        if (reference_is_greedy) fd.reference.assign(plain.tokens.begin() + n, plain.tokens.end());
        else
            for (int k = 0; k < 24; ++k) fd.reference.push_back(static_cast<int32_t>(g() % 256));
        GenerateOptions o;
        o.forced_draft = &fd;
        int rejected = 0;
        o.observer = [&](const TokenEvent& ev) {
            if (ev.index > 0 && ev.from_verifier) ++rejected;
            return true;
        };
        GenerateResult r;
        if (branches == 0) {
            SpeculativeConfig sc;
            sc.max_tokens = 24;
            sc.draft_loops = draft_loops;
            sc.verify_loops = 6;
            sc.draft_ahead = ahead;
            sc.ignore_eos = true;
            r = generate_speculative_ex(m, p.data(), n, sc, o);
        } else {
            TreeSpeculativeConfig tc;
            tc.max_tokens = 24;
            tc.draft_loops = draft_loops;
            tc.verify_loops = 6;
            tc.draft_ahead = ahead;
            tc.K_branches = branches;
            tc.ignore_eos = true;
            r = generate_tree_speculative_ex(m, p.data(), n, tc, o);
        }
        EXPECT_EQ(r.tokens, plain.tokens) << "rate " << rate << " prompt " << i << " branches " << branches;
        c.accepted += r.stats.spec_accepted;
        c.rejected += rejected;
        c.cycles += r.stats.spec_cycles;
        c.tokens += r.stats.tokens_emitted - 1;
    }
    return c;
}

}  // namespace

// The acceptance test of the hook: at each forced rate the greedy output equals plain greedy
// decoding (the tokens emitted are the verifier's) and the measured acceptance per compared
// token is the rate (the coins are seeded: the figures are the same every run).
TEST(ForcedDraft, ChainAcceptsAtTheForcedRateAndEqualsGreedy) {
    for (const std::string* path : {&f32_path(), &q4_path()}) {
        ModelHandle mp = load_model_handle(*path);
        const auto ps = tltest::random_prompts(40, 21);
        double last = -1.0;
        for (double rate : {0.5, 0.7, 0.9}) {
            const Counts c = forced_run(mp.get(), ps, rate, 1, 4, 0);
            std::printf("%s chain rate %.1f: acceptance %.3f over %d compared, %.2f tokens per cycle\n",
                        path->c_str(), rate, c.acceptance(), c.accepted + c.rejected, double(c.tokens) / c.cycles);
            EXPECT_GT(c.accepted + c.rejected, 300);
            EXPECT_NEAR(c.acceptance(), rate, 0.06) << *path;
            EXPECT_GT(c.acceptance(), last);  // more acceptance at a higher rate
            last = c.acceptance();
        }
    }
}

TEST(ForcedDraft, TreeAcceptsAtTheForcedRateAndEqualsGreedy) {
    ModelHandle mp = load_model_handle(q4_path());
    const auto ps = tltest::random_prompts(40, 22);
    for (double rate : {0.5, 0.9}) {
        const Counts c = forced_run(mp.get(), ps, rate, 2, 4, 2);
        EXPECT_GT(c.accepted + c.rejected, 300);
        EXPECT_NEAR(c.acceptance(), rate, 0.06);
    }
}

// The extremes: rate 1 accepts every compared draft (a cycle emits draft_ahead tokens), rate 0
// none; a reference that is not the greedy output is rejected by the verifier wherever it is
// wrong, and the output is still plain greedy.
TEST(ForcedDraft, ExtremesAndAWrongReferenceStillEmitTheVerifiersTokens) {
    ModelHandle mp = load_model_handle(q4_path());
    const auto ps = tltest::random_prompts(10, 23);
    const Counts all = forced_run(mp.get(), ps, 1.0, 2, 4, 0);
    EXPECT_EQ(all.rejected, 0);
    EXPECT_GT(all.accepted, 0);
    const Counts none = forced_run(mp.get(), ps, 0.0, 2, 4, 0);
    EXPECT_EQ(none.accepted, 0);
    EXPECT_EQ(none.tokens, none.cycles);  // one correction per cycle
    const Counts wrong = forced_run(mp.get(), ps, 1.0, 2, 4, 0, false);
    EXPECT_LT(wrong.acceptance(), 0.2);
    // One branch: the wrong reference is the only candidate (with more, the draft's own next
    // choices stay candidates and the verifier accepts them as often as unforced).
    const Counts wrong_tree = forced_run(mp.get(), ps, 1.0, 2, 4, 1, false);
    EXPECT_LT(wrong_tree.acceptance(), 0.2);
}

TEST(ForcedDraft, RefusesBadHooks) {
    ModelHandle mp = load_model_handle(f32_path());
    const std::vector<int32_t> p = {1, 2, 3};
    SpeculativeConfig sc;
    sc.max_tokens = 4;
    sc.verify_loops = 6;
    ForcedDraft fd;
    GenerateOptions o;
    o.forced_draft = &fd;
    auto code_of = [&](auto&& f) {
        try {
            f();
        } catch (const Error& e) {
            return std::pair<ErrorCode, std::string>(e.code(), e.what());
        }
        return std::pair<ErrorCode, std::string>(ErrorCode::Internal, "accepted");
    };
    fd.rate = 1.5;
    auto r = code_of([&] { generate_speculative_ex(mp.get(), p.data(), 3, sc, o); });
    EXPECT_EQ(r.first, ErrorCode::InvalidArgument);
    EXPECT_NE(r.second.find("forced_draft.rate"), std::string::npos) << r.second;
    fd.rate = 0.5;
    fd.reference = {5, 999999};
    r = code_of([&] { generate_speculative_ex(mp.get(), p.data(), 3, sc, o); });
    EXPECT_EQ(r.first, ErrorCode::InvalidArgument);
    EXPECT_NE(r.second.find("forced_draft.reference"), std::string::npos) << r.second;
    fd.reference = {5};
    sc.temperature = 0.8f;
    r = code_of([&] { generate_speculative_ex(mp.get(), p.data(), 3, sc, o); });
    EXPECT_EQ(r.first, ErrorCode::NotSupported);
    EXPECT_NE(r.second.find("forced_draft"), std::string::npos) << r.second;
}

TEST(SweepCost, MeasuresEveryRowCountAndRefusesBadArguments) {
    ModelHandle mp = load_model_handle(q4_path());
    const std::vector<SweepCost> c = measure_sweep_cost(mp.get(), {1, 4, 2}, 16, 3);
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ(c[0].rows, 1);
    EXPECT_EQ(c[1].rows, 4);
    EXPECT_EQ(c[2].rows, 2);
    for (const SweepCost& s : c) {
        EXPECT_EQ(s.pass_runs_ms.size(), 3u);
        EXPECT_GT(s.pass_ms, 0.0);
        EXPECT_GT(s.head_ms, 0.0);
    }
    auto refused = [&](std::vector<int> rows, int context, int repeat, const std::string& field) {
        try {
            measure_sweep_cost(mp.get(), rows, context, repeat);
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
            return;
        }
        ADD_FAILURE() << "accepted " << field;
    };
    refused({0}, 16, 1, "rows");
    refused({65}, 16, 1, "rows");
    refused({}, 16, 1, "rows");
    refused({8}, 121, 1, "context");  // max_seq_len 128
    refused({1}, 0, 1, "context");
    refused({1}, 16, 0, "repeat");
}
