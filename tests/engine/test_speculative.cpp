// Self-speculative decoding: greedy chain equals plain greedy token for token; stochastic chain
// is lossless (its output distribution equals plain sampling's).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "decode/sampling.h"
#include "chi_square.h"
#include "test_util.h"

using namespace tinyloop;

namespace {

HParams spec_hparams() {
    HParams hp = tltest::small_hparams();
    hp.max_loops = 8;
    hp.default_loops = 6;
    return hp;
}

const std::string& model_path() {
    static const std::string p = tltest::write_random_model("spec.tinyloop", spec_hparams(), 31);
    return p;
}

}  // namespace

TEST(Speculative, GreedyChainEqualsPlainGreedyOver50Prompts) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto ps = tltest::random_prompts(50, 1);
    struct S { int D, K; };
    int total_cycles = 0, total_accepted = 0, total_rejections = 0;
    for (S s : {S{1, 1}, S{2, 4}, S{3, 3}, S{5, 6}}) {
        for (const auto& p : ps) {
            GenerateConfig g;
            g.max_tokens = 20;
            g.loops = 6;
            g.ignore_eos = true;
            SpeculativeConfig c;
            c.max_tokens = 20;
            c.draft_loops = s.D;
            c.verify_loops = 6;
            c.draft_ahead = s.K;
            c.ignore_eos = true;
            const int n = static_cast<int>(p.size());
            GenerateResult plain = generate_ex(mp.get(), p.data(), n, g);
            GenerateResult spec = generate_speculative_ex(mp.get(), p.data(), n, c);
            ASSERT_EQ(plain.tokens, spec.tokens) << "D=" << s.D << " K=" << s.K;
            EXPECT_EQ(spec.stats.tokens_emitted, 20);
            total_cycles += spec.stats.spec_cycles;
            total_accepted += spec.stats.spec_accepted;
            total_rejections += spec.stats.spec_tested - spec.stats.spec_accepted;
            int hist_sum = 0, hist_acc = 0;
            for (size_t k = 0; k < spec.stats.spec_accept_hist.size(); ++k) {
                hist_sum += spec.stats.spec_accept_hist[k];
                hist_acc += static_cast<int>(k) * spec.stats.spec_accept_hist[k];
            }
            EXPECT_EQ(hist_sum, spec.stats.spec_cycles);
            EXPECT_EQ(hist_acc, spec.stats.spec_accepted);
        }
    }
    // The test means something only if both acceptance and rejection happened.
    EXPECT_GT(total_accepted, 0);
    EXPECT_GT(total_rejections, 0);
    EXPECT_GT(total_cycles, 0);
}

TEST(Speculative, EventsDescribeCyclesAndStopOnEos) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto p = tltest::random_prompts(1, 9)[0];
    SpeculativeConfig c;
    c.max_tokens = 15;
    c.verify_loops = 6;
    c.draft_loops = 2;
    c.draft_ahead = 3;
    c.ignore_eos = true;
    std::vector<TokenEvent> evs;
    GenerateOptions o;
    o.observer = [&](const TokenEvent& e) {
        evs.push_back(e);
        return true;
    };
    GenerateResult r = generate_speculative_ex(mp.get(), p.data(), static_cast<int>(p.size()), c, o);
    ASSERT_EQ(evs.size(), 15u);
    EXPECT_EQ(evs[0].cycle, -1);  // from the prefill
    for (size_t i = 1; i < evs.size(); ++i) {
        EXPECT_GE(evs[i].cycle, 0);
        EXPECT_LE(evs[i].accepted, 3);
        if (!evs[i].from_verifier) {
            EXPECT_NE(std::find(evs[i].drafted.begin(), evs[i].drafted.end(), evs[i].token), evs[i].drafted.end());
        }
    }
    EXPECT_EQ(r.stats.stop_reason, StopReason::MAX_TOKENS);
    // Errors name the field.
    c.draft_loops = 6;
    EXPECT_THROW(generate_speculative_ex(mp.get(), p.data(), 1, c), Error);
    c.draft_loops = 2;
    c.verify_loops = 9;
    try {
        generate_speculative_ex(mp.get(), p.data(), 1, c);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("verify_loops"), std::string::npos);
    }
}

TEST(Speculative, StochasticChainIsLossless) {
    // Joint distribution of the first three emitted tokens (the first from the prefill, the next
    // two from one draft-verify cycle) against the exact distribution of plain sampling.
    HParams hp = spec_hparams();
    hp.d_model = 32;
    hp.n_heads = 2;
    hp.n_kv_heads = 2;
    hp.d_ff = 64;
    hp.n_loop_layers = 1;
    const std::string path = tltest::write_random_model("spec_small.tinyloop", hp, 77);
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(path);
    const std::vector<int32_t> prompt = {65, 66, 67};
    const float T = 1.0f;
    const int top_k = 3;
    const int V = hp.vocab_size;
    const int n_ids = model_info(mp.get()).tokenizer_vocab;
    auto dist = [&](std::vector<int32_t> seq) {
        auto l = forward_logits(mp.get(), seq.data(), static_cast<int>(seq.size()), 6);
        std::vector<float> row(l.end() - V, l.end());
        mask_undecodable(row.data(), V, n_ids);
        return sampling_probs(row.data(), V, T, top_k, 1.0f, 0.0f);
    };
    std::map<std::vector<int32_t>, double> expected;
    const auto p1 = dist(prompt);
    for (int a = 0; a < V; ++a) {
        if (p1[a] <= 0) continue;
        auto s1 = prompt;
        s1.push_back(a);
        const auto p2 = dist(s1);
        for (int b = 0; b < V; ++b) {
            if (p2[b] <= 0) continue;
            auto s2 = s1;
            s2.push_back(b);
            const auto p3 = dist(s2);
            for (int cc = 0; cc < V; ++cc)
                if (p3[cc] > 0) expected[{a, b, cc}] = static_cast<double>(p1[a]) * p2[b] * p3[cc];
        }
    }
    SpeculativeConfig c;
    c.max_tokens = 3;
    c.draft_loops = 1;
    c.verify_loops = 6;
    c.draft_ahead = 2;
    c.temperature = T;
    c.top_k = top_k;
    c.ignore_eos = true;
    const int N = 20000;
    std::map<std::vector<int32_t>, int> seen;
    int accepted = 0, tested = 0;
    for (int i = 0; i < N; ++i) {
        c.seed = static_cast<uint64_t>(i) * 7919 + 1;
        GenerateResult r = generate_speculative_ex(mp.get(), prompt.data(), 3, c);
        ASSERT_EQ(r.tokens.size(), 6u);
        ++seen[{r.tokens[3], r.tokens[4], r.tokens[5]}];
        accepted += r.stats.spec_accepted;
        tested += r.stats.spec_tested;
    }
    const tltest::ChiSquare cs = tltest::pooled_chi_square(expected, seen, N);
    const double chi2 = cs.chi2;
    const int cells = cs.cells;
    for (const auto& [k, o] : seen) EXPECT_TRUE(expected.count(k)) << "a sequence plain sampling never makes";
    // Critical values of chi-square at p = 0.01 for up to 26 degrees of freedom.
    static const double crit[] = {0, 6.63, 9.21, 11.34, 13.28, 15.09, 16.81, 18.48, 20.09, 21.67, 23.21, 24.72, 26.22,
                                  27.69, 29.14, 30.58, 32.0, 33.41, 34.81, 36.19, 37.57, 38.93, 40.29, 41.64, 42.98,
                                  44.31, 45.64};
    ASSERT_GE(cells, 2);
    ASSERT_LE(cells - 1, 26);
    EXPECT_LT(chi2, crit[cells - 1]) << "cells " << cells;
    // Draft and verifier disagree sometimes: the rejection path is exercised.
    EXPECT_GT(accepted, 0);
    EXPECT_LT(accepted, tested);
}

TEST(TreeSpeculative, GreedyTreeEqualsPlainGreedyOver50Prompts) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto ps = tltest::random_prompts(50, 2);
    struct S { int D, depth, K; };
    int accepted = 0, rejected = 0, deep_accepts = 0;
    for (S s : {S{1, 1, 2}, S{2, 2, 2}, S{3, 3, 3}, S{2, 4, 2}, S{4, 2, 4}}) {
        for (const auto& p : ps) {
            GenerateConfig g;
            g.max_tokens = 18;
            g.loops = 6;
            g.ignore_eos = true;
            TreeSpeculativeConfig c;
            c.max_tokens = 18;
            c.draft_loops = s.D;
            c.verify_loops = 6;
            c.draft_ahead = s.depth;
            c.K_branches = s.K;
            c.ignore_eos = true;
            const int n = static_cast<int>(p.size());
            GenerateResult plain = generate_ex(mp.get(), p.data(), n, g);
            GenerateResult tree = generate_tree_speculative_ex(mp.get(), p.data(), n, c);
            ASSERT_EQ(plain.tokens, tree.tokens) << "D=" << s.D << " depth=" << s.depth << " K=" << s.K;
            accepted += tree.stats.spec_accepted;
            rejected += tree.stats.spec_tested - tree.stats.spec_accepted;
            for (size_t k = 2; k < tree.stats.spec_accept_hist.size(); ++k) deep_accepts += tree.stats.spec_accept_hist[k];
        }
    }
    EXPECT_GT(accepted, 0);
    EXPECT_GT(rejected, 0);
    EXPECT_GT(deep_accepts, 0);  // paths of two or more accepted nodes happened
}

// Best-first growth runs as many nodes per cycle as the chain drafts (draft_ahead), so over many
// prompts the tree must emit at least as many tokens per cycle as the chain with the same knobs:
// where the draft's first choice keeps winning the tree is the chain, and it branches only where
// its running acceptance estimate says a second choice is likelier than going deeper.
TEST(TreeSpeculative, EmitsAtLeastAsManyTokensPerCycleAsTheChain) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto ps = tltest::random_prompts(30, 11);
    for (int D : {1, 2}) {
        long long chain_tokens = 0, chain_cycles = 0, tree_tokens = 0, tree_cycles = 0;
        for (const auto& p : ps) {
            const int n = static_cast<int>(p.size());
            SpeculativeConfig c;
            c.max_tokens = 40;
            c.draft_loops = D;
            c.verify_loops = 6;
            c.draft_ahead = 4;
            c.ignore_eos = true;
            TreeSpeculativeConfig t;
            t.max_tokens = 40;
            t.draft_loops = D;
            t.verify_loops = 6;
            t.draft_ahead = 4;
            t.K_branches = 2;
            t.ignore_eos = true;
            const GenerateResult a = generate_speculative_ex(mp.get(), p.data(), n, c);
            const GenerateResult b = generate_tree_speculative_ex(mp.get(), p.data(), n, t);
            ASSERT_EQ(a.tokens, b.tokens);
            chain_tokens += a.stats.tokens_emitted - 1;  // the first token comes from the prefill
            chain_cycles += a.stats.spec_cycles;
            tree_tokens += b.stats.tokens_emitted - 1;
            tree_cycles += b.stats.spec_cycles;
        }
        const double chain_rate = static_cast<double>(chain_tokens) / chain_cycles;
        const double tree_rate = static_cast<double>(tree_tokens) / tree_cycles;
        EXPECT_GE(tree_rate, chain_rate) << "D=" << D << ": tree " << tree_rate << " vs chain " << chain_rate
                                         << " tokens per cycle";
        std::printf("D=%d: tokens per cycle, chain %.3f, tree %.3f\n", D, chain_rate, tree_rate);
    }
}

TEST(TreeSpeculative, MatchesChainWithOneBranchAndRefusesBadKnobs) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto p = tltest::random_prompts(1, 3)[0];
    const int n = static_cast<int>(p.size());
    TreeSpeculativeConfig t;
    t.max_tokens = 12;
    t.verify_loops = 6;
    t.K_branches = 1;
    t.draft_ahead = 3;
    t.ignore_eos = true;
    SpeculativeConfig c;
    c.max_tokens = 12;
    c.verify_loops = 6;
    c.draft_ahead = 3;
    c.ignore_eos = true;
    GenerateResult a = generate_tree_speculative_ex(mp.get(), p.data(), n, t);
    GenerateResult b = generate_speculative_ex(mp.get(), p.data(), n, c);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.stats.spec_accepted, b.stats.spec_accepted);
    EXPECT_EQ(a.stats.spec_cycles, b.stats.spec_cycles);
    // The widest, deepest tree the ranges allow is cheap (best-first: draft_ahead run nodes and
    // 8 candidates each) and still plain greedy; one past either range is refused.
    t.K_branches = 8;
    t.draft_ahead = 8;
    GenerateConfig g;
    g.max_tokens = 12;
    g.loops = 6;
    g.ignore_eos = true;
    EXPECT_EQ(generate_tree_speculative_ex(mp.get(), p.data(), n, t).tokens, generate_ex(mp.get(), p.data(), n, g).tokens);
    t.K_branches = 9;
    EXPECT_THROW(generate_tree_speculative_ex(mp.get(), p.data(), n, t), Error);
    t.K_branches = 8;
    t.draft_ahead = 9;
    EXPECT_THROW(generate_tree_speculative_ex(mp.get(), p.data(), n, t), Error);
    t.K_branches = 2;
    t.draft_ahead = 2;
    t.temperature = 0.8f;
    try {
        generate_tree_speculative_ex(mp.get(), p.data(), n, t);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::NotSupported);
    }
}
