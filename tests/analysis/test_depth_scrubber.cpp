// The depth scrubber (tinyloop_analysis): each depth's answer through the ResumeHandle equals a
// fresh generation at that depth, and the token diff is minimal.
#include <tinyloop_analysis/compare_modes.h>
#include <tinyloop_analysis/depth_scrubber.h>
#include <gtest/gtest.h>

#include "analysis_test_util.h"

using namespace tinyloop::analysis;
using namespace analysis_test;

TEST(DepthScrubber, EqualsFreshGeneration) {
    tinyloop::Model* m_model = bundled();

    const std::vector<int32_t> ids = prompt_ids(m_model, "In the beginning God created");
    tinyloop::GenerateConfig cfg;
    cfg.max_tokens = 12;
    DepthScrubber s(m_model, ids, cfg, 4);
    EXPECT_EQ(s.handle_loops(), 4);
    int deepest = 4;
    std::vector<int32_t> previous;
    for (int d : {4, 8, 2, 6, 1, 12, 3}) {
        const ScrubAnswer a = s.answer(d);
        tinyloop::GenerateConfig fresh = cfg;
        fresh.loops = d;
        const tinyloop::GenerateResult f = plain(m_model, ids, fresh);
        EXPECT_EQ(a.tokens, continuationOf(f));
        EXPECT_EQ(a.text, f.text);
        EXPECT_EQ(a.depth, d);
        EXPECT_EQ(a.stats.depth_per_token, f.stats.depth_per_token);
        // the prompt is computed once: only going deeper runs new passes over it
        EXPECT_EQ(a.handle_loops_before, deepest);
        deepest = std::max(deepest, d);
        EXPECT_EQ(a.handle_loops_after, deepest);
        // the diff replays both answers
        const std::vector<DiffOp> ops = diff_tokens(previous, a.tokens);
        std::vector<int32_t> from, to;
        for (const DiffOp& op : ops) {
            if (op.kind != DiffOp::Added) from.push_back(op.token);
            if (op.kind != DiffOp::Removed) to.push_back(op.token);
        }
        EXPECT_EQ(from, previous);
        EXPECT_EQ(to, a.tokens);
        previous = a.tokens;
    }
    EXPECT_THROW(s.answer(0), tinyloop::Error);
    EXPECT_THROW(s.answer(17), tinyloop::Error);
}

TEST(DepthScrubber, TokenDiffIsMinimal) {

    const std::vector<DiffOp> ops = diff_tokens({1, 2, 3, 4, 5}, {1, 3, 4, 9, 5});
    int same = 0, removed = 0, added = 0;
    for (const DiffOp& op : ops) (op.kind == DiffOp::Same ? same : op.kind == DiffOp::Removed ? removed : added)++;
    EXPECT_EQ(same, 4);  // 1 3 4 5
    EXPECT_EQ(removed, 1);
    EXPECT_EQ(added, 1);
    EXPECT_EQ(ops[1].kind, DiffOp::Removed);
    EXPECT_EQ(ops[1].token, 2);
    EXPECT_EQ(ops[4].kind, DiffOp::Added);
    EXPECT_EQ(ops[4].token, 9);
    EXPECT_EQ(diff_tokens({}, {7, 8}).size(), size_t(2));
}
