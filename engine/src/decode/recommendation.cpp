// The model's recommended settings as defaults: "the user's value, else the model's
// recommendation, else the built-in default" (run_spec.h), in one place for every front end.
#include <algorithm>
#include <optional>

#include "model/model.h"
#include "tinyloop/json.h"
#include "tinyloop/mode_rules.h"

namespace tinyloop {

namespace {

bool user_set(const std::vector<std::string>& keys, const char* key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// The exit gate's threshold an imported checkpoint's own config gives (Ouro's
// early_exit_threshold, kept in metadata.source.config; 1.0 runs every step), if any.
std::optional<float> config_gate_threshold(const Model& m) {
    const nlohmann::json meta = nlohmann::json::parse(m.metadata_json, nullptr, false);
    if (!meta.is_object()) return std::nullopt;
    const auto src = meta.find("source");
    if (src == meta.end() || !src->is_object()) return std::nullopt;
    const auto cfg = src->find("config");
    if (cfg == src->end() || !cfg->is_object()) return std::nullopt;
    const auto q = cfg->find("early_exit_threshold");
    if (q == cfg->end() || !q->is_number()) return std::nullopt;
    const double v = q->get<double>();
    if (!(v > 0.0 && v <= 1.0)) return std::nullopt;  // outside the gate's (0, 1]: not a threshold to use
    return static_cast<float>(v);
}

}  // namespace

const Recommendation& model_recommendation(const Model* model) { return checked(model).recommended; }

Recommendation builtin_early_exit() {
    Recommendation r;
    r.early_exit.patience = 1;
    r.early_exit.criterion = EarlyExitCriterion::HiddenL2;
    r.early_exit.threshold = 0.05f;
    r.early_exit.min_L = 2;
    r.early_exit.peek_every = 1;
    return r;
}

GenerateConfig resolve_early_exit(const Model* model, const GenerateConfig& config,
                                  const std::vector<std::string>& user_keys,
                                  std::vector<std::pair<std::string, std::string>>* source) {
    const Recommendation& rec = model_recommendation(model);
    GenerateConfig c = config;
    const bool user_criterion = user_set(user_keys, "early_exit_criterion");
    // The model's policy holds for its own criterion only: its threshold means nothing for another.
    const bool model_applies = rec.has_early_exit() && (!user_criterion || c.early_exit.criterion == rec.early_exit.criterion);
    const Recommendation& from = model_applies ? rec : builtin_early_exit();
    const char* origin = model_applies ? "model" : "built-in";
    auto pick = [&](const char* key, auto& field, auto value) {
        const bool mine = user_set(user_keys, key);
        if (!mine) field = value;
        if (source) source->emplace_back(key, mine ? "user" : origin);
    };
    pick("early_exit_criterion", c.early_exit.criterion, from.early_exit.criterion);
    // A gate criterion the model has no policy for: its checkpoint's own threshold (the config
    // the file was imported from), not the built-in one, which is another criterion's.
    const std::optional<float> config_q =
        !model_applies && is_gate_criterion(c.early_exit.criterion) ? config_gate_threshold(checked(model))
                                                                      : std::nullopt;
    if (config_q && !user_set(user_keys, "early_exit_threshold")) {
        c.early_exit.threshold = *config_q;
        if (source) source->emplace_back("early_exit_threshold", "model");
    } else {
        pick("early_exit_threshold", c.early_exit.threshold, from.early_exit.threshold);
    }
    pick("early_exit_patience", c.early_exit.patience, from.early_exit.patience);
    pick("early_exit_min_L", c.early_exit.min_L, from.early_exit.min_L);
    pick("early_exit_peek_every", c.early_exit.peek_every, from.early_exit.peek_every);
    // A logit margin > 0 switches any criterion to logit_margin (the seed's knob): keep it in step
    // with the threshold for that criterion and off for the others, unless the user set it.
    if (!user_set(user_keys, "early_exit_logit_margin"))
        c.early_exit.logit_margin =
            c.early_exit.criterion == EarlyExitCriterion::LogitMargin ? c.early_exit.threshold : 0.0f;
    return c;
}

GenerateConfig recommended_config(const Model* model) {
    GenerateConfig c = resolve_early_exit(model, GenerateConfig{}, {});
    c.early_exit.patience = 0;  // the policy is ready; early exit stays off until asked for
    c.early_exit.logit_margin = 0.0f;
    return c;
}

ResolvedRun resolve_run(const Model* model, const RunSpec& given, const std::vector<std::string>& user_keys) {
    const HParams& hp = checked(model).hp;
    ResolvedRun out;
    out.spec = given;
    RunSpec& spec = out.spec;
    GenerateConfig& c = spec.config;
    auto mine = [&](const std::string& key) { return user_set(user_keys, key.c_str()); };
    auto note = [&](const std::string& key, const char* decided) {
        out.source.emplace_back(key, mine(key) ? "user" : decided);
    };
    auto refuse = [](const std::string& m) -> void { throw Error(ErrorCode::InvalidArgument, m); };
    const DecodeMode mode = spec.mode;

    if (c.loops < 0 || c.loops > hp.max_loops)
        refuse("loops: " + std::to_string(c.loops) + " is outside [1, " + std::to_string(hp.max_loops) +
               "] (0 = the model's default_loops, " + std::to_string(hp.default_loops) + ")");
    if (c.loops == 0) c.loops = hp.default_loops;
    out.source.emplace_back("loops", mine("loops") && given.config.loops > 0 ? "user" : "model");

    if (mine("temperature")) check_mode_temperature(mode, c.temperature);
    if (greedy_only(mode)) {
        c.temperature = 0.0f;
        note("temperature", "mode");
    } else if (mode == DecodeMode::Sample) {
        if (!mine("temperature")) c.temperature = kSampleModeTemperature;
        note("temperature", "built-in");
    }
    if (mode == DecodeMode::Beam) {
        if (!mine("beam_size")) c.beam_size = kBeamModeWidth;
        if (c.beam_size < 2) refuse("beam_size: " + std::to_string(c.beam_size) + " is outside [2, 64] for mode beam");
        note("beam_size", "built-in");
    } else if (c.beam_size != 0 && (greedy_only(mode) || mode == DecodeMode::Sample || mode == DecodeMode::EarlyExit)) {
        // run_decode's rule for these modes; the others leave it for the run to refuse
        c.beam_size = 0;
        note("beam_size", "mode");
    }
    if (mode == DecodeMode::EarlyExit) {
        std::vector<std::pair<std::string, std::string>> ee;
        const bool patience_given = mine("early_exit_patience") && c.early_exit.patience > 0;
        std::vector<std::string> keys = user_keys;
        if (!patience_given) keys.erase(std::remove(keys.begin(), keys.end(), "early_exit_patience"), keys.end());
        c = resolve_early_exit(model, c, keys, &ee);
        out.source.insert(out.source.end(), ee.begin(), ee.end());
        validate_early_exit(c.early_exit, hp.max_loops);
    } else if (c.early_exit.enabled() && (mode == DecodeMode::Greedy || mode == DecodeMode::Sample)) {
        // run_decode's rule; beam and draft-model runs refuse early exit (validate_config)
        c.early_exit.patience = 0;
        c.early_exit.logit_margin = 0.0f;
        out.source.emplace_back("early_exit_patience", "mode");
    }
    if (self_speculative(mode) || mode == DecodeMode::DraftModel) {
        spec.speculation = resolved_speculation(model, spec);
        ConfigLimits limits;
        limits.max_loops = hp.max_loops;
        validate_speculation(spec.speculation, limits);
        // The rules tying two knobs, as the run will apply them (a front end shows these
        // refusals before it starts; the server names its request's fields by them).
        if (mode != DecodeMode::DraftModel) {
            check_speculation_depths(spec.speculation.draft_loops, spec.speculation.verify_loops, hp.max_loops);
            validate_mode_speculation(spec);
        }
        const Recommendation& recommended = model_recommendation(model);
        const SpeculationPolicy& rec = recommended.speculation(spec.speculation.kind);
        const bool tree = mode == DecodeMode::Tree;
        const char* draft_from = mode == DecodeMode::DraftModel ? "model"
                                 : rec.draft_loops > 0 && rec.draft_loops == spec.speculation.draft_loops ? "model"
                                                                                                           : "built-in";
        if (mode != DecodeMode::DraftModel)  // verify_loops 0 = the config's depth, resolved above
            out.source.emplace_back("speculation.verify_loops", given.speculation.verify_loops > 0 ? "user" : "built-in");
        if (!mine("speculation.draft_loops") && given.speculation.draft_loops == 0) note("speculation.draft_loops", draft_from);
        else out.source.emplace_back("speculation.draft_loops", "user");
        if (mode != DecodeMode::DraftModel) {
            out.source.emplace_back("speculation.draft_ahead", given.speculation.draft_ahead > 0 ? "user"
                                                               : rec.draft_ahead > 0           ? "model"
                                                                                               : "built-in");
            if (tree)
                out.source.emplace_back("speculation.branches", given.speculation.branches > 0 ? "user"
                                                                : rec.branches > 0            ? "model"
                                                                                              : "built-in");
        }
    }
    // The lines a front end shows, with the resolved values in the codec's JSON.
    const nlohmann::json cj = config_to_json(c);
    const nlohmann::json sj = speculation_to_json(spec.speculation);
    for (const auto& [key, from] : out.source) {
        const bool sp = key.rfind("speculation.", 0) == 0;
        const std::string k = sp ? key.substr(12) : key;
        const nlohmann::json& j = sp ? sj : cj;
        out.messages.push_back(key + ": " + (j.contains(k) ? j[k].dump() : std::string("?")) + " (" + from + ")");
    }
    return out;
}

}  // namespace tinyloop
