#include <tinyloop_analysis/speculation_sweep.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace tinyloop::analysis {

namespace {

[[noreturn]] void badArg(const std::string& msg) {
    throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, msg);
}

std::string listText(const std::vector<int>& v) {
    std::string s;
    for (int x : v) {
        if (!s.empty()) s += ',';
        s += std::to_string(x);
    }
    return s;
}

// Greedy at `loops`: the sweep's baseline.
ModeSpec greedySpec(int maxTokens, int loops) {
    ModeSpec g;
    g.run.mode = DecodeMode::Greedy;
    g.run.config.max_tokens = maxTokens;
    g.run.config.loops = loops;
    return g;
}

// One cell as a run: chain speculation (branches 0) or tree speculation, greedy.
ModeSpec cellSpec(const SweepCell& c, int verifyLoops, int maxTokens) {
    ModeSpec s;
    s.run.mode = c.branches > 0 ? DecodeMode::Tree : DecodeMode::Speculative;
    s.run.config.max_tokens = maxTokens;
    s.run.config.temperature = 0.0f;
    s.run.speculation.draft_loops = c.draftLoops;
    s.run.speculation.verify_loops = verifyLoops;
    s.run.speculation.draft_ahead = c.draftAhead;
    s.run.speculation.branches = c.branches > 0 ? c.branches : 2;
    return s;
}

}  // namespace

double SweepCell::predictedSpeedup(int verifyLoops) const {
    return analysis::predictedSpeedup(predictedAcceptance, draftLoops, verifyLoops, draftAhead);
}

// ---------------------------------------------------------------------------------------------

int SweepResult::bestCell() const {
    int best = -1;
    for (size_t i = 0; i < cells.size(); ++i) {
        const SweepCell& c = cells[i];
        if (!c.error.empty() || c.runs == 0) continue;
        if (best < 0 || c.measuredSpeedup() > cells[static_cast<size_t>(best)].measuredSpeedup())
            best = static_cast<int>(i);
    }
    return best;
}

ModeSpec SweepResult::bestSpec() const {
    const int b = bestCell();
    if (b < 0) return {};
    const SweepCell& c = cells[static_cast<size_t>(b)];
    ModeSpec m = cellSpec(c, verifyLoops, spec.maxTokens);
    char label[96];
    std::snprintf(label, sizeof label, "sweep best %s %d->%d k=%d", c.branches > 0 ? "tree" : "chain", c.draftLoops,
                  verifyLoops, c.draftAhead);
    m.label = label;
    if (c.branches > 0) m.label += " K=" + std::to_string(c.branches);
    return m;
}

SweepResult runSweep(tinyloop::Model* model, const SweepSpec& spec, const std::atomic<bool>* cancel,
                     const std::function<void(int, int)>& progress) {
    const auto& hp = tinyloop::model_hparams(model);
    if (spec.prompts.empty()) badArg("prompts: the sweep needs at least one prompt");
    if (spec.maxTokens < 1 || spec.maxTokens > 4096)
        badArg("max_tokens: " + std::to_string(spec.maxTokens) + " is outside [1, 4096]");
    SweepResult r;
    r.spec = spec;
    r.verifyLoops = spec.verifyLoops > 0 ? spec.verifyLoops : hp.default_loops;
    if (r.verifyLoops < 2 || r.verifyLoops > hp.max_loops)
        badArg("verify_loops: " + std::to_string(r.verifyLoops) + " is outside [2, " + std::to_string(hp.max_loops) + "]");
    for (int d : spec.draftLoops)
        if (d < 1 || d > hp.max_loops) badArg("draft_loops: " + std::to_string(d) + " is outside [1, " + std::to_string(hp.max_loops) + "]");
    for (int k : spec.draftAhead)
        if (k < 1 || k > 32) badArg("draft_ahead: " + std::to_string(k) + " is outside [1, 32]");
    for (int b : spec.branches)
        if (b < 0 || b > 8) badArg("K_branches: " + std::to_string(b) + " is outside [0, 8] (0 = chain)");
    for (int b : spec.branches)
        for (int k : spec.draftAhead)
            if (b > 0 && k > 8) badArg("draft_ahead: " + std::to_string(k) + " is outside [1, 8] for tree cells");

    for (int b : spec.branches)
        for (int d : spec.draftLoops)
            for (int k : spec.draftAhead)
                if (d < r.verifyLoops) {
                    SweepCell c;
                    c.draftLoops = d;
                    c.draftAhead = k;
                    c.branches = b;
                    r.cells.push_back(c);
                }
    if (r.cells.empty())
        badArg("draft_loops: no value below the verify depth " + std::to_string(r.verifyLoops) + " (got " +
               listText(spec.draftLoops) + ")");
    r.cellsPlanned = static_cast<int>(r.cells.size());

    const int P = static_cast<int>(spec.prompts.size());
    // The baseline runs before the grid and again after it; each prompt keeps its faster time,
    // so a cold first run (page faults, caches) does not flatter the speculative cells.
    const int total = 2 * P + r.cellsPlanned * P;
    int done = 0;
    auto stopped = [&] { return cancel && cancel->load(); };
    tinyloop::GenerateOptions opts;
    if (cancel) opts.observer = [cancel](const tinyloop::TokenEvent&) { return !cancel->load(); };

    // Greedy at the verify depth: the baseline, and the text every greedy speculation must equal.
    for (int p = 0; p < P; ++p) {
        if (stopped()) break;
        r.promptIds.push_back(promptIds(model, spec.prompts[static_cast<size_t>(p)]));
        ModeRun run = runMode(model, r.promptIds.back(), greedySpec(spec.maxTokens, r.verifyLoops), opts);
        r.baselineTokens.push_back(run.tokens);
        r.baselineMs.push_back(run.stats.total_ms);
        if (!run.tokens.empty())
            r.maps.push_back(buildAgreementMap(model, r.promptIds.back(), run.tokens, r.verifyLoops));
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
            for (int j = 1; j < m.positions(); ++j, ++n) ok += m.agrees(j, c.draftLoops) ? 1 : 0;
        c.predictedAcceptance = n > 0 ? double(ok) / n : 0.0;
        for (int p = 0; p < P; ++p) {
            if (stopped()) break;
            const ModeSpec s = cellSpec(c, r.verifyLoops, spec.maxTokens);
            try {
                ModeRun run = runMode(model, r.promptIds[static_cast<size_t>(p)], s, opts);
                if (stopped()) break;  // a run cut short by cancel is not a measurement
                c.runs++;
                c.tokens += run.stats.tokens_emitted;
                c.cycles += run.stats.spec_cycles;
                c.drafted += run.stats.spec_drafted;
                c.tested += run.stats.spec_tested;
                c.accepted += run.stats.spec_accepted;
                c.totalMs += run.stats.total_ms;
                if (run.tokens != r.baselineTokens[static_cast<size_t>(p)]) c.equalsGreedy = false;
            } catch (const std::exception& e) {
                c.error = e.what();
            }
            if (progress) progress(++done, total);
        }
        if (stopped()) break;
    }
    for (int p = 0; p < P && !stopped(); ++p) {
        const ModeRun run =
            runMode(model, r.promptIds[static_cast<size_t>(p)], greedySpec(spec.maxTokens, r.verifyLoops), opts);
        if (stopped()) break;
        double& ms = r.baselineMs[static_cast<size_t>(p)];
        ms = std::min(ms, run.stats.total_ms);
        if (progress) progress(++done, total);
    }
    // Each cell is measured against the baseline of the prompts it ran (prompts run in order).
    for (SweepCell& c : r.cells) {
        c.baselineMs = 0;
        for (int p = 0; p < c.runs; ++p) c.baselineMs += r.baselineMs[static_cast<size_t>(p)];
    }
    r.cancelled = stopped();
    return r;
}

//

nlohmann::json sweepToJson(const SweepResult& r) {
    nlohmann::json cells = nlohmann::json::array();
    for (const SweepCell& c : r.cells) {
        nlohmann::json j = {{"draft_loops", c.draftLoops},
                            {"draft_ahead", c.draftAhead},
                            {"K_branches", c.branches},
                            {"mode", c.branches > 0 ? "tree" : "speculative"},
                            {"runs", c.runs},
                            {"tokens", c.tokens},
                            {"cycles", c.cycles},
                            {"drafted", c.drafted},
                            {"tested", c.tested},
                            {"accepted", c.accepted},
                            {"total_ms", c.totalMs},
                            {"baseline_ms", c.baselineMs},
                            {"measured_speedup", c.measuredSpeedup()},
                            {"acceptance", c.acceptance()},
                            {"predicted_acceptance", c.predictedAcceptance},
                            {"predicted_speedup", c.predictedSpeedup(r.verifyLoops)},
                            {"equals_greedy", c.equalsGreedy}};
        if (!c.error.empty()) j["error"] = c.error;
        cells.push_back(std::move(j));
    }
    nlohmann::json maps = nlohmann::json::array();
    for (const AgreementMap& m : r.maps) maps.push_back(agreementToJson(m));
    const int best = r.bestCell();
    return {{"view", "sweep"},
            {"prompts", r.spec.prompts},
            {"max_tokens", r.spec.maxTokens},
            {"verify_loops", r.verifyLoops},
            {"draft_loops", r.spec.draftLoops},
            {"draft_ahead", r.spec.draftAhead},
            {"K_branches", r.spec.branches},
            {"baseline_ms", r.baselineMs},
            {"cells_planned", r.cellsPlanned},
            {"cancelled", r.cancelled},
            {"best_cell", best},
            {"cells", cells},
            {"agreement_maps", maps}};
}

}  // namespace tinyloop::analysis
