// The bundled trained model against the trainer's parity fixture: the engine's tokenizer ids are
// identical and its logits agree (relative error <= 1e-4 of the largest logit magnitude per row,
// and the same argmax) at the fixture's depths.
#include <gtest/gtest.h>

#include "engine/parity_fixture.h"
#include "test_util.h"

using namespace tinyloop;

#ifndef TL_PARITY_FIXTURE
#define TL_PARITY_FIXTURE TL_SOURCE_DIR "/resources/models/tinyloop-kjv/parity.json"
#endif

namespace {

nlohmann::json fixture() { return tltest::read_parity_fixture(TL_PARITY_FIXTURE); }

std::string model_path(const nlohmann::json& fx) { return tltest::parity_model_path(TL_PARITY_FIXTURE, fx); }

}  // namespace

TEST(BundledModel, TokenizerIdsAreIdentical) {
    const auto fx = fixture();
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path(fx));
    EXPECT_GE(tltest::expect_parity_token_ids(mp.get(), fx), 4);
}

TEST(BundledModel, LogitsMatchTheTrainer) {
    const auto fx = fixture();
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path(fx));
    EXPECT_GE(tltest::expect_parity_logits(mp.get(), fx, 1e-4).rows, 8);
}

TEST(BundledModel, SpeculationAndEarlyExitOffEqualGreedyOn50Prompts) {
    const auto fx = fixture();
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path(fx));
    Model* m = mp.get();
    const std::vector<std::string> words = {"And", " God", " said", " the", " LORD", " of", " Israel", ",", " unto",
                                            " him", " hacker", " n.", " a", " terminal", " DEVIL", " is", " my"};
    int accepted = 0, rejected = 0;
    for (int i = 0; i < 50; ++i) {
        std::string text;
        for (int w = 0; w < 2 + i % 5; ++w) text += words[(i * 7 + w * 3) % words.size()];
        std::vector<int32_t> p = tokenize(m, "<|endoftext|>", true);
        const auto body = tokenize(m, text);
        p.insert(p.end(), body.begin(), body.end());
        const int n = static_cast<int>(p.size());
        GenerateConfig g;
        g.max_tokens = 16;
        g.ignore_eos = true;
        g.loops = 4;
        const auto plain = generate(m, p.data(), n, g);
        SpeculativeConfig s;
        s.max_tokens = 16;
        s.ignore_eos = true;
        s.verify_loops = 4;
        s.draft_loops = 1 + i % 3;
        s.draft_ahead = 2 + i % 4;
        GenerateResult sr = generate_speculative_ex(m, p.data(), n, s);
        EXPECT_EQ(sr.tokens, plain) << text;
        accepted += sr.stats.spec_accepted;
        rejected += sr.stats.spec_tested - sr.stats.spec_accepted;
        TreeSpeculativeConfig t;
        t.max_tokens = 16;
        t.ignore_eos = true;
        t.verify_loops = 4;
        t.draft_loops = 1 + i % 2;
        t.draft_ahead = 2 + i % 2;
        t.K_branches = 2 + i % 2;
        EXPECT_EQ(generate_tree_speculative(m, p.data(), n, t), plain) << text;
    }
    EXPECT_GT(accepted, 0);
    EXPECT_GT(rejected, 0);
}
