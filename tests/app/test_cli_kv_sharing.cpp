// `tinyloop score --kv-sharing` and `generate --kv-sharing` (FORMAT.md §1c): the figures the CLI
// prints are the engine's score_kv_sharing, the cache of a generate really shrinks, bad values
// are refused naming the flag.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "app/cli_fixture.h"
#include "tinyloop/tinyloop.h"

using nlohmann::json;
using tl_test::CliRun;
using tl_test::CliTest;

TEST_F(CliTest, ScoreKvSharingAllIsTheEnginesMeasurement) {
    const std::string ids = "5,9,33,71,12,40,8,99,101,7,64,3,18,250,44,2";
    CliRun r = run({"score", model_, "--ids", ids, "--kv-sharing", "all", "--prompt-tokens", "4", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = parse_json(r);
    ASSERT_EQ(j["kv_sharing"].size(), 5u);
    std::vector<int32_t> tok = j["tokens"].get<std::vector<int32_t>>();
    tinyloop::ModelHandle m = tinyloop::load_model_handle(model_);
    for (const json& e : j["kv_sharing"]) {
        tinyloop::GenerateConfig c;
        c.kv_sharing = tinyloop::parse_kv_sharing(e["mode"].get<std::string>());
        const tinyloop::KVSharingScore s = tinyloop::score_kv_sharing(m.get(), tok.data(), int(tok.size()), c, 4);
        EXPECT_DOUBLE_EQ(e["delta_nll"].get<double>(), s.delta_nll) << e.dump();
        EXPECT_EQ(e["cache_bytes"].get<size_t>(), s.cache_bytes) << e.dump();
        EXPECT_EQ(e["prompt"].get<int>(), 4);
    }
    EXPECT_EQ(j["kv_sharing"][0]["mode"], "per-pass");
    EXPECT_EQ(j["kv_sharing"][0]["delta_nll"].get<double>(), 0.0);
    EXPECT_LT(j["kv_sharing"][1]["bytes_per_token"].get<double>(), j["kv_sharing"][1]["exact_bytes_per_token"].get<double>());
    // the text output has one line per mode
    CliRun t = run({"score", model_, "--ids", ids, "--kv-sharing", "last-pass,compress-s2"});
    ASSERT_EQ(t.status, 0) << t.err;
    EXPECT_NE(t.out.find("kv_sharing last-pass"), std::string::npos) << t.out;
    EXPECT_NE(t.out.find("kv_sharing compress-s2"), std::string::npos) << t.out;
}

TEST_F(CliTest, GenerateKvSharingShrinksTheCacheAndBadValuesAreRefused) {
    CliRun per = generate({"--max-tokens", "8", "--json"});
    CliRun last = generate({"--max-tokens", "8", "--kv-sharing", "last-pass", "--json"});
    ASSERT_EQ(per.status, 0) << per.err;
    ASSERT_EQ(last.status, 0) << last.err;
    EXPECT_LT(parse_json(last)["stats"]["kv_cache_bytes"].get<size_t>(),
              parse_json(per)["stats"]["kv_cache_bytes"].get<size_t>());
    for (const char* bad : {"every-pass", "compress-s0", "compress-s2000"}) {
        CliRun g = generate({"--kv-sharing", bad});
        EXPECT_EQ(g.status, 2) << bad;
        EXPECT_NE(g.err.find("--kv-sharing: "), std::string::npos) << g.err;
        CliRun s = run({"score", model_, "--text", "hello there", "--kv-sharing", bad});
        EXPECT_EQ(s.status, 2) << bad;
        EXPECT_NE(s.err.find("--kv-sharing: "), std::string::npos) << s.err;
    }
    CliRun beam = generate({"--kv-sharing", "last-pass", "--mode", "beam"});
    EXPECT_NE(beam.status, 0);
    EXPECT_NE(beam.err.find("kv_sharing"), std::string::npos) << beam.err;
    CliRun prompt = run({"score", model_, "--text", "hello there", "--prompt-tokens", "2"});
    EXPECT_EQ(prompt.status, 2);
    EXPECT_NE(prompt.err.find("--prompt-tokens: only used with --kv-sharing"), std::string::npos) << prompt.err;
}
