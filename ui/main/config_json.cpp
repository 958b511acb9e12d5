#include "main/config_json.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>

namespace tlui {

using nlohmann::json;
using tinyloop::EarlyExitCriterion;
using tinyloop::GenerateConfig;

const char* modeName(DecodeMode m) {
    switch (m) {
    case DecodeMode::Greedy: return "greedy";
    case DecodeMode::Sampling: return "sampling";
    case DecodeMode::Speculative: return "speculative";
    case DecodeMode::Tree: return "tree";
    case DecodeMode::Beam: return "beam";
    case DecodeMode::EarlyExit: return "early-exit";
    }
    return "greedy";
}

const char* modeLabel(DecodeMode m) {
    switch (m) {
    case DecodeMode::Greedy: return "Greedy";
    case DecodeMode::Sampling: return "Sampling";
    case DecodeMode::Speculative: return "Speculative (chain)";
    case DecodeMode::Tree: return "Speculative (tree)";
    case DecodeMode::Beam: return "Beam search";
    case DecodeMode::EarlyExit: return "Early exit";
    }
    return "Greedy";
}

const std::vector<DecodeMode>& allModes() {
    static const std::vector<DecodeMode> v = {DecodeMode::Greedy, DecodeMode::Sampling,
                                              DecodeMode::Speculative, DecodeMode::Tree,
                                              DecodeMode::Beam, DecodeMode::EarlyExit};
    return v;
}

bool parseMode(const std::string& name, DecodeMode* out) {
    for (DecodeMode m : allModes())
        if (name == modeName(m)) {
            *out = m;
            return true;
        }
    return false;
}

const char* criterionName(EarlyExitCriterion c) {
    switch (c) {
    case EarlyExitCriterion::HiddenL2: return "hidden_l2";
    case EarlyExitCriterion::LogitMargin: return "logit_margin";
    case EarlyExitCriterion::KL: return "kl";
    case EarlyExitCriterion::EntropyDelta: return "entropy_delta";
    case EarlyExitCriterion::ArgmaxStable: return "argmax_stable";
    }
    return "hidden_l2";
}

bool parseCriterion(const std::string& s, EarlyExitCriterion* out) {
    for (int i = 0; i <= 4; ++i) {
        auto c = static_cast<EarlyExitCriterion>(i);
        if (s == criterionName(c)) {
            *out = c;
            return true;
        }
    }
    return false;
}

const std::vector<FieldInfo>& configFields() {
    using K = FieldKind;
    static const std::vector<FieldInfo> v = {
        {"max_tokens", K::Int, "0 .. max_seq_len - prompt", "Upper bound on emitted tokens (excludes the prompt). Default 64.", false},
        {"loops", K::Int, "0 .. max_loops (0 = model default)", "Loop depth. Set explicitly to override the checkpoint's trained default (0 = model.default_loops).", false},
        {"temperature", K::Float, ">= 0", "Softmax temperature. 0.0 (or <= 0.01) means greedy argmax. Must be >= 0.", false},
        {"top_k", K::Int, "1 .. vocab", "Retain top-k tokens before sampling. Must be >= 1 when sampling is active. Ignored when temperature == 0.", false},
        {"top_p", K::Float, "(0, 1]", "Nucleus sampling threshold. 1.0 disables. Applied after top_k.", false},
        {"min_p", K::Float, "[0, 1]", "Drop tokens whose probability is below min_p times the top probability. 0 disables.", false},
        {"cache_window", K::Int, ">= 0 (0 = unlimited)", "Sliding-window cap on KV cache. 0 means unlimited (bounded by max_seq_len).", false},
        {"repetition_penalty", K::Float, "> 0 (1 disables)", "HuggingFace-convention penalty applied before temperature/top-k/top-p. 1.0 disables.", false},
        {"frequency_penalty", K::Float, "[-2, 2]", "Subtracts penalty x (times the token was emitted) from its logit. 0 disables.", false},
        {"presence_penalty", K::Float, "[-2, 2]", "Subtracts penalty from the logit of every token already emitted. 0 disables.", false},
        {"logit_bias", K::Bias, "id:bias, bias in [-100, 100]", "Added to the logits after the penalties, e.g. \"256:-100, 32:1.5\".", false},
        {"stop_sequences", K::IdLists, "ids; ids; ...", "Token-id sequences that terminate decode when matched at the tail of emitted output. Matching tokens are included in the returned stream. Format: \"13; 198 198\".", false},
        {"stop_strings", K::Strings, "JSON array of strings", "Text that terminates decode when it appears; excluded from the text. Format: [\"\\n\\n\", \"Amen\"].", false},
        {"ignore_eos", K::Bool, "", "Keep going past the model's EOS token.", false},
        {"max_time", K::Float, ">= 0 s (0 = no limit)", "Seconds of wall clock for the call; the run stops with MAX_TIME when it is spent. 0 = no limit.", false},
        {"no_repeat_ngram_size", K::Int, ">= 0 (0 disables)", "n > 0 bans a token that would repeat an n-gram of prompt + emitted (Hugging Face convention).", false},
        {"bad_words", K::IdLists, "ids; ids; ...", "Token sequences that are never emitted (each non-empty). Format: \"256; 10 10\".", false},
        {"beam_size", K::Int, "0 .. 64", "0 or 1 = standard sampling. >= 2 switches to deterministic beam search; sampling knobs are then ignored.", false},
        {"length_penalty", K::Float, "beam only (1 otherwise)", "Beam-search only. Ranks beams by log_prob / max(1, len)^length_penalty.", false},
        {"early_exit_patience", K::Int, ">= 0 (0 disables)", "0 disables adaptive-depth early exit. >0 enables: exit after patience consecutive stable probes past min_L.", false},
        {"early_exit_min_L", K::Int, "1 .. max_loops", "First-probe floor for early exit.", false},
        {"early_exit_peek_every", K::Int, ">= 1", "Probe cadence past min_L.", false},
        {"early_exit_logit_margin", K::Float, ">= 0", ">0 switches from hidden-L2 to logit-margin stability. Empirically the right signal for high-beta models.", false},
        {"early_exit_criterion", K::Criterion, "", "Stability signal for early exit: hidden-state L2 change (the seed's default), logit margin, KL, entropy change or argmax stability.", false},
        {"early_exit_threshold", K::Float, "> 0", "Threshold the chosen early-exit criterion is compared with.", false},
        {"sample_seed", K::U64, "0 .. 2^64-1", "RNG seed for stochastic sampling. Deterministic given seed + config + model.", false},
        {"kv_cache", K::KvCache, "f32 | int8", "Layout of the KV cache: f32 (exact) or int8 (one byte per element plus a scale per row and head: about 3.8x less KV memory, logits within about 1% of their span of f32's). Used by plain decode, beam search, early exit and draft-model speculation; chain and tree self-speculation keep f32.", false},
        {"grammar", K::Pointer, "a .gbnf file, or empty", "Optional constrained-decoding grammar (GBNF: rules name ::= ..., start rule root). A token is allowed when its bytes keep the output inside the grammar; when nothing is allowed the run stops with GRAMMAR_DEAD_END.", false},
        {"draft_loops", K::Int, "1 .. verify_loops - 1", "Cheap draft-pass loop depth. Lower = faster drafts, more rejections.", true},
        {"verify_loops", K::Int, "0 .. max_loops (0 = model default)", "Verify-pass loop depth. Typically equal to model.default_loops (0 = the model's default_loops).", true},
        {"draft_ahead", K::Int, "1 .. 32 (tree: 1 .. 8)", "Number of tokens drafted per verify cycle (tree: tree depth). Larger = more parallelism per verify, more wasted work on miss.", true},
        {"K_branches", K::Int, "1 .. 8", "Tree only: number of candidate tokens kept per draft step. Total tree size is approximately K_branches^draft_ahead.", true},
    };
    return v;
}

const FieldInfo* findField(const std::string& key) {
    for (const auto& f : configFields())
        if (key == f.key) return &f;
    return nullptr;
}

namespace {

std::string fmt(double x) {
    std::ostringstream os;
    os << x;
    return os.str();
}

bool asInteger(const json& v, long long* out) {
    if (v.is_number_integer()) {
        if (v.is_number_unsigned() && v.get<unsigned long long>() > (unsigned long long)LLONG_MAX) return false;
        *out = v.get<long long>();
        return true;
    }
    if (v.is_number_float()) {
        double d = v.get<double>();
        if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15) {
            *out = static_cast<long long>(d);
            return true;
        }
    }
    return false;
}

std::string intRange(const json& v, long long lo, long long hi) {
    long long x = 0;
    if (!asInteger(v, &x)) return "expected an integer";
    if (x < lo || x > hi) return fmt(double(x)) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    return "";
}

// lo/hi inclusive unless the open flags say otherwise
std::string floatRange(const json& v, double lo, double hi, bool loOpen = false, bool hiOpen = false) {
    if (!v.is_number()) return "expected a number";
    double x = v.get<double>();
    if (!std::isfinite(x)) return "must be a finite number";
    bool ok = (loOpen ? x > lo : x >= lo) && (hiOpen ? x < hi : x <= hi);
    if (ok) return "";
    std::string lb = loOpen ? "(" : "[";
    std::string rb = hiOpen ? ")" : "]";
    std::string los = std::isinf(lo) ? "-inf" : fmt(lo);
    std::string his = std::isinf(hi) ? "inf" : fmt(hi);
    return fmt(x) + " is outside " + lb + los + ", " + his + rb;
}

const double kInf = std::numeric_limits<double>::infinity();

}  // namespace

std::string checkField(const std::string& key, const json& v, const ConfigLimits& lim) {
    if (key == "max_tokens") return intRange(v, 0, lim.max_seq_len);
    if (key == "loops") return intRange(v, 0, lim.max_loops);
    if (key == "temperature") return floatRange(v, 0, kInf);
    if (key == "top_k") return intRange(v, 1, lim.vocab_size);
    if (key == "top_p") return floatRange(v, 0, 1, true, false);
    if (key == "min_p") return floatRange(v, 0, 1);
    if (key == "cache_window") return intRange(v, 0, lim.max_seq_len);
    if (key == "repetition_penalty") return floatRange(v, 0, kInf, true, false);
    if (key == "frequency_penalty" || key == "presence_penalty") return floatRange(v, -2, 2);
    if (key == "beam_size") return intRange(v, 0, 64);
    if (key == "length_penalty") return floatRange(v, -kInf, kInf);
    if (key == "early_exit_patience") return intRange(v, 0, 1 << 20);
    if (key == "early_exit_min_L") return intRange(v, 1, lim.max_loops);
    if (key == "early_exit_peek_every") return intRange(v, 1, 1 << 20);
    if (key == "early_exit_logit_margin") return floatRange(v, 0, kInf);
    if (key == "early_exit_threshold") return floatRange(v, 0, kInf, true, false);
    if (key == "draft_loops") return intRange(v, 1, lim.max_loops);
    if (key == "verify_loops") return intRange(v, 0, lim.max_loops);
    if (key == "draft_ahead") return intRange(v, 1, 32);
    if (key == "K_branches") return intRange(v, 1, 8);
    if (key == "max_time") return floatRange(v, 0, kInf);
    if (key == "no_repeat_ngram_size") return intRange(v, 0, lim.max_seq_len);
    if (key == "ignore_eos") return v.is_boolean() ? "" : "expected true or false";
    if (key == "sample_seed") {
        if (v.is_number_unsigned()) return "";
        if (v.is_number_integer() && v.get<long long>() >= 0) return "";
        return "expected an integer in [0, 2^64-1]";
    }
    if (key == "early_exit_criterion") {
        EarlyExitCriterion c;
        if (v.is_string() && parseCriterion(v.get<std::string>(), &c)) return "";
        return "expected one of hidden_l2, logit_margin, kl, entropy_delta, argmax_stable";
    }
    if (key == "kv_cache") {
        if (v.is_string() && (v.get<std::string>() == "f32" || v.get<std::string>() == "int8")) return "";
        return "expected one of f32, int8";
    }
    if (key == "stop_sequences" || key == "bad_words") {
        if (!v.is_array()) return "expected an array of arrays of token ids";
        for (size_t i = 0; i < v.size(); ++i) {
            if (!v[i].is_array()) return "[" + std::to_string(i) + "]: expected an array of token ids";
            if (v[i].empty()) return "[" + std::to_string(i) + "]: must not be empty";
            for (size_t k = 0; k < v[i].size(); ++k) {
                std::string e = intRange(v[i][k], 0, lim.vocab_size - 1);
                if (!e.empty()) return "[" + std::to_string(i) + "][" + std::to_string(k) + "]: token id " + e;
            }
        }
        return "";
    }
    if (key == "stop_strings") {
        if (!v.is_array()) return "expected an array of strings";
        for (size_t i = 0; i < v.size(); ++i) {
            if (!v[i].is_string()) return "[" + std::to_string(i) + "]: expected a string";
            if (v[i].get<std::string>().empty()) return "[" + std::to_string(i) + "]: must not be empty";
        }
        return "";
    }
    if (key == "logit_bias") {
        if (!v.is_array()) return "expected an array of [token id, bias] pairs";
        for (size_t i = 0; i < v.size(); ++i) {
            const json& p = v[i];
            if (!p.is_array() || p.size() != 2) return "[" + std::to_string(i) + "]: expected a [token id, bias] pair";
            std::string e = intRange(p[0], 0, lim.vocab_size - 1);
            if (!e.empty()) return "[" + std::to_string(i) + "]: token id " + e;
            e = floatRange(p[1], -100, 100);
            if (!e.empty()) return "[" + std::to_string(i) + "]: bias " + e;
        }
        return "";
    }
    if (key == "grammar") return v.is_null() ? "" : "a grammar is given as a file (grammar_file), not inside the config";
    return "unknown field";
}

json configToJson(const GenerateConfig& c) {
    json j = json::object();
    j["max_tokens"] = c.max_tokens;
    j["loops"] = c.loops;
    j["temperature"] = c.temperature;
    j["top_k"] = c.top_k;
    j["top_p"] = c.top_p;
    j["min_p"] = c.min_p;
    j["cache_window"] = c.cache_window;
    j["repetition_penalty"] = c.repetition_penalty;
    j["frequency_penalty"] = c.frequency_penalty;
    j["presence_penalty"] = c.presence_penalty;
    json lb = json::array();
    for (const auto& [id, b] : c.logit_bias) lb.push_back(json::array({id, b}));
    j["logit_bias"] = lb;
    j["stop_sequences"] = c.stop_sequences;
    j["stop_strings"] = c.stop_strings;
    j["ignore_eos"] = c.ignore_eos;
    j["max_time"] = c.max_time;
    j["no_repeat_ngram_size"] = c.no_repeat_ngram_size;
    j["bad_words"] = c.bad_words;
    j["beam_size"] = c.beam_size;
    j["length_penalty"] = c.length_penalty;
    j["early_exit_patience"] = c.early_exit_patience;
    j["early_exit_min_L"] = c.early_exit_min_L;
    j["early_exit_peek_every"] = c.early_exit_peek_every;
    j["early_exit_logit_margin"] = c.early_exit_logit_margin;
    j["early_exit_criterion"] = criterionName(c.early_exit_criterion);
    j["kv_cache"] = tinyloop::kv_cache_type_name(c.kv_cache);
    j["early_exit_threshold"] = c.early_exit_threshold;
    j["sample_seed"] = c.sample_seed;
    j["grammar"] = nullptr;
    return j;
}

GenerateConfig configFromJson(const json& j, const ConfigLimits& lim, const std::string& where) {
    if (!j.is_object()) throw ConfigError(where.empty() ? "config" : where.substr(0, where.size() - 1), "expected a JSON object");
    GenerateConfig c;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& k = it.key();
        const FieldInfo* f = findField(k);
        if (!f || f->speculative) throw ConfigError(where + k, "unknown field");
        std::string e = checkField(k, it.value(), lim);
        if (!e.empty()) throw ConfigError(where + k, e);
        const json& v = it.value();
        auto I = [&]() { long long x = 0; asInteger(v, &x); return static_cast<int>(x); };
        auto F = [&]() { return v.get<float>(); };
        if (k == "max_tokens") c.max_tokens = I();
        else if (k == "loops") c.loops = I();
        else if (k == "temperature") c.temperature = F();
        else if (k == "top_k") c.top_k = I();
        else if (k == "top_p") c.top_p = F();
        else if (k == "min_p") c.min_p = F();
        else if (k == "cache_window") c.cache_window = I();
        else if (k == "repetition_penalty") c.repetition_penalty = F();
        else if (k == "frequency_penalty") c.frequency_penalty = F();
        else if (k == "presence_penalty") c.presence_penalty = F();
        else if (k == "logit_bias") {
            c.logit_bias.clear();
            for (const auto& p : v) {
                long long id = 0;
                asInteger(p[0], &id);
                c.logit_bias.emplace_back(static_cast<int32_t>(id), p[1].get<float>());
            }
        } else if (k == "stop_sequences" || k == "bad_words") {
            auto& lists = k == "bad_words" ? c.bad_words : c.stop_sequences;
            lists.clear();
            for (const auto& s : v) {
                std::vector<int32_t> ids;
                for (const auto& x : s) {
                    long long id = 0;
                    asInteger(x, &id);
                    ids.push_back(static_cast<int32_t>(id));
                }
                lists.push_back(ids);
            }
        } else if (k == "stop_strings") c.stop_strings = v.get<std::vector<std::string>>();
        else if (k == "ignore_eos") c.ignore_eos = v.get<bool>();
        else if (k == "max_time") c.max_time = v.get<double>();
        else if (k == "no_repeat_ngram_size") c.no_repeat_ngram_size = I();
        else if (k == "beam_size") c.beam_size = I();
        else if (k == "length_penalty") c.length_penalty = F();
        else if (k == "early_exit_patience") c.early_exit_patience = I();
        else if (k == "early_exit_min_L") c.early_exit_min_L = I();
        else if (k == "early_exit_peek_every") c.early_exit_peek_every = I();
        else if (k == "early_exit_logit_margin") c.early_exit_logit_margin = F();
        else if (k == "early_exit_criterion") parseCriterion(v.get<std::string>(), &c.early_exit_criterion);
        else if (k == "kv_cache") c.kv_cache = tinyloop::parse_kv_cache_type(v.get<std::string>());
        else if (k == "early_exit_threshold") c.early_exit_threshold = F();
        else if (k == "sample_seed") c.sample_seed = v.get<uint64_t>();
    }
    return c;
}

json knobsToJson(const SpeculativeKnobs& k) {
    return json{{"draft_loops", k.draft_loops}, {"verify_loops", k.verify_loops},
                {"draft_ahead", k.draft_ahead}, {"K_branches", k.K_branches}};
}

SpeculativeKnobs knobsFromJson(const json& j, const ConfigLimits& lim, const std::string& where) {
    if (!j.is_object()) throw ConfigError(where.empty() ? "speculative" : where.substr(0, where.size() - 1), "expected a JSON object");
    SpeculativeKnobs k;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const FieldInfo* f = findField(it.key());
        if (!f || !f->speculative) throw ConfigError(where + it.key(), "unknown field");
        std::string e = checkField(it.key(), it.value(), lim);
        if (!e.empty()) throw ConfigError(where + it.key(), e);
        long long x = 0;
        asInteger(it.value(), &x);
        if (it.key() == "draft_loops") k.draft_loops = int(x);
        else if (it.key() == "verify_loops") k.verify_loops = int(x);
        else if (it.key() == "draft_ahead") k.draft_ahead = int(x);
        else if (it.key() == "K_branches") k.K_branches = int(x);
    }
    return k;
}

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
        s += std::to_string(v[i].first) + ":" + fmt(v[i].second);
    }
    return s;
}

std::string stringsToText(const std::vector<std::string>& v) {
    return v.empty() ? std::string() : json(v).dump();
}

json idListsFromText(const std::string& key, const std::string& text) {
    json out = json::array();
    std::stringstream all(text);
    std::string part;
    int idx = 0;
    while (std::getline(all, part, ';')) {
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
                throw ConfigError(key, "[" + std::to_string(idx) + "]: '" + tok + "' is not a token id");
            }
        }
        if (ids.empty()) {
            // "a;" or an all-blank text: trailing separators are tolerated, inner empties are not
            if (all.eof() || part.find_first_not_of(" \t") == std::string::npos) {
                if (!all.eof()) throw ConfigError(key, "[" + std::to_string(idx) + "]: must not be empty");
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

bool configsEqual(const GenerateConfig& a, const GenerateConfig& b) {
    return configToJson(a) == configToJson(b);
}

}  // namespace tlui
