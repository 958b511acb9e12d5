// Shared by the bundled models' tests (test_bundled_model.cpp: tinyloop-kjv;
// test_bundled_reasoner.cpp: tinyloop-digitsum): reading a recipe's parity.json (schema
// tinyloop-parity-v1, written by the model's make_parity.py) and checking the engine's tokenizer
// ids and logits against it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "tinyloop/tinyloop.h"

namespace tltest {

inline nlohmann::json read_parity_fixture(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot open the parity fixture " + path);
    return nlohmann::json::parse(f);
}

// The model file the fixture was made from: "model_file", next to the fixture.
inline std::string parity_model_path(const std::string& fixture_path, const nlohmann::json& fx) {
    return (std::filesystem::path(fixture_path).parent_path() / fx.at("model_file").get<std::string>()).string();
}

// Expects the engine's ids for every text of "tokenizer_cases" and "cases"; returns how many.
inline int expect_parity_token_ids(tinyloop::Model* m, const nlohmann::json& fx) {
    int checked = 0;
    for (const char* key : {"tokenizer_cases", "cases"}) {
        for (const auto& c : fx.value(key, nlohmann::json::array())) {
            const std::string text = c.at("text").get<std::string>();
            EXPECT_EQ(tinyloop::tokenize(m, text), c.at("ids").get<std::vector<int32_t>>()) << "'" << text << "'";
            ++checked;
        }
    }
    return checked;
}

struct ParityOutcome {
    int rows = 0;              // (case, depth, position) rows compared
    double worst_rel = 0;      // max over rows of max|engine - reference| / max|reference|
};

// Runs every case at every depth it stores and expects, per row, the same argmax and
// max|engine - reference| <= rel_tol * max|reference| (the reference is float64, stored as float32).
inline ParityOutcome expect_parity_logits(tinyloop::Model* m, const nlohmann::json& fx, double rel_tol) {
    const int V = tinyloop::model_hparams(m).vocab_size;
    EXPECT_EQ(V, fx.at("vocab_size").get<int>());
    ParityOutcome out;
    for (const auto& c : fx.at("cases")) {
        const auto ids = c.at("ids").get<std::vector<int32_t>>();
        const auto positions = c.at("positions").get<std::vector<int>>();
        for (const auto& [depth_s, per_pos] : c.at("logits").items()) {
            const int depth = std::stoi(depth_s);
            const auto l = tinyloop::forward_logits(m, ids.data(), static_cast<int>(ids.size()), depth);
            for (size_t k = 0; k < positions.size(); ++k) {
                const auto want = per_pos.at(k).get<std::vector<double>>();
                if (static_cast<int>(want.size()) != V) {
                    ADD_FAILURE() << "fixture row of " << want.size() << " logits, vocabulary " << V;
                    return out;
                }
                const float* got = l.data() + static_cast<size_t>(positions[k]) * V;
                double mx = 0, err = 0;
                int arg_w = 0, arg_g = 0;
                for (int j = 0; j < V; ++j) {
                    mx = std::max(mx, std::fabs(want[j]));
                    err = std::max(err, std::fabs(got[j] - want[j]));
                    if (want[j] > want[arg_w]) arg_w = j;
                    if (got[j] > got[arg_g]) arg_g = j;
                }
                EXPECT_LE(err / mx, rel_tol) << "'" << c.at("text") << "' depth " << depth << " position " << positions[k];
                EXPECT_EQ(arg_g, arg_w) << "'" << c.at("text") << "' depth " << depth << " position " << positions[k];
                out.worst_rel = std::max(out.worst_rel, err / mx);
                ++out.rows;
            }
        }
    }
    return out;
}

}  // namespace tltest
