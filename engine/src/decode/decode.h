// The decode core shared by generate, the caches and early exit: the seed's canonical state
// machine (prefill, first logits, per-token sample / report / stop / advance).
#pragma once

#include "forward/forward.h"

namespace tinyloop {

class Executor;  // forward/executor.h
class ExecSequence;

// State that a cache hands to the decoder so part (or all) of the prompt is not recomputed. A
// start with kv null reuses nothing: a call of the caches' family (a pool without a matching
// prefix, a resume that recomputes) that must still run on the executor the rest of the family
// runs on (executor.h: CacheImport), never the device for some of its calls and the CPU for others.
struct DecodeStart {
    // A kept sequence (a prefix cache's, a resume handle's) on the call's back end: its rows
    // [0, n_cached) of every layer the depth needs are valid.
    const ExecSequence* from = nullptr;
    int n_cached = 0;
    // When n_cached == prompt_len: the last prompt position's readout input after each pass
    // (its state, or with a coda the coda's output, FORMAT.md §1b), [loops, d] with pass l at
    // row l-1 (at least `loops` rows).
    const float* last_pass_states = nullptr;
};

GenerateResult decode(const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& config,
                      const GenerateOptions& options, const DecodeStart* start);

// generate_ex's dispatch (num_return_sequences > 1 when sampling: several draws) with a start
// handed to every decode() it makes.
GenerateResult generate_from(const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& config,
                             const GenerateOptions& options, const DecodeStart* start);

// Beam search (config.beam_size >= 2), reached through decode(), on the call's executor `ex`.
GenerateResult decode_beam(const Executor& ex, const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& config,
                           const GenerateOptions& options);
// Diverse group beam search (config.num_beam_groups >= 2), reached through decode_beam().
GenerateResult decode_group_beam(const Executor& ex, const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& config,
                                 const GenerateOptions& options);
// Constrained beam search (config.force_words non-empty), reached through decode_beam().
GenerateResult decode_constrained_beam(const Executor& ex, const Model& m, const int32_t* prompt, int prompt_len,
                                       const GenerateConfig& config, const GenerateOptions& options);

void check_prompt_ids(const Model& m, const int32_t* prompt, int prompt_len);

}  // namespace tinyloop
