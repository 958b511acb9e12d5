// The draft-agreement map (tinyloop_analysis): the definition on a hand-built table, and on a real
// greedy run it predicts the acceptance the engine measures when speculating.
#include <stdexcept>

#include <tinyloop_analysis/agreement_map.h>
#include <tinyloop_analysis/compare_modes.h>
#include <gtest/gtest.h>

#include "analysis_test_util.h"

using namespace tinyloop::analysis;
using namespace analysis_test;

TEST(AgreementMap, HandBuilt) {

    // 5 positions x 4 depths; the last column is the final depth's argmax.
    const AgreementMap m = agreement_from_argmax({
        {10, 10, 10, 10},  // agrees from depth 1
        {11, 12, 13, 13},  // from depth 3
        {14, 15, 14, 14},  // depth 1 agrees, 2 does not, 3 again: first = 1
        {16, 17, 18, 19},  // only the final depth
        {20, 21, 22, 20},  // depth 1 and 4
    });
    EXPECT_EQ(m.final_depth, 4);
    EXPECT_EQ(m.first_agree, (std::vector<int>{1, 3, 1, 4, 1}));
    // Definition: over positions 1..4 (position 0 is the prefill's), the share whose argmax at
    // D equals the final one. D=1: positions 2, 4 -> 2/4. D=2: none -> 0. D=3: 1, 2 -> 2/4. D=4: all.
    EXPECT_EQ(predicted_acceptance(m, 1), 0.5);
    EXPECT_EQ(predicted_acceptance(m, 2), 0.0);
    EXPECT_EQ(predicted_acceptance(m, 3), 0.5);
    EXPECT_EQ(predicted_acceptance(m, 4), 1.0);
    EXPECT_THROW(predicted_acceptance(m, 5), tinyloop::Error);
    // Chain replay at D=3, 2 drafts per cycle: emitted 1 (prefill); cycle 1 drafts positions
    // 1, 2 -> both agree, a=2, no bonus -> emitted 3; cycle 2 drafts 3, 4 -> 3 disagrees, a=0,
    // the verifier's token -> emitted 4; cycle 3 drafts 4 -> 4 disagrees at D=3 -> a=0 -> 5.
    const ChainReplay r = replay_chain(m, 3, 2);
    EXPECT_EQ(r.cycles, 3);
    EXPECT_EQ(r.drafted, 5);
    EXPECT_EQ(r.accepted, 2);
    EXPECT_EQ(r.emitted, 5);
    EXPECT_THROW(agreement_from_argmax({{1, 2}, {1}}), std::invalid_argument);
    // Predicted speedup: alpha = 1 with 4 drafts at depth 2 of 8 emits 4 tokens for 4*2 + 6 = 14
    // passes against 4*8 = 32 for greedy; alpha = 0 emits 1 token per 14 passes.
    EXPECT_EQ(predicted_speedup(1.0, 2, 8, 4), 32.0 / 14.0);
    EXPECT_EQ(predicted_speedup(0.0, 2, 8, 4), 8.0 / 14.0);
}

TEST(AgreementMap, PredictsMeasuredSpeculation) {
    tinyloop::Model* m_model = bundled();

    const std::vector<int32_t> ids = prompt_ids(m_model, "The LORD is my shepherd");
    const int V = 8, N = 24;
    tinyloop::GenerateConfig g;
    g.max_tokens = N;
    g.loops = V;
    const tinyloop::GenerateResult greedy = plain(m_model, ids, g);
    const AgreementMap map = build_agreement_map(m_model, ids, continuationOf(greedy), V);
    EXPECT_EQ(map.positions(), greedy.stats.tokens_emitted);
    // the map's final column is the greedy answer itself
    for (int j = 0; j < map.positions(); ++j)
        EXPECT_EQ(map.argmax[static_cast<size_t>(j)][V - 1], map.continuation[static_cast<size_t>(j)]);
    bool sawRejection = false;
    for (int D = 1; D < V; ++D)
        for (int K : {2, 4}) {
            tinyloop::SpeculativeConfig sc;
            sc.max_tokens = N;
            sc.draft_loops = D;
            sc.verify_loops = V;
            sc.draft_ahead = K;
            const tinyloop::GenerateResult spec =
                tinyloop::generate_speculative_ex(m_model, ids.data(), static_cast<int>(ids.size()), sc);
            EXPECT_EQ(spec.tokens, greedy.tokens);
            const ChainReplay r = replay_chain(map, D, K, N);
            EXPECT_EQ(r.cycles, spec.stats.spec_cycles);
            EXPECT_EQ(r.accepted, spec.stats.spec_accepted);
            if (greedy.stats.stop_reason == tinyloop::StopReason::MAX_TOKENS) {
                EXPECT_EQ(r.drafted, spec.stats.spec_drafted);
            }
            sawRejection = sawRejection || r.accepted < r.drafted;
        }
    EXPECT_TRUE(sawRejection);  // the shallow drafts do disagree somewhere: the test is not vacuous
}
