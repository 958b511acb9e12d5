#include <tinyloop_analysis/speculation_sweep.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include "tinyloop/mode_rules.h"

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

int SweepResult::fastest_cell() const {
    int best = -1;
    for (size_t i = 0; i < cells.size(); ++i) {
        const SweepCell& c = cells[i];
        if (!c.error.empty() || c.runs == 0 || c.time.empty()) continue;
        if (best < 0 || c.measured_speedup() > cells[static_cast<size_t>(best)].measured_speedup())
            best = static_cast<int>(i);
    }
    return best;
}

int SweepResult::best_cell() const {
    int best = -1;
    for (size_t i = 0; i < cells.size(); ++i) {
        const SweepCell& c = cells[i];
        if (!c.error.empty() || c.runs == 0 || !c.speedup().beyond_noise) continue;
        if (best < 0 || c.measured_speedup() > cells[static_cast<size_t>(best)].measured_speedup())
            best = static_cast<int>(i);
    }
    return best;
}

std::string SweepResult::no_best_reason() const {
    if (best_cell() >= 0) return "";
    const int f = fastest_cell();
    if (f < 0) return "no cell finished a timed repeat";
    const SweepCell& c = cells[static_cast<size_t>(f)];
    const Speedup s = c.speedup();
    char buf[200];
    const size_t n = std::min(c.time.samples.size(), c.baseline.samples.size());
    if (n < static_cast<size_t>(kMinRepeats)) {
        std::snprintf(buf, sizeof buf,
                      "no setting is faster than greedy beyond the noise: the fastest reads %.2fx from only %zu "
                      "timed repeat(s), and a ranking needs %d",
                      s.median, n, kMinRepeats);
        return buf;
    }
    std::snprintf(buf, sizeof buf,
                  "no setting is faster than greedy beyond the noise: the fastest reads %.2fx, but its repeats "
                  "range %.2fx..%.2fx and overlap greedy's",
                  s.median, s.min, s.max);
    return buf;
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
    r.verify_loops = tinyloop::resolve_loops(hp, spec.verify_loops);
    tinyloop::check_speculation_depths(1, r.verify_loops, hp.max_loops);  // the verify depth's range (draft 1 is below any)
    for (int d : spec.draft_loops)
        if (d < 1 || d > hp.max_loops) bad_arg("draft_loops: " + std::to_string(d) + " is outside [1, " + std::to_string(hp.max_loops) + "]");
    for (int k : spec.draft_ahead)
        if (k < 1 || k > 32) bad_arg("draft_ahead: " + std::to_string(k) + " is outside [1, 32]");
    check_repeats(spec.repeats, "repeats");
    for (int b : spec.branches)
        if (b < 0 || b > 8) bad_arg("branches: " + std::to_string(b) + " is outside [0, 8] (0 = chain)");
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
    const int R = spec.repeats;
    const int total = 1 + R * (P + r.cells_planned * P);  // the warm-up, then every repeat
    int done = 0;
    auto stopped = [&] { return cancel && cancel->load(); };
    tinyloop::GenerateOptions opts;
    if (cancel) opts.observer = [cancel](const tinyloop::TokenEvent&) { return !cancel->load(); };
    const ModeSpec greedy = greedy_spec(spec.max_tokens, r.verify_loops);
    auto tick = [&] {
        if (progress) progress(++done, total);
    };

    // Greedy at the verify depth: the baseline, and the text every greedy speculation must equal.
    for (int p = 0; p < P; ++p) r.prompt_ids.push_back(prompt_ids(model, spec.prompts[static_cast<size_t>(p)]));
    // Untimed warm-up: the first run pays for page faults and cold caches; no setting should.
    if (!stopped()) run_mode(model, r.prompt_ids[0], greedy, opts);
    tick();
    std::vector<std::vector<double>> prompt_ms(static_cast<size_t>(P));
    std::vector<double> baseline_totals;
    std::vector<std::vector<double>> cell_totals(r.cells.size());
    for (int rep = 0; rep < R && !stopped(); ++rep) {
        double rep_ms = 0;
        for (int p = 0; p < P && !stopped(); ++p) {
            ModeRun run = run_mode(model, r.prompt_ids[static_cast<size_t>(p)], greedy, opts);
            if (stopped()) break;  // a run cut short by cancel is not a measurement
            rep_ms += run.stats.total_ms;
            prompt_ms[static_cast<size_t>(p)].push_back(run.stats.total_ms);
            if (rep == 0) {
                r.baseline_tokens.push_back(run.tokens);
                r.maps.push_back(run.tokens.empty() ? AgreementMap{}
                                                    : build_agreement_map(model, r.prompt_ids[static_cast<size_t>(p)],
                                                                          run.tokens, r.verify_loops));
            }
            tick();
        }
        if (stopped()) break;
        baseline_totals.push_back(rep_ms);
        for (size_t ci = 0; ci < r.cells.size() && !stopped(); ++ci) {
            SweepCell& c = r.cells[ci];
            if (rep == 0) {
                // Pooled prediction over every prompt's draftable positions.
                int n = 0, ok = 0;
                for (const AgreementMap& m : r.maps)
                    for (int j = 1; j < m.positions(); ++j, ++n) ok += m.agrees(j, c.draft_loops) ? 1 : 0;
                c.predicted_acceptance = n > 0 ? double(ok) / n : 0.0;
            }
            const ModeSpec s = cell_spec(c, r.verify_loops, spec.max_tokens);
            double cell_ms = 0;
            int ran = 0;
            for (int p = 0; p < P && !stopped() && c.error.empty(); ++p) {
                try {
                    ModeRun run = run_mode(model, r.prompt_ids[static_cast<size_t>(p)], s, opts);
                    if (stopped()) break;
                    cell_ms += run.stats.total_ms;
                    ++ran;
                    if (rep == 0) {
                        c.runs++;
                        c.tokens += run.stats.tokens_emitted;
                        c.cycles += run.stats.spec_cycles;
                        c.drafted += run.stats.spec_drafted;
                        c.tested += run.stats.spec_tested;
                        c.accepted += run.stats.spec_accepted;
                        if (run.tokens != r.baseline_tokens[static_cast<size_t>(p)]) c.equals_greedy = false;
                    }
                } catch (const std::exception& e) {
                    c.error = e.what();
                }
                tick();
            }
            if (ran == P) cell_totals[ci].push_back(cell_ms);
        }
    }
    r.baseline = summarize(baseline_totals);
    for (int p = 0; p < P; ++p)
        if (!prompt_ms[static_cast<size_t>(p)].empty())
            r.baseline_ms.push_back(summarize(prompt_ms[static_cast<size_t>(p)]).median);
    // Each cell against greedy over the same repeats (a repeat the cancel cut short counts for neither).
    for (size_t ci = 0; ci < r.cells.size(); ++ci) {
        SweepCell& c = r.cells[ci];
        c.time = summarize(cell_totals[ci]);
        const size_t n = std::min(cell_totals[ci].size(), baseline_totals.size());
        c.baseline = summarize(std::vector<double>(baseline_totals.begin(), baseline_totals.begin() + static_cast<long>(n)));
        c.total_ms = c.time.median;
        c.baseline_ms = c.baseline.median;
    }
    r.cancelled = stopped();
    return r;
}

nlohmann::json sweep_to_json(const SweepResult& r) {
    nlohmann::json cells = nlohmann::json::array();
    for (const SweepCell& c : r.cells) {
        const Speedup sp = c.speedup();
        nlohmann::json j = {{"draft_loops", c.draft_loops},
                            {"draft_ahead", c.draft_ahead},
                            {"branches", c.branches},
                            {"mode", c.branches > 0 ? "tree" : "speculative"},
                            {"runs", c.runs},
                            {"tokens", c.tokens},
                            {"cycles", c.cycles},
                            {"drafted", c.drafted},
                            {"tested", c.tested},
                            {"accepted", c.accepted},
                            {"total_ms", c.total_ms},
                            {"baseline_ms", c.baseline_ms},
                            {"time_ms", timing_to_json(c.time)},
                            {"baseline_time_ms", timing_to_json(c.baseline)},
                            {"measured_speedup", c.measured_speedup()},
                            {"speedup_range", {sp.min, sp.max}},
                            {"faster_than_greedy_beyond_noise", sp.beyond_noise},
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
            {"branches", r.spec.branches},
            {"repeats", r.spec.repeats},
            {"baseline_ms", r.baseline_ms},
            {"baseline_time_ms", timing_to_json(r.baseline)},
            {"cells_planned", r.cells_planned},
            {"cancelled", r.cancelled},
            {"best_cell", best},
            {"fastest_cell", r.fastest_cell()},
            {"no_best_reason", r.no_best_reason()},
            {"cells", cells},
            {"agreement_maps", maps}};
}

}  // namespace tinyloop::analysis
