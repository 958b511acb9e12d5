// run_decode: the mode's rules are the engine's (refusals name the field), each mode reaches its
// engine entry with the settings every front end gets alike (speculative sampling's top_k is the
// config's), and the speculation defaults resolve in one place.
#include <gtest/gtest.h>

#include "test_util.h"

using namespace tinyloop;

namespace {

// A small random model with default_loops 5 of max_loops 8.
const std::string& model_path() {
    static const std::string path = [] {
        HParams hp = tltest::small_hparams();
        hp.max_loops = 8;
        hp.default_loops = 5;
        return tltest::write_random_model("run.tinyloop", hp, 41);
    }();
    return path;
}

const std::vector<int32_t> kPrompt = {5, 17, 42, 99, 3, 64};

GenerateResult run(Model* m, const RunSpec& spec) {
    return run_decode(m, kPrompt.data(), static_cast<int>(kPrompt.size()), spec);
}

void expect_refused(Model* m, const RunSpec& spec, ErrorCode code, const std::string& field) {
    try {
        run(m, spec);
        FAIL() << decode_mode_name(spec.mode) << ": expected a refusal naming " << field;
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_EQ(std::string(e.what()).rfind(field + ":", 0), 0u) << e.what();
    }
}

}  // namespace

TEST(RunDecode, ModeRulesAreRefusedNamingTheField) {
    tinyloop::ModelHandle m = tinyloop::load_model_handle(model_path());
    RunSpec beam;
    beam.mode = DecodeMode::Beam;
    beam.config.beam_size = 1;
    expect_refused(m.get(), beam, ErrorCode::InvalidArgument, "beam_size");

    RunSpec early;
    early.mode = DecodeMode::EarlyExit;
    expect_refused(m.get(), early, ErrorCode::InvalidArgument, "early_exit_patience");

    RunSpec tree;
    tree.mode = DecodeMode::Tree;
    tree.config.temperature = 0.8f;
    expect_refused(m.get(), tree, ErrorCode::NotSupported, "temperature");

    RunSpec draft;
    draft.mode = DecodeMode::DraftModel;  // no draft model
    expect_refused(m.get(), draft, ErrorCode::InvalidArgument, "draft");
}

TEST(RunDecode, PlainModesOverrideWhatTheyExclude) {
    tinyloop::ModelHandle m = tinyloop::load_model_handle(model_path());
    GenerateConfig plain;
    plain.max_tokens = 12;
    const std::vector<int32_t> greedy = generate(m.get(), kPrompt.data(), static_cast<int>(kPrompt.size()), plain);

    RunSpec spec;
    spec.mode = DecodeMode::Greedy;
    spec.config.max_tokens = 12;
    spec.config.temperature = 0.9f;       // greedy decodes at temperature 0
    spec.config.early_exit.patience = 2;  // and without early exit
    EXPECT_EQ(run(m.get(), spec).tokens, greedy);

    spec.mode = DecodeMode::Sample;
    spec.config.sample_seed = 3;
    GenerateConfig sampled = plain;
    sampled.temperature = 0.9f;
    sampled.sample_seed = 3;
    EXPECT_EQ(run(m.get(), spec).tokens,
              generate(m.get(), kPrompt.data(), static_cast<int>(kPrompt.size()), sampled));

    spec.mode = DecodeMode::EarlyExit;
    GenerateConfig early = sampled;
    early.early_exit.patience = 2;
    EXPECT_EQ(run(m.get(), spec).tokens, generate(m.get(), kPrompt.data(), static_cast<int>(kPrompt.size()), early));
}

TEST(RunDecode, SpeculativeSamplingFiltersAsPlainSampling) {
    tinyloop::ModelHandle m = tinyloop::load_model_handle(model_path());
    RunSpec spec;
    spec.mode = DecodeMode::Speculative;
    spec.config.max_tokens = 16;
    spec.config.temperature = 0.9f;
    spec.config.top_k = 7;
    spec.config.top_p = 0.95f;
    spec.config.sample_seed = 11;
    const SpeculationPolicy k = resolved_speculation(m.get(), spec);
    EXPECT_EQ(k.verify_loops, 5);  // config.loops 0: the model's default_loops
    EXPECT_EQ(k.draft_loops, 2);   // min(2, verify - 1)
    EXPECT_EQ(k.kind, SpeculationKind::Chain);  // the mode decides the kind

    SpeculativeConfig sc;
    sc.max_tokens = 16;
    sc.draft_loops = 2;
    sc.verify_loops = 5;
    sc.temperature = 0.9f;
    sc.top_k = 7;
    sc.top_p = 0.95f;
    sc.seed = 11;
    const std::vector<int32_t> direct =
        generate_speculative(m.get(), kPrompt.data(), static_cast<int>(kPrompt.size()), sc);
    EXPECT_EQ(run(m.get(), spec).tokens, direct);
    sc.top_k = 0;  // unfiltered: a different draw sequence, so the config's top_k did reach it
    EXPECT_NE(generate_speculative(m.get(), kPrompt.data(), static_cast<int>(kPrompt.size()), sc), direct);
}

TEST(RunDecode, SpeculationDefaultsResolveFromTheConfig) {
    tinyloop::ModelHandle m = tinyloop::load_model_handle(model_path());
    RunSpec spec;
    spec.mode = DecodeMode::Tree;
    spec.config.loops = 3;
    SpeculationPolicy k = resolved_speculation(m.get(), spec);
    EXPECT_EQ(k.kind, SpeculationKind::Tree);
    EXPECT_EQ(k.verify_loops, 3);
    EXPECT_EQ(k.draft_loops, 2);
    spec.config.loops = 2;
    EXPECT_EQ(resolved_speculation(m.get(), spec).draft_loops, 1);
    spec.speculation.verify_loops = 7;
    spec.speculation.draft_loops = 4;
    k = resolved_speculation(m.get(), spec);
    EXPECT_EQ(k.verify_loops, 7);
    EXPECT_EQ(k.draft_loops, 4);

    // Tree and draft-model runs reach their entries: greedy output equals plain greedy.
    spec.config.max_tokens = 10;
    GenerateConfig plain;
    plain.max_tokens = 10;
    plain.loops = 7;
    plain.ignore_eos = spec.config.ignore_eos;
    const std::vector<int32_t> greedy = generate(m.get(), kPrompt.data(), static_cast<int>(kPrompt.size()), plain);
    EXPECT_EQ(run(m.get(), spec).tokens, greedy);

    tinyloop::ModelHandle draft = tinyloop::load_model_handle(model_path());
    RunSpec dm;
    dm.mode = DecodeMode::DraftModel;
    dm.config = plain;
    dm.speculation.draft_model = draft.get();
    dm.speculation.gamma = 3;
    EXPECT_EQ(resolved_speculation(m.get(), dm).draft_loops, 5);  // the draft's default_loops
    EXPECT_EQ(resolved_speculation(m.get(), dm).kind, SpeculationKind::DraftModel);
    EXPECT_EQ(run(m.get(), dm).tokens, greedy);
}

// The mode a config alone asks for (the binding's generate() runs it): beam, early exit, sample or
// greedy; a temperature the engine refuses stays with Sample, whose validation names it.
TEST(RunDecode, ConfigModeIsTheEnginesRule) {
    GenerateConfig c;
    EXPECT_EQ(config_mode(c), DecodeMode::Greedy);
    c.temperature = 0.7f;
    EXPECT_EQ(config_mode(c), DecodeMode::Sample);
    c.early_exit.patience = 1;
    EXPECT_EQ(config_mode(c), DecodeMode::EarlyExit);
    c.beam_size = 2;
    EXPECT_EQ(config_mode(c), DecodeMode::Beam);
    GenerateConfig bad;
    bad.temperature = -1.0f;
    EXPECT_EQ(config_mode(bad), DecodeMode::Sample);
    tinyloop::ModelHandle m = tinyloop::load_model_handle(model_path());
    RunSpec spec;
    spec.config = bad;
    spec.mode = config_mode(bad);
    expect_refused(m.get(), spec, ErrorCode::InvalidArgument, "temperature");
}
