// The JSON codec's config half: the GenerateConfig field table (one line a field), the config,
// speculation knobs and run specification to and from JSON (tinyloop/json.h).
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <optional>
#include <utility>

#include "tinyloop/json.h"

namespace tinyloop {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& why) {
    throw Error(ErrorCode::InvalidArgument, field + ": " + why);
}

bool as_integer(const json& v, long long* out) {
    if (v.is_number_integer()) {
        if (v.is_number_unsigned() && v.get<unsigned long long>() > static_cast<unsigned long long>(LLONG_MAX))
            return false;
        *out = v.get<long long>();
        return true;
    }
    if (v.is_number_float()) {
        const double d = v.get<double>();
        if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15) {
            *out = static_cast<long long>(d);
            return true;
        }
    }
    return false;
}

int32_t int_value(const json& v, const std::string& f, long long lo = INT32_MIN, long long hi = INT32_MAX) {
    long long x = 0;
    if (!as_integer(v, &x)) bad(f, "expected an integer, got " + v.dump());
    if (x < lo || x > hi) bad(f, std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return static_cast<int32_t>(x);
}

double double_value(const json& v, const std::string& f) {
    if (!v.is_number()) bad(f, "expected a number, got " + v.dump());
    return v.get<double>();
}

float float_value(const json& v, const std::string& f) {
    const double d = double_value(v, f);
    if (std::fabs(d) > FLT_MAX) bad(f, v.dump() + " is outside the float range");
    return static_cast<float>(d);
}

// ---- one overload per member type: to JSON and from JSON ----

json to_j(int x) { return x; }
json to_j(float x) { return json_float(x); }
json to_j(double x) { return x; }
json to_j(bool x) { return x; }
json to_j(uint64_t x) { return x; }
json to_j(const std::vector<std::vector<int32_t>>& x) { return x; }
json to_j(const std::vector<std::string>& x) { return x; }
json to_j(const std::vector<int32_t>& x) { return x; }
json to_j(const std::optional<std::pair<int, float>>& x) {
    return x ? json::array({x->first, json_float(x->second)}) : json(nullptr);
}
// HF's force_words_ids: a word of one alternative as [ids], alternatives as [[ids], [ids], ...].
json to_j(const std::vector<std::vector<std::vector<int32_t>>>& x) {
    json a = json::array();
    for (const auto& alts : x) a.push_back(alts.size() == 1 ? json(alts[0]) : json(alts));
    return a;
}
json to_j(EarlyExitCriterion x) { return criterion_name(x); }
json to_j(KVCacheType x) { return kv_cache_type_name(x); }
json to_j(const KVSharing& x) { return kv_sharing_name(x); }
// Hugging Face's spelling: false (Heuristic), true (WhenFull) or "never".
json to_j(EarlyStopping x) { return x == EarlyStopping::Never ? json("never") : json(x == EarlyStopping::WhenFull); }
json to_j(Grammar*) { return nullptr; }
json to_j(const std::vector<std::pair<int32_t, float>>& x) {
    json a = json::array();
    for (const auto& [id, b] : x) a.push_back(json::array({id, json_float(b)}));
    return a;
}

void from_j(const json& v, int& x, const std::string& f) { x = int_value(v, f); }
void from_j(const json& v, float& x, const std::string& f) { x = float_value(v, f); }
void from_j(const json& v, double& x, const std::string& f) { x = double_value(v, f); }
void from_j(const json& v, bool& x, const std::string& f) {
    if (!v.is_boolean()) bad(f, "expected true or false, got " + v.dump());
    x = v.get<bool>();
}
void from_j(const json& v, uint64_t& x, const std::string& f) {
    long long i = 0;
    if (v.is_number_unsigned()) x = v.get<uint64_t>();
    else if (as_integer(v, &i) && i >= 0) x = static_cast<uint64_t>(i);
    else bad(f, "expected an integer in [0, 2^64-1], got " + v.dump());
}
void from_j(const json& v, std::vector<std::vector<int32_t>>& x, const std::string& f) {
    if (!v.is_array()) bad(f, "expected an array of arrays of token ids");
    x.clear();
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string fi = f + "[" + std::to_string(i) + "]";
        if (!v[i].is_array()) bad(fi, "expected an array of token ids");
        std::vector<int32_t> ids;
        for (size_t k = 0; k < v[i].size(); ++k) ids.push_back(int_value(v[i][k], fi + "[" + std::to_string(k) + "]"));
        x.push_back(std::move(ids));
    }
}
void from_j(const json& v, std::vector<int32_t>& x, const std::string& f) {
    if (!v.is_array()) bad(f, "expected an array of token ids");
    x.clear();
    for (size_t i = 0; i < v.size(); ++i) x.push_back(int_value(v[i], f + "[" + std::to_string(i) + "]"));
}
void from_j(const json& v, std::optional<std::pair<int, float>>& x, const std::string& f) {
    if (v.is_null()) {
        x.reset();
        return;
    }
    if (!v.is_array() || v.size() != 2) bad(f, "expected null or a [start_index, decay_factor] pair, got " + v.dump());
    x.emplace(int_value(v[0], f + ": start_index"), float_value(v[1], f + ": decay_factor"));
}
void from_j(const json& v, std::vector<std::vector<std::vector<int32_t>>>& x, const std::string& f) {
    if (!v.is_array()) bad(f, "expected an array whose entries are [token ids] or [[token ids], [token ids], ...]");
    x.clear();
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string fi = f + "[" + std::to_string(i) + "]";
        const json& w = v[i];
        if (!w.is_array()) bad(fi, "expected [token ids] or [[token ids], [token ids], ...]");
        std::vector<std::vector<int32_t>> alts;
        if (!w.empty() && w[0].is_array()) {
            from_j(w, alts, fi);
        } else {
            alts.emplace_back();
            for (size_t k = 0; k < w.size(); ++k) alts[0].push_back(int_value(w[k], fi + "[" + std::to_string(k) + "]"));
        }
        x.push_back(std::move(alts));
    }
}
void from_j(const json& v, std::vector<std::string>& x, const std::string& f) {
    if (!v.is_array()) bad(f, "expected an array of strings");
    x.clear();
    for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string()) bad(f + "[" + std::to_string(i) + "]", "expected a string");
        x.push_back(v[i].get<std::string>());
    }
}
void from_j(const json& v, std::vector<std::pair<int32_t, float>>& x, const std::string& f) {
    if (!v.is_array()) bad(f, "expected an array of [token id, bias] pairs");
    x.clear();
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string fi = f + "[" + std::to_string(i) + "]";
        if (!v[i].is_array() || v[i].size() != 2) bad(fi, "expected a [token id, bias] pair");
        x.emplace_back(int_value(v[i][0], fi + ": token id"), float_value(v[i][1], fi + ": bias"));
    }
}
void from_j(const json& v, EarlyExitCriterion& x, const std::string& f) {
    if (!v.is_string() || !parse_criterion(v.get<std::string>(), &x))
        bad(f, v.dump() + " is not one of hidden_l2, logit_margin, kl, entropy_delta, argmax_stable, gate_stop, "
                          "gate_select, reverse_kl, minp_kl");
}
void from_j(const json& v, KVCacheType& x, const std::string& f) {
    if (!v.is_string() || (v.get<std::string>() != "f32" && v.get<std::string>() != "int8"))
        bad(f, v.dump() + " is not one of f32, int8");
    x = parse_kv_cache_type(v.get<std::string>());
}
void from_j(const json& v, KVSharing& x, const std::string& f) {
    if (!v.is_string()) bad(f, v.dump() + " is not one of per-pass, last-pass, latest-m4, compress-s{k} with k in [1, 1024]");
    try {
        x = parse_kv_sharing(v.get<std::string>());
    } catch (const Error& e) {
        // parse_kv_sharing names the field "kv_sharing: "; keep the caller's path (config.kv_sharing)
        const std::string msg = e.what();
        bad(f, msg.substr(msg.find(": ") + 2));
    }
}
void from_j(const json& v, EarlyStopping& x, const std::string& f) {
    if (v.is_boolean()) x = v.get<bool>() ? EarlyStopping::WhenFull : EarlyStopping::Heuristic;
    else if (v == "never") x = EarlyStopping::Never;
    else bad(f, v.dump() + " is not one of false, true, \"never\"");
}
void from_j(const json& v, Grammar*&, const std::string& f) {
    if (!v.is_null()) bad(f, "a grammar is given as a file (grammar_file), not inside the config");
}

struct FieldCodec {
    ConfigField info;
    json (*get)(const GenerateConfig&);
    void (*set)(GenerateConfig&, const json&, const std::string&);
};

template <auto Member>
FieldCodec field(const char* key, ConfigFieldKind kind, const char* range, const char* help) {
    return {{key, kind, range, help},
            [](const GenerateConfig& c) { return to_j(c.*Member); },
            [](GenerateConfig& c, const json& v, const std::string& f) { from_j(v, c.*Member, f); }};
}

// A field of the config's early-exit policy, under its flat key ("early_exit_patience").
template <auto Member>
FieldCodec exit_field(const char* key, ConfigFieldKind kind, const char* range, const char* help) {
    return {{key, kind, range, help},
            [](const GenerateConfig& c) { return to_j(c.early_exit.*Member); },
            [](GenerateConfig& c, const json& v, const std::string& f) { from_j(v, c.early_exit.*Member, f); }};
}

using K = ConfigFieldKind;
using C = GenerateConfig;

// The one list of GenerateConfig fields: key, kind, range, the seed's description.
const std::vector<FieldCodec>& codecs() {
    static const std::vector<FieldCodec> v = {
        field<&C::max_tokens>("max_tokens", K::Int, "0 .. max_seq_len - prompt", "Upper bound on emitted tokens (excludes the prompt). Default 64."),
        field<&C::loops>("loops", K::Int, "0 .. max_loops (0 = model default)", "Loop depth. Set explicitly to override the checkpoint's trained default (0 = model.default_loops)."),
        field<&C::temperature>("temperature", K::Float, ">= 0", "Softmax temperature. 0.0 (or <= 0.01) means greedy argmax. Must be >= 0."),
        field<&C::top_k>("top_k", K::Int, "1 .. vocab", "Retain top-k tokens before sampling. Must be >= 1 when sampling is active. Ignored when temperature == 0."),
        field<&C::top_p>("top_p", K::Float, "(0, 1]", "Nucleus sampling threshold. 1.0 disables. Applied after top_k."),
        field<&C::min_p>("min_p", K::Float, "[0, 1]", "Drop tokens whose probability is below min_p times the top probability. 0 disables."),
        field<&C::cache_window>("cache_window", K::Int, ">= 0 (0 = unlimited)", "Sliding-window cap on KV cache. 0 means unlimited (bounded by max_seq_len)."),
        field<&C::repetition_penalty>("repetition_penalty", K::Float, "> 0 (1 disables)", "HuggingFace-convention penalty applied before temperature/top-k/top-p. 1.0 disables."),
        field<&C::frequency_penalty>("frequency_penalty", K::Float, "[-2, 2]", "Subtracts penalty x (times the token was emitted) from its logit. 0 disables."),
        field<&C::presence_penalty>("presence_penalty", K::Float, "[-2, 2]", "Subtracts penalty from the logit of every token already emitted. 0 disables."),
        field<&C::logit_bias>("logit_bias", K::Bias, "id:bias, bias in [-100, 100]", "Added to the logits before the penalties (Hugging Face's sequence_bias order), e.g. \"256:-100, 32:1.5\"."),
        field<&C::stop_sequences>("stop_sequences", K::IdLists, "ids; ids; ...", "Token-id sequences that terminate decode when matched at the tail of emitted output. Matching tokens are included in the returned stream. Format: \"13; 198 198\"."),
        field<&C::stop_strings>("stop_strings", K::Strings, "JSON array of strings", "Text that terminates decode when it appears; excluded from the text. Format: [\"\\n\\n\", \"Amen\"]."),
        field<&C::ignore_eos>("ignore_eos", K::Bool, "", "Keep going past the model's EOS token."),
        field<&C::max_time>("max_time", K::Float, ">= 0 s (0 = no limit)", "Seconds of wall clock for the call; the run stops with MAX_TIME when it is spent. 0 = no limit."),
        field<&C::no_repeat_ngram_size>("no_repeat_ngram_size", K::Int, ">= 0 (0 disables)", "n > 0 bans a token that would repeat an n-gram of prompt + emitted (Hugging Face convention)."),
        field<&C::bad_words>("bad_words", K::IdLists, "ids; ids; ...", "Token sequences that are never emitted (each non-empty). Format: \"256; 10 10\"."),
        field<&C::beam_size>("beam_size", K::Int, "0 .. 64", "0 or 1 = standard sampling. >= 2 switches to deterministic beam search; sampling knobs are then ignored."),
        field<&C::length_penalty>("length_penalty", K::Float, "beam only (1 otherwise)", "Beam-search only. Ranks beams by log_prob / max(1, len)^length_penalty."),
        field<&C::early_stopping>("early_stopping", K::EarlyStopping, "false | true | never (beam only)", "Hugging Face's early_stopping. true: the search ends when beam_size hypotheses have finished; false (default): also when the best live beam, scored at its current length, cannot beat the worst of them; never: only when no live beam can."),
        field<&C::renormalize_logits>("renormalize_logits", K::Bool, "beam only", "Beam-search only: log-softmax the scores again after the penalties and bans (Hugging Face's renormalize_logits)."),
        field<&C::min_new_tokens>("min_new_tokens", K::Int, "0 .. max_seq_len (0 disables)", "EOS is banned until this many tokens have been emitted (Hugging Face's min_new_tokens)."),
        field<&C::min_length>("min_length", K::Int, "0 .. max_seq_len (0 disables)", "EOS is banned until prompt + emitted hold this many tokens (Hugging Face's min_length)."),
        field<&C::forced_eos_token_id>("forced_eos_token_id", K::Int, "-1 (off) or 0 .. vocab - 1", "The only token allowed as the last allowed new token (emitted == max_tokens - 1), Hugging Face's forced_eos_token_id. -1 disables."),
        field<&C::exponential_decay_length_penalty>("exponential_decay_length_penalty", K::LengthDecay, "start_index, decay_factor (0, 10]; empty = off", "Hugging Face's exponential_decay_length_penalty: once more than start_index tokens were emitted, EOS's score s becomes s + |s| x (decay_factor^(emitted - start_index) - 1). Format: \"10, 1.05\"."),
        field<&C::suppress_tokens>("suppress_tokens", K::Ids, "ids in 0 .. vocab - 1", "Token ids never emitted (Hugging Face's suppress_tokens). Format: \"256 10\"."),
        field<&C::begin_suppress_tokens>("begin_suppress_tokens", K::Ids, "ids in 0 .. vocab - 1", "Token ids banned for the first emitted token only (Hugging Face's begin_suppress_tokens). Format: \"2047 10\"."),
        field<&C::typical_p>("typical_p", K::Float, "(0, 1]", "Sampling only: keep the most locally typical tokens (closest to the distribution's entropy) up to this mass (Hugging Face's typical_p). 1 disables."),
        field<&C::epsilon_cutoff>("epsilon_cutoff", K::Float, "[0, 1)", "Sampling only: drop tokens whose probability is below this (the most probable stays; Hugging Face's epsilon_cutoff). 0 disables."),
        field<&C::eta_cutoff>("eta_cutoff", K::Float, "[0, 1)", "Sampling only: drop tokens whose probability is below min(eta, sqrt(eta) x exp(-entropy)) (Hugging Face's eta_cutoff). 0 disables."),
        field<&C::num_return_sequences>("num_return_sequences", K::Int, "1 .. 64 (beam: <= beam_size)", "How many outputs (Hugging Face's num_return_sequences): beam search returns its best N hypotheses, sampling N independent draws (sequence i seeded sample_seed + i). Greedy has one."),
        field<&C::num_beam_groups>("num_beam_groups", K::Int, "1 .. beam_size, dividing it (beam only)", "Diverse beam search (Hugging Face's num_beam_groups): the beams split into groups of beam_size / num_beam_groups, each a beam search of its own. 1 = plain beam search."),
        field<&C::diversity_penalty>("diversity_penalty", K::Float, "[0, 100] (needs num_beam_groups >= 2)", "Group beam search only: a group's score for an id loses diversity_penalty times how many beams of the earlier groups chose it at this step (Hugging Face's Hamming diversity). 0 disables."),
        field<&C::force_words>("force_words", K::WordLists, "ids; ids | ids; ... (beam only)", "Constrained beam search (Hugging Face's force_words_ids): each entry must appear in the output; \"a | b\" is fulfilled by either alternative. Format: \"259; 44 269 | 312\"."),
        exit_field<&EarlyExitPolicy::patience>("early_exit_patience", K::Int, ">= 0 (0 disables)", "0 disables adaptive-depth early exit. >0 enables: exit after patience consecutive stable probes past min_L."),
        exit_field<&EarlyExitPolicy::min_L>("early_exit_min_L", K::Int, "1 .. max_loops", "First-probe floor for early exit."),
        exit_field<&EarlyExitPolicy::peek_every>("early_exit_peek_every", K::Int, ">= 1", "Probe cadence past min_L."),
        exit_field<&EarlyExitPolicy::logit_margin>("early_exit_logit_margin", K::Float, ">= 0", ">0 switches from hidden-L2 to logit-margin stability. Empirically the right signal for high-beta models."),
        exit_field<&EarlyExitPolicy::criterion>("early_exit_criterion", K::Criterion, "", "Stability signal for early exit: hidden-state L2 change (the seed's default), logit margin, KL, entropy change or argmax stability."),
        exit_field<&EarlyExitPolicy::threshold>("early_exit_threshold", K::Float, "> 0", "Threshold the chosen early-exit criterion is compared with."),
        field<&C::sample_seed>("sample_seed", K::U64, "0 .. 2^64-1", "RNG seed for stochastic sampling. Deterministic given seed + config + model."),
        field<&C::kv_cache>("kv_cache", K::KvCache, "f32 | int8", "Layout of the KV cache: f32 (exact) or int8 (one byte per element plus a scale per row and head: about 3.8x less KV memory, logits within about 1% of their span of f32's). Used by plain decode, beam search, early exit and draft-model speculation; chain and tree self-speculation keep f32."),
        field<&C::kv_sharing>("kv_sharing", K::KvSharing, "per-pass | last-pass | latest-m4 | compress-s{k}, k 1 .. 1024", "How a position's keys and values are kept across passes (FORMAT.md §1c): per-pass (exact, one entry per pass and layer), last-pass (Ouro: generated tokens keep one entry per layer, the last pass's; the prompt stays per-pass), latest-m4 (Huginn: an early-exited token is read at its exit pass), compress-s{k} (Huginn: k ring slots per position). Plain decoding and early exit only."),
        field<&C::grammar>("grammar", K::Grammar, "a .gbnf file, or empty", "Optional constrained-decoding grammar (GBNF: rules name ::= ..., start rule root). A token is allowed when its bytes keep the output inside the grammar; when nothing is allowed the run stops with GRAMMAR_DEAD_END."),
    };
    return v;
}

const FieldCodec* find_codec(const std::string& key) {
    for (const auto& f : codecs())
        if (key == f.info.key) return &f;
    return nullptr;
}

// Runs `check`, prefixing the field named in its error with `where`.
template <class F>
void with_prefix(const std::string& where, F&& check) {
    try {
        check();
    } catch (const Error& e) {
        if (where.empty()) throw;
        throw Error(e.code(), where + e.what());
    }
}

std::string object_name(const std::string& where, const char* fallback) {
    return where.empty() ? fallback : where.substr(0, where.size() - 1);
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
    static const std::vector<ConfigField> v = [] {
        std::vector<ConfigField> out;
        for (const auto& f : codecs()) out.push_back(f.info);
        return out;
    }();
    return v;
}

const ConfigField* find_config_field(const std::string& key) {
    for (const auto& f : config_fields())
        if (key == f.key) return &f;
    return nullptr;
}

namespace {
struct CriterionName {
    const char* name;
    EarlyExitCriterion c;
};
// The canonical names first, then the CLI's short ones.
const CriterionName kCriteria[] = {
    {"hidden_l2", EarlyExitCriterion::HiddenL2}, {"logit_margin", EarlyExitCriterion::LogitMargin},
    {"kl", EarlyExitCriterion::KL},              {"entropy_delta", EarlyExitCriterion::EntropyDelta},
    {"argmax_stable", EarlyExitCriterion::ArgmaxStable},
    {"gate_stop", EarlyExitCriterion::GateStop}, {"gate_select", EarlyExitCriterion::GateSelect},
    {"reverse_kl", EarlyExitCriterion::ReverseKL}, {"minp_kl", EarlyExitCriterion::MinPKL},
    {"l2", EarlyExitCriterion::HiddenL2},
    {"margin", EarlyExitCriterion::LogitMargin}, {"entropy", EarlyExitCriterion::EntropyDelta},
    {"argmax", EarlyExitCriterion::ArgmaxStable}, {"gate", EarlyExitCriterion::GateStop},
};
}  // namespace

const char* criterion_name(EarlyExitCriterion c) {
    for (const auto& k : kCriteria)
        if (k.c == c) return k.name;
    return "?";
}

const char* criterion_short_name(EarlyExitCriterion c) {
    const char* name = "?";
    for (const auto& k : kCriteria)  // the short names follow the canonical ones: the last match
        if (k.c == c) name = k.name;
    return name;
}

bool parse_criterion(const std::string& name, EarlyExitCriterion* out) {
    for (const auto& k : kCriteria)
        if (name == k.name) {
            *out = k.c;
            return true;
        }
    return false;
}

json config_to_json(const GenerateConfig& c) {
    json j = json::object();
    for (const auto& f : codecs()) j[f.info.key] = f.get(c);
    return j;
}

namespace {
bool read_early_exit_key(EarlyExitPolicy& p, const std::string& key, const json& v, const std::string& f,
                         const ConfigLimits& limits, int min_patience);

// The other names a config's JSON may hold for a field, read on input only and never written
// (README "JSON names"): the CLI flags' names, which its --json echo wrote beside the codec's
// before it wrote each field once.
const std::pair<const char*, const char*> kConfigAliases[] = {
    {"seed", "sample_seed"},
    {"stop", "stop_strings"},
    {"stop_ids", "stop_sequences"},
    {"no_repeat_ngram", "no_repeat_ngram_size"},
};
}  // namespace

void set_config_field(GenerateConfig& c, const std::string& key, const json& value, const std::string& where) {
    if (key == "early_exit") {
        // the policy as an object (the old echo's form; its "min_l" too): each key sets its field;
        // ranges are validate_config_fields'
        if (!value.is_object()) bad(where + key, "expected a JSON object");
        for (auto it = value.begin(); it != value.end(); ++it) {
            const std::string k = it.key() == "min_l" ? "min_L" : it.key();
            if (!read_early_exit_key(c.early_exit, k, it.value(), where + key + "." + it.key(), ConfigLimits{}, 0))
                bad(where + key + "." + it.key(),
                    "unknown key (allowed: criterion, threshold, patience, min_L, peek_every, logit_margin)");
        }
        return;
    }
    std::string name = key;
    for (const auto& [alias, canonical] : kConfigAliases)
        if (key == alias) name = canonical;
    const FieldCodec* f = find_codec(name);
    if (!f) bad(where + key, "unknown field");
    f->set(c, value, where + key);
}

GenerateConfig config_from_json(const json& j, const ConfigLimits& limits, const std::string& where,
                                const GenerateConfig& base) {
    if (!j.is_object()) bad(object_name(where, "config"), "expected a JSON object");
    GenerateConfig c = base;
    for (auto it = j.begin(); it != j.end(); ++it) set_config_field(c, it.key(), it.value(), where);
    with_prefix(where, [&] { validate_config_fields(c, limits); });
    return c;
}

// ---- the early-exit policy ----

namespace {
// One key of the policy's JSON form into `p`; false for a key that is not the policy's.
bool read_early_exit_key(EarlyExitPolicy& p, const std::string& key, const json& v, const std::string& f,
                         const ConfigLimits& limits, int min_patience) {
    if (key == "criterion") from_j(v, p.criterion, f);
    else if (key == "patience") p.patience = int_value(v, f, min_patience, 16);
    else if (key == "min_L") p.min_L = int_value(v, f, 1, limits.max_loops);
    else if (key == "peek_every") p.peek_every = int_value(v, f, 1, limits.max_loops);
    else if (key == "threshold") {
        p.threshold = float_value(v, f);
        if (!(p.threshold > 0.0f)) bad(f, v.dump() + " is outside (0, 3.4e38]");
    } else if (key == "logit_margin") {
        p.logit_margin = float_value(v, f);
        if (!(p.logit_margin >= 0.0f)) bad(f, v.dump() + " is outside [0, 3.4e38]");
    } else return false;
    return true;
}
}  // namespace

json early_exit_policy_to_json(const EarlyExitPolicy& p) {
    json j{{"criterion", criterion_name(p.criterion)},
           {"threshold", json_float(p.threshold)},
           {"patience", p.patience},
           {"min_L", p.min_L},
           {"peek_every", p.peek_every}};
    if (p.logit_margin > 0) j["logit_margin"] = json_float(p.logit_margin);  // the seed's shorthand, when used
    return j;
}

EarlyExitPolicy early_exit_policy_from_json(const json& j, const ConfigLimits& limits, const std::string& where) {
    if (!j.is_object()) bad(object_name(where, "early_exit"), "expected a JSON object");
    EarlyExitPolicy p;
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!read_early_exit_key(p, it.key(), it.value(), where + it.key(), limits, 0))
            bad(where + it.key(), "unknown key (allowed: criterion, threshold, patience, min_L, peek_every, logit_margin)");
    validate_early_exit(p, limits.max_loops, where);
    return p;
}

// ---- speculation knobs and the run specification ----

void validate_speculation(const SpeculationPolicy& k, const ConfigLimits& limits) {
    auto in = [](const char* f, int x, int lo, int hi, const char* note) {
        if (x < lo || x > hi)
            bad(f, std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]" + note);
    };
    in("verify_loops", k.verify_loops, 0, limits.max_loops, " (0 = the config's loops)");
    in("draft_loops", k.draft_loops, 0, limits.max_loops, " (0 = the mode's default)");
    in("draft_ahead", k.draft_ahead, 0, 32, " (tree: 1 .. 8; 0 = the model's recommendation, else 4)");
    in("branches", k.branches, 0, 8, " (0 = the model's recommendation, else 2)");
    in("gamma", k.gamma, 1, 32, "");
}

json speculation_to_json(const SpeculationPolicy& k) {
    json j{{"verify_loops", k.verify_loops}, {"draft_loops", k.draft_loops}, {"gamma", k.gamma}};
    if (k.draft_ahead > 0) j["draft_ahead"] = k.draft_ahead;  // unset: left out, read back as unset
    if (k.branches > 0) j["branches"] = k.branches;
    return j;
}

SpeculationPolicy speculation_from_json(const json& j, const ConfigLimits& limits, const std::string& where) {
    if (!j.is_object()) bad(object_name(where, "speculation"), "expected a JSON object");
    SpeculationPolicy k;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& key = it.key();
        int* slot = key == "verify_loops" ? &k.verify_loops
                    : key == "draft_loops" ? &k.draft_loops
                    : key == "draft_ahead" ? &k.draft_ahead
                    : key == "branches" || key == "K_branches" ? &k.branches
                    : key == "gamma" ? &k.gamma
                                     : nullptr;
        if (!slot) bad(where + key, "unknown field");
        *slot = int_value(it.value(), where + key);
        // A knob written is a value; 0 ("the model's recommendation") is what an absent knob means.
        if ((slot == &k.draft_ahead || slot == &k.branches) && *slot == 0)
            bad(where + key, std::string("0 is outside [1, ") + (slot == &k.branches ? "8" : "32") +
                                 "] (leave the knob out for the model's recommendation)");
    }
    with_prefix(where, [&] { validate_speculation(k, limits); });
    return k;
}

bool parse_decode_mode(const std::string& name, DecodeMode* out) {
    for (DecodeMode m : {DecodeMode::Greedy, DecodeMode::Sample, DecodeMode::EarlyExit, DecodeMode::Beam,
                         DecodeMode::Speculative, DecodeMode::Tree, DecodeMode::DraftModel, DecodeMode::Pipelined})
        if (name == decode_mode_name(m)) {
            *out = m;
            return true;
        }
    // The aliases, accepted on input only (every writer uses decode_mode_name's names).
    static const std::pair<const char*, DecodeMode> kAliases[] = {
        {"sampling", DecodeMode::Sample},         {"early_exit", DecodeMode::EarlyExit},
        {"chain", DecodeMode::Speculative},       {"draft_model", DecodeMode::DraftModel},
        {"draft", DecodeMode::DraftModel},
    };
    for (const auto& [alias, m] : kAliases)
        if (name == alias) {
            *out = m;
            return true;
        }
    return false;
}

const char* speculation_kind_name(SpeculationKind kind) {
    switch (kind) {
        case SpeculationKind::None: return "none";
        case SpeculationKind::Chain: return "chain";
        case SpeculationKind::Tree: return "tree";
        case SpeculationKind::DraftModel: return "draft-model";
    }
    return "?";
}

json run_spec_to_json(const RunSpec& spec) {
    return json{{"mode", decode_mode_name(spec.mode)},
                {"config", config_to_json(spec.config)},
                {"speculation", speculation_to_json(spec.speculation)}};
}

RunSpec run_spec_from_json(const json& j, const ConfigLimits& limits) {
    if (!j.is_object()) bad("run", "expected a JSON object");
    RunSpec spec;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& key = it.key();
        if (key == "mode") {
            if (!it->is_string() || !parse_decode_mode(it->get<std::string>(), &spec.mode))
                bad("mode", it->dump() + " is not one of greedy, sample, early-exit, beam, speculative, tree, draft-model");
        } else if (key == "config") {
            spec.config = config_from_json(*it, limits, "config.");
        } else if (key == "speculation") {
            spec.speculation = speculation_from_json(*it, limits, "speculation.");
        } else {
            bad(key, "unknown field");
        }
    }
    return spec;
}

// ---- the model's recommended settings ----

json recommendation_to_json(const Recommendation& r) {
    json j = json::object();
    if (r.has_speculation()) {
        // the file's form (FORMAT.md §2): one draft depth for both kinds
        if (r.chain.draft_loops > 0 && r.tree.draft_loops > 0 && r.chain.draft_loops != r.tree.draft_loops)
            bad("speculation.draft_loops", "chain's " + std::to_string(r.chain.draft_loops) + " and tree's " +
                                               std::to_string(r.tree.draft_loops) + " differ (the file holds one draft depth)");
        json sp = json::object();
        const int draft_loops = std::max(r.chain.draft_loops, r.tree.draft_loops);
        if (draft_loops > 0) sp["draft_loops"] = draft_loops;
        if (r.chain.draft_ahead > 0) sp["draft_ahead"] = r.chain.draft_ahead;
        if (r.tree.draft_ahead > 0) sp["tree_draft_ahead"] = r.tree.draft_ahead;
        if (r.tree.branches > 0) sp["branches"] = r.tree.branches;
        j["speculation"] = std::move(sp);
    }
    if (r.has_early_exit()) {
        j["early_exit"] = early_exit_policy_to_json(r.early_exit);
        if (r.early_exit_loops > 0) j["early_exit"]["loops"] = r.early_exit_loops;
    }
    return j;
}

Recommendation recommendation_from_json(const json& j, const ConfigLimits& limits, const std::string& where) {
    if (!j.is_object()) bad(object_name(where, "recommended"), "expected a JSON object");
    Recommendation r;
    auto read_part = [&](const char* part, auto&& read_key) {
        const auto it = j.find(part);
        if (it == j.end()) return;
        const std::string at = where + part + ".";
        if (!it->is_object()) bad(at.substr(0, at.size() - 1), "expected a JSON object");
        for (auto k = it->begin(); k != it->end(); ++k) read_key(k.key(), k.value(), at + k.key());
    };
    for (auto it = j.begin(); it != j.end(); ++it)
        if (it.key() != "speculation" && it.key() != "early_exit" && it.key() != "measured" && it.key() != "found_by")
            bad(where + it.key(), "unknown key (allowed: speculation, early_exit, measured, found_by)");
    read_part("speculation", [&](const std::string& key, const json& v, const std::string& f) {
        if (key == "draft_loops") r.set_draft_loops(int_value(v, f, 1, std::max(1, limits.max_loops - 1)));
        else if (key == "draft_ahead") r.chain.draft_ahead = int_value(v, f, 1, 32);
        else if (key == "tree_draft_ahead") r.tree.draft_ahead = int_value(v, f, 1, 8);
        else if (key == "branches") r.tree.branches = int_value(v, f, 1, 8);
        else bad(f, "unknown key (allowed: draft_loops, draft_ahead, tree_draft_ahead, branches)");
    });
    bool has_early_exit = false;
    std::optional<EarlyExitCriterion> cli_criterion;
    read_part("early_exit", [&](const std::string& key, const json& v, const std::string& f) {
        has_early_exit = true;
        // the policy's own form (early_exit_policy_to_json) but the seed's shorthand, plus two records
        if (key != "logit_margin" && read_early_exit_key(r.early_exit, key, v, f, limits, 1)) return;
        if (key == "loops") r.early_exit_loops = int_value(v, f, 1, limits.max_loops);
        else if (key == "cli") {  // the CLI's name of the criterion, as a record: it must name the same one
            EarlyExitCriterion c{};
            if (!v.is_string() || !parse_criterion(v.get<std::string>(), &c)) bad(f, v.dump() + " is not a criterion name");
            cli_criterion = c;
        } else {
            bad(f, "unknown key (allowed: criterion, threshold, patience, min_L, peek_every, loops, cli)");
        }
    });
    if (cli_criterion && *cli_criterion != r.early_exit.criterion)
        bad(where + "early_exit.cli", std::string("names another criterion than early_exit.criterion (") +
                                          criterion_name(r.early_exit.criterion) + ")");
    // A policy without a patience is still a policy: exit after one stable probe.
    if (has_early_exit && r.early_exit.patience == 0) r.early_exit.patience = 1;
    return r;
}

}  // namespace tinyloop
