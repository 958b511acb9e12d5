#include "base/config_json.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>

#include <tinyloop/mode_rules.h>

namespace tlui {

using nlohmann::json;
using tinyloop::EarlyExitCriterion;
using tinyloop::EarlyStopping;
using tinyloop::GenerateConfig;

const std::vector<DecodeMode>& allModes() {
    static const std::vector<DecodeMode> v = {DecodeMode::Greedy, DecodeMode::Sample,
                                              DecodeMode::Speculative, DecodeMode::Tree,
                                              DecodeMode::Pipelined, DecodeMode::Beam, DecodeMode::EarlyExit};
    return v;
}

const char* modeName(DecodeMode m) { return tinyloop::decode_mode_name(m); }

const char* modeLabel(DecodeMode m) {
    switch (m) {
    case DecodeMode::Greedy: return "Greedy";
    case DecodeMode::Sample: return "Sampling";
    case DecodeMode::Speculative: return "Speculative (chain)";
    case DecodeMode::Tree: return "Speculative (tree)";
    case DecodeMode::Beam: return "Beam search";
    case DecodeMode::EarlyExit: return "Early exit";
    case DecodeMode::DraftModel: return "Draft model";
    case DecodeMode::Pipelined: return "Speculative (pipelined)";
    }
    return "Greedy";
}

bool parseMode(const std::string& name, DecodeMode* out) {
    if (name == "sampling") {  // presets and sessions written before the engine's names
        *out = DecodeMode::Sample;
        return true;
    }
    return tinyloop::parse_decode_mode(name, out);
}

const char* criterionName(EarlyExitCriterion c) { return tinyloop::criterion_name(c); }

bool parseCriterion(const std::string& s, EarlyExitCriterion* out) { return tinyloop::parse_criterion(s, out); }

ConfigError ConfigError::fromEngine(const tinyloop::Error& e) {
    const std::string m = e.what();
    const size_t colon = m.find(": ");
    if (colon == std::string::npos) return ConfigError("config", m);
    return ConfigError(m.substr(0, colon), m.substr(colon + 2));
}

const std::vector<FieldInfo>& configFields() {
    static const std::vector<FieldInfo> v = [] {
        std::vector<FieldInfo> out;
        for (const auto& f : tinyloop::config_fields()) out.push_back({f.key, f.kind, f.range, f.help, false});
        const std::vector<FieldInfo> knobs = {
            // 0 in a knob is the engine's "the default" (tinyloop::resolved_speculation).
            {"draft_loops", FieldKind::Int, "0 .. verify_loops - 1 (0 = the model's recommendation, else min(2, verify_loops - 1))", "Cheap draft-pass loop depth. Lower = faster drafts, more rejections.", true},
            {"verify_loops", FieldKind::Int, "0 .. max_loops (0 = loops, else the model's default)", "Verify-pass loop depth (0 = the config's loops, else the model's default_loops).", true},
            {"draft_ahead", FieldKind::Int, "0 .. 32, tree: 0 .. 8 (0 = the model's recommendation, else 4)", "Number of tokens drafted per verify cycle (tree: nodes run per cycle). Larger = more parallelism per verify, more wasted work on miss.", true},
            {"branches", FieldKind::Int, "0 .. 8 (0 = the model's recommendation, else 2)", "Tree only: number of candidate tokens kept per draft step. The tree grows best-first: draft_ahead nodes run per cycle, each keeping its branches best children as candidates.", true},
        };
        out.insert(out.end(), knobs.begin(), knobs.end());
        return out;
    }();
    return v;
}

const FieldInfo* findField(const std::string& key) {
    for (const auto& f : configFields())
        if (key == f.key) return &f;
    return nullptr;
}

std::string floatText(float x) {
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x);
    return ec == std::errc() ? std::string(buf, end) : std::to_string(x);
}

json configToJson(const GenerateConfig& c) { return tinyloop::config_to_json(c); }

GenerateConfig configFromJson(const json& j, const ConfigLimits& lim, const std::string& where) {
    try {
        return tinyloop::config_from_json(j, lim, where);
    } catch (const tinyloop::Error& e) {
        throw ConfigError::fromEngine(e);
    }
}

json knobsToJson(const tinyloop::SpeculationPolicy& k) { return tinyloop::speculation_to_json(k); }

tinyloop::SpeculationPolicy knobsFromJson(const json& j, const ConfigLimits& lim, const std::string& where) {
    try {
        return tinyloop::speculation_from_json(j, lim, where);
    } catch (const tinyloop::Error& err) {
        throw ConfigError::fromEngine(err);
    }
}

bool knobsEqual(const tinyloop::SpeculationPolicy& a, const tinyloop::SpeculationPolicy& b) {
    return knobsToJson(a) == knobsToJson(b) && a.draft_model == b.draft_model;
}

tinyloop::GenerateConfig modeConfig(DecodeMode mode, const tinyloop::GenerateConfig& config,
                                    const tinyloop::Recommendation& rec) {
    return tinyloop::mode_config(mode, config, rec);
}

void validateModeSpeculation(const tinyloop::RunSpec& spec) {
    try {
        tinyloop::validate_mode_speculation(spec);
    } catch (const tinyloop::Error& err) {
        throw ConfigError::fromEngine(err);
    }
}

tinyloop::ResolvedRun resolveRun(const tinyloop::Model* model, const tinyloop::RunSpec& spec,
                                 const std::vector<std::string>& userKeys) {
    try {
        return tinyloop::resolve_run(model, spec, userKeys);
    } catch (const tinyloop::Error& err) {
        throw ConfigError::fromEngine(err);
    }
}

std::vector<std::string> workbenchUserKeys(const tinyloop::RunSpec& spec) {
    std::vector<std::string> keys;
    for (const tinyloop::ConfigField& f : tinyloop::config_fields())
        if (std::string(f.key) != "loops" || spec.config.loops > 0) keys.push_back(f.key);
    const tinyloop::SpeculationPolicy& k = spec.speculation;
    const std::pair<const char*, int> knobs[] = {{"speculation.verify_loops", k.verify_loops},
                                                 {"speculation.draft_loops", k.draft_loops},
                                                 {"speculation.draft_ahead", k.draft_ahead},
                                                 {"speculation.branches", k.branches}};
    for (const auto& [key, value] : knobs)
        if (value > 0) keys.push_back(key);
    return keys;
}

tinyloop::ResolvedRun resolvedRun(const tinyloop::Model* model, const tinyloop::RunSpec& spec) {
    return resolveRun(model, spec, workbenchUserKeys(spec));
}

int configDepth(const tinyloop::GenerateConfig& config, const tinyloop::HParams& hp) {
    return tinyloop::resolve_loops(hp, config.loops);
}

tinyloop::GenerateConfig defaultConfig(const tinyloop::Model* model) { return tinyloop::recommended_config(model); }

const tinyloop::Recommendation& modelRecommendation(const tinyloop::Model* model) {
    return tinyloop::model_recommendation(model);
}

tinyloop::Recommendation builtinEarlyExit() { return tinyloop::builtin_early_exit(); }

std::string idListsToText(const std::vector<std::vector<int32_t>>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) {
        if (i) s += "; ";
        for (size_t k = 0; k < v[i].size(); ++k) {
            if (k) s += " ";
            s += std::to_string(v[i][k]);
        }
    }
    return s;
}

std::string biasToText(const std::vector<std::pair<int32_t, float>>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(v[i].first) + ":" + floatText(v[i].second);
    }
    return s;
}

std::string stringsToText(const std::vector<std::string>& v) {
    return v.empty() ? std::string() : json(v).dump();
}

std::string wordListsToText(const std::vector<std::vector<std::vector<int32_t>>>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) {
        if (i) s += "; ";
        std::string alts = idListsToText(v[i]);  // "a b; c" -> "a b | c"
        for (size_t at = alts.find("; "); at != std::string::npos; at = alts.find("; ", at)) alts.replace(at, 2, " | ");
        s += alts;
    }
    return s;
}

namespace {

// The ids of one "1 2 3" part; `where` ("[0]") names it in the error.
json idsFromText(const std::string& key, const std::string& where, const std::string& part) {
    std::stringstream ps(part);
    std::string tok;
    json ids = json::array();
    while (ps >> tok) {
        try {
            size_t used = 0;
            long long x = std::stoll(tok, &used);
            if (used != tok.size()) throw std::invalid_argument(tok);
            ids.push_back(x);
        } catch (const std::exception&) {
            throw ConfigError(key, where + ": '" + tok + "' is not a token id");
        }
    }
    return ids;
}

}  // namespace

json wordListsFromText(const std::string& key, const std::string& text) {
    json out = json::array();
    for (const json& entry : idListsFromText(key, text, '|')) {
        if (entry.size() == 1) out.push_back(entry[0]);  // one alternative: a plain word
        else out.push_back(entry);
    }
    return out;
}

json idListsFromText(const std::string& key, const std::string& text, char alternatives) {
    json out = json::array();
    std::stringstream all(text);
    std::string part;
    int idx = 0;
    while (std::getline(all, part, ';')) {
        std::string where(1, '[');  // not "[" + std::string: GCC 12's -Wrestrict false alarm
        where += std::to_string(idx) + "]";
        json ids = json::array();
        if (alternatives == 0) {
            ids = idsFromText(key, where, part);
        } else if (part.find_first_not_of(" \t") != std::string::npos) {
            std::stringstream as(part);
            std::string alt;
            for (int a = 0; std::getline(as, alt, alternatives); ++a) {
                json one = idsFromText(key, where + "[" + std::to_string(a) + "]", alt);
                if (one.empty()) throw ConfigError(key, where + "[" + std::to_string(a) + "]: must not be empty");
                ids.push_back(one);
            }
            if (!part.empty() && part.back() == alternatives)
                throw ConfigError(key, where + ": must not end with '" + std::string(1, alternatives) + "'");
        }
        if (ids.empty()) {
            // "a;" or an all-blank text: trailing separators are tolerated, inner empties are not
            if (all.eof() || part.find_first_not_of(" \t") == std::string::npos) {
                if (!all.eof()) throw ConfigError(key, where + ": must not be empty");
                continue;
            }
        }
        out.push_back(ids);
        ++idx;
    }
    return out;
}

json biasFromText(const std::string& key, const std::string& text) {
    json out = json::array();
    std::stringstream all(text);
    std::string part;
    int idx = 0;
    while (std::getline(all, part, ',')) {
        if (part.find_first_not_of(" \t") == std::string::npos) {
            if (all.eof()) break;
            throw ConfigError(key, "[" + std::to_string(idx) + "]: empty entry, expected id:bias");
        }
        auto colon = part.find(':');
        if (colon == std::string::npos) throw ConfigError(key, "[" + std::to_string(idx) + "]: expected id:bias");
        try {
            size_t u1 = 0, u2 = 0;
            std::string a = part.substr(0, colon), b = part.substr(colon + 1);
            long long id = std::stoll(a, &u1);
            double bias = std::stod(b, &u2);
            if (a.find_first_not_of(" \t", u1) != std::string::npos || b.find_first_not_of(" \t", u2) != std::string::npos)
                throw std::invalid_argument(part);
            out.push_back(json::array({id, bias}));
        } catch (const std::exception&) {
            throw ConfigError(key, "[" + std::to_string(idx) + "]: '" + part + "' is not id:bias");
        }
        ++idx;
    }
    return out;
}

json stringsFromText(const std::string& key, const std::string& text) {
    if (text.find_first_not_of(" \t") == std::string::npos) return json::array();
    json v = json::parse(text, nullptr, false);
    if (v.is_discarded() || !v.is_array()) throw ConfigError(key, "expected a JSON array of strings, e.g. [\"\\n\\n\", \"Amen\"]");
    return v;
}

std::string idsToText(const json& ids) {
    std::string s;
    for (const json& id : ids) {
        if (!s.empty()) s += ' ';
        s += std::to_string(id.get<long long>());
    }
    return s;
}

json idsFromText(const std::string& key, const std::string& text) {
    std::string spaced = text;
    std::replace(spaced.begin(), spaced.end(), ',', ' ');
    if (spaced.find(';') != std::string::npos) throw ConfigError(key, "expected one list of token ids, e.g. 256 10");
    const json lists = idListsFromText(key, spaced);
    return lists.empty() ? json::array() : lists[0];
}

std::string lengthDecayToText(const json& decay) {
    return decay.is_array() ? std::to_string(decay[0].get<long long>()) + ", " + floatText(decay[1].get<float>()) : "";
}

json lengthDecayFromText(const std::string& key, const std::string& text) {
    if (text.find_first_not_of(" \t") == std::string::npos) return nullptr;
    std::string spaced = text;
    std::replace(spaced.begin(), spaced.end(), ',', ' ');
    std::stringstream in(spaced);
    long long start = 0;
    double factor = 0;
    std::string rest;
    if (!(in >> start >> factor) || (in >> rest))
        throw ConfigError(key, "expected start_index, decay_factor like 10, 1.05 (empty = off)");
    return json::array({start, factor});
}

bool configsEqual(const GenerateConfig& a, const GenerateConfig& b) {
    return configToJson(a) == configToJson(b);
}

}  // namespace tlui
