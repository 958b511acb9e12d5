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
//   Pipelined    generate_pipelined_ex with the chain's knobs (draft and verify depth, and the
//                chain's sampling fields): self-speculation pipelined over depth
// A broken rule throws InvalidArgument naming the field ("beam_size: ...").
enum class DecodeMode { Greedy, Sample, EarlyExit, Beam, Speculative, Tree, DraftModel, Pipelined };
// "greedy", "sample", "early-exit", "beam", "speculative", "tree", "draft-model", "pipelined"
const char* decode_mode_name(DecodeMode mode);
// Whether the mode drafts from the model's own shallow passes (Speculative, Tree, Pipelined): the
// modes whose knobs are draft and verify depth.
bool self_speculative(DecodeMode mode);

// Which self-speculation a run uses. In a RunSpec the mode decides (resolved_speculation sets
// kind from it: Speculative and Pipelined -> Chain, Tree -> Tree, DraftModel -> DraftModel, else
// None).
enum class SpeculationKind { None, Chain, Tree, DraftModel };
// "none", "chain", "tree", "draft-model"
const char* speculation_kind_name(SpeculationKind kind);

// The speculation policy: one value for RunSpec, the codec (speculation_to_json) and every front
// end; the seed's SpeculativeConfig / TreeSpeculativeConfig / DraftSpeculativeConfig are built
// from it in one place (run_decode) and stay only as the low-level entry points' arguments.
struct SpeculationPolicy {
    SpeculationKind kind = SpeculationKind::None;
    int verify_loops = 0;  // Speculative, Tree: verify depth; 0 = config.loops (itself 0 = default_loops)
    int draft_loops = 0;   // Speculative, Tree: draft depth; 0 = the model's recommendation when it is
                           // below verify_loops, else min(2, verify_loops - 1)
                           // DraftModel: the draft model's depth; 0 = its default_loops
    int draft_ahead = 0;   // Speculative: tokens drafted per cycle, 1 .. 32; Tree: depth, 1 .. 8;
                           // 0 = the model's recommendation, else 4
    int branches = 0;      // Tree: candidates per node, 1 .. 8; 0 = the model's recommendation, else 2
    Model* draft_model = nullptr;  // DraftModel: a model with the same vocabulary (not owned)
    int gamma = kDraftModelGamma;  // DraftModel: tokens drafted per cycle, 1 .. 32
};

struct RunSpec {
    DecodeMode mode = DecodeMode::Greedy;
    GenerateConfig config{};
    SpeculationPolicy speculation{};
};

// The policy as run_decode uses it, kind set from spec.mode and every 0 ("the default")
// resolved: the model's recommendation (model_recommendation) when it has one, else the built-in
// default (draft_loops of DraftModel needs speculation.draft_model).
SpeculationPolicy resolved_speculation(const Model* model, const RunSpec& spec);

// The built-in self-speculation knobs at verify depth `verify_loops`, the last word of
// resolved_speculation when neither the user nor the model's recommendation sets a knob:
// draft_loops min(2, verify_loops - 1) (at least 1), draft_ahead 4, branches 2; kind and
// verify_loops as given. Where no model is open (the compare view's modes from hyperparameters)
// this is the same policy a run would resolve.
SpeculationPolicy builtin_speculation(SpeculationKind kind, int verify_loops);

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
    // Self-speculation, the engine's policy per kind; a knob at 0 = none recommended (the built-in
    // default). The file holds one draft depth for both kinds (docs/FORMAT.md §2 "draft_loops",
    // 1 .. max_loops - 1): set it with set_draft_loops, which keeps chain's and tree's equal.
    SpeculationPolicy chain{.kind = SpeculationKind::Chain};  // draft_loops; draft_ahead: tokens per cycle, 1 .. 32
    SpeculationPolicy tree{.kind = SpeculationKind::Tree};    // draft_loops; draft_ahead: nodes per cycle, 1 .. 8;
                                                              // branches: candidates per node, 1 .. 8
    // Early exit; early_exit.patience 0 = no policy recommended (patience 1 .. 16, min_L and
    // peek_every 1 .. max_loops, threshold > 0; logit_margin unused).
    EarlyExitPolicy early_exit;
    int early_exit_loops = 0;            // the depth the policy was measured at (a record; 0 = not said)

    void set_draft_loops(int d) { chain.draft_loops = tree.draft_loops = d; }
    // The policy recommended for a kind of self-speculation (Tree: tree, else chain).
    const SpeculationPolicy& speculation(SpeculationKind kind) const { return kind == SpeculationKind::Tree ? tree : chain; }
    bool has_speculation() const {
        return chain.draft_loops > 0 || tree.draft_loops > 0 || chain.draft_ahead > 0 || tree.draft_ahead > 0 ||
               tree.branches > 0;
    }
    bool has_early_exit() const { return early_exit.enabled(); }
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
// stay in step for the logit_margin criterion. A gate criterion (gate_stop, gate_select) the model
// has no policy for takes, unless the user set it, the threshold of the checkpoint's own config
// (an imported Ouro's early_exit_threshold, metadata.source.config; 1.0 runs every step) as the
// model's. Returns the config and, in `source` (optional),
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

// ---------------------------------------------------------------------------------------------
// The resolver: what a user set + the model's recommendation -> a complete run
// ---------------------------------------------------------------------------------------------
//
// Every front end (CLI, Python binding, server, workbench) asks here instead of restating the
// rules, and shows `messages`.
//
//   ResolvedRun resolve_run(const Model* model, const RunSpec& given,
//                           const std::vector<std::string>& user_keys);
//
// `given` is the run as the user described it; `user_keys` names the fields the user set, by the
// codec's names: config keys ("temperature", "beam_size", "loops", "early_exit_patience", ...,
// config_fields()) and speculation keys prefixed "speculation." ("speculation.draft_loops").
// A field not named is the resolver's to decide. The rules, each once:
//   depth        config.loops 0 -> the model's default_loops ("model")
//   Greedy       temperature 0, beam_size 0, early exit off ("mode"); a user temperature > 0.01
//                is refused ("temperature: ...")
//   Sample       temperature 0.8 unless the user set it ("built-in"); a user temperature in
//                [0, 0.01] is refused; beam_size 0, early exit off
//   EarlyExit    the early-exit fields as resolve_early_exit gives them (user > model > built-in);
//                beam_size 0
//   Beam         beam_size 4 unless the user set it ("built-in"); < 2 is refused; early exit off
//   Speculative, Tree, DraftModel: the speculation policy as resolved_speculation gives it (user >
//                model > built-in; kind from the mode); Tree is greedy only (a user temperature
//                > 0.01 is refused, else temperature 0); other modes' conflicts: the run refuses
// then the knob ranges: validate_speculation, validate_early_exit, and for Speculative and Tree
// the depths' rule check_speculation_depths and validate_mode_speculation (mode_rules.h)
// (InvalidArgument naming the field and its range). run_decode(model, ..., resolve_run(model, spec, keys).spec) runs what
// run_decode(model, ..., spec) runs, with every default written out.
struct ResolvedRun {
    RunSpec spec;  // complete: config.loops >= 1, the mode's rules applied, every knob resolved
    // (key, source) per field the resolver decided or kept; source: "user", "model", "built-in"
    // or "mode" (forced by the mode's rules).
    std::vector<std::pair<std::string, std::string>> source;
    // One line per field in `source`, "key: value (source)", for a front end to show.
    std::vector<std::string> messages;
};
ResolvedRun resolve_run(const Model* model, const RunSpec& given, const std::vector<std::string>& user_keys);

}  // namespace tinyloop
