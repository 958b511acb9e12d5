// The config adapter: the workbench's one door to the engine's run description and its rules.
// The run is the engine's tinyloop::RunSpec (mode, GenerateConfig, speculation knobs); this file
// holds the decode modes the workbench offers, the config panel's field list (the engine's
// GenerateConfig field table plus the knobs), the panel's text forms, and the only calls in ui/ to
// the engine's resolvers and mode rules (modeConfig, validateModeSpeculation, resolvedRun), so a
// change of the engine's resolver is one edit here. Ranges are the engine's own
// (validate_config_fields, validate_speculation): nothing here repeats them. No Qt widgets.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/json.h>
#include <tinyloop/tinyloop.h>

namespace tlui {

// The engine's decode modes (the workbench has no mode type of its own).
using tinyloop::DecodeMode;
// The modes the workbench offers, in the selector's order (DraftModel needs a second model file:
// not offered).
const std::vector<DecodeMode>& allModes();
const char* modeName(DecodeMode m);            // the engine's name: "greedy", "sample", "speculative", ...
const char* modeLabel(DecodeMode m);           // "Greedy", "Sampling", ... for a person
// The engine's names, and "sampling" (sample mode as presets and sessions wrote it before).
bool parseMode(const std::string& name, DecodeMode* out);

// Model-dependent bounds; the defaults are loose so a config can be checked without a model.
using ConfigLimits = tinyloop::ConfigLimits;

// A refusal naming the field ("config.top_p") and the reason with the allowed range.
class ConfigError : public std::runtime_error {
public:
    ConfigError(std::string field, const std::string& why)
        : std::runtime_error(field + ": " + why), m_field(std::move(field)) {}
    const std::string& field() const { return m_field; }

    // The engine's refusal ("config.top_p: 1.5 is outside ...") as a ConfigError naming its field.
    static ConfigError fromEngine(const tinyloop::Error& e);

private:
    std::string m_field;
};

using FieldKind = tinyloop::ConfigFieldKind;

struct FieldInfo {
    const char* key;
    FieldKind kind;
    const char* range;    // shown beside the field
    const char* tooltip;  // the seed's description
    bool speculative;     // a speculation knob (tinyloop::SpeculationPolicy)
};
// Every GenerateConfig field (the engine's table, tinyloop::config_fields), then the speculative
// knobs, in panel order.
const std::vector<FieldInfo>& configFields();
const FieldInfo* findField(const std::string& key);

// The engine codec's config_to_json / config_from_json; refusals as ConfigError naming the field
// (prefixed with `where`, e.g. "config."). Missing fields keep their defaults.
nlohmann::json configToJson(const tinyloop::GenerateConfig& c);
tinyloop::GenerateConfig configFromJson(const nlohmann::json& j, const ConfigLimits& lim = {},
                                        const std::string& where = "");
// The engine codec's speculation_to_json / speculation_from_json (canonical keys: "branches";
// the old "K_branches" still read). Ranges are the engine's validate_speculation.
nlohmann::json knobsToJson(const tinyloop::SpeculationPolicy& k);
tinyloop::SpeculationPolicy knobsFromJson(const nlohmann::json& j, const ConfigLimits& lim = {},
                                         const std::string& where = "");
bool knobsEqual(const tinyloop::SpeculationPolicy& a, const tinyloop::SpeculationPolicy& b);

// ---- the engine's rules and resolver: ui/ asks them here and nowhere else -----------------

// `config` made ready for `mode` (tinyloop::mode_config: greedy temperature 0, sample 0.8, beam
// width 4, early exit the model's patience else the built-in one). `rec`: the loaded model's
// recommendation (empty before a model is open).
tinyloop::GenerateConfig modeConfig(DecodeMode mode, const tinyloop::GenerateConfig& config,
                                    const tinyloop::Recommendation& rec);
// The speculation knobs' cross-field rules (tinyloop::validate_mode_speculation); throws
// ConfigError naming the field.
void validateModeSpeculation(const tinyloop::RunSpec& spec);
// The run as the engine will decode it, and its messages (one line per field it decided, "key:
// value (source)"): tinyloop::resolve_run, the one resolver every front end asks. `userKeys` names
// the fields the user set (the codec's names, "speculation."-prefixed for the knobs). A broken
// mode rule or a knob out of range throws ConfigError naming the field. On the thread that holds
// `model` (the worker, a test).
tinyloop::ResolvedRun resolveRun(const tinyloop::Model* model, const tinyloop::RunSpec& spec,
                                 const std::vector<std::string>& userKeys);
// The workbench's user keys for `spec`: every config field (the panel holds and shows them all,
// as the CLI's flags do), the depth only when set (loops 0 is "the model's default_loops"), a
// speculation knob when set (> 0; 0 is "the model's recommendation, else the built-in").
std::vector<std::string> workbenchUserKeys(const tinyloop::RunSpec& spec);
// resolveRun with the workbench's user keys.
tinyloop::ResolvedRun resolvedRun(const tinyloop::Model* model, const tinyloop::RunSpec& spec);
// The depth a plain run of `config` decodes at: config.loops, else the model's default_loops
// (tinyloop::resolve_loops, the engine's "0 = the default depth"; ui/ asks it here). Called for
// runs the engine accepted (loops within [0, max_loops]); another throws
// tinyloop::Error naming "loops".
int configDepth(const tinyloop::GenerateConfig& config, const tinyloop::HParams& hp);
// The config a front end shows before the user sets anything (tinyloop::recommended_config).
tinyloop::GenerateConfig defaultConfig(const tinyloop::Model* model);
// What the loaded file recommends (tinyloop::model_recommendation) and the built-in early-exit
// policy (tinyloop::builtin_early_exit).
const tinyloop::Recommendation& modelRecommendation(const tinyloop::Model* model);
tinyloop::Recommendation builtinEarlyExit();
const char* criterionName(tinyloop::EarlyExitCriterion c);
bool parseCriterion(const std::string& s, tinyloop::EarlyExitCriterion* out);

// A float as the shortest decimal that reads back as the same float: 0.05f as "0.05", never
// "0.0500000007". Every field showing a float is filled through it.
std::string floatText(float x);

// Text forms used by the panel's line edits: "1 2 3; 4 5", "id:bias, id:bias", JSON string array.
std::string idListsToText(const std::vector<std::vector<int32_t>>& v);
// force_words: "1 2; 3 | 4 5" (entries by ';', an entry's alternatives by '|').
std::string wordListsToText(const std::vector<std::vector<std::vector<int32_t>>>& v);
std::string biasToText(const std::vector<std::pair<int32_t, float>>& v);
std::string stringsToText(const std::vector<std::string>& v);
// Parse text forms into JSON values; throw ConfigError(key, why) on malformed text.
// With `alternatives` ('|'), each ';' part is a list of id lists split at that character.
nlohmann::json idListsFromText(const std::string& key, const std::string& text, char alternatives = 0);
nlohmann::json wordListsFromText(const std::string& key, const std::string& text);
nlohmann::json biasFromText(const std::string& key, const std::string& text);
nlohmann::json stringsFromText(const std::string& key, const std::string& text);
// A list of token ids ("256 10", commas allowed) and Hugging Face's (start_index, decay_factor)
// pair ("10, 1.05"; empty = off, JSON null), to and from the codec's JSON values.
std::string idsToText(const nlohmann::json& ids);
nlohmann::json idsFromText(const std::string& key, const std::string& text);
std::string lengthDecayToText(const nlohmann::json& decay);
nlohmann::json lengthDecayFromText(const std::string& key, const std::string& text);

bool configsEqual(const tinyloop::GenerateConfig& a, const tinyloop::GenerateConfig& b);

}  // namespace tlui
