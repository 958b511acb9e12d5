// resolve_run (run_spec.h): what a user set plus the model's recommendation becomes a complete run
// with a source per field; the mode rules (greedy temperature 0, sample 0.8, beam 4, tree greedy
// only) are decided there once, and the resolved run decodes exactly as the unresolved one.
#include <gtest/gtest.h>

#include <algorithm>

#include "test_util.h"
#include "tinyloop/json.h"
#include "tinyloop/mode_rules.h"

using namespace tinyloop;

namespace {

// A small random model with default_loops 5 of max_loops 8, and one that recommends settings.
std::string model_path(bool recommends) {
    HParams hp = tltest::small_hparams();
    hp.max_loops = 8;
    hp.default_loops = 5;
    const std::string path = tltest::write_random_model(recommends ? "resolver_rec.tinyloop" : "resolver.tinyloop", hp, 43);
    if (!recommends) return path;
    Recommendation r;
    r.set_draft_loops(3);
    r.chain.draft_ahead = 6;
    r.tree.draft_ahead = 3;
    r.tree.branches = 3;
    r.early_exit.patience = 2;
    r.early_exit.criterion = EarlyExitCriterion::KL;
    r.early_exit.threshold = 0.2f;
    r.early_exit.min_L = 3;
    r.early_exit.peek_every = 1;
    const std::string out = tltest::temp_path("resolver_rec_with.tinyloop");
    // the metadata as `tinyloop recommend` writes it: through the codec
    write_model_metadata(path, out, nlohmann::json{{"recommended", recommendation_to_json(r)}}.dump());
    return out;
}

const std::vector<int32_t> kPrompt = {5, 17, 42, 99, 3, 64};

std::string source_of(const ResolvedRun& r, const std::string& key) {
    for (const auto& [k, s] : r.source)
        if (k == key) return s;
    return "";
}

std::string refusal(Model* m, const RunSpec& spec, const std::vector<std::string>& keys) {
    try {
        resolve_run(m, spec, keys);
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        return e.what();
    }
    ADD_FAILURE() << "expected a refusal";
    return "";
}

}  // namespace

TEST(RunResolver, ModeRulesAndDepthDecidedOnce) {
    ModelHandle m = load_model_handle(model_path(false));
    RunSpec spec;
    spec.mode = DecodeMode::Sample;
    ResolvedRun r = resolve_run(m.get(), spec, {});
    EXPECT_EQ(r.spec.config.loops, 5);
    EXPECT_EQ(source_of(r, "loops"), "model");
    EXPECT_FLOAT_EQ(r.spec.config.temperature, 0.8f);
    EXPECT_EQ(source_of(r, "temperature"), "built-in");
    EXPECT_NE(std::find(r.messages.begin(), r.messages.end(), "temperature: 0.8 (built-in)"), r.messages.end());
    spec.config.temperature = 1.3f;
    spec.config.loops = 7;
    r = resolve_run(m.get(), spec, {"temperature", "loops"});
    EXPECT_FLOAT_EQ(r.spec.config.temperature, 1.3f);
    EXPECT_EQ(source_of(r, "temperature"), "user");
    EXPECT_EQ(r.spec.config.loops, 7);
    EXPECT_EQ(source_of(r, "loops"), "user");

    spec = {};
    spec.mode = DecodeMode::Greedy;
    spec.config.temperature = 0.7f;  // not set by the user: the mode's
    spec.config.early_exit.patience = 3;
    r = resolve_run(m.get(), spec, {});
    EXPECT_EQ(r.spec.config.temperature, 0.0f);
    EXPECT_EQ(r.spec.config.early_exit.patience, 0);
    EXPECT_EQ(source_of(r, "temperature"), "mode");
    EXPECT_EQ(refusal(m.get(), spec, {"temperature"}).rfind("temperature: 0.7 conflicts with mode greedy", 0), 0u);

    spec = {};
    spec.mode = DecodeMode::Beam;
    r = resolve_run(m.get(), spec, {});
    EXPECT_EQ(r.spec.config.beam_size, 4);
    spec.config.beam_size = 1;
    EXPECT_EQ(refusal(m.get(), spec, {"beam_size"}).rfind("beam_size: 1 is outside [2, 64]", 0), 0u);

    spec = {};
    spec.mode = DecodeMode::Tree;
    spec.config.temperature = 0.9f;
    EXPECT_NE(refusal(m.get(), spec, {"temperature"}).find("greedy only"), std::string::npos);
    spec.config.loops = 9;
    EXPECT_EQ(refusal(m.get(), spec, {"loops"}).rfind("loops: 9 is outside [1, 8]", 0), 0u);
}

TEST(RunResolver, UserThenModelThenBuiltIn) {
    ModelHandle plain = load_model_handle(model_path(false));
    ModelHandle rec = load_model_handle(model_path(true));
    RunSpec spec;
    spec.mode = DecodeMode::EarlyExit;
    ResolvedRun r = resolve_run(rec.get(), spec, {});
    EXPECT_EQ(r.spec.config.early_exit.patience, 2);
    EXPECT_EQ(r.spec.config.early_exit.criterion, EarlyExitCriterion::KL);
    EXPECT_EQ(r.spec.config.early_exit.min_L, 3);
    EXPECT_EQ(source_of(r, "early_exit_threshold"), "model");
    r = resolve_run(plain.get(), spec, {});
    EXPECT_EQ(r.spec.config.early_exit.patience, 1);
    EXPECT_EQ(source_of(r, "early_exit_threshold"), "built-in");
    spec.config.early_exit.min_L = 4;
    r = resolve_run(rec.get(), spec, {"early_exit_min_L"});
    EXPECT_EQ(r.spec.config.early_exit.min_L, 4);
    EXPECT_EQ(source_of(r, "early_exit_min_L"), "user");

    spec = {};
    spec.mode = DecodeMode::Tree;
    r = resolve_run(rec.get(), spec, {});
    EXPECT_EQ(r.spec.speculation.kind, SpeculationKind::Tree);
    EXPECT_EQ(r.spec.speculation.verify_loops, 5);
    EXPECT_EQ(r.spec.speculation.draft_loops, 3);
    EXPECT_EQ(r.spec.speculation.draft_ahead, 3);  // the tree's depth, not the chain's 6
    EXPECT_EQ(r.spec.speculation.branches, 3);
    EXPECT_EQ(source_of(r, "speculation.branches"), "model");
    r = resolve_run(plain.get(), spec, {});
    EXPECT_EQ(r.spec.speculation.draft_ahead, 4);
    EXPECT_EQ(r.spec.speculation.branches, 2);
    {  // no recommendation: every knob is builtin_speculation's at the verify depth
        const SpeculationPolicy b = builtin_speculation(SpeculationKind::Tree, r.spec.speculation.verify_loops);
        EXPECT_EQ(r.spec.speculation.draft_loops, b.draft_loops);
        EXPECT_EQ(r.spec.speculation.draft_ahead, b.draft_ahead);
        EXPECT_EQ(r.spec.speculation.branches, b.branches);
        EXPECT_EQ(builtin_speculation(SpeculationKind::Chain, 2).draft_loops, 1);
        EXPECT_EQ(builtin_speculation(SpeculationKind::Chain, 8).draft_loops, 2);
    }
    EXPECT_EQ(source_of(r, "speculation.branches"), "built-in");
    spec.speculation.branches = 9;
    EXPECT_EQ(refusal(plain.get(), spec, {"speculation.branches"}).rfind("branches: 9 is outside [0, 8]", 0), 0u);

    // The depths' rule (check_speculation_depths) is the resolver's too, as the run applies it:
    // a front end shows the run's refusal before it starts.
    spec = {};
    spec.mode = DecodeMode::Speculative;
    spec.speculation.verify_loops = 4;
    spec.speculation.draft_loops = 5;
    EXPECT_EQ(refusal(plain.get(), spec, {"speculation.draft_loops"}), "draft_loops: 5 is outside [1, verify_loops - 1 = 3]");
    spec.speculation = {};
    spec.config.loops = 1;  // the verify depth from loops
    EXPECT_EQ(refusal(plain.get(), spec, {"loops"}), "verify_loops: 1 is outside [2, 8]");
    EXPECT_THROW(check_speculation_depths(1, 9, 8), Error);
    EXPECT_NO_THROW(check_speculation_depths(1, 9, 0));  // max_loops unknown: only draft < verify
    EXPECT_THROW(check_speculation_depths(9, 9, 0), Error);
}

TEST(RunResolver, ResolvedRunDecodesAsTheGivenOne) {
    ModelHandle m = load_model_handle(model_path(true));
    for (DecodeMode mode : {DecodeMode::Greedy, DecodeMode::Sample, DecodeMode::EarlyExit, DecodeMode::Beam,
                            DecodeMode::Speculative, DecodeMode::Tree}) {
        RunSpec spec;
        spec.mode = mode;
        spec.config.max_tokens = 8;
        spec.config.sample_seed = 5;
        spec.config.temperature = mode == DecodeMode::Sample ? 0.8f : 0.0f;
        spec.config.beam_size = mode == DecodeMode::Beam ? 4 : 0;
        if (mode == DecodeMode::EarlyExit) spec.config = resolve_early_exit(m.get(), spec.config, {});
        const ResolvedRun r = resolve_run(m.get(), spec, {});
        const auto given = run_decode(m.get(), kPrompt.data(), static_cast<int>(kPrompt.size()), spec);
        const auto resolved = run_decode(m.get(), kPrompt.data(), static_cast<int>(kPrompt.size()), r.spec);
        EXPECT_EQ(given.tokens, resolved.tokens) << decode_mode_name(mode);
    }
}
