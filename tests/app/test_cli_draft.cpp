// `tinyloop generate --draft-model` and `tinyloop bench --modes draft`, run as a user runs them:
// a child process on the bundled model with its q4 file as the draft.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "app/cli_run.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kF32 = TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-f32.tinyloop";
const std::string kQ4 = TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-q4.tinyloop";

using tl_test::CliRun;

std::string temp_dir() {
    static const std::string d = [] {
        const fs::path p = fs::temp_directory_path() / ("tinyloop-cli-draft-" + std::to_string(::getpid()));
        fs::create_directories(p);
        return p.string();
    }();
    return d;
}

CliRun run(const std::vector<std::string>& args) { return tl_test::run_cli(temp_dir(), args); }

json parse(const CliRun& r) {
    json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "stdout is not JSON: " << r.out << "\nstderr: " << r.err;
    return j;
}

void expect_usage_error(const CliRun& r, const std::string& needle) {
    EXPECT_FALSE(r.signaled) << r.err;
    EXPECT_EQ(r.status, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr should mention '" << needle << "': " << r.err;
}

}  // namespace

TEST(CliDraft, GenerateWithDraftModelEqualsGreedyAndReportsAcceptance) {
    const std::vector<std::string> base = {"generate", kF32, "--prompt", "And God said,", "--max-tokens", "40",
                                           "--json"};
    const CliRun plain = run(base);
    ASSERT_EQ(plain.status, 0) << plain.err;
    for (const char* gamma : {"1", "4", "7"}) {
        auto a = base;
        a.insert(a.end(), {"--draft-model", kQ4, "--gamma", gamma, "--events"});
        const CliRun r = run(a);
        ASSERT_EQ(r.status, 0) << r.err;
        const json j = parse(r), p = parse(plain);
        EXPECT_EQ(j["output_ids"], p["output_ids"]) << "gamma " << gamma;
        EXPECT_EQ(j["text"], p["text"]);
        EXPECT_EQ(j["config"]["draft_model"], kQ4);
        EXPECT_EQ(j["config"]["gamma"], std::stoi(gamma));
        EXPECT_EQ(j["config"]["mode"], "draft-model");  // the mode the engine runs
        EXPECT_EQ(j["config"]["temperature"], 0.0);
        const json& st = j["stats"];
        EXPECT_GT(st["spec_cycles"].get<int>(), 0);
        EXPECT_GT(st["spec_accepted"].get<int>(), 0);
        EXPECT_GT(st["spec_acceptance_rate"].get<double>(), 0.0);
        EXPECT_LE(st["spec_acceptance_rate"].get<double>(), 1.0);
        ASSERT_EQ(j["events"].size(), p["output_ids"].size());
        EXPECT_TRUE(j["events"][1].contains("cycle"));
    }
    // The text output reports the acceptance on stderr.
    const CliRun t = run({"generate", kF32, "--prompt", "And God said,", "--max-tokens", "20", "--draft-model", kQ4});
    ASSERT_EQ(t.status, 0) << t.err;
    EXPECT_NE(t.err.find("drafted tokens accepted"), std::string::npos) << t.err;
    // Sampling through a draft model: deterministic for a seed.
    const std::vector<std::string> s = {"generate", kF32, "--prompt", "And God said,", "--max-tokens", "30",
                                        "--temperature", "0.8", "--seed", "7", "--draft-model", kQ4, "--json"};
    const CliRun s1 = run(s), s2 = run(s);
    ASSERT_EQ(s1.status, 0) << s1.err;
    EXPECT_EQ(parse(s1)["output_ids"], parse(s2)["output_ids"]);
    EXPECT_EQ(parse(s1)["config"]["mode"], "draft-model");
    EXPECT_NEAR(parse(s1)["config"]["temperature"].get<double>(), 0.8, 1e-6);
}

TEST(CliDraft, RefusesBadDraftFlags) {
    const std::string random = temp_dir() + "/v300.tinyloop";
    const CliRun mk = run({"make-random", random, "--d-model", "32", "--n-heads", "2", "--n-kv-heads", "2",
                        "--head-dim", "16", "--d-ff", "64", "--vocab", "300", "--n-pre", "1", "--n-loop", "1",
                        "--loops", "2", "--max-loops", "4", "--max-seq-len", "128", "--seed", "3"});
    ASSERT_EQ(mk.status, 0) << mk.err;
    const std::vector<std::string> g = {"generate", kF32, "--prompt", "And", "--max-tokens", "5"};
    auto with = [&](std::vector<std::string> extra) {
        auto a = g;
        a.insert(a.end(), extra.begin(), extra.end());
        return run(a);
    };
    expect_usage_error(with({"--draft-model", random}), "vocab_size");
    expect_usage_error(with({"--draft-model", random}), "--draft-model");
    expect_usage_error(with({"--draft-model", kQ4, "--gamma", "0"}), "--gamma");
    expect_usage_error(with({"--draft-model", kQ4, "--gamma", "33"}), "[1, 32]");
    expect_usage_error(with({"--gamma", "3"}), "--gamma: only used with --draft-model");
    expect_usage_error(with({"--draft-model", temp_dir() + "/missing.tinyloop"}), "--draft-model");
    expect_usage_error(with({"--draft-model", kQ4, "--mode", "beam"}), "--draft-model");
    expect_usage_error(with({"--draft-model", kQ4, "--mode", "speculative"}), "--draft-model");
    expect_usage_error(with({"--draft-model", kQ4, "--draft-loops", "99"}), "--draft-loops");
    expect_usage_error(with({"--draft-model", kQ4, "--early-exit", "l2"}), "--early-exit");
}

TEST(CliDraft, BenchDraftModeMatchesPlainAndReportsAcceptance) {
    const CliRun r = run({"bench", kF32, "--modes", "draft", "--tokens", "24", "--prompt-tokens", "16", "--repeat", "1",
                       "--no-machine", "--threads", "1", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = parse(r);
    ASSERT_EQ(j["rows"].size(), 2u);
    const json& row = j["rows"][1];
    EXPECT_EQ(row["mode"], "draft");
    EXPECT_TRUE(row["identical"].get<bool>());
    EXPECT_GT(row["acceptance_rate"].get<double>(), 0.0);
    EXPECT_GT(row["speedup_vs_plain"].get<double>(), 0.0);
    EXPECT_EQ(row["draft_ahead"], 4);
    const CliRun bad = run({"bench", kF32, "--modes", "plain", "--gamma", "3", "--no-machine"});
    expect_usage_error(bad, "--gamma: only used with --modes draft");
}
