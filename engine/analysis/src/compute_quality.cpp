#include <tinyloop_analysis/compute_quality.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include <tinyloop_analysis/exit_calibration.h>
#include "tinyloop/mode_rules.h"

namespace tinyloop::analysis {

namespace {

[[noreturn]] void bad(const std::string& m) { throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, m); }

std::string num(float x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", static_cast<double>(x));
    return b;
}

double ms_per_decoded(const tinyloop::GenerateStats& st) {
    return st.tokens_emitted > 1 ? st.decode_ms / (st.tokens_emitted - 1) : 0.0;
}

}  // namespace

tinyloop::EarlyExitPolicy exit_setting(tinyloop::EarlyExitCriterion criterion, float threshold) {
    tinyloop::EarlyExitPolicy p;
    p.patience = 1;
    p.criterion = criterion;
    p.threshold = threshold;
    return p;
}

tinyloop::SpeculationPolicy spec_setting(int draft_loops, int draft_ahead) {
    tinyloop::SpeculationPolicy k;
    k.kind = tinyloop::SpeculationKind::Chain;
    k.draft_loops = draft_loops;
    k.draft_ahead = draft_ahead;
    return k;
}

ComputeSettings default_compute_settings(const tinyloop::HParams& hp) {
    ComputeSettings s;
    const int top = std::min(hp.max_loops, std::max(hp.default_loops, 8));
    for (int d = 1; d <= top; ++d) s.depths.push_back(d);
    s.exit_loops = hp.default_loops;
    s.verify_loops = hp.default_loops;
    using C = tinyloop::EarlyExitCriterion;
    for (float t : {0.05f, 0.1f, 0.2f, 0.4f}) s.exits.push_back(exit_setting(C::HiddenL2, t));
    for (float t : {0.01f, 0.05f, 0.2f, 0.5f}) s.exits.push_back(exit_setting(C::KL, t));
    for (float t : {8.0f, 4.0f, 2.0f, 1.0f}) s.exits.push_back(exit_setting(C::LogitMargin, t));
    for (int D = 1; D < s.verify_loops && D <= 3; ++D) s.specs.push_back(spec_setting(D, 4));
    return s;
}

std::vector<ComputePoint> compute_vs_quality(tinyloop::Model* model, const std::vector<int32_t>& text,
                                             const ComputeSettings& s, const ComputeProgress& progress,
                                             const std::atomic<bool>* cancel) {
    const int n = static_cast<int>(text.size());
    if (n < 2) bad("text: needs at least 2 tokens to score (has " + std::to_string(n) + ")");
    if (s.prompt_tokens < 1) bad("prompt_tokens: " + std::to_string(s.prompt_tokens) + " must be >= 1");
    if (s.decode_tokens < 2 || s.decode_tokens > 1024)
        bad("decode_tokens: " + std::to_string(s.decode_tokens) + " is outside [2, 1024]");
    check_repeats(s.repeats, "repeats");
    const tinyloop::HParams& hp = tinyloop::model_hparams(model);
    const int total = static_cast<int>(s.depths.size() + s.exits.size() + s.specs.size());
    int done = 0;
    auto step = [&](const std::string& what) {
        if (cancel && cancel->load()) throw std::runtime_error("cancelled");
        if (progress) progress(done, total, what);
        ++done;
    };
    const int pn = std::min(s.prompt_tokens, n);
    // Timed decodes from the text's first tokens, through the engine's one run entry.
    auto decode = [&](tinyloop::RunSpec spec) {
        spec.config.max_tokens = s.decode_tokens;
        spec.config.ignore_eos = true;
        return tinyloop::run_decode(model, text.data(), pn, spec);
    };
    // Each timed setting decodes `repeats` times, one after another; the point keeps the median.
    auto timed = [&](const tinyloop::RunSpec& spec, ComputePoint& p) {
        std::vector<double> ms;
        tinyloop::GenerateResult first;
        for (int rep = 0; rep < s.repeats; ++rep) {
            tinyloop::GenerateResult g = decode(spec);
            ms.push_back(ms_per_decoded(g.stats));
            if (rep == 0) first = std::move(g);
        }
        p.ms = summarize(std::move(ms));
        p.ms_per_token = p.ms.median;
        return first;
    };
    auto decode_ms = [&](tinyloop::DecodeMode mode, const tinyloop::GenerateConfig& c, ComputePoint& p) {
        timed({.mode = mode, .config = c, .speculation = {}}, p);
    };

    std::vector<ComputePoint> out;
    for (int d : s.depths) {
        step("fixed depth " + std::to_string(d));
        const tinyloop::ScoreResult r = tinyloop::score(model, text.data(), n, d);
        ComputePoint p;
        p.series = "fixed depth";
        p.label = "L=" + std::to_string(d);
        p.mean_depth = d;
        p.nll = r.total_nll / (n - 1);
        p.scored_tokens = n - 1;
        tinyloop::GenerateConfig c;
        c.loops = d;
        decode_ms(tinyloop::DecodeMode::Greedy, c, p);
        out.push_back(p);
    }
    const int exit_loops = tinyloop::resolve_loops(hp, s.exit_loops);
    for (const tinyloop::EarlyExitPolicy& e : s.exits) {
        const std::string crit = criterion_label(e.criterion);
        step("early exit " + crit + " " + num(e.threshold));
        tinyloop::GenerateConfig c;
        c.loops = exit_loops;
        c.early_exit = e;
        c.early_exit.min_L = std::min(e.min_L, exit_loops);  // a shallow exit depth probes from its first pass
        std::vector<int> depth;
        const tinyloop::ScoreResult r = tinyloop::score_early_exit(model, text.data(), n, c, &depth);
        ComputePoint p;
        p.series = "early exit " + crit;
        p.label = crit + (e.criterion == tinyloop::EarlyExitCriterion::LogitMargin ? ">=" : "<") + num(e.threshold);
        long long sum = 0;
        for (int i = 0; i + 1 < n; ++i) sum += depth[static_cast<size_t>(i)];  // positions that predict
        p.mean_depth = static_cast<double>(sum) / (n - 1);
        p.nll = r.total_nll / (n - 1);
        p.scored_tokens = n - 1;
        decode_ms(tinyloop::DecodeMode::EarlyExit, c, p);
        out.push_back(p);
    }
    const int V = tinyloop::resolve_loops(hp, s.verify_loops);
    if (!s.specs.empty()) {
        const tinyloop::ScoreResult r = tinyloop::score(model, text.data(), n, V);
        for (const tinyloop::SpeculationPolicy& sp : s.specs) {
            step("speculative D" + std::to_string(sp.draft_loops) + " K" + std::to_string(sp.draft_ahead));
            tinyloop::RunSpec spec;
            spec.mode = tinyloop::DecodeMode::Speculative;
            spec.speculation = sp;
            spec.speculation.verify_loops = V;
            ComputePoint p;
            const tinyloop::GenerateResult g = timed(spec, p);
            p.series = "speculative";
            p.label = "D" + std::to_string(sp.draft_loops) + " K" + std::to_string(sp.draft_ahead) + " V" +
                      std::to_string(V);
            const int decoded = g.stats.tokens_emitted - 1;
            p.mean_depth = decoded > 0 ? static_cast<double>(V) * g.stats.spec_drafted / decoded : V;
            p.nll = r.total_nll / (n - 1);
            p.scored_tokens = n - 1;
            p.acceptance = g.stats.spec_acceptance_rate();
            out.push_back(p);
        }
    }
    if (progress) progress(total, total, "done");
    return out;
}

nlohmann::json compute_json(const std::vector<ComputePoint>& points, int text_tokens) {
    nlohmann::json j;
    j["view"] = "compute against quality";
    j["text_tokens"] = text_tokens;
    nlohmann::json arr = nlohmann::json::array();
    for (const ComputePoint& p : points) {
        nlohmann::json o = {{"series", p.series}, {"label", p.label}, {"mean_depth", p.mean_depth},
                            {"nll_per_token", p.nll}, {"ms_per_token", p.ms_per_token},
                            {"ms_per_token_repeats", timing_to_json(p.ms)},
                            {"scored_tokens", p.scored_tokens}};
        if (p.acceptance >= 0) o["acceptance"] = p.acceptance;
        arr.push_back(o);
    }
    j["points"] = arr;
    return j;
}

}  // namespace tinyloop::analysis
