// Step mode (tinyloop_analysis): taking the proposal every time is plain generation (greedy,
// sampled with a seed, early exit), with each step's lens row; an override continues as a plain
// run from the chosen token.
#include <ostream>

#include <tinyloop_analysis/compare_modes.h>
#include <tinyloop_analysis/step_mode.h>
#include <gtest/gtest.h>

#include "analysis_test_util.h"

using namespace tinyloop::analysis;
using namespace analysis_test;

namespace {

struct StepCase {
    const char* name;
    float temperature;
    int loops;
    int patience;
};

// CTest lists a case by its name, not its bytes.
void PrintTo(const StepCase& c, std::ostream* os) { *os << c.name; }

class StepTakingProposals : public ::testing::TestWithParam<StepCase> {};

}  // namespace

TEST_P(StepTakingProposals, IsPlainGeneration) {
    tinyloop::Model* m_model = bundled();
    const float temperature = GetParam().temperature;
    const int loops = GetParam().loops;
    const int patience = GetParam().patience;

    const std::vector<int32_t> ids = prompt_ids(m_model, "In the beginning God");
    tinyloop::GenerateConfig cfg;
    cfg.max_tokens = 14;
    cfg.loops = loops;
    cfg.temperature = temperature;
    cfg.top_k = 40;
    cfg.sample_seed = 11;
    cfg.early_exit.patience = patience;
    cfg.early_exit.criterion = tinyloop::EarlyExitCriterion::ArgmaxStable;
    tinyloop::GenerateOptions lensOpts;
    lensOpts.lens = true;
    lensOpts.lens_top_k = 8;
    std::vector<tinyloop::TokenEvent> events;
    lensOpts.observer = [&](const tinyloop::TokenEvent& ev) {
        events.push_back(ev);
        return true;
    };
    const tinyloop::GenerateResult ref = tinyloop::generate_ex(m_model, ids.data(), static_cast<int>(ids.size()), cfg, lensOpts);
    Stepper s(m_model, ids, cfg, 8);
    while (!s.finished()) s.accept_proposal();
    EXPECT_EQ(s.continuation(), continuationOf(ref));
    EXPECT_EQ(s.text(), ref.text);
    EXPECT_EQ(s.stop_reason(), std::string(tinyloop::stop_reason_name(ref.stats.stop_reason)));
    // each step showed the lens row the plain run reports for that token
    EXPECT_EQ(s.steps().size(), events.size());
    for (size_t i = 0; i < events.size(); ++i) {
        const tinyloop::TokenEvent& p = s.steps()[i].proposal;
        EXPECT_EQ(p.token, events[i].token);
        EXPECT_EQ(p.depth, events[i].depth);
        EXPECT_TRUE(p.prob == events[i].prob);
        EXPECT_EQ(p.lens.size(), events[i].lens.size());
        for (size_t d = 0; d < p.lens.size(); ++d) {
            EXPECT_EQ(p.lens[d].top_ids, events[i].lens[d].top_ids);
            EXPECT_TRUE(p.lens[d].top_probs == events[i].lens[d].top_probs);
        }
        EXPECT_TRUE(!s.steps()[i].overridden());
    }
    EXPECT_THROW(s.propose(), tinyloop::Error);
}

INSTANTIATE_TEST_SUITE_P(StepMode, StepTakingProposals,
                         ::testing::Values(StepCase{"greedy_L4", 0.0f, 4, 0}, StepCase{"greedy_L8", 0.0f, 8, 0},
                                           StepCase{"sampling_T09_seed11", 0.9f, 4, 0},
                                           StepCase{"early_exit", 0.0f, 8, 1}),
                         [](const ::testing::TestParamInfo<StepCase>& i) { return std::string(i.param.name); });

TEST(StepMode, OverrideContinuesFromTheChosenToken) {
    tinyloop::Model* m_model = bundled();

    const std::vector<int32_t> ids = prompt_ids(m_model, "And God said");
    tinyloop::GenerateConfig cfg;
    cfg.max_tokens = 10;
    cfg.temperature = 0.8f;
    cfg.sample_seed = 3;
    Stepper s(m_model, ids, cfg, 5);
    s.accept_proposal();
    s.accept_proposal();
    // pick the second-ranked candidate of the final depth's lens row
    const tinyloop::TokenEvent& p = s.propose();
    const auto& row = p.lens.back().top_ids;
    const int32_t other = row[0] == p.token ? row[1] : row[0];
    s.commit(other);
    EXPECT_TRUE(s.steps().back().overridden());
    EXPECT_EQ(s.origin_steps(), 3);
    while (!s.finished()) s.accept_proposal();
    // after the override, the rest is a plain run from prompt + the three chosen tokens
    std::vector<int32_t> origin = ids;
    for (int i = 0; i < 3; ++i) origin.push_back(s.continuation()[static_cast<size_t>(i)]);
    tinyloop::GenerateConfig rest = cfg;
    rest.max_tokens = cfg.max_tokens - 3;
    const tinyloop::GenerateResult r = plain(m_model, origin, rest);
    const std::vector<int32_t> all = s.continuation();
    const std::vector<int32_t> got(all.begin() + 3, all.end());
    EXPECT_EQ(got, continuationOf(r));
    EXPECT_EQ(static_cast<int>(s.continuation().size()), 3 + r.stats.tokens_emitted);
    EXPECT_THROW(Stepper(m_model, ids, cfg).commit(1 << 20), tinyloop::Error);
}
