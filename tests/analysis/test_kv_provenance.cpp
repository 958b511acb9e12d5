// KV provenance (tinyloop_analysis): the provenance map against its definition for the three
// set-ups (plain, early exit, prefix cache).
#include <tinyloop_analysis/kv_provenance.h>
#include <gtest/gtest.h>

#include "analysis_test_util.h"

using namespace tinyloop::analysis;
using namespace analysis_test;

TEST(KvProvenance, MatchesDefinition) {
    tinyloop::Model* m = bundled();

    const auto prompt = tinyloop::tokenize(m, kPrompt);
    const tinyloop::HParams& hp = tinyloop::model_hparams(m);
    tinyloop::GenerateConfig c;
    c.max_tokens = 16;
    c.loops = 8;
    c.ignore_eos = true;
    c.early_exit.patience = 1;
    c.early_exit.threshold = 0.2f;
    const int L = 8, layers = hp.n_pre_blocks + L * hp.n_loop_layers;
    using O = tinyloop::KVOrigin;

    const KvRun plain = run_kv_provenance(m, prompt, c, KvSetup::Plain);
    EXPECT_EQ(plain.prov.n_layers, layers);
    EXPECT_EQ(plain.count(O::Computed), layers * (plain.prov.n_positions - 1));
    EXPECT_EQ(plain.count(O::Propagated) + plain.count(O::Reused), 0);
    EXPECT_EQ(plain.live_bytes.back(), plain.prov.kv_bytes_written);

    const KvRun ee = run_kv_provenance(m, prompt, c, KvSetup::EarlyExit);
    int propagated = 0;
    for (int i = 1; i < static_cast<int>(ee.depth_per_token.size()); ++i) {
        const int pos = ee.prompt_len + i - 1;
        const int ran = hp.n_pre_blocks + ee.depth_per_token[static_cast<size_t>(i)] * hp.n_loop_layers;
        for (int e = 0; e < layers; ++e) {
            EXPECT_EQ(ee.prov.at(e, pos), e < ran ? O::Computed : O::Propagated);
            propagated += e >= ran;
        }
    }
    EXPECT_TRUE(propagated > 0);
    EXPECT_EQ(ee.count(O::Propagated), propagated);

    const KvRun pc = run_kv_provenance(m, prompt, c, KvSetup::PrefixCache, 5);
    EXPECT_EQ(pc.count(O::Reused), 5 * layers);
    for (int e = 0; e < layers; ++e)
        for (int pos = 0; pos + 1 < pc.prov.n_positions; ++pos)
            EXPECT_EQ(pc.prov.at(e, pos), pos < 5 ? O::Reused : O::Computed);
    EXPECT_TRUE(pc.prefix_cache_bytes > 0);
    EXPECT_EQ(pc.tokens, plain.tokens);  // reuse changes nothing in the output
    const nlohmann::json j = kv_json(pc);
    EXPECT_EQ(j["counts"]["reused"].get<int>(), 5 * layers);
    EXPECT_EQ(j["origin"][0][0].get<std::string>(), std::string("reused"));
    try {
        run_kv_provenance(m, prompt, c, KvSetup::PrefixCache, 0);
        FAIL() << "prefix_len 0 accepted";
    } catch (const tinyloop::Error& e) {
        EXPECT_TRUE(contains(e.what(), "prefix_len"));
    }
}
