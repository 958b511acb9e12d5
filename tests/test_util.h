// Shared helpers for the tests: small random models written with the engine's own writer.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "tinyloop/tinyloop.h"

namespace tltest {

inline tinyloop::HParams small_hparams() {
    tinyloop::HParams hp;
    hp.vocab_size = 300;
    hp.d_model = 64;
    hp.n_heads = 4;
    hp.n_kv_heads = 2;
    hp.head_dim = 16;
    hp.d_ff = 96;
    hp.n_pre_blocks = 1;
    hp.n_loop_layers = 2;
    hp.default_loops = 3;
    hp.max_loops = 6;
    hp.max_seq_len = 128;
    return hp;
}

// A path in a directory of this process's own: CTest runs each test as its own process, in
// parallel, so files with fixed names must not be shared between processes.
inline std::string temp_path(const std::string& name) {
    const std::filesystem::path dir =
        std::filesystem::path(::testing::TempDir()) / ("tinyloop-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return (dir / name).string();
}

// Writes a random model and returns its path.
inline std::string write_random_model(const std::string& name, const tinyloop::HParams& hp, uint64_t seed = 7,
                                      tinyloop::DType dt = tinyloop::DType::F32) {
    const std::string path = temp_path(name);
    tinyloop::save_model(path, tinyloop::random_model_spec(hp, seed, dt));
    return path;
}

// `count` prompts of 1..12 byte ids (0..255), the same for the same seed.
inline std::vector<std::vector<int32_t>> random_prompts(int count, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < count; ++i) {
        std::vector<int32_t> p(1 + g() % 12);
        for (auto& t : p) t = static_cast<int32_t>(g() % 256);
        out.push_back(p);
    }
    return out;
}

// validate_config's message for `c` with a prompt of `prompt_len` tokens, or "" when it is accepted.
inline std::string refusal(tinyloop::Model* m, const tinyloop::GenerateConfig& c, int prompt_len = 4) {
    try {
        tinyloop::validate_config(m, prompt_len, c);
    } catch (const tinyloop::Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace tltest
