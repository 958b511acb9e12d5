// TinyLoop public API, the decode modes' rules as a front end shows them before a run: what
// picking a mode puts into a config (greedy: temperature 0; sample: 0.8; beam: width 4; early
// exit: the model's patience, else the built-in one) and the speculation knobs' cross-field rules
// (draft depth below verify depth, the tree at most 8 deep). The workbench asks these instead of
// restating them; run_decode (run_spec.h) keeps the final word at run time.
#pragma once

#include "tinyloop/tinyloop.h"

namespace tinyloop {

// A run's depth, the one "0 means the default depth" rule every front end and room asks: loops 0
// -> hp.default_loops, else loops itself; outside [0, hp.max_loops] throws InvalidArgument naming
// "loops" and the range. (Inside engine/src, model/model.h's resolve_loops(const Model&, int) is
// this same function.)
int resolve_loops(const HParams& hp, int loops);

// The token-id rule's refusal (check_token_id, tinyloop.h) for an id of any size given as its
// decimal text: a front end's integer that does not fit 32 bits (a Python int such as 2**70) is
// outside every vocabulary and is refused with the message check_token_id gives, never cast (the
// binding's check_token_id / check_token_ids, which the server's request fields use).
[[noreturn]] void token_id_outside(const std::string& id, int vocab_size, const std::string& field);

// The temperature sample mode starts from when the config's is greedy (<= 0.01), and the beam
// width beam mode starts from when the config's is below 2 (the CLI's --mode sample default too).
inline constexpr float kSampleModeTemperature = 0.8f;
inline constexpr int kBeamModeWidth = 4;

// `config` made ready for `mode`, the fields a user set kept where the mode allows them:
//   Greedy       temperature 0, beam_size 0, early exit off
//   Sample       temperature kSampleModeTemperature when <= 0.01, beam_size 0, early exit off
//   Beam         beam_size kBeamModeWidth when < 2
//   EarlyExit    early_exit_patience `rec`'s when it recommends a policy, else builtin_early_exit()'s,
//                when < 1; beam_size 0
//   Speculative, Tree, DraftModel, Pipelined   beam_size 0, early exit off
// `rec` is the model's recommendation (model_recommendation; empty = none, as before a model is open).
GenerateConfig mode_config(DecodeMode mode, const GenerateConfig& config, const Recommendation& rec = {});

// Whether the mode decodes greedily only (Greedy, Tree): the resolver (resolve_run)
// sets their temperature to 0 and refuses a user's temperature above 0.01, and a front end asks
// here which sampling flags a mode leaves unused.
bool greedy_only(DecodeMode mode);
// Whether the mode's decoder reports the per-token lens rows (GenerateOptions.lens): every mode
// but Pipelined, whose wave refuses the option (a front end then leaves it off and reads the
// exact lens after the run, score_logit_lens).
bool mode_reports_lens(DecodeMode mode);

// The temperature rule of a mode, the one place it is written: a greedy_only mode refuses a
// temperature above 0.01, Sample one in [0, 0.01]. Throws InvalidArgument "temperature: ...". The
// resolver calls it for a temperature the user set; the CLI for its --mode with --temperature.
void check_mode_temperature(DecodeMode mode, float temperature);

// The self-speculation depths' rule, the one place it is written: verify_loops in [2, max_loops],
// then draft_loops in [1, verify_loops - 1]. Throws InvalidArgument "verify_loops: V is outside
// [2, M]" or "draft_loops: D is outside [1, verify_loops - 1 = V-1]". max_loops <= 0: the model is
// not known yet, the verify depth's upper bound is not checked. The speculative decoders, the
// resolver (resolve_run), validate_mode_speculation and the speculation sweep all call it.
void check_speculation_depths(int draft_loops, int verify_loops, int max_loops);

// The speculation knobs' rules that tie two fields, as run_decode will apply them, checked before
// a run: in Speculative and Tree mode a draft_loops set (> 0) must be below the verify depth
// (verify_loops, else config.loops when set: check_speculation_depths); Tree's draft_ahead is at
// most 8 (nodes run per cycle). Throws InvalidArgument naming the field ("draft_loops: ...").
// Ranges of single knobs are validate_speculation's (json.h).
void validate_mode_speculation(const RunSpec& spec);

}  // namespace tinyloop
