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
    int draft_loops = 0;   // Speculative, Tree: draft depth; 0 = the model's recommendation when it is
                           // below verify_loops, else min(2, verify_loops - 1)
                           // DraftModel: the draft model's depth; 0 = its default_loops
    int draft_ahead = 0;   // Speculative: tokens drafted per cycle, 1 .. 32; Tree: depth, 1 .. 8;
                           // 0 = the model's recommendation, else 4
    int branches = 0;      // Tree: candidates per node, 1 .. 8; 0 = the model's recommendation, else 2
    Model* draft_model = nullptr;  // DraftModel: a model with the same vocabulary (not owned)
    int gamma = 4;         // DraftModel: tokens drafted per cycle, 1 .. 32
};

struct RunSpec {
    DecodeMode mode = DecodeMode::Greedy;
    GenerateConfig config;
    SpeculationKnobs speculation;
};

// The knobs as run_decode uses them, every 0 ("the default") resolved: the model's recommendation
// (model_recommendation) when it has one, else the built-in default (draft_loops of DraftModel
// needs speculation.draft_model).
SpeculationKnobs resolved_speculation(const Model* model, const RunSpec& spec);

// ---------------------------------------------------------------------------------------------
// The model's recommended settings: user value, else the model's, else the built-in default
// ---------------------------------------------------------------------------------------------
//
// A checkpoint may carry, in its metadata's "recommended" object (docs/FORMAT.md §2), the
// speculation knobs and early-exit policy measured to pay on it (`tinyloop recommend` writes
// them). They are the defaults of every front end: run_decode resolves speculation knobs left at
// 0 through them (resolved_speculation); resolve_early_exit fills the early-exit fields a user
// left unset. A file without the object behaves as before (the built-in defaults).
struct Recommendation {
    // Self-speculation; 0 = none recommended (the built-in default).
    int draft_loops = 0;       // draft depth, 1 .. max_loops - 1
    int draft_ahead = 0;       // chain: tokens drafted per cycle, 1 .. 32
    int tree_draft_ahead = 0;  // tree: nodes run per cycle, 1 .. 8
    int branches = 0;          // tree: candidates per node, 1 .. 8
    // Early exit; early_exit_patience 0 = no policy recommended.
    int early_exit_patience = 0;  // 1 .. 16
    EarlyExitCriterion early_exit_criterion = EarlyExitCriterion::HiddenL2;
    float early_exit_threshold = 0.05f;  // > 0 (logit_margin: the margin to reach)
    int early_exit_min_L = 2;            // 1 .. max_loops
    int early_exit_peek_every = 1;       // 1 .. max_loops
    int early_exit_loops = 0;            // the depth the policy was measured at (a record; 0 = not said)

    bool has_speculation() const { return draft_loops > 0 || draft_ahead > 0 || tree_draft_ahead > 0 || branches > 0; }
    bool has_early_exit() const { return early_exit_patience > 0; }
};

// What the loaded file recommends (an empty Recommendation when its metadata has none).
const Recommendation& model_recommendation(const Model* model);

// The built-in early-exit defaults (what a front end uses when neither the user nor the model
// says): patience 1, hidden_l2, threshold 0.05, min_L 2, peek_every 1.
Recommendation builtin_early_exit();

// Early exit switched on in `config` with "the user's value, else the model's, else the built-in
// default" per field: `user_keys` are the GenerateConfig keys (the codec's names:
// "early_exit_criterion", "early_exit_threshold", "early_exit_logit_margin",
// "early_exit_patience", "early_exit_min_L", "early_exit_peek_every") the user set in `config`;
// every other early-exit field is the model's, or, when the model recommends none or the user
// chose another criterion than the model's, the built-in default. Threshold and logit margin
// stay in step for the logit_margin criterion. Returns the config and, in `source` (optional),
// "user", "model" or "built-in" per key.
GenerateConfig resolve_early_exit(const Model* model, const GenerateConfig& config,
                                  const std::vector<std::string>& user_keys,
                                  std::vector<std::pair<std::string, std::string>>* source = nullptr);

// The defaults a front end shows before the user sets anything: GenerateConfig{} with the
// early-exit fields resolve_early_exit gives (patience stays 0: early exit off until asked for).
GenerateConfig recommended_config(const Model* model);
// The mode a config alone asks for: Beam (beam_size >= 2), EarlyExit (patience > 0), Sample or Greedy.
DecodeMode config_mode(const GenerateConfig& config);

GenerateResult run_decode(Model* model, const int32_t* prompt, int prompt_len, const RunSpec& spec,
                          const GenerateOptions& options = {});

}  // namespace tinyloop
