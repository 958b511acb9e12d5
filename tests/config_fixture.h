// A GenerateConfig with every field away from its default, for the round-trip tests of the JSON
// codec (tests/engine) and the workbench's config panel (tests/ui). early_exit_patience stays 0:
// the engine refuses early exit together with beam search (beam_size 3 here, for length_penalty).
#pragma once

#include "tinyloop/tinyloop.h"

namespace tltest {

inline tinyloop::GenerateConfig every_config_field_changed() {
    tinyloop::GenerateConfig c;
    c.max_tokens = 77;
    c.loops = 5;
    c.temperature = 0.73f;
    c.top_k = 17;
    c.top_p = 0.91f;
    c.min_p = 0.05f;
    c.cache_window = 33;
    c.repetition_penalty = 1.15f;
    c.frequency_penalty = -0.5f;
    c.presence_penalty = 1.25f;
    c.logit_bias = {{10, -3.5f}, {256, -100.0f}};
    c.stop_sequences = {{13}, {1, 2, 3}};
    c.stop_strings = {"\n\n", "Amen; \"quoted\""};
    c.ignore_eos = true;
    c.max_time = 2.5;
    c.no_repeat_ngram_size = 3;
    c.bad_words = {{256}, {10, 10}};
    c.beam_size = 3;
    c.length_penalty = 0.6f;
    c.early_stopping = tinyloop::EarlyStopping::Never;
    c.renormalize_logits = true;
    c.min_new_tokens = 4;
    c.min_length = 9;
    c.forced_eos_token_id = 7;
    c.exponential_decay_length_penalty = std::pair<int, float>{12, 1.25f};
    c.suppress_tokens = {3, 200};
    c.begin_suppress_tokens = {5};
    c.typical_p = 0.8f;
    c.epsilon_cutoff = 0.03f;
    c.eta_cutoff = 0.002f;
    c.num_return_sequences = 2;
    c.num_beam_groups = 3;
    c.diversity_penalty = 0.5f;
    c.early_exit.min_L = 3;
    c.early_exit.peek_every = 2;
    c.early_exit.logit_margin = 0.25f;
    c.early_exit.criterion = tinyloop::EarlyExitCriterion::KL;
    c.early_exit.threshold = 0.125f;
    c.sample_seed = 18446744073709551557ull;
    c.kv_cache = tinyloop::KVCacheType::Int8;
    return c;
}

}  // namespace tltest
