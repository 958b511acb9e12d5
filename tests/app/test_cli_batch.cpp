// The CLI's continuous-batching bench and --kv-cache flags, run as a user runs them (a child
// process on the bundled model): bench --batch prints one aggregate figure per batch size,
// --kv-cache reaches generate / score / bench and is validated (exit 2 naming the flag).
#include <sys/wait.h>

#include <algorithm>
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

TEST(CliBatch, BenchBatchReportsEachSize) {
    const CliResult r = cli({"bench", kModel, "--batch", "1,4,16", "--tokens", "8", "--repeat", "1", "--json"});
    ASSERT_EQ(r.status, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    ASSERT_EQ(j["batches"].size(), 3u);
    const int sizes[] = {1, 4, 16};
    for (int i = 0; i < 3; ++i) {
        const auto& b = j["batches"][static_cast<size_t>(i)];
        EXPECT_EQ(b["batch"].get<int>(), sizes[i]);
        EXPECT_GT(b["decode_tok_s"].get<double>(), 0.0);
        EXPECT_EQ(b["decode_tokens"].get<long long>(), 7LL * sizes[i]) << "all but the first token of each";
        EXPECT_GT(b["kv_cache_bytes"].get<long long>(), 0);
    }
    EXPECT_EQ(j["kv_cache"], "f32");
    // The table form prints a row per size.
    const CliResult t = cli({"bench", kModel, "--batch", "2,3", "--tokens", "4", "--repeat", "1", "--kv-cache", "int8"});
    ASSERT_EQ(t.status, 0) << t.out;
    EXPECT_NE(t.out.find("kv int8"), std::string::npos) << t.out;
    EXPECT_NE(t.out.find("decode tok/s"), std::string::npos) << t.out;
}

TEST(CliBatch, KvCacheFlagReachesGenerateAndScore) {
    CliResult a = cli({"generate", kModel, "--prompt", "In the beginning", "--max-tokens", "6", "--json", "--quiet"});
    CliResult b = cli({"generate", kModel, "--prompt", "In the beginning", "--max-tokens", "6", "--json", "--quiet",
                 "--kv-cache", "int8"});
    ASSERT_EQ(a.status, 0) << a.out;
    ASSERT_EQ(b.status, 0) << b.out;
    const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
    EXPECT_GT(ja["stats"]["kv_cache_bytes"].get<long long>(), 3 * jb["stats"]["kv_cache_bytes"].get<long long>());
    const CliResult s1 = cli({"score", kModel, "--text", "And God said, Let there be light", "--json"});
    const CliResult s2 = cli({"score", kModel, "--text", "And God said, Let there be light", "--json", "--kv-cache", "int8"});
    ASSERT_EQ(s1.status, 0) << s1.out;
    ASSERT_EQ(s2.status, 0) << s2.out;
    const double n1 = nlohmann::json::parse(s1.out)["total_nll"], n2 = nlohmann::json::parse(s2.out)["total_nll"];
    EXPECT_NE(n1, n2);
    EXPECT_NEAR(n1, n2, 0.5);
    EXPECT_EQ(nlohmann::json::parse(s2.out)["kv_cache"], "int8");
}

TEST(CliBatch, BadValuesExitTwoNamingTheFlag) {
    const std::vector<std::vector<std::string>> bad = {
        {"generate", kModel, "--prompt", "x", "--kv-cache", "fp16"},
        {"score", kModel, "--text", "a b c", "--kv-cache", "int4"},
        {"score", kModel, "--text", "a b c", "--kv-cache", "int8", "--early-exit", "l2"},
        {"bench", kModel, "--batch", "1,4", "--kv-cache", "q8"},
        {"bench", kModel, "--batch", "0"},
        {"bench", kModel, "--batch", "1,abc"},
        {"bench", kModel, "--batch", "4", "--modes", "tree"},
        {"generate", kModel, "--prompt", "x", "--mode", "speculative", "--kv-cache", "int8"},
    };
    for (const auto& args : bad) {
        const CliResult r = cli(args);
        EXPECT_EQ(r.status, 2) << args[0] << " " << args.back() << ": " << r.out;
        const std::string flag = std::find(args.begin(), args.end(), "--modes") != args.end() ? "--modes"
                                 : std::find(args.begin(), args.end(), "--kv-cache") != args.end() ? "--kv-cache"
                                                                                                    : "--batch";
        EXPECT_NE(r.out.find(flag), std::string::npos) << r.out;
    }
}
