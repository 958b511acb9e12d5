// TinyLoop public API, decode modes: one run specification (RunSpec), one entry (run_decode).
// Part of tinyloop/tinyloop.h, which includes every part: include that one.
#pragma once

// GenerateConfig, GenerateResult, GenerateOptions, TokenEvent: tinyloop.h includes this part
// after them, and this include brings them in when the part is included first.
#include "tinyloop/tinyloop.h"

namespace tinyloop {

// ---------------------------------------------------------------------------------------------
// Decode modes: one run specification, one entry
// ---------------------------------------------------------------------------------------------
//
// A front end describes a run as a RunSpec (the mode, the GenerateConfig, the speculation knobs)
// and calls run_decode, which applies the mode's rules and calls the mode's engine entry:
//   Greedy       generate_ex at temperature 0, beam search and early exit off
//   Sample       generate_ex at config.temperature, beam search and early exit off
//   EarlyExit    generate_ex with early exit, beam search off; early_exit_patience must be >= 1
//   Beam         generate_ex with beam search; beam_size must be >= 2
//   Speculative  generate_speculative_ex with the config's max_tokens, temperature, sample_seed,
//                top_p, ignore_eos and, when sampling, its top_k (the same filters as plain
//                sampling); the config's other fields are unused
//   Tree         generate_tree_speculative_ex (greedy only: temperature > 0.01 is NotSupported)
//   DraftModel   draft_speculative_generate_ex with speculation.draft_model and gamma
// A broken rule throws InvalidArgument naming the field ("beam_size: ...").
enum class DecodeMode { Greedy, Sample, EarlyExit, Beam, Speculative, Tree, DraftModel };
// "greedy", "sample", "early-exit", "beam", "speculative", "tree", "draft-model"
const char* decode_mode_name(DecodeMode mode);

struct SpeculationKnobs {
    int verify_loops = 0;  // Speculative, Tree: verify depth; 0 = config.loops (itself 0 = default_loops)
    int draft_loops = 0;   // Speculative, Tree: draft depth; 0 = min(2, verify_loops - 1)
                           // DraftModel: the draft model's depth; 0 = its default_loops
    int draft_ahead = 4;   // Speculative: tokens drafted per cycle, 1 .. 32; Tree: depth, 1 .. 8
    int branches = 2;      // Tree: candidates per node, 1 .. 8
    Model* draft_model = nullptr;  // DraftModel: a model with the same vocabulary (not owned)
    int gamma = 4;         // DraftModel: tokens drafted per cycle, 1 .. 32
};

struct RunSpec {
    DecodeMode mode = DecodeMode::Greedy;
    GenerateConfig config;
    SpeculationKnobs speculation;
};

// The knobs as run_decode uses them, every 0 ("the default") resolved (draft_loops of DraftModel
// needs speculation.draft_model).
SpeculationKnobs resolved_speculation(const Model* model, const RunSpec& spec);
// The mode a config alone asks for: Beam (beam_size >= 2), EarlyExit (patience > 0), Sample or Greedy.
DecodeMode config_mode(const GenerateConfig& config);

GenerateResult run_decode(Model* model, const int32_t* prompt, int prompt_len, const RunSpec& spec,
                          const GenerateOptions& options = {});

}  // namespace tinyloop
