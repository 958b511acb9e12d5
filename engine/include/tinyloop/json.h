// The one JSON codec (nlohmann/json) for what front ends write and read: GenerateConfig, the
// speculation knobs and the run specification, GenerateStats, TokenEvent (with its lens rows and
// speculative cycle fields). The CLI, the workbench (sessions, presets, the config panel) and the
// Python binding (and through it the server) all use these functions, so each type has one field
// set, written in one place.
//
// Reading is strict: an unknown field, a wrong type or a value outside its range throws
// Error(InvalidArgument) whose message starts with the field's path ("config.top_p: 1.5 is
// outside (0, 1] ..."); missing fields keep their defaults. Ranges are the engine's own
// (validate_config_fields), so a config the codec accepts is one the engine accepts.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tinyloop/tinyloop.h"

namespace tinyloop {

// ---- checking a config without a prompt ------------------------------------------------------

// The model-dependent bounds a config is checked against: a model's (config_limits(model)) or,
// without a model, loose ones.
struct ConfigLimits {
    int max_loops = 1024;
    int max_seq_len = 1 << 24;
    int vocab_size = 1 << 24;
};
ConfigLimits config_limits(const Model* model);

// Every rule of validate_config that needs no prompt (validate_config calls it with the model's
// limits); throws Error(InvalidArgument) "field: value is outside [lo, hi]".
void validate_config_fields(const GenerateConfig& config, const ConfigLimits& limits = {});

// ---- the GenerateConfig field table ----------------------------------------------------------

// How a field is written in JSON (and edited in the workbench's config panel).
// Ids: one list of token ids; LengthDecay: null or [start_index, decay_factor]; WordLists is
// Hugging Face's force_words_ids: a list whose entries are a word ([ids]) or alternatives
// ([[ids], [ids], ...]).
enum class ConfigFieldKind { Int, Float, U64, Bool, Criterion, KvCache, KvSharing, IdLists, Strings, Bias, Grammar, EarlyStopping,
                             Ids, LengthDecay, WordLists };

// One GenerateConfig field: its JSON key, kind, range (as shown beside an editor) and description.
// Adding a GenerateConfig field is one line in this table (engine/src/json_config.cpp).
struct ConfigField {
    const char* key;
    ConfigFieldKind kind;
    const char* range;
    const char* help;
};
const std::vector<ConfigField>& config_fields();  // in the panel's order
const ConfigField* find_config_field(const std::string& key);

const char* criterion_name(EarlyExitCriterion c);  // "hidden_l2", "logit_margin", "kl", ...
// Accepts the names above and the CLI's short ones (l2, margin, entropy, argmax); false otherwise.
bool parse_criterion(const std::string& name, EarlyExitCriterion* out);
// The short name where the criterion has one (l2, margin, kl, entropy, argmax, gate), else
// criterion_name's: the command line's spelling (with '-' for '_').
const char* criterion_short_name(EarlyExitCriterion c);

// ---- GenerateConfig, RunSpec ----------------------------------------------------------------

// Every field of the table; grammar is written as null (a grammar travels as a file, not inside
// a config).
nlohmann::json config_to_json(const GenerateConfig& c);
// `where` prefixes field names in errors ("config."). `base` supplies the fields j leaves out.
GenerateConfig config_from_json(const nlohmann::json& j, const ConfigLimits& limits = {},
                                const std::string& where = "", const GenerateConfig& base = {});
// One field of `c` set from its JSON value (type checked; ranges are validate_config_fields').
void set_config_field(GenerateConfig& c, const std::string& key, const nlohmann::json& value,
                      const std::string& where = "");

// The early-exit policy's one JSON form: {"criterion", "threshold", "patience", "min_L",
// "peek_every"} (+ "logit_margin" when > 0). Inside a config's JSON the same fields are the flat
// keys early_exit_criterion, ... (the config field table). The reader throws InvalidArgument
// naming the key with `where` for an unknown key or a value out of range (validate_early_exit).
nlohmann::json early_exit_policy_to_json(const EarlyExitPolicy& p);
EarlyExitPolicy early_exit_policy_from_json(const nlohmann::json& j, const ConfigLimits& limits = {},
                                            const std::string& where = "early_exit.");

// draft_loops, verify_loops, draft_ahead, branches, gamma (draft_model is not written).
nlohmann::json speculation_to_json(const SpeculationPolicy& k);
SpeculationPolicy speculation_from_json(const nlohmann::json& j, const ConfigLimits& limits = {},
                                       const std::string& where = "");
// Throws InvalidArgument "field: ..." for a knob outside its range (run_decode's rules).
void validate_speculation(const SpeculationPolicy& k, const ConfigLimits& limits = {});

// decode_mode_name's names, and on input only the other spellings front ends used (one alias
// table: "sampling" -> sample, "early_exit" -> early-exit, "chain" -> speculative,
// "draft_model"/"draft" -> draft-model); false for any other.
bool parse_decode_mode(const std::string& name, DecodeMode* out);

// {"mode", "config", "speculation"}.
nlohmann::json run_spec_to_json(const RunSpec& spec);
RunSpec run_spec_from_json(const nlohmann::json& j, const ConfigLimits& limits = {});

// ---- the model's recommended settings (docs/FORMAT.md §2, metadata "recommended") ----------

// {"speculation": {draft_loops, draft_ahead, tree_draft_ahead, branches},
//  "early_exit": {criterion, threshold, patience, min_L, peek_every}}, each part only when set.
nlohmann::json recommendation_to_json(const Recommendation& r);
// Reads the object above (a key "measured" or "found_by" is free-form and ignored); an absent
// part or key keeps "none recommended". Throws InvalidArgument naming the key with `where`
// ("metadata.recommended.early_exit.threshold: ...") for an unknown key or a value out of range.
Recommendation recommendation_from_json(const nlohmann::json& j, const ConfigLimits& limits = {},
                                        const std::string& where = "recommended.");

// ---- results ---------------------------------------------------------------------------------

// Every GenerateStats field plus the derived rates (decode_tokens_per_s, spec_acceptance_rate,
// spec_mean_accepted); the speculation counters are zero outside speculative modes.
nlohmann::json stats_to_json(const GenerateStats& s);
GenerateStats stats_from_json(const nlohmann::json& j);

// token, position, index, piece, depth, prob; the cycle fields (cycle, drafted, accepted,
// from_verifier) when the token belongs to a speculative cycle; lens (rows of depth, top_ids,
// top_probs, p_emitted, entropy) when it was asked for. Floats are written as their shortest
// decimal form (0.1f as 0.1).
nlohmann::json event_to_json(const TokenEvent& ev);
TokenEvent event_from_json(const nlohmann::json& j);

// GenerateResult::sequences (num_return_sequences > 1): an array of {output_ids, text,
// stop_reason, score}, best first for beam search.
nlohmann::json sequences_to_json(const std::vector<ReturnedSequence>& seqs);
std::vector<ReturnedSequence> sequences_from_json(const nlohmann::json& j);

// A float as the double with the same shortest decimal form (what the writers above emit).
double json_float(float f);

}  // namespace tinyloop
