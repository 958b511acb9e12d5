#include <tinyloop_analysis/speculation_sweep.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace tinyloop::analysis {

namespace {

[[noreturn]] void bad_arg(const std::string& msg) {
    throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, msg);
}

std::string list_text(const std::vector<int>& v) {
    std::string s;
    for (int x : v) {
        if (!s.empty()) s += ',';
        s += std::to_string(x);
    }
    return s;
}

// Greedy at `loops`: the sweep's baseline.
ModeSpec greedy_spec(int max_tokens, int loops) {
    ModeSpec g;
    g.run.mode = DecodeMode::Greedy;
    g.run.config.max_tokens = max_tokens;
    g.run.config.loops = loops;
    return g;
}

// One cell as a run: chain speculation (branches 0) or tree speculation, greedy.
ModeSpec cell_spec(const SweepCell& c, int verify_loops, int max_tokens) {
    ModeSpec s;
    s.run.mode = c.branches > 0 ? DecodeMode::Tree : DecodeMode::Speculative;
    s.run.config.max_tokens = max_tokens;
    s.run.config.temperature = 0.0f;
    s.run.speculation.draft_loops = c.draft_loops;
    s.run.speculation.verify_loops = verify_loops;
    s.run.speculation.draft_ahead = c.draft_ahead;
    s.run.speculation.branches = c.branches > 0 ? c.branches : 2;
    return s;
}

}  // namespace

double SweepCell::predicted_speedup(int verify_loops) const {
    return analysis::predicted_speedup(predicted_acceptance, draft_loops, verify_loops, draft_ahead);
}

// ---------------------------------------------------------------------------------------------

int SweepResult::best_cell() const {
    int best = -1;
    for (size_t i = 0; i < cells.size(); ++i) {
        const SweepCell& c = cells[i];
        if (!c.error.empty() || c.runs == 0) continue;
        if (best < 0 || c.measured_speedup() > cells[static_cast<size_t>(best)].measured_speedup())
            best = static_cast<int>(i);
    }
    return best;
}

ModeSpec SweepResult::best_spec() const {
    const int b = best_cell();
    if (b < 0) return {};
    const SweepCell& c = cells[static_cast<size_t>(b)];
    ModeSpec m = cell_spec(c, verify_loops, spec.max_tokens);
    char label[96];
    std::snprintf(label, sizeof label, "sweep best %s %d->%d k=%d", c.branches > 0 ? "tree" : "chain", c.draft_loops,
                  verify_loops, c.draft_ahead);
    m.label = label;
    if (c.branches > 0) m.label += " K=" + std::to_string(c.branches);
    return m;
}

SweepResult run_sweep(tinyloop::Model* model, const SweepSpec& spec, const std::atomic<bool>* cancel,
                     const std::function<void(int, int)>& progress) {
    const auto& hp = tinyloop::model_hparams(model);
    if (spec.prompts.empty()) bad_arg("prompts: the sweep needs at least one prompt");
    if (spec.max_tokens < 1 || spec.max_tokens > 4096)
        bad_arg("max_tokens: " + std::to_string(spec.max_tokens) + " is outside [1, 4096]");
    SweepResult r;
    r.spec = spec;
    r.verify_loops = spec.verify_loops > 0 ? spec.verify_loops : hp.default_loops;
    if (r.verify_loops < 2 || r.verify_loops > hp.max_loops)
        bad_arg("verify_loops: " + std::to_string(r.verify_loops) + " is outside [2, " + std::to_string(hp.max_loops) + "]");
    for (int d : spec.draft_loops)
        if (d < 1 || d > hp.max_loops) bad_arg("draft_loops: " + std::to_string(d) + " is outside [1, " + std::to_string(hp.max_loops) + "]");
    for (int k : spec.draft_ahead)
        if (k < 1 || k > 32) bad_arg("draft_ahead: " + std::to_string(k) + " is outside [1, 32]");
    for (int b : spec.branches)
        if (b < 0 || b > 8) bad_arg("K_branches: " + std::to_string(b) + " is outside [0, 8] (0 = chain)");
    for (int b : spec.branches)
        for (int k : spec.draft_ahead)
            if (b > 0 && k > 8) bad_arg("draft_ahead: " + std::to_string(k) + " is outside [1, 8] for tree cells");

    for (int b : spec.branches)
        for (int d : spec.draft_loops)
            for (int k : spec.draft_ahead)
                if (d < r.verify_loops) {
                    SweepCell c;
                    c.draft_loops = d;
                    c.draft_ahead = k;
                    c.branches = b;
                    r.cells.push_back(c);
                }
    if (r.cells.empty())
        bad_arg("draft_loops: no value below the verify depth " + std::to_string(r.verify_loops) + " (got " +
               list_text(spec.draft_loops) + ")");
    r.cells_planned = static_cast<int>(r.cells.size());

    const int P = static_cast<int>(spec.prompts.size());
    // The baseline runs before the grid and again after it; each prompt keeps its faster time,
    // so a cold first run (page faults, caches) does not flatter the speculative cells.
    const int total = 2 * P + r.cells_planned * P;
    int done = 0;
    auto stopped = [&] { return cancel && cancel->load(); };
    tinyloop::GenerateOptions opts;
    if (cancel) opts.observer = [cancel](const tinyloop::TokenEvent&) { return !cancel->load(); };

    // Greedy at the verify depth: the baseline, and the text every greedy speculation must equal.
    for (int p = 0; p < P; ++p) {
        if (stopped()) break;
        r.prompt_ids.push_back(prompt_ids(model, spec.prompts[static_cast<size_t>(p)]));
        ModeRun run = run_mode(model, r.prompt_ids.back(), greedy_spec(spec.max_tokens, r.verify_loops), opts);
        r.baseline_tokens.push_back(run.tokens);
        r.baseline_ms.push_back(run.stats.total_ms);
        if (!run.tokens.empty())
            r.maps.push_back(build_agreement_map(model, r.prompt_ids.back(), run.tokens, r.verify_loops));
        else
            r.maps.push_back(AgreementMap{});
        if (progress) progress(++done, total);
    }
    if (stopped()) {
        r.cancelled = true;
        return r;
    }

    for (SweepCell& c : r.cells) {
        // Pooled prediction over every prompt's draftable positions.
        int n = 0, ok = 0;
        for (const AgreementMap& m : r.maps)
            for (int j = 1; j < m.positions(); ++j, ++n) ok += m.agrees(j, c.draft_loops) ? 1 : 0;
        c.predicted_acceptance = n > 0 ? double(ok) / n : 0.0;
        for (int p = 0; p < P; ++p) {
            if (stopped()) break;
            const ModeSpec s = cell_spec(c, r.verify_loops, spec.max_tokens);
            try {
                ModeRun run = run_mode(model, r.prompt_ids[static_cast<size_t>(p)], s, opts);
                if (stopped()) break;  // a run cut short by cancel is not a measurement
                c.runs++;
                c.tokens += run.stats.tokens_emitted;
                c.cycles += run.stats.spec_cycles;
                c.drafted += run.stats.spec_drafted;
                c.tested += run.stats.spec_tested;
                c.accepted += run.stats.spec_accepted;
                c.total_ms += run.stats.total_ms;
                if (run.tokens != r.baseline_tokens[static_cast<size_t>(p)]) c.equals_greedy = false;
            } catch (const std::exception& e) {
                c.error = e.what();
            }
            if (progress) progress(++done, total);
        }
        if (stopped()) break;
    }
    for (int p = 0; p < P && !stopped(); ++p) {
        const ModeRun run =
            run_mode(model, r.prompt_ids[static_cast<size_t>(p)], greedy_spec(spec.max_tokens, r.verify_loops), opts);
        if (stopped()) break;
        double& ms = r.baseline_ms[static_cast<size_t>(p)];
        ms = std::min(ms, run.stats.total_ms);
        if (progress) progress(++done, total);
    }
    // Each cell is measured against the baseline of the prompts it ran (prompts run in order).
    for (SweepCell& c : r.cells) {
        c.baseline_ms = 0;
        for (int p = 0; p < c.runs; ++p) c.baseline_ms += r.baseline_ms[static_cast<size_t>(p)];
    }
    r.cancelled = stopped();
    return r;
}

//

nlohmann::json sweep_to_json(const SweepResult& r) {
    nlohmann::json cells = nlohmann::json::array();
    for (const SweepCell& c : r.cells) {
        nlohmann::json j = {{"draft_loops", c.draft_loops},
                            {"draft_ahead", c.draft_ahead},
                            {"K_branches", c.branches},
                            {"mode", c.branches > 0 ? "tree" : "speculative"},
                            {"runs", c.runs},
                            {"tokens", c.tokens},
                            {"cycles", c.cycles},
                            {"drafted", c.drafted},
                            {"tested", c.tested},
                            {"accepted", c.accepted},
                            {"total_ms", c.total_ms},
                            {"baseline_ms", c.baseline_ms},
                            {"measured_speedup", c.measured_speedup()},
                            {"acceptance", c.acceptance()},
                            {"predicted_acceptance", c.predicted_acceptance},
                            {"predicted_speedup", c.predicted_speedup(r.verify_loops)},
                            {"equals_greedy", c.equals_greedy}};
        if (!c.error.empty()) j["error"] = c.error;
        cells.push_back(std::move(j));
    }
    nlohmann::json maps = nlohmann::json::array();
    for (const AgreementMap& m : r.maps) maps.push_back(agreement_to_json(m));
    const int best = r.best_cell();
    return {{"view", "sweep"},
            {"prompts", r.spec.prompts},
            {"max_tokens", r.spec.max_tokens},
            {"verify_loops", r.verify_loops},
            {"draft_loops", r.spec.draft_loops},
            {"draft_ahead", r.spec.draft_ahead},
            {"K_branches", r.spec.branches},
            {"baseline_ms", r.baseline_ms},
            {"cells_planned", r.cells_planned},
            {"cancelled", r.cancelled},
            {"best_cell", best},
            {"cells", cells},
            {"agreement_maps", maps}};
}

}  // namespace tinyloop::analysis
