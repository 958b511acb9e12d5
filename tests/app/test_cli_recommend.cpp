// The model file's recommended settings as the CLI's defaults: generate, bench and score use
// them when no flag is given and say so; a flag overrides them; `tinyloop recommend` measures
// them and writes them into a copy that keeps every tensor. A child process, as a user runs it.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <tinyloop/json.h>
#include <tinyloop/tinyloop.h>

#include "app/cli_fixture.h"

namespace {

using nlohmann::json;
using tl_test::CliRun;
using tl_test::CliTest;

class CliRecommendTest : public CliTest {
protected:
    // The fixture's model with a recommendation no built-in default equals.
    static const std::string& recommended() {
        static const std::string path = [] {
            const std::string p = dir_ + "/recommended.tinyloop";
            tinyloop::write_model_metadata(model_, p, R"({"recommended": {
                "speculation": {"draft_loops": 1, "draft_ahead": 3, "tree_draft_ahead": 2, "branches": 3},
                "early_exit": {"criterion": "kl", "threshold": 0.3, "patience": 2, "min_L": 1}}})");
            return p;
        }();
        return path;
    }
    static CliRun gen(std::vector<std::string> extra) {
        std::vector<std::string> a = {"generate", recommended(), "--prompt", "Hello", "--max-tokens", "6"};
        a.insert(a.end(), extra.begin(), extra.end());
        return run(a);
    }
};

TEST_F(CliRecommendTest, GenerateUsesTheModelsSpeculationUnlessAFlagSaysOtherwise) {
    CliRun chain = gen({"--mode", "speculative", "--json"});
    ASSERT_EQ(chain.status, 0) << chain.err;
    json c = parse_json(chain)["config"];
    EXPECT_EQ(c["draft_loops"], 1);
    EXPECT_EQ(c["draft_ahead"], 3);
    CliRun tree = gen({"--mode", "tree", "--json"});
    ASSERT_EQ(tree.status, 0) << tree.err;
    c = parse_json(tree)["config"];
    EXPECT_EQ(c["draft_ahead"], 2);
    EXPECT_EQ(c["branches"], 3);
    CliRun given = gen({"--mode", "tree", "--draft-ahead", "4", "--branches", "2", "--draft-loops", "2", "--json"});
    ASSERT_EQ(given.status, 0) << given.err;
    c = parse_json(given)["config"];
    EXPECT_EQ(c["draft_loops"], 2);
    EXPECT_EQ(c["draft_ahead"], 4);
    EXPECT_EQ(c["branches"], 2);
    // Without --json, stderr says where the knobs came from.
    CliRun said = gen({"--mode", "speculative"});
    ASSERT_EQ(said.status, 0) << said.err;
    EXPECT_NE(said.err.find("speculation: draft 1 -> verify 3, draft_ahead 3 (recommended by the model)"),
              std::string::npos) << said.err;
    // The plain model: the built-in defaults, and no such note.
    CliRun plain = run({"generate", model_, "--prompt", "Hello", "--max-tokens", "6", "--mode", "speculative"});
    ASSERT_EQ(plain.status, 0) << plain.err;
    EXPECT_NE(plain.err.find("speculation: draft 2 -> verify 3, draft_ahead 4\n"), std::string::npos) << plain.err;
}

TEST_F(CliRecommendTest, GenerateAndScoreUseTheModelsEarlyExitPolicy) {
    CliRun model = gen({"--early-exit", "model", "--json"});
    ASSERT_EQ(model.status, 0) << model.err;
    // The config echo holds the policy once, in the codec's flat config fields, and names the
    // mode the engine runs.
    json e = parse_json(model)["config"];
    EXPECT_EQ(e["mode"], "early-exit");
    EXPECT_EQ(e["early_exit_criterion"], "kl");
    EXPECT_EQ(e["early_exit_patience"], 2);
    EXPECT_EQ(e["early_exit_min_L"], 1);
    EXPECT_NEAR(e["early_exit_threshold"].get<double>(), 0.3, 1e-6);
    // The same criterion named: still the model's policy; a flag given wins for its field.
    CliRun kl = gen({"--early-exit", "kl", "--early-exit-patience", "1", "--json"});
    ASSERT_EQ(kl.status, 0) << kl.err;
    e = parse_json(kl)["config"];
    EXPECT_EQ(e["early_exit_patience"], 1);
    EXPECT_NEAR(e["early_exit_threshold"].get<double>(), 0.3, 1e-6);
    // Another criterion: the built-in policy, not the model's threshold.
    CliRun l2 = gen({"--early-exit", "l2", "--json"});
    ASSERT_EQ(l2.status, 0) << l2.err;
    e = parse_json(l2)["config"];
    EXPECT_EQ(e["early_exit_criterion"], "hidden_l2");
    EXPECT_EQ(e["early_exit_patience"], 1);
    EXPECT_EQ(e["early_exit_min_L"], 2);
    EXPECT_NEAR(e["early_exit_threshold"].get<double>(), 0.05, 1e-6);
    CliRun said = gen({"--early-exit", "model"});
    ASSERT_EQ(said.status, 0) << said.err;
    EXPECT_NE(said.err.find("early exit: kl, threshold 0.3, patience 2, first probe at depth 1 (recommended by the model)"),
              std::string::npos) << said.err;

    CliRun score = run({"score", recommended(), "--text", "In the beginning was the word", "--early-exit", "model", "--json"});
    ASSERT_EQ(score.status, 0) << score.err;
    e = parse_json(score)["early_exit"];
    EXPECT_EQ(e["criterion"], "kl");
    EXPECT_EQ(e["patience"], 2);
    EXPECT_EQ(e["min_L"], 1);
    // In text, one summary line that says where the policy came from.
    CliRun score_text = run({"score", recommended(), "--text", "In the beginning was the word", "--early-exit", "model"});
    ASSERT_EQ(score_text.status, 0) << score_text.err;
    const std::string all_text = score_text.out + score_text.err;
    EXPECT_NE(all_text.find("positions exited early (recommended by the model)\n"), std::string::npos) << all_text;
    EXPECT_EQ(all_text.find("early exit:"), all_text.rfind("early exit:")) << all_text;
    CliRun scored = run({"score", recommended(), "--text", "In the beginning", "--early-exit", "kl",
                         "--early-exit-threshold", "0.1", "--json"});
    ASSERT_EQ(scored.status, 0) << scored.err;
    EXPECT_NEAR(parse_json(scored)["early_exit"]["threshold"].get<double>(), 0.1, 1e-6);
}

TEST_F(CliRecommendTest, BenchRunsTheModelsSettings) {
    auto rows_of = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = {"bench", recommended(), "--tokens", "6", "--prompt-tokens", "8", "--repeat", "1",
                                      "--threads", "1", "--no-machine", "--json"};
        a.insert(a.end(), extra.begin(), extra.end());
        CliRun r = run(a);
        EXPECT_EQ(r.status, 0) << r.err;
        json by_mode;
        const json out = parse_json(r);  // kept: a loop over a temporary's member would dangle
        for (const auto& row : out["rows"]) by_mode[row["mode"].get<std::string>()] = row;
        return by_mode;
    };
    json rows = rows_of({});
    // the policy in the codec's form (early_exit_policy_to_json), as score --json writes it
    EXPECT_EQ(rows["early-exit"]["early_exit"]["criterion"], "kl");
    EXPECT_EQ(rows["early-exit"]["early_exit"]["patience"], 2);
    EXPECT_EQ(rows["early-exit"]["early_exit"]["min_L"], 1);
    EXPECT_TRUE(rows["speculative"]["early_exit"].is_null());
    EXPECT_EQ(rows["speculative"]["draft_loops"], 1);
    EXPECT_EQ(rows["speculative"]["draft_ahead"], 3);
    EXPECT_EQ(rows["tree"]["draft_ahead"], 2);
    EXPECT_EQ(rows["tree"]["branches"], 3);
    rows = rows_of({"--early-exit", "l2", "--draft-ahead", "4", "--branches", "2"});
    EXPECT_EQ(rows["early-exit"]["early_exit"]["criterion"], "hidden_l2");
    EXPECT_EQ(rows["early-exit"]["early_exit"]["patience"], 1);
    EXPECT_EQ(rows["speculative"]["draft_ahead"], 4);
    EXPECT_EQ(rows["tree"]["branches"], 2);
}

TEST_F(CliRecommendTest, RecommendWritesACopyThatKeepsTheTensors) {
    const std::string out = dir_ + "/tuned.tinyloop";
    CliRun r = run({"recommend", model_, "--text", "In the beginning God created the heaven and the earth.",
                    "--prompts", "In the|And God", "--max-tokens", "6", "--out", out, "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    json j = parse_json(r);
    EXPECT_EQ(j["written"], out);
    EXPECT_TRUE(j["recommended"].is_object());
    ASSERT_TRUE(j["early_exit"]["candidates"].is_array());
    EXPECT_FALSE(j["early_exit"]["candidates"].empty());
    EXPECT_TRUE(j["speculation"]["cells"].is_array());
    // The copy carries what was printed, and answers as the original does.
    tinyloop::ModelHandle a = tinyloop::load_model_handle(model_), b = tinyloop::load_model_handle(out);
    EXPECT_EQ(tinyloop::recommendation_to_json(tinyloop::model_recommendation(b.get())), j["recommended"]);
    const std::vector<int32_t> ids = {72, 101, 108, 108, 111};
    EXPECT_EQ(tinyloop::forward_logits(a.get(), ids.data(), 5), tinyloop::forward_logits(b.get(), ids.data(), 5));

    EXPECT_USAGE_ERROR(run({"recommend", model_, "--text", "a b c", "--write", "--out", out}), "--out");
    EXPECT_USAGE_ERROR(run({"recommend", model_, "--text", "a b c", "--skip", "both"}), "--skip");
    EXPECT_USAGE_ERROR(run({"recommend", model_, "--text", "a b c", "--nll-tolerance", "0.5"}), "--nll-tolerance");
    EXPECT_USAGE_ERROR(run({"generate", model_, "--prompt", "a", "--early-exit", "loud"}), "--early-exit");
}

}  // namespace
