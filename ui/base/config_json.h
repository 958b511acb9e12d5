// The workbench's side of the engine's JSON codec (tinyloop/json.h): the decode modes it offers,
// the speculative knobs of its presets, the config panel's field list (the engine's GenerateConfig
// field table plus the knobs) and the panel's text forms. Ranges are the engine's own
// (validate_config_fields, validate_speculation): nothing here repeats them. No Qt widgets.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/json.h>
#include <tinyloop/tinyloop.h>

namespace tlui {

// The decode modes the workbench offers; see EngineHost::generate for the dispatch.
enum class DecodeMode { Greedy, Sampling, Speculative, Tree, Beam, EarlyExit };
const char* modeName(DecodeMode m);            // "greedy", "sampling", "speculative", ...
const char* modeLabel(DecodeMode m);           // "Greedy", "Sampling", ... for a person
bool parseMode(const std::string& name, DecodeMode* out);
const std::vector<DecodeMode>& allModes();

// The knobs of the seed's SpeculativeConfig / TreeSpeculativeConfig that GenerateConfig lacks
// (max_tokens, temperature and seed come from GenerateConfig).
struct SpeculativeKnobs {
    int draft_loops = 2;    // 1..max_loops, below verify_loops
    int verify_loops = 0;   // 0 = the model's default_loops; else 1..max_loops
    int draft_ahead = 4;    // 1..32 (tree: 1..8)
    int K_branches = 2;     // 1..8 (tree only)
    bool operator==(const SpeculativeKnobs&) const = default;
};

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
    bool speculative;     // a SpeculativeKnobs field
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
nlohmann::json knobsToJson(const SpeculativeKnobs& k);
// Ranges are the engine's validate_speculation.
SpeculativeKnobs knobsFromJson(const nlohmann::json& j, const ConfigLimits& lim = {},
                               const std::string& where = "");

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
