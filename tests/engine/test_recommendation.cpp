// The model's recommended settings (metadata "recommended", FORMAT.md §2): read at load, refused
// when out of range, resolved "user > model > built-in" in one place (resolved_speculation,
// resolve_early_exit), and written by write_model_metadata without touching a tensor byte.
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tinyloop/json.h"

using namespace tinyloop;

namespace {

const std::string& plain_model() {
    static const std::string path = [] {
        HParams hp = tltest::small_hparams();
        hp.max_loops = 8;
        hp.default_loops = 5;
        return tltest::write_random_model("recommend-plain.tinyloop", hp, 43);
    }();
    return path;
}

std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The file's bytes from data_start on (FORMAT.md §2): the tensors.
std::string tensor_region(const std::string& bytes) {
    uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(bytes[16 + i]);
    return bytes.substr((24 + header + 63) / 64 * 64);
}

const char* kRecommended = R"({"generator": "test", "recommended": {
    "speculation": {"draft_loops": 3, "draft_ahead": 6, "tree_draft_ahead": 3, "branches": 4},
    "early_exit": {"criterion": "kl", "threshold": 0.25, "patience": 2, "min_L": 1, "peek_every": 2},
    "measured": {"note": "free-form"}}})";

std::string recommended_model() {
    const std::string out = tltest::temp_path("recommend-with.tinyloop");
    write_model_metadata(plain_model(), out, kRecommended);
    return out;
}

}  // namespace

TEST(Recommendation, WritingMetadataKeepsEveryTensorByte) {
    const std::string out = recommended_model();
    const std::string before = slurp(plain_model()), after = slurp(out);
    EXPECT_EQ(before.substr(0, 16), after.substr(0, 16));  // magic, version, flags
    EXPECT_EQ(tensor_region(before), tensor_region(after));
    EXPECT_NE(before, after);
    ModelHandle a = load_model_handle(plain_model()), b = load_model_handle(out);
    const std::vector<int32_t> ids = {5, 17, 42, 99, 3};
    EXPECT_EQ(forward_logits(a.get(), ids.data(), 5), forward_logits(b.get(), ids.data(), 5));
    EXPECT_EQ(nlohmann::json::parse(model_info(b.get()).metadata_json)["generator"], "test");
    // In place: the same file replaced, still the same tensors.
    write_model_metadata(out, out, R"({"generator": "again"})");
    EXPECT_EQ(tensor_region(slurp(out)), tensor_region(before));
    EXPECT_FALSE(model_recommendation(load_model_handle(out).get()).has_early_exit());
}

TEST(Recommendation, AbsentMeansTheBuiltInDefaults) {
    ModelHandle m = load_model_handle(plain_model());
    EXPECT_FALSE(model_recommendation(m.get()).has_speculation());
    EXPECT_FALSE(model_recommendation(m.get()).has_early_exit());
    RunSpec chain;
    chain.mode = DecodeMode::Speculative;
    const SpeculationPolicy k = resolved_speculation(m.get(), chain);
    EXPECT_EQ(k.draft_loops, 2);
    EXPECT_EQ(k.draft_ahead, 4);
    EXPECT_EQ(k.branches, 2);
    GenerateConfig on;
    on.early_exit.patience = 1;
    const GenerateConfig c = resolve_early_exit(m.get(), on, {});
    EXPECT_EQ(c.early_exit.criterion, EarlyExitCriterion::HiddenL2);
    EXPECT_FLOAT_EQ(c.early_exit.threshold, 0.05f);
    EXPECT_EQ(c.early_exit.patience, 1);
    EXPECT_EQ(c.early_exit.min_L, 2);
    EXPECT_EQ(recommended_config(m.get()).early_exit.patience, 0);  // off until asked for
}

TEST(Recommendation, UserThenModelThenBuiltIn) {
    ModelHandle m = load_model_handle(recommended_model());
    const Recommendation& rec = model_recommendation(m.get());
    EXPECT_EQ(rec.chain.draft_loops, 3);
    EXPECT_EQ(rec.tree.draft_loops, 3);  // one draft depth in the file, both kinds
    EXPECT_EQ(rec.early_exit.criterion, EarlyExitCriterion::KL);

    // Speculation: 0 = the model's; a knob given wins; a draft depth not below verify falls back.
    RunSpec chain;
    chain.mode = DecodeMode::Speculative;
    SpeculationPolicy k = resolved_speculation(m.get(), chain);
    EXPECT_EQ(k.draft_loops, 3);
    EXPECT_EQ(k.draft_ahead, 6);
    chain.speculation.draft_ahead = 2;
    chain.speculation.draft_loops = 1;
    k = resolved_speculation(m.get(), chain);
    EXPECT_EQ(k.draft_loops, 1);
    EXPECT_EQ(k.draft_ahead, 2);
    RunSpec tree;
    tree.mode = DecodeMode::Tree;
    tree.speculation.verify_loops = 3;  // the model's draft depth 3 is not below 3
    k = resolved_speculation(m.get(), tree);
    EXPECT_EQ(k.draft_loops, 2);
    EXPECT_EQ(k.draft_ahead, 3);
    EXPECT_EQ(k.branches, 4);

    // Early exit: every field the user left is the model's...
    GenerateConfig on;
    on.early_exit.patience = 1;
    std::vector<std::pair<std::string, std::string>> source;
    GenerateConfig c = resolve_early_exit(m.get(), on, {}, &source);
    EXPECT_EQ(c.early_exit.criterion, EarlyExitCriterion::KL);
    EXPECT_FLOAT_EQ(c.early_exit.threshold, 0.25f);
    EXPECT_EQ(c.early_exit.patience, 2);
    EXPECT_EQ(c.early_exit.min_L, 1);
    EXPECT_EQ(c.early_exit.peek_every, 2);
    for (const auto& [key, from] : source) EXPECT_EQ(from, "model") << key;
    // ... a field the user set is theirs ...
    on.early_exit.threshold = 0.5f;
    c = resolve_early_exit(m.get(), on, {"early_exit_threshold"});
    EXPECT_FLOAT_EQ(c.early_exit.threshold, 0.5f);
    EXPECT_EQ(c.early_exit.patience, 2);
    // ... and another criterion than the model's takes the built-in policy, not the model's.
    on = GenerateConfig{};
    on.early_exit.patience = 1;
    on.early_exit.criterion = EarlyExitCriterion::HiddenL2;
    c = resolve_early_exit(m.get(), on, {"early_exit_criterion"});
    EXPECT_EQ(c.early_exit.criterion, EarlyExitCriterion::HiddenL2);
    EXPECT_FLOAT_EQ(c.early_exit.threshold, 0.05f);
    EXPECT_EQ(c.early_exit.patience, 1);
    EXPECT_EQ(c.early_exit.min_L, 2);
    // The workbench's defaults show the model's policy, off.
    const GenerateConfig shown = recommended_config(m.get());
    EXPECT_EQ(shown.early_exit.criterion, EarlyExitCriterion::KL);
    EXPECT_FLOAT_EQ(shown.early_exit.threshold, 0.25f);
    EXPECT_EQ(shown.early_exit.patience, 0);
}

TEST(Recommendation, RunsWithTheModelsPolicy) {
    // run_decode in early-exit mode with the resolved config equals the same policy spelled out.
    ModelHandle m = load_model_handle(recommended_model());
    const std::vector<int32_t> prompt = {5, 17, 42, 99, 3, 64};
    GenerateConfig on;
    on.max_tokens = 12;
    on.early_exit.patience = 1;
    RunSpec a;
    a.mode = DecodeMode::EarlyExit;
    a.config = resolve_early_exit(m.get(), on, {});
    RunSpec b = a;
    b.config = on;
    b.config.early_exit.criterion = EarlyExitCriterion::KL;
    b.config.early_exit.threshold = 0.25f;
    b.config.early_exit.patience = 2;
    b.config.early_exit.min_L = 1;
    b.config.early_exit.peek_every = 2;
    EXPECT_EQ(run_decode(m.get(), prompt.data(), 6, a).tokens, run_decode(m.get(), prompt.data(), 6, b).tokens);
}

TEST(Recommendation, OutOfRangeIsRefusedNamingTheKey) {
    struct Case {
        const char* recommended;
        const char* field;
    };
    const Case cases[] = {
        {R"({"early_exit": {"threshold": -1}})", "metadata.recommended.early_exit.threshold"},
        {R"({"early_exit": {"patience": 0}})", "metadata.recommended.early_exit.patience"},
        {R"({"early_exit": {"criterion": "loud"}})", "metadata.recommended.early_exit.criterion"},
        {R"({"speculation": {"draft_loops": 8}})", "metadata.recommended.speculation.draft_loops"},
        {R"({"speculation": {"branches": 9}})", "metadata.recommended.speculation.branches"},
        {R"({"speculation": {"width": 2}})", "metadata.recommended.speculation.width"},
        {R"({"speed": 2})", "metadata.recommended.speed"},
        {R"([1])", "metadata.recommended"},
    };
    const std::string out = tltest::temp_path("recommend-bad.tinyloop");
    for (const Case& c : cases) {
        const std::string meta = std::string(R"({"recommended": )") + c.recommended + "}";
        try {
            write_model_metadata(plain_model(), out, meta);  // the writer checks by loading
            FAIL() << "accepted " << meta;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::BadFile) << e.what();
            EXPECT_NE(std::string(e.what()).find(std::string(c.field) + ":"), std::string::npos) << e.what();
        }
    }
    EXPECT_THROW(write_model_metadata(plain_model(), out, "[1, 2]"), Error);
    EXPECT_THROW(write_model_metadata(plain_model(), out, "{not json"), Error);
}

TEST(Recommendation, JsonRoundTrip) {
    Recommendation r;
    r.set_draft_loops(1);
    r.tree.branches = 3;
    r.early_exit.patience = 1;
    r.early_exit.criterion = EarlyExitCriterion::HiddenL2;
    r.early_exit.threshold = 0.5f;
    r.early_exit.min_L = 1;
    const nlohmann::json j = recommendation_to_json(r);
    EXPECT_EQ(j["early_exit"]["criterion"], "hidden_l2");
    EXPECT_FALSE(j["speculation"].contains("draft_ahead"));
    const Recommendation back = recommendation_from_json(j);
    EXPECT_EQ(back.chain.draft_loops, 1);  // one draft depth on disk: both kinds read it
    EXPECT_EQ(back.tree.draft_loops, 1);
    EXPECT_EQ(back.tree.branches, 3);
    EXPECT_EQ(back.chain.draft_ahead, 0);
    EXPECT_EQ(back.chain.kind, SpeculationKind::Chain);
    EXPECT_EQ(back.tree.kind, SpeculationKind::Tree);
    EXPECT_EQ(j["speculation"]["draft_loops"], 1);
    // two depths cannot be written: the file holds one
    Recommendation two = r;
    two.tree.draft_loops = 2;
    EXPECT_THROW(recommendation_to_json(two), Error);
    EXPECT_FLOAT_EQ(back.early_exit.threshold, 0.5f);
    EXPECT_EQ(back.early_exit.min_L, 1);
    EXPECT_EQ(recommendation_to_json(Recommendation{}), nlohmann::json::object());
}

TEST(Recommendation, BundledModelsCarryTheirs) {
    // The prose model: the policy and the speculation cells `tinyloop recommend` found on each file
    // (its card: a depth-1 draft pays in wall time on the f32 file; on the q8 file no cell does, and
    // the settings `tinyloop quantize` copied from the f32 file were removed); the reasoner:
    // the one its own evaluation chose (argmax stability, measured at depth 12, with the CLI's name
    // recorded).
    ModelHandle kjv = load_model_handle(TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-f32.tinyloop");
    const Recommendation& k = model_recommendation(kjv.get());
    EXPECT_EQ(k.early_exit.criterion, EarlyExitCriterion::HiddenL2);
    EXPECT_EQ(k.early_exit.min_L, 1);
    EXPECT_TRUE(k.has_speculation());
    EXPECT_EQ(k.chain.draft_loops, 1);
    EXPECT_GE(k.tree.branches, 2);
    ModelHandle kjv_q8 = load_model_handle(TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-q8.tinyloop");
    const Recommendation& q8 = model_recommendation(kjv_q8.get());
    EXPECT_EQ(q8.early_exit.criterion, EarlyExitCriterion::HiddenL2);
    EXPECT_FALSE(q8.has_speculation());
    ModelHandle digits = load_model_handle(TL_SOURCE_DIR "/resources/models/tinyloop-digitsum/model-f32.tinyloop");
    const Recommendation& d = model_recommendation(digits.get());
    EXPECT_EQ(d.early_exit.criterion, EarlyExitCriterion::ArgmaxStable);
    EXPECT_EQ(d.early_exit_loops, 12);
    EXPECT_THROW(recommendation_from_json(nlohmann::json::parse(
                     R"({"early_exit": {"criterion": "kl", "cli": "argmax"}})")),
                 Error);
    // The files were written before the policy became one value: the codec reads them and writes
    // back the same object (the free-form records "measured", "found_by" and the CLI's name aside).
    for (const Model* m : {kjv.get(), kjv_q8.get(), digits.get()}) {
        nlohmann::json file = nlohmann::json::parse(model_info(m).metadata_json).at("recommended");
        file.erase("measured");
        file.erase("found_by");
        if (file.contains("early_exit")) file["early_exit"].erase("cli");
        EXPECT_EQ(recommendation_to_json(model_recommendation(m)), file);
    }
}
