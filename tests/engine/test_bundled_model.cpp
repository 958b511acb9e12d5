// The bundled trained model against the trainer's parity fixture: the engine's tokenizer ids are
// identical and its logits agree (relative error <= 1e-4 of the largest logit magnitude per row,
// and the same argmax) at the fixture's depths.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

using namespace tinyloop;

#ifndef TL_PARITY_FIXTURE
#define TL_PARITY_FIXTURE TL_SOURCE_DIR "/resources/models/tinyloop-kjv/parity.json"
#endif

namespace {

nlohmann::json fixture() {
    std::ifstream f(TL_PARITY_FIXTURE);
    if (!f) throw std::runtime_error(std::string("cannot open the parity fixture ") + TL_PARITY_FIXTURE);
    return nlohmann::json::parse(f);
}

std::string model_path(const nlohmann::json& fx) {
    return (std::filesystem::path(TL_PARITY_FIXTURE).parent_path() / fx["model_file"].get<std::string>()).string();
}

}  // namespace

TEST(BundledModel, TokenizerIdsAreIdentical) {
    const auto fx = fixture();
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path(fx));
    int checked = 0;
    for (const auto& c : fx["tokenizer_cases"]) {
        const std::string text = c["text"].get<std::string>();
        EXPECT_EQ(tokenize(mp.get(), text), c["ids"].get<std::vector<int32_t>>()) << "'" << text << "'";
        ++checked;
    }
    for (const auto& c : fx["cases"]) {
        const std::string text = c["text"].get<std::string>();
        EXPECT_EQ(tokenize(mp.get(), text), c["ids"].get<std::vector<int32_t>>()) << "'" << text << "'";
        ++checked;
    }
    EXPECT_GE(checked, 4);
}

TEST(BundledModel, LogitsMatchTheTrainer) {
    const auto fx = fixture();
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path(fx));
    const int V = model_hparams(mp.get()).vocab_size;
    ASSERT_EQ(V, fx["vocab_size"].get<int>());
    int rows = 0;
    for (const auto& c : fx["cases"]) {
        const auto ids = c["ids"].get<std::vector<int32_t>>();
        const auto positions = c["positions"].get<std::vector<int>>();
        for (const auto& [depth_s, per_pos] : c["logits"].items()) {
            const int depth = std::stoi(depth_s);
            const auto l = forward_logits(mp.get(), ids.data(), static_cast<int>(ids.size()), depth);
            for (size_t k = 0; k < positions.size(); ++k) {
                const auto want = per_pos[k].get<std::vector<double>>();
                ASSERT_EQ(static_cast<int>(want.size()), V);
                const float* got = l.data() + static_cast<size_t>(positions[k]) * V;
                double mx = 0, err = 0;
                int arg_w = 0, arg_g = 0;
                for (int j = 0; j < V; ++j) {
                    mx = std::max(mx, std::fabs(want[j]));
                    err = std::max(err, std::fabs(got[j] - want[j]));
                    if (want[j] > want[arg_w]) arg_w = j;
                    if (got[j] > got[arg_g]) arg_g = j;
                }
                EXPECT_LE(err / mx, 1e-4) << "'" << c["text"] << "' depth " << depth << " position " << positions[k];
                EXPECT_EQ(arg_g, arg_w);
                ++rows;
            }
        }
    }
    EXPECT_GE(rows, 8);
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
