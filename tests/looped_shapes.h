// The published looped architectures' shapes (FORMAT.md §1b) as small random-model hyperparameters,
// shared by the engine's tests against the double reference (tests/engine/test_looped_architectures.cpp)
// and the device's against the CPU (tests/cuda/test_cuda_engine.cpp): an Ouro-shaped model
// (sandwich_branch blocks, the final norm after every pass, an exit gate, an untied head, no
// prelude) and Huginn-shaped ones (sandwich_sum blocks, qk_bias, embed_scale sqrt(d), the
// concatenating adapter from a zero or seeded initial state, prelude and coda blocks).
#pragma once

#include <cmath>

#include "test_util.h"
#include "tinyloop/tinyloop.h"

namespace tltest {

// test_util.h's small shape without a prelude, T = 4 of at most 6 passes, a 64-position context.
inline tinyloop::HParams looped_base_hparams() {
    tinyloop::HParams hp = small_hparams();
    hp.n_pre_blocks = 0;
    hp.default_loops = 4;
    hp.max_loops = 6;  // T + 2 with T = default_loops
    hp.max_seq_len = 64;
    hp.rope_theta = 10000.0f;
    hp.norm_eps = 1e-6f;
    return hp;
}

inline tinyloop::HParams ouro_hparams() {
    tinyloop::HParams hp = looped_base_hparams();
    hp.architecture = "ouro";
    hp.block = tinyloop::BlockKind::SandwichBranch;
    hp.pass_norm = true;
    hp.exit_gate = true;
    hp.tie_embeddings = false;
    return hp;
}

inline tinyloop::HParams huginn_hparams(bool coda = true, bool seeded_state = false) {
    tinyloop::HParams hp = looped_base_hparams();
    hp.architecture = "huginn";
    hp.block = tinyloop::BlockKind::SandwichSum;
    hp.qk_bias = true;
    hp.embed_scale = std::sqrt(static_cast<float>(hp.d_model));
    hp.n_pre_blocks = 2;
    hp.n_coda_blocks = coda ? 2 : 0;
    hp.loop_input = tinyloop::LoopInput::Adapter;
    hp.n_kv_heads = hp.n_heads;  // MHA, as Huginn
    if (seeded_state) {
        hp.state_init.kind = tinyloop::StateInit::Kind::TruncNormal;
        hp.state_init.std = std::sqrt(2.0f / (5.0f * hp.d_model));
        hp.state_init.scale = hp.embed_scale;
        hp.state_init.seed = 0x5eedf00dull;
    }
    return hp;
}

}  // namespace tltest
