#include <tinyloop_analysis/compare_modes.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

namespace tlui {

using tinyloop::GenerateConfig;

namespace {
// snprintf, not string concatenation: GCC 12 warns (-Wrestrict, a false positive) on
// "literal" + std::to_string(...) at -O3.
std::string format(const char* fmt, int a, int b = 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, fmt, a, b);
    return buf;
}
}  // namespace

std::vector<ModeSpec> defaultCompareModes(const tinyloop::HParams& hp, int maxTokens) {
    const int maxL = std::max(1, hp.max_loops);
    const int deep = std::min(8, maxL);
    const int shallow = std::min(4, maxL);
    auto base = [&](const std::string& label, DecodeMode mode) {
        ModeSpec m;
        m.label = label;
        m.mode = mode;
        m.config.max_tokens = maxTokens;
        m.config.loops = deep;
        return m;
    };
    std::vector<ModeSpec> out;
    ModeSpec g4 = base(format("greedy L=%d", shallow), DecodeMode::Greedy);
    g4.config.loops = shallow;
    out.push_back(g4);
    out.push_back(base(format("greedy L=%d", deep), DecodeMode::Greedy));
    if (deep >= 2) {
        ModeSpec s = base(format("speculative %d->%d", std::min(2, deep - 1), deep), DecodeMode::Speculative);
        s.knobs.draft_loops = std::min(2, deep - 1);
        s.knobs.verify_loops = deep;
        s.knobs.draft_ahead = 4;
        out.push_back(s);
        ModeSpec t = base(format("tree %d->%d K=2", std::min(2, deep - 1), deep), DecodeMode::Tree);
        t.knobs = s.knobs;
        t.knobs.K_branches = 2;
        out.push_back(t);
    }
    for (float thr : {0.1f, 0.2f}) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "early exit l2<%.2f", static_cast<double>(thr));
        ModeSpec e = base(buf, DecodeMode::EarlyExit);
        e.config.early_exit_patience = 1;
        e.config.early_exit_min_L = 2;
        e.config.early_exit_criterion = tinyloop::EarlyExitCriterion::HiddenL2;
        e.config.early_exit_threshold = thr;
        out.push_back(e);
    }
    ModeSpec smp = base("sampling T=0.8 seed=7", DecodeMode::Sampling);
    smp.config.temperature = 0.8f;
    smp.config.top_k = 40;
    smp.config.sample_seed = 7;
    out.push_back(smp);
    return out;
}

double ModeRun::meanDepth() const {
    if (stats.depth_per_token.empty()) return 0.0;
    double s = 0;
    for (int d : stats.depth_per_token) s += d;
    return s / static_cast<double>(stats.depth_per_token.size());
}

double ModeRun::tokensPerSecond() const {
    return stats.total_ms > 0 ? stats.tokens_emitted * 1000.0 / stats.total_ms : 0.0;
}

std::vector<int32_t> promptIds(const tinyloop::Model* model, const std::string& text) {
    std::vector<int32_t> ids = tinyloop::tokenize(model, text);
    if (ids.empty()) {
        const auto info = tinyloop::model_info(model);
        const int32_t start = info.tokenizer.bos_id >= 0 ? info.tokenizer.bos_id : info.tokenizer.eos_id;
        if (start < 0)
            throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument,
                                  "prompt: empty, and the tokenizer has no BOS/EOS token to start from");
        ids.push_back(start);
    }
    return ids;
}

ModeRun runMode(tinyloop::Model* model, const std::vector<int32_t>& prompt, const ModeSpec& spec,
                const tinyloop::GenerateOptions& options) {
    const auto& hp = tinyloop::model_hparams(model);
    ModeRun run;
    run.spec = spec;
    GenerateConfig cfg = spec.config;
    const int n = static_cast<int>(prompt.size());
    run.loops = cfg.loops > 0 ? cfg.loops : hp.default_loops;
    tinyloop::GenerateResult out;
    switch (spec.mode) {
    case DecodeMode::Greedy:
        cfg.temperature = 0.0f;
        cfg.beam_size = 0;
        cfg.early_exit_patience = 0;
        out = tinyloop::generate_ex(model, prompt.data(), n, cfg, options);
        break;
    case DecodeMode::Sampling:
        cfg.beam_size = 0;
        cfg.early_exit_patience = 0;
        out = tinyloop::generate_ex(model, prompt.data(), n, cfg, options);
        break;
    case DecodeMode::EarlyExit:
        cfg.beam_size = 0;
        if (cfg.early_exit_patience <= 0)
            throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument,
                                  "early_exit_patience: must be >= 1 in early-exit mode (0 disables early exit)");
        out = tinyloop::generate_ex(model, prompt.data(), n, cfg, options);
        break;
    case DecodeMode::Beam:
        if (cfg.beam_size < 2)
            throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, "beam_size: must be >= 2 in beam mode");
        out = tinyloop::generate_ex(model, prompt.data(), n, cfg, options);
        break;
    case DecodeMode::Speculative: {
        tinyloop::SpeculativeConfig sc;
        sc.max_tokens = cfg.max_tokens;
        sc.verify_loops = spec.knobs.verify_loops > 0 ? spec.knobs.verify_loops : hp.default_loops;
        sc.draft_loops = spec.knobs.draft_loops;
        sc.draft_ahead = spec.knobs.draft_ahead;
        sc.temperature = cfg.temperature;
        sc.seed = cfg.sample_seed;
        sc.top_k = cfg.temperature > 0.01f ? cfg.top_k : 0;
        sc.top_p = cfg.top_p;
        sc.ignore_eos = cfg.ignore_eos;
        run.loops = sc.verify_loops;
        run.speculative = true;
        out = tinyloop::generate_speculative_ex(model, prompt.data(), n, sc, options);
        break;
    }
    case DecodeMode::Tree: {
        tinyloop::TreeSpeculativeConfig tc;
        tc.max_tokens = cfg.max_tokens;
        tc.verify_loops = spec.knobs.verify_loops > 0 ? spec.knobs.verify_loops : hp.default_loops;
        tc.draft_loops = spec.knobs.draft_loops;
        tc.draft_ahead = spec.knobs.draft_ahead;
        tc.K_branches = spec.knobs.K_branches;
        tc.temperature = cfg.temperature;
        tc.seed = cfg.sample_seed;
        tc.ignore_eos = cfg.ignore_eos;
        run.loops = tc.verify_loops;
        run.speculative = true;
        out = tinyloop::generate_tree_speculative_ex(model, prompt.data(), n, tc, options);
        break;
    }
    }
    run.tokens.assign(out.tokens.begin() + out.prompt_len, out.tokens.end());
    run.text = std::move(out.text);
    run.stats = std::move(out.stats);
    return run;
}

int firstDivergence(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    const size_t n = std::min(a.size(), b.size());
    for (size_t i = 0; i < n; ++i)
        if (a[i] != b[i]) return static_cast<int>(i);
    return a.size() == b.size() ? -1 : static_cast<int>(n);
}

void setBaseline(CompareResult& r, int baseline) {
    if (r.runs.empty()) {
        r.baseline = 0;
        r.divergence.clear();
        return;
    }
    r.baseline = std::clamp(baseline, 0, static_cast<int>(r.runs.size()) - 1);
    r.divergence.assign(r.runs.size(), -1);
    const ModeRun& b = r.runs[static_cast<size_t>(r.baseline)];
    for (size_t i = 0; i < r.runs.size(); ++i)
        r.divergence[i] = (r.runs[i].error.empty() && b.error.empty()) ? firstDivergence(r.runs[i].tokens, b.tokens) : 0;
}

CompareResult runComparison(tinyloop::Model* model, const std::string& prompt,
                            const std::vector<ModeSpec>& modes, int baseline, bool concurrent,
                            const std::atomic<bool>* cancel, const std::function<void(int)>& onDone) {
    CompareResult r;
    r.prompt = prompt;
    r.promptIds = promptIds(model, prompt);
    r.concurrent = concurrent;
    r.runs.resize(modes.size());
    tinyloop::GenerateOptions opts;
    if (cancel) opts.observer = [cancel](const tinyloop::TokenEvent&) { return !cancel->load(); };
    auto one = [&](size_t i) {
        try {
            r.runs[i] = runMode(model, r.promptIds, modes[i], opts);
        } catch (const std::exception& e) {
            r.runs[i] = ModeRun{};
            r.runs[i].spec = modes[i];
            r.runs[i].error = e.what();
        }
        if (onDone) onDone(static_cast<int>(i));
    };
    const auto t0 = std::chrono::steady_clock::now();
    if (concurrent) {
        std::vector<std::thread> threads;
        threads.reserve(modes.size());
        for (size_t i = 0; i < modes.size(); ++i) threads.emplace_back(one, i);
        for (auto& t : threads) t.join();
    } else {
        for (size_t i = 0; i < modes.size(); ++i) {
            if (cancel && cancel->load()) {
                r.runs[i].spec = modes[i];
                r.runs[i].error = "cancelled";
                continue;
            }
            one(i);
        }
    }
    r.wallMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    setBaseline(r, baseline);
    return r;
}

nlohmann::json runStatsToJson(const tinyloop::GenerateStats& s) {
    return {{"prefill_ms", s.prefill_ms},
            {"first_token_ms", s.first_token_ms},
            {"decode_ms", s.decode_ms},
            {"total_ms", s.total_ms},
            {"prompt_tokens", s.prompt_tokens},
            {"tokens_emitted", s.tokens_emitted},
            {"stop_reason", tinyloop::stop_reason_name(s.stop_reason)},
            {"loops_used", s.loops_used},
            {"depth_per_token", s.depth_per_token},
            {"spec_cycles", s.spec_cycles},
            {"spec_drafted", s.spec_drafted},
            {"spec_tested", s.spec_tested},
            {"spec_accepted", s.spec_accepted},
            {"spec_accept_hist", s.spec_accept_hist},
            {"spec_acceptance_rate", s.spec_acceptance_rate()},
            {"draft_ms", s.draft_ms},
            {"verify_ms", s.verify_ms}};
}

nlohmann::json modeSpecToJson(const ModeSpec& m) {
    return {{"label", m.label}, {"mode", modeName(m.mode)}, {"config", configToJson(m.config)},
            {"speculative", knobsToJson(m.knobs)}};
}

nlohmann::json compareToJson(const CompareResult& r) {
    nlohmann::json runs = nlohmann::json::array();
    for (size_t i = 0; i < r.runs.size(); ++i) {
        const ModeRun& m = r.runs[i];
        nlohmann::json j = {{"mode", modeSpecToJson(m.spec)},
                            {"loops", m.loops},
                            {"output_ids", m.tokens},
                            {"text", m.text},
                            {"stats", runStatsToJson(m.stats)},
                            {"mean_depth", m.meanDepth()},
                            {"tokens_per_s", m.tokensPerSecond()},
                            {"first_divergence", i < r.divergence.size() ? r.divergence[i] : -1}};
        if (!m.error.empty()) j["error"] = m.error;
        runs.push_back(std::move(j));
    }
    return {{"view", "compare"},   {"prompt", r.prompt}, {"prompt_ids", r.promptIds},
            {"baseline", r.baseline}, {"concurrent", r.concurrent}, {"wall_ms", r.wallMs},
            {"runs", runs}};
}

}  // namespace tlui
