#include <tinyloop_analysis/compare_modes.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include <tinyloop/json.h>
#include <tinyloop/mode_rules.h>

namespace tinyloop::analysis {

namespace {
// snprintf, not string concatenation: GCC 12 warns (-Wrestrict, a false positive) on
// "literal" + std::to_string(...) at -O3.
template <class... A>
std::string format(const char* fmt, A... args) {
    char buf[128];
    std::snprintf(buf, sizeof buf, fmt, args...);
    return buf;
}

ModeSpec mode(const std::string& label, DecodeMode m, int max_tokens, int loops) {
    ModeSpec s;
    s.label = label;
    s.run.mode = m;
    s.run.config.max_tokens = max_tokens;
    s.run.config.loops = loops;
    return s;
}

ModeSpec sampling_mode(int max_tokens, int loops) {
    // sample mode's own temperature (mode_config: kSampleModeTemperature)
    ModeSpec smp = mode("", DecodeMode::Sample, max_tokens, loops);
    smp.run.config = mode_config(DecodeMode::Sample, smp.run.config);
    smp.label = format("sampling T=%g seed=7", static_cast<double>(smp.run.config.temperature));
    smp.run.config.top_k = 40;
    smp.run.config.sample_seed = 7;
    return smp;
}

// A model with the learned exit gate: early exit by the gate at depth D, both semantics (gate_stop
// stops the passes, gate_select runs them all and reads the exit pass), with the threshold the
// engine resolves (the model's policy for that criterion, else its checkpoint's config's q).
// Inserted before the sampling row, which stays last.
void add_gate_modes(const Model* model, int max_tokens, int D, std::vector<ModeSpec>& out) {
    if (!model_hparams(model).exit_gate) return;
    const Recommendation& rec = model_recommendation(model);
    auto at = out.end();
    if (!out.empty() && out.back().run.mode == DecodeMode::Sample) --at;
    std::vector<ModeSpec> gates;
    for (EarlyExitCriterion c : {EarlyExitCriterion::GateStop, EarlyExitCriterion::GateSelect}) {
        if (rec.has_early_exit() && rec.early_exit.criterion == c) continue;  // the model's own row has it
        ModeSpec e = mode("", DecodeMode::EarlyExit, max_tokens, D);
        e.run.config.early_exit.criterion = c;
        e.run.config = resolve_early_exit(model, e.run.config, {"early_exit_criterion"});
        e.label = format("early exit %s q=%g", criterion_name(c), static_cast<double>(e.run.config.early_exit.threshold));
        gates.push_back(std::move(e));
    }
    out.insert(at, gates.begin(), gates.end());
}

// The file's recommended modes at its default depth D. The knobs and the early-exit policy are
// resolved by the engine's one resolver (resolve_run, nothing set by a user: the model's value,
// else the built-in), so the rows run exactly what the CLI and the config panel run.
std::vector<ModeSpec> recommended_compare_modes(const Model* model, int max_tokens) {
    const HParams& hp = model_hparams(model);
    const Recommendation& rec = model_recommendation(model);
    const int D = hp.default_loops;
    std::vector<ModeSpec> out;
    const int deep = std::min(2 * D, hp.max_loops);
    if (deep != D) out.push_back(mode(format("greedy L=%d", deep), DecodeMode::Greedy, max_tokens, deep));
    out.push_back(mode(format("greedy L=%d", D), DecodeMode::Greedy, max_tokens, D));
    const char* whose = rec.has_speculation() ? " (model's)" : "";
    if (D >= 2) {
        ModeSpec s = mode("", DecodeMode::Speculative, max_tokens, D);
        s.run = resolve_run(model, s.run, {}).spec;
        s.label = format("speculative %d->%d, %d ahead%s", s.run.speculation.draft_loops, D,
                         s.run.speculation.draft_ahead, whose);
        out.push_back(s);
        ModeSpec t = mode("", DecodeMode::Tree, max_tokens, D);
        t.run = resolve_run(model, t.run, {}).spec;
        t.label = format("tree %d->%d K=%d%s", t.run.speculation.draft_loops, D, t.run.speculation.branches, whose);
        out.push_back(t);
        ModeSpec w = mode("", DecodeMode::Pipelined, max_tokens, D);
        w.run = resolve_run(model, w.run, {}).spec;
        w.label = format("pipelined %d->%d%s", w.run.speculation.draft_loops, D, whose);
        out.push_back(w);
    }
    if (rec.has_early_exit()) {
        ModeSpec e = mode("", DecodeMode::EarlyExit, max_tokens, D);
        e.run = resolve_run(model, e.run, {}).spec;
        e.label = format("early exit %s%s%g (model's)", criterion_name(e.run.config.early_exit.criterion),
                         e.run.config.early_exit.criterion == EarlyExitCriterion::LogitMargin ? ">=" : "<",
                         static_cast<double>(e.run.config.early_exit.threshold));
        out.push_back(e);
    }
    out.push_back(sampling_mode(max_tokens, D));
    return out;
}

}  // namespace

std::vector<ModeSpec> default_compare_modes(const Model* model, int max_tokens) {
    const Recommendation& rec = model_recommendation(model);
    const HParams& hp = model_hparams(model);
    std::vector<ModeSpec> out = rec.has_early_exit() || rec.has_speculation() ? recommended_compare_modes(model, max_tokens)
                                                                              : default_compare_modes(hp, max_tokens);
    add_gate_modes(model, max_tokens, std::clamp(hp.default_loops, 1, std::max(1, hp.max_loops)), out);
    return out;
}

std::vector<ModeSpec> default_compare_modes(const HParams& hp, int max_tokens) {
    // The model's own depth D (8 when the hyperparameters name none), and twice it for contrast.
    const int max_l = std::max(1, hp.max_loops);
    const int D = std::clamp(hp.default_loops > 0 ? hp.default_loops : 8, 1, max_l);
    const int deep = std::min(2 * D, max_l);
    std::vector<ModeSpec> out;
    if (deep != D) out.push_back(mode(format("greedy L=%d", deep), DecodeMode::Greedy, max_tokens, deep));
    out.push_back(mode(format("greedy L=%d", D), DecodeMode::Greedy, max_tokens, D));
    if (D >= 2) {
        // The engine's built-in knobs at depth D: what the run would resolve without a recommendation.
        const SpeculationPolicy chain = builtin_speculation(SpeculationKind::Chain, D);
        const SpeculationPolicy tree = builtin_speculation(SpeculationKind::Tree, D);
        ModeSpec s = mode(format("speculative %d->%d", chain.draft_loops, D), DecodeMode::Speculative, max_tokens, D);
        s.run.speculation = {.verify_loops = D, .draft_loops = chain.draft_loops, .draft_ahead = chain.draft_ahead};
        out.push_back(s);
        ModeSpec t = mode(format("tree %d->%d K=%d", tree.draft_loops, D, tree.branches), DecodeMode::Tree, max_tokens, D);
        t.run.speculation = {.verify_loops = D, .draft_loops = tree.draft_loops, .draft_ahead = tree.draft_ahead,
                             .branches = tree.branches};
        out.push_back(t);
        // Pipelined over depth with the chain's knobs (run_spec.h: Pipelined).
        ModeSpec w = mode(format("pipelined %d->%d", chain.draft_loops, D), DecodeMode::Pipelined, max_tokens, D);
        w.run.speculation = s.run.speculation;
        out.push_back(w);
    }
    for (float thr : {0.1f, 0.2f}) {
        ModeSpec e = mode(format("early exit l2<%.2f", static_cast<double>(thr)), DecodeMode::EarlyExit, max_tokens, D);
        e.run.config.early_exit.patience = 1;
        e.run.config.early_exit.min_L = 2;
        e.run.config.early_exit.criterion = EarlyExitCriterion::HiddenL2;
        e.run.config.early_exit.threshold = thr;
        out.push_back(e);
    }
    out.push_back(sampling_mode(max_tokens, D));
    return out;
}

double ModeRun::mean_depth() const {
    if (stats.depth_per_token.empty()) return 0.0;
    double s = 0;
    for (int d : stats.depth_per_token) s += d;
    return s / static_cast<double>(stats.depth_per_token.size());
}

double ModeRun::tokens_per_second() const {
    const double ms = time.empty() ? stats.total_ms : time.median;
    return ms > 0 ? stats.tokens_emitted * 1000.0 / ms : 0.0;
}

Rate ModeRun::tokens_per_second_range() const { return rate_per_second(time, stats.tokens_emitted); }

Timing ModeRun::ms_per_token() const {
    std::vector<double> per;
    if (stats.tokens_emitted > 0)
        for (double ms : time.samples) per.push_back(ms / stats.tokens_emitted);
    return summarize(per);
}

std::vector<int32_t> prompt_ids(const Model* model, const std::string& text) {
    std::vector<int32_t> ids = tokenize(model, text);
    if (ids.empty()) {
        const auto info = model_info(model);
        const int32_t start = info.tokenizer.bos_id >= 0 ? info.tokenizer.bos_id : info.tokenizer.eos_id;
        if (start < 0)
            throw Error(ErrorCode::InvalidArgument,
                                  "prompt: empty, and the tokenizer has no BOS/EOS token to start from");
        ids.push_back(start);
    }
    return ids;
}

ModeRun run_mode(Model* model, const std::vector<int32_t>& prompt, const ModeSpec& spec,
                const GenerateOptions& options) {
    ModeRun run;
    run.spec = spec;
    const RunSpec& rs = spec.run;
    run.speculative = self_speculative(rs.mode) || rs.mode == DecodeMode::DraftModel;
    if (!run.speculative) run.loops = tinyloop::resolve_loops(model_hparams(model), rs.config.loops);
    GenerateResult out = run_decode(model, prompt.data(), static_cast<int>(prompt.size()), rs, options);
    // Speculating, the depth is the verify depth the engine resolved and ran (loops_used), not a
    // second resolution here.
    if (run.speculative) run.loops = out.stats.loops_used;
    run.tokens.assign(out.tokens.begin() + out.prompt_len, out.tokens.end());
    run.text = std::move(out.text);
    run.stats = std::move(out.stats);
    return run;
}

int first_divergence(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    const size_t n = std::min(a.size(), b.size());
    for (size_t i = 0; i < n; ++i)
        if (a[i] != b[i]) return static_cast<int>(i);
    return a.size() == b.size() ? -1 : static_cast<int>(n);
}

void set_baseline(CompareResult& r, int baseline) {
    if (r.runs.empty()) {
        r.baseline = 0;
        r.divergence.clear();
        return;
    }
    r.baseline = std::clamp(baseline, 0, static_cast<int>(r.runs.size()) - 1);
    r.divergence.assign(r.runs.size(), -1);
    const ModeRun& b = r.runs[static_cast<size_t>(r.baseline)];
    for (size_t i = 0; i < r.runs.size(); ++i)
        r.divergence[i] = (r.runs[i].error.empty() && b.error.empty()) ? first_divergence(r.runs[i].tokens, b.tokens) : 0;
}

CompareResult run_comparison(Model* model, const std::string& prompt,
                            const std::vector<ModeSpec>& modes, int baseline, bool concurrent, int repeats,
                            const std::atomic<bool>* cancel, const std::function<void(int)>& on_done) {
    check_repeats(repeats, "repeats");
    CompareResult r;
    r.prompt = prompt;
    r.prompt_ids = prompt_ids(model, prompt);
    r.concurrent = concurrent;
    r.repeats = repeats;
    r.runs.resize(modes.size());
    std::vector<std::vector<double>> total(modes.size()), first(modes.size());
    GenerateOptions opts;
    if (cancel) opts.observer = [cancel](const TokenEvent&) { return !cancel->load(); };
    auto stopped = [cancel] { return cancel && cancel->load(); };
    auto one = [&](size_t i, int rep) {
        if (rep > 0 && !r.runs[i].error.empty()) return;  // refused once, refused again
        try {
            ModeRun run = run_mode(model, r.prompt_ids, modes[i], opts);
            if (!stopped()) {  // a run cut short by cancel is not a measurement
                total[i].push_back(run.stats.total_ms);
                first[i].push_back(run.stats.first_token_ms);
            }
            if (rep == 0) r.runs[i] = std::move(run);
        } catch (const std::exception& e) {
            r.runs[i] = ModeRun{};
            r.runs[i].spec = modes[i];
            r.runs[i].error = e.what();
        }
        if (on_done) on_done(static_cast<int>(i));
    };
    const auto t0 = std::chrono::steady_clock::now();
    for (int rep = 0; rep < repeats; ++rep) {
        if (concurrent) {
            std::vector<std::thread> threads;
            threads.reserve(modes.size());
            for (size_t i = 0; i < modes.size(); ++i) threads.emplace_back(one, i, rep);
            for (auto& t : threads) t.join();
            continue;
        }
        for (size_t i = 0; i < modes.size(); ++i) {
            if (stopped()) {
                if (rep == 0) {
                    r.runs[i].spec = modes[i];
                    r.runs[i].error = "cancelled";
                }
                continue;
            }
            one(i, rep);
        }
    }
    r.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (size_t i = 0; i < modes.size(); ++i) {
        r.runs[i].time = summarize(total[i]);
        r.runs[i].first_token = summarize(first[i]);
    }
    set_baseline(r, baseline);
    return r;
}

Ranking rank_modes(const CompareResult& r) {
    std::vector<Timing> t;
    for (const ModeRun& m : r.runs) t.push_back(m.error.empty() ? m.ms_per_token() : Timing{});
    Ranking k = rank_fastest_first(t);
    // modes with no timing (refused, cancelled) are not ranked at all
    while (!k.order.empty() && t[static_cast<size_t>(k.order.back())].empty()) {
        k.order.pop_back();
        k.distinct_from_next.pop_back();
    }
    if (!k.distinct_from_next.empty()) k.distinct_from_next.back() = false;
    return k;
}

std::string ranking_sentence(const CompareResult& r) {
    const Ranking k = rank_modes(r);
    if (k.order.size() < 2) return "";
    auto label = [&](size_t n) { return r.runs[static_cast<size_t>(k.order[n])].spec.label; };
    const ModeRun& a = r.runs[static_cast<size_t>(k.order[0])];
    const ModeRun& b = r.runs[static_cast<size_t>(k.order[1])];
    std::string s = compare_sentence(label(0), a.ms_per_token(), label(1), b.ms_per_token(), "ms/token");
    int close = 0;
    for (size_t n = 0; n + 1 < k.order.size(); ++n) close += k.distinct_from_next[n] ? 0 : 1;
    if (close > 0)
        s += "; " + std::to_string(close) + " neighbouring pair" + (close > 1 ? "s" : "") +
             " in the speed order too close to rank";
    return s;
}

nlohmann::json mode_spec_to_json(const ModeSpec& m) {
    nlohmann::json j = run_spec_to_json(m.run);
    j["label"] = m.label;
    return j;
}

nlohmann::json compare_to_json(const CompareResult& r) {
    nlohmann::json runs = nlohmann::json::array();
    for (size_t i = 0; i < r.runs.size(); ++i) {
        const ModeRun& m = r.runs[i];
        nlohmann::json j = {{"mode", mode_spec_to_json(m.spec)},
                            {"loops", m.loops},
                            {"output_ids", m.tokens},
                            {"text", m.text},
                            {"stats", stats_to_json(m.stats)},
                            {"mean_depth", m.mean_depth()},
                            {"tokens_per_s", m.tokens_per_second()},
                            {"time_ms", timing_to_json(m.time)},
                            {"first_token_ms", timing_to_json(m.first_token)},
                            {"first_divergence", i < r.divergence.size() ? r.divergence[i] : -1}};
        if (!m.error.empty()) j["error"] = m.error;
        runs.push_back(std::move(j));
    }
    return {{"view", "compare"},   {"prompt", r.prompt}, {"prompt_ids", r.prompt_ids},
            {"baseline", r.baseline}, {"concurrent", r.concurrent}, {"repeats", r.repeats}, {"wall_ms", r.wall_ms},
            {"ranking", ranking_sentence(r)},
            {"runs", runs}};
}

}  // namespace tinyloop::analysis
