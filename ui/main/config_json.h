// GenerateConfig (and the speculative knobs) <-> JSON, with the range checks the config panel and
// the preset files share. Pure data: no Qt widgets, no engine calls.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
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
struct ConfigLimits {
    int max_loops = 1024;
    int max_seq_len = 1 << 24;
    int vocab_size = 1 << 24;
};

// A refusal naming the field ("config.top_p") and the reason with the allowed range.
class ConfigError : public std::runtime_error {
public:
    ConfigError(std::string field, const std::string& why)
        : std::runtime_error(field + ": " + why), m_field(std::move(field)) {}
    const std::string& field() const { return m_field; }

private:
    std::string m_field;
};

enum class FieldKind { Int, Float, U64, Bool, Criterion, KvCache, IdLists, Strings, Bias, Pointer };

struct FieldInfo {
    const char* key;
    FieldKind kind;
    const char* range;    // shown beside the field
    const char* tooltip;  // the seed's description
    bool speculative;     // a SpeculativeKnobs field
};
// Every GenerateConfig field, then the speculative knobs, in panel order.
const std::vector<FieldInfo>& configFields();
const FieldInfo* findField(const std::string& key);

nlohmann::json configToJson(const tinyloop::GenerateConfig& c);
// Strict: unknown fields, wrong types and out-of-range values throw ConfigError naming the field
// (prefixed with `where`, e.g. "config."). Missing fields keep their defaults.
tinyloop::GenerateConfig configFromJson(const nlohmann::json& j, const ConfigLimits& lim = {},
                                        const std::string& where = "");
nlohmann::json knobsToJson(const SpeculativeKnobs& k);
SpeculativeKnobs knobsFromJson(const nlohmann::json& j, const ConfigLimits& lim = {},
                               const std::string& where = "");
// Checks one field's JSON value; "" when it is acceptable, else the reason.
std::string checkField(const std::string& key, const nlohmann::json& value, const ConfigLimits& lim);

const char* criterionName(tinyloop::EarlyExitCriterion c);
bool parseCriterion(const std::string& s, tinyloop::EarlyExitCriterion* out);

// Text forms used by the panel's line edits: "1 2 3; 4 5", "id:bias, id:bias", JSON string array.
std::string idListsToText(const std::vector<std::vector<int32_t>>& v);
std::string biasToText(const std::vector<std::pair<int32_t, float>>& v);
std::string stringsToText(const std::vector<std::string>& v);
// Parse text forms into JSON values; throw ConfigError(key, why) on malformed text.
nlohmann::json idListsFromText(const std::string& key, const std::string& text);
nlohmann::json biasFromText(const std::string& key, const std::string& text);
nlohmann::json stringsFromText(const std::string& key, const std::string& text);

bool configsEqual(const tinyloop::GenerateConfig& a, const tinyloop::GenerateConfig& b);

}  // namespace tlui
