// The CLI's verification-sweep bench, run as a user runs it (a child process on the bundled
// model): bench --sweep prints one pass cost per row count, --forced-acceptance one row per rate
// after plain decoding, every forced run's output equal to plain greedy; bad values exit 2 naming
// the flag.
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

const std::string kModel = TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-f32.tinyloop";

struct CliResult {
    int status = -1;
    std::string out;  // stdout and stderr together
};

std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) {
        if (c == '\'') {
            q.append("'\\''");
        } else {
            q.push_back(c);
        }
    }
    q.push_back('\'');
    return q;
}

CliResult cli(const std::vector<std::string>& args) {
    std::string cmd = quote(TL_CLI_PATH);
    for (const auto& a : args) {
        cmd.push_back(' ');
        cmd.append(quote(a));
    }
    cmd.append(" 2>&1");
    CliResult r;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    return r;
}

}  // namespace

TEST(CliSweep, SweepAndForcedAcceptanceInOneRun) {
    const CliResult r = cli({"bench", kModel, "--sweep", "1,2,4", "--forced-acceptance", "0,0.5,1", "--tokens", "16",
                             "--repeat", "1", "--threads", "1", "--json"});
    ASSERT_EQ(r.status, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    const int L = j["loops"].get<int>();
    ASSERT_EQ(j["sweep"].size(), 3u);
    EXPECT_EQ(j["sweep"][2]["rows"].get<int>(), 4);
    EXPECT_DOUBLE_EQ(j["sweep"][0]["pass_vs_first"].get<double>(), 1.0);
    for (const auto& s : j["sweep"]) EXPECT_GT(s["pass_ms"].get<double>(), 0.0);
    const auto& f = j["forced"];
    ASSERT_EQ(f.size(), 4u);  // plain, then the three rates
    EXPECT_TRUE(f[0]["rate"].is_null());
    EXPECT_NEAR(f[0]["tokens_per_sweep"].get<double>(), 1.0 / L, 1e-12);
    for (const auto& row : f) EXPECT_TRUE(row["identical"].get<bool>()) << row.dump();
    EXPECT_DOUBLE_EQ(f[1]["acceptance"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(f[3]["acceptance"].get<double>(), 1.0);
    // Rate 0.5: both accepted and rejected drafts were counted.
    EXPECT_GT(f[2]["acceptance"].get<double>(), 0.2);
    EXPECT_LT(f[2]["acceptance"].get<double>(), 0.8);
    // Rate 1 with draft 1 of L, 4 drafted per cycle: 4 tokens per 4 + (L - 1) sweeps.
    EXPECT_GT(f[3]["tokens_per_sweep"].get<double>(), f[0]["tokens_per_sweep"].get<double>());
}

// --pipelined: after chain's rows, the pipelined wave at each rate; its output is plain greedy's,
// its acceptance the forced one, and at rate 1 it spends V sweeps on the first row and D = 1 on
// every later token: 15 tokens after the first in 4 + 14 sweeps on the bundled model (L = 4).
TEST(CliSweep, PipelinedRowsAfterChainsRows) {
    const CliResult r = cli({"bench", kModel, "--forced-acceptance", "0,1", "--pipelined", "--tokens", "16",
                             "--repeat", "1", "--threads", "1", "--json"});
    ASSERT_EQ(r.status, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    const auto& f = j["forced"];
    ASSERT_EQ(f.size(), 5u);  // plain, chain at 0 and 1, pipelined at 0 and 1
    const int L = j["loops"].get<int>();
    ASSERT_EQ(L, 4);
    EXPECT_EQ(f[0]["mode"], "plain");
    EXPECT_EQ(f[1]["mode"], "chain");
    EXPECT_EQ(f[3]["mode"], "pipelined");
    EXPECT_EQ(f[4]["mode"], "pipelined");
    for (const auto& row : f) EXPECT_TRUE(row["identical"].get<bool>()) << row.dump();
    EXPECT_DOUBLE_EQ(f[3]["acceptance"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(f[4]["acceptance"].get<double>(), 1.0);
    EXPECT_TRUE(f[4]["tokens_per_cycle"].is_null());
    EXPECT_DOUBLE_EQ(f[3]["tokens_per_sweep"].get<double>(), 1.0 / L);  // every draft rejected: plain's cost
    EXPECT_DOUBLE_EQ(f[4]["tokens_per_sweep"].get<double>(), 15.0 / 18.0);
    EXPECT_GT(f[4]["tokens_per_sweep"].get<double>(), f[2]["tokens_per_sweep"].get<double>());
    // --pipelined belongs to --forced-acceptance
    const CliResult bad = cli({"bench", kModel, "--sweep", "1", "--pipelined"});
    EXPECT_EQ(bad.status, 2) << bad.out;
    EXPECT_NE(bad.out.find("--pipelined"), std::string::npos) << bad.out;
}

TEST(CliSweep, BadValuesExitTwoNamingTheFlag) {
    const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
        {{"bench", kModel, "--sweep", "0"}, "--sweep"},
        {{"bench", kModel, "--sweep", "65"}, "--sweep"},
        {{"bench", kModel, "--sweep", "1,x"}, "--sweep"},
        {{"bench", kModel, "--forced-acceptance", "1.5"}, "--forced-acceptance"},
        {{"bench", kModel, "--forced-acceptance", "-0.1"}, "--forced-acceptance"},
        {{"bench", kModel, "--sweep", "1", "--tokens", "8"}, "--tokens"},
        {{"bench", kModel, "--sweep", "1", "--modes", "tree"}, "--modes"},
        {{"bench", kModel, "--forced-acceptance", "0.5", "--draft-loops", "4"}, "--draft-loops"},
    };
    for (const auto& [args, flag] : bad) {
        const CliResult r = cli(args);
        EXPECT_EQ(r.status, 2) << args.back() << ": " << r.out;
        EXPECT_NE(r.out.find(flag), std::string::npos) << r.out;
    }
}
