// The run's value types (tinyloop.h EarlyExitPolicy, run_spec.h SpeculationPolicy, DecodeMode):
// the one exit rule decoding and calibration share, each type's validation naming the field and
// its range, each type's one JSON form, and the mode vocabulary's aliases (accepted on input,
// never written).
#include <gtest/gtest.h>

#include "test_util.h"
#include "tinyloop/json.h"

using namespace tinyloop;
using nlohmann::json;

namespace {

template <class F>
std::string refusal(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "expected a refusal";
    return "";
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// The exit depth of a token whose criterion signal at pass l is signal[l - 1], under the rule.
int exit_depth(const EarlyExitPolicy& p, const std::vector<float>& signal) {
    const int loops = static_cast<int>(signal.size());
    int stable = 0;
    for (int pass = 1; pass <= loops; ++pass)
        if (exit_probe_at(p, pass, loops) && exit_after_probe(p, signal[static_cast<size_t>(pass - 1)], stable))
            return pass;
    return loops;
}

}  // namespace

TEST(EarlyExitPolicy, ProbesFromMinLEveryPeekNeverTheLastPass) {
    EarlyExitPolicy p;
    p.patience = 1;
    p.min_L = 3;
    p.peek_every = 2;
    std::vector<int> probed;
    for (int pass = 1; pass <= 8; ++pass)
        if (exit_probe_at(p, pass, 8)) probed.push_back(pass);
    EXPECT_EQ(probed, (std::vector<int>{3, 5, 7}));
    p.min_L = 2;
    p.peek_every = 2;
    probed.clear();
    for (int pass = 1; pass <= 8; ++pass)
        if (exit_probe_at(p, pass, 8)) probed.push_back(pass);
    EXPECT_EQ(probed, (std::vector<int>{2, 4, 6}));  // 8 is the last pass: never probed
}

TEST(EarlyExitPolicy, PatienceCountsStableProbesInARow) {
    EarlyExitPolicy p;
    p.min_L = 1;
    p.threshold = 0.1f;  // hidden_l2: stable below 0.1
    //                                 1     2      3     4      5      6     7     8
    const std::vector<float> signal = {0.5f, 0.05f, 0.3f, 0.05f, 0.05f, 0.05f, 0.5f, 0.5f};
    p.patience = 1;
    EXPECT_EQ(exit_depth(p, signal), 2);
    p.patience = 2;  // pass 3 breaks the first run
    EXPECT_EQ(exit_depth(p, signal), 5);
    p.patience = 3;
    EXPECT_EQ(exit_depth(p, signal), 6);
    p.patience = 4;
    EXPECT_EQ(exit_depth(p, signal), 8);
}

TEST(EarlyExitPolicy, StabilityPerCriterion) {
    EarlyExitPolicy p;
    p.criterion = EarlyExitCriterion::LogitMargin;  // the signal is -margin: stable when margin >= threshold
    p.threshold = 2.0f;
    EXPECT_TRUE(exit_stable(p, -2.0f));
    EXPECT_FALSE(exit_stable(p, -1.5f));
    p.criterion = EarlyExitCriterion::ArgmaxStable;
    EXPECT_TRUE(exit_stable(p, 0.0f));
    EXPECT_FALSE(exit_stable(p, 1.0f));
    p.criterion = EarlyExitCriterion::KL;
    p.threshold = 0.1f;
    EXPECT_TRUE(exit_stable(p, 0.05f));
    EXPECT_FALSE(exit_stable(p, 0.1f));
}

TEST(EarlyExitPolicy, LogitMarginShorthandFoldsIntoTheCriterion) {
    EarlyExitPolicy p;
    p.patience = 2;
    p.logit_margin = 3.0f;
    const EarlyExitPolicy e = effective_exit_policy(p);
    EXPECT_EQ(e.criterion, EarlyExitCriterion::LogitMargin);
    EXPECT_FLOAT_EQ(e.threshold, 3.0f);
    EXPECT_EQ(e.logit_margin, 0.0f);
    EXPECT_EQ(e.patience, 2);
    p.logit_margin = 0.0f;
    EXPECT_EQ(effective_exit_policy(p).criterion, EarlyExitCriterion::HiddenL2);
}

TEST(EarlyExitPolicy, ValidationNamesTheFieldAndRange) {
    EarlyExitPolicy p;
    p.min_L = 9;
    EXPECT_EQ(refusal([&] { validate_early_exit(p, 8); }), "early_exit_min_L: 9 is outside [1, 8]");
    EXPECT_EQ(refusal([&] { validate_early_exit(p, 8, ""); }), "min_L: 9 is outside [1, 8]");
    p = {};
    p.patience = -1;
    EXPECT_TRUE(starts_with(refusal([&] { validate_early_exit(p, 8); }), "early_exit_patience: -1 must be >= 0"));
    p = {};
    p.threshold = 0.0f;
    EXPECT_TRUE(starts_with(refusal([&] { validate_early_exit(p, 8); }), "early_exit_threshold: 0 must be > 0"));
    p = {};
    p.patience = 1;
    p.criterion = EarlyExitCriterion::GateStop;
    p.threshold = 1.5f;
    EXPECT_TRUE(starts_with(refusal([&] { validate_early_exit(p, 8); }), "early_exit_threshold: 1.5 is outside (0, 1]"));
    p = {};
    p.peek_every = 0;
    EXPECT_TRUE(starts_with(refusal([&] { validate_early_exit(p, 8); }), "early_exit_peek_every: 0 must be >= 1"));
}

TEST(EarlyExitPolicy, OneJsonFormRoundTrips) {
    EarlyExitPolicy p;
    p.patience = 3;
    p.min_L = 2;
    p.peek_every = 2;
    p.criterion = EarlyExitCriterion::KL;
    p.threshold = 0.25f;
    const json j = early_exit_policy_to_json(p);
    EXPECT_EQ(j, json::parse(R"({"criterion":"kl","threshold":0.25,"patience":3,"min_L":2,"peek_every":2})"));
    ConfigLimits limits;
    limits.max_loops = 8;
    const EarlyExitPolicy back = early_exit_policy_from_json(j, limits);
    EXPECT_EQ(back.patience, 3);
    EXPECT_EQ(back.peek_every, 2);
    EXPECT_EQ(back.criterion, EarlyExitCriterion::KL);
    EXPECT_FLOAT_EQ(back.threshold, 0.25f);
    // the recommendation writes the same form (plus its record of the depth measured at)
    Recommendation r;
    r.early_exit = p;
    EXPECT_EQ(recommendation_to_json(r)["early_exit"], j);
    EXPECT_EQ(refusal([&] { early_exit_policy_from_json(json{{"min_L", 9}}, limits); }),
              "early_exit.min_L: 9 is outside [1, 8]");
    EXPECT_TRUE(starts_with(refusal([&] { early_exit_policy_from_json(json{{"patience_", 1}}, limits); }),
                            "early_exit.patience_: unknown key"));
    // the config's flat keys hold the same fields
    GenerateConfig c;
    c.early_exit = p;
    const json cj = config_to_json(c);
    EXPECT_EQ(cj["early_exit_patience"], 3);
    EXPECT_EQ(cj["early_exit_criterion"], "kl");
    EXPECT_EQ(config_from_json(cj).early_exit.peek_every, 2);
}

TEST(DecodeModeNames, OneVocabularyOutAliasesIn) {
    const std::pair<const char*, DecodeMode> aliases[] = {{"sampling", DecodeMode::Sample},
                                                          {"early_exit", DecodeMode::EarlyExit},
                                                          {"chain", DecodeMode::Speculative},
                                                          {"draft_model", DecodeMode::DraftModel},
                                                          {"draft", DecodeMode::DraftModel}};
    for (const auto& [name, mode] : aliases) {
        DecodeMode m = DecodeMode::Greedy;
        ASSERT_TRUE(parse_decode_mode(name, &m)) << name;
        EXPECT_EQ(m, mode) << name;
        RunSpec spec;
        spec.mode = m;
        EXPECT_EQ(run_spec_from_json(json{{"mode", name}}).mode, mode) << name;
        EXPECT_EQ(run_spec_to_json(spec)["mode"], decode_mode_name(mode)) << "written canonical";
    }
    DecodeMode m;
    EXPECT_FALSE(parse_decode_mode("plain-ish", &m));
    EXPECT_TRUE(starts_with(refusal([] { run_spec_from_json(json{{"mode", "fast"}}); }), "mode: \"fast\" is not one of"));
}

TEST(SpeculationPolicy, KindFollowsTheModeAndRangesNameTheField) {
    EXPECT_STREQ(speculation_kind_name(SpeculationKind::None), "none");
    EXPECT_STREQ(speculation_kind_name(SpeculationKind::Chain), "chain");
    EXPECT_STREQ(speculation_kind_name(SpeculationKind::Tree), "tree");
    EXPECT_STREQ(speculation_kind_name(SpeculationKind::DraftModel), "draft-model");
    SpeculationPolicy k;
    k.branches = 9;
    EXPECT_TRUE(starts_with(refusal([&] { validate_speculation(k); }), "branches: 9 is outside [0, 8]"));
    k = {};
    k.gamma = 0;
    EXPECT_TRUE(starts_with(refusal([&] { validate_speculation(k); }), "gamma: 0 is outside [1, 32]"));
    // the old key K_branches is read; branches is written
    const SpeculationPolicy read = speculation_from_json(json{{"K_branches", 3}});
    EXPECT_EQ(read.branches, 3);
    EXPECT_TRUE(speculation_to_json(read).contains("branches"));
    EXPECT_FALSE(speculation_to_json(read).contains("K_branches"));
}
