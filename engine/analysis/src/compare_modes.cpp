#include <tinyloop_analysis/compare_modes.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include <tinyloop/json.h>

namespace tinyloop::analysis {

namespace {
// snprintf, not string concatenation: GCC 12 warns (-Wrestrict, a false positive) on
// "literal" + std::to_string(...) at -O3.
std::string format(const char* fmt, int a, int b = 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, fmt, a, b);
    return buf;
}
template <class... A>
std::string formatv(const char* fmt, A... args) {
    char buf[128];
    std::snprintf(buf, sizeof buf, fmt, args...);
    return buf;
}
}  // namespace

namespace {

std::vector<ModeSpec> recommended_compare_modes(const HParams& hp, int max_tokens, const Recommendation& rec) {
    const int max_l = std::max(1, hp.max_loops);
    const int D = std::clamp(hp.default_loops, 1, max_l);
    auto base = [&](const std::string& label, DecodeMode mode, int loops) {
        ModeSpec m;
        m.label = label;
        m.run.mode = mode;
        m.run.config.max_tokens = max_tokens;
        m.run.config.loops = loops;
        return m;
    };
    std::vector<ModeSpec> out;
    const int deep = std::min(2 * D, max_l);
    if (deep != D) out.push_back(base(format("greedy L=%d", deep), DecodeMode::Greedy, deep));
    out.push_back(base(format("greedy L=%d", D), DecodeMode::Greedy, D));
    if (D >= 2) {
        const int draft = rec.draft_loops > 0 && rec.draft_loops < D ? rec.draft_loops : std::min(2, D - 1);
        ModeSpec s = base("", DecodeMode::Speculative, D);
        s.run.speculation.draft_loops = draft;
        s.run.speculation.verify_loops = D;
        s.run.speculation.draft_ahead = rec.draft_ahead > 0 ? rec.draft_ahead : 4;
        s.label = formatv("speculative %d->%d, %d ahead%s", draft, D, s.run.speculation.draft_ahead,
                         rec.has_speculation() ? " (model's)" : "");
        out.push_back(s);
        ModeSpec t = base("", DecodeMode::Tree, D);
        t.run.speculation.draft_loops = draft;
        t.run.speculation.verify_loops = D;
        t.run.speculation.draft_ahead = rec.tree_draft_ahead > 0 ? rec.tree_draft_ahead : 4;
        t.run.speculation.branches = rec.branches > 0 ? rec.branches : 2;
        t.label = formatv("tree %d->%d K=%d%s", draft, D, t.run.speculation.branches,
                         rec.has_speculation() ? " (model's)" : "");
        out.push_back(t);
    }
    if (rec.has_early_exit()) {
        ModeSpec e = base("", DecodeMode::EarlyExit, D);
        e.run.config.early_exit_criterion = rec.early_exit_criterion;
        e.run.config.early_exit_threshold = rec.early_exit_threshold;
        if (rec.early_exit_criterion == EarlyExitCriterion::LogitMargin)
            e.run.config.early_exit_logit_margin = rec.early_exit_threshold;
        e.run.config.early_exit_patience = rec.early_exit_patience;
        e.run.config.early_exit_min_L = std::min(rec.early_exit_min_L, D);
        e.run.config.early_exit_peek_every = rec.early_exit_peek_every;
        e.label = formatv("early exit %s%s%g (model's)", criterion_name(rec.early_exit_criterion),
                         rec.early_exit_criterion == EarlyExitCriterion::LogitMargin ? ">=" : "<",
                         static_cast<double>(rec.early_exit_threshold));
        out.push_back(e);
    }
    ModeSpec smp = base("sampling T=0.8 seed=7", DecodeMode::Sample, D);
    smp.run.config.temperature = 0.8f;
    smp.run.config.top_k = 40;
    smp.run.config.sample_seed = 7;
    out.push_back(smp);
    return out;
}

}  // namespace

std::vector<ModeSpec> default_compare_modes(const HParams& hp, int max_tokens, const Recommendation* rec) {
    if (rec && (rec->has_early_exit() || rec->has_speculation())) return recommended_compare_modes(hp, max_tokens, *rec);
    const int max_l = std::max(1, hp.max_loops);
    const int deep = std::min(8, max_l);
    const int shallow = std::min(4, max_l);
    auto base = [&](const std::string& label, DecodeMode mode) {
        ModeSpec m;
        m.label = label;
        m.run.mode = mode;
        m.run.config.max_tokens = max_tokens;
        m.run.config.loops = deep;
        return m;
    };
    std::vector<ModeSpec> out;
    ModeSpec g4 = base(format("greedy L=%d", shallow), DecodeMode::Greedy);
    g4.run.config.loops = shallow;
    out.push_back(g4);
    out.push_back(base(format("greedy L=%d", deep), DecodeMode::Greedy));
    if (deep >= 2) {
        ModeSpec s = base(format("speculative %d->%d", std::min(2, deep - 1), deep), DecodeMode::Speculative);
        s.run.speculation.draft_loops = std::min(2, deep - 1);
        s.run.speculation.verify_loops = deep;
        s.run.speculation.draft_ahead = 4;
        out.push_back(s);
        ModeSpec t = base(format("tree %d->%d K=2", std::min(2, deep - 1), deep), DecodeMode::Tree);
        t.run.speculation = s.run.speculation;
        t.run.speculation.branches = 2;
        out.push_back(t);
    }
    for (float thr : {0.1f, 0.2f}) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "early exit l2<%.2f", static_cast<double>(thr));
        ModeSpec e = base(buf, DecodeMode::EarlyExit);
        e.run.config.early_exit_patience = 1;
        e.run.config.early_exit_min_L = 2;
        e.run.config.early_exit_criterion = EarlyExitCriterion::HiddenL2;
        e.run.config.early_exit_threshold = thr;
        out.push_back(e);
    }
    ModeSpec smp = base("sampling T=0.8 seed=7", DecodeMode::Sample);
    smp.run.config.temperature = 0.8f;
    smp.run.config.top_k = 40;
    smp.run.config.sample_seed = 7;
    out.push_back(smp);
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
    run.speculative = rs.mode == DecodeMode::Speculative || rs.mode == DecodeMode::Tree ||
                      rs.mode == DecodeMode::DraftModel;
    if (run.speculative && rs.mode != DecodeMode::DraftModel)
        run.loops = resolved_speculation(model, rs).verify_loops;
    else
        run.loops = rs.config.loops > 0 ? rs.config.loops : model_hparams(model).default_loops;
    GenerateResult out = run_decode(model, prompt.data(), static_cast<int>(prompt.size()), rs, options);
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
