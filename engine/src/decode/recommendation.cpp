// The model's recommended settings as defaults: "the user's value, else the model's
// recommendation, else the built-in default" (run_spec.h), in one place for every front end.
#include <algorithm>

#include "model/model.h"

namespace tinyloop {

namespace {

bool user_set(const std::vector<std::string>& keys, const char* key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
}

}  // namespace

const Recommendation& model_recommendation(const Model* model) { return checked(model).recommended; }

Recommendation builtin_early_exit() {
    Recommendation r;
    r.early_exit_patience = 1;
    r.early_exit_criterion = EarlyExitCriterion::HiddenL2;
    r.early_exit_threshold = 0.05f;
    r.early_exit_min_L = 2;
    r.early_exit_peek_every = 1;
    return r;
}

GenerateConfig resolve_early_exit(const Model* model, const GenerateConfig& config,
                                  const std::vector<std::string>& user_keys,
                                  std::vector<std::pair<std::string, std::string>>* source) {
    const Recommendation& rec = model_recommendation(model);
    GenerateConfig c = config;
    const bool user_criterion = user_set(user_keys, "early_exit_criterion");
    // The model's policy holds for its own criterion only: its threshold means nothing for another.
    const bool model_applies = rec.has_early_exit() && (!user_criterion || c.early_exit_criterion == rec.early_exit_criterion);
    const Recommendation& from = model_applies ? rec : builtin_early_exit();
    const char* origin = model_applies ? "model" : "built-in";
    auto pick = [&](const char* key, auto& field, auto value) {
        const bool mine = user_set(user_keys, key);
        if (!mine) field = value;
        if (source) source->emplace_back(key, mine ? "user" : origin);
    };
    pick("early_exit_criterion", c.early_exit_criterion, from.early_exit_criterion);
    pick("early_exit_threshold", c.early_exit_threshold, from.early_exit_threshold);
    pick("early_exit_patience", c.early_exit_patience, from.early_exit_patience);
    pick("early_exit_min_L", c.early_exit_min_L, from.early_exit_min_L);
    pick("early_exit_peek_every", c.early_exit_peek_every, from.early_exit_peek_every);
    // A logit margin > 0 switches any criterion to logit_margin (the seed's knob): keep it in step
    // with the threshold for that criterion and off for the others, unless the user set it.
    if (!user_set(user_keys, "early_exit_logit_margin"))
        c.early_exit_logit_margin =
            c.early_exit_criterion == EarlyExitCriterion::LogitMargin ? c.early_exit_threshold : 0.0f;
    return c;
}

GenerateConfig recommended_config(const Model* model) {
    GenerateConfig c = resolve_early_exit(model, GenerateConfig{}, {});
    c.early_exit_patience = 0;  // the policy is ready; early exit stays off until asked for
    c.early_exit_logit_margin = 0.0f;
    return c;
}

}  // namespace tinyloop
