#include <tinyloop_analysis/depth_scrubber.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include <tinyloop_analysis/compare_modes.h>

namespace tlui {

namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

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

}  // namespace

// ---------------------------------------------------------------------------------------------

std::vector<DiffOp> diffTokens(const std::vector<int32_t>& from, const std::vector<int32_t>& to) {
    const size_t n = from.size(), m = to.size();
    // lcs[i][j]: LCS length of from[i..] and to[j..]
    std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
    for (size_t i = n; i-- > 0;)
        for (size_t j = m; j-- > 0;)
            lcs[i][j] = from[i] == to[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    std::vector<DiffOp> ops;
    size_t i = 0, j = 0;
    while (i < n || j < m) {
        if (i < n && j < m && from[i] == to[j]) {
            ops.push_back({DiffOp::Same, from[i]});
            ++i, ++j;
        } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
            ops.push_back({DiffOp::Removed, from[i++]});
        } else {
            ops.push_back({DiffOp::Added, to[j++]});
        }
    }
    return ops;
}

// ---------------------------------------------------------------------------------------------

DepthScrubber::DepthScrubber(tinyloop::Model* model, std::vector<int32_t> prompt,
                             const tinyloop::GenerateConfig& config, int startDepth)
    : m_model(model), m_prompt(std::move(prompt)), m_config(config) {
    const auto& hp = tinyloop::model_hparams(model);
    if (startDepth < 1 || startDepth > hp.max_loops)
        badArg("depth: " + std::to_string(startDepth) + " is outside [1, " + std::to_string(hp.max_loops) + "]");
    tinyloop::GenerateConfig probe = m_config;
    probe.loops = startDepth;
    tinyloop::validate_config(model, static_cast<int>(m_prompt.size()), probe);
    m_handle = tinyloop::create_resume_handle(model, m_prompt.data(), static_cast<int>(m_prompt.size()), startDepth);
}

DepthScrubber::~DepthScrubber() { tinyloop::free_resume_handle(m_handle); }

int DepthScrubber::handleLoops() const { return tinyloop::resume_handle_loops(m_handle); }
size_t DepthScrubber::handleBytes() const { return tinyloop::resume_handle_bytes(m_handle); }

ScrubAnswer DepthScrubber::answer(int depth) {
    const auto& hp = tinyloop::model_hparams(m_model);
    if (depth < 1 || depth > hp.max_loops)
        badArg("depth: " + std::to_string(depth) + " is outside [1, " + std::to_string(hp.max_loops) + "]");
    ScrubAnswer a;
    a.depth = depth;
    a.handleLoopsBefore = handleLoops();
    tinyloop::GenerateConfig cfg = m_config;
    cfg.loops = depth;
    const auto t0 = Clock::now();
    tinyloop::GenerateResult r = tinyloop::resume_generate(m_handle, cfg);
    a.ms = msSince(t0);
    a.handleLoopsAfter = handleLoops();
    a.tokens.assign(r.tokens.begin() + r.prompt_len, r.tokens.end());
    a.text = std::move(r.text);
    a.stats = std::move(r.stats);
    return a;
}

// ---------------------------------------------------------------------------------------------

AgreementMap agreementFromArgmax(const std::vector<std::vector<int32_t>>& argmax) {
    if (argmax.empty()) throw std::invalid_argument("argmax: no positions");
    const size_t depths = argmax.front().size();
    if (depths == 0) throw std::invalid_argument("argmax[0]: no depths");
    AgreementMap m;
    m.finalDepth = static_cast<int>(depths);
    m.argmax = argmax;
    m.firstAgree.reserve(argmax.size());
    for (size_t j = 0; j < argmax.size(); ++j) {
        if (argmax[j].size() != depths)
            throw std::invalid_argument("argmax[" + std::to_string(j) + "]: " + std::to_string(argmax[j].size()) +
                                        " depths, expected " + std::to_string(depths));
        int first = m.finalDepth;
        for (int d = 1; d <= m.finalDepth; ++d)
            if (argmax[j][static_cast<size_t>(d - 1)] == argmax[j][depths - 1]) {
                first = d;
                break;
            }
        m.firstAgree.push_back(first);
    }
    return m;
}

AgreementMap buildAgreementMap(tinyloop::Model* model, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& continuation, int finalDepth) {
    if (prompt.empty()) badArg("prompt: must hold at least one token");
    if (continuation.empty()) badArg("continuation: must hold at least one token");
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), continuation.begin(), continuation.end());
    // The last continuation token predicts nothing we read, so the lens stops one short of it.
    const int n = static_cast<int>(seq.size()) - 1;
    const tinyloop::LensResult lens = tinyloop::score_logit_lens(model, seq.data(), n, finalDepth, 1);
    std::vector<std::vector<int32_t>> table(continuation.size(), std::vector<int32_t>(static_cast<size_t>(lens.loops)));
    for (size_t j = 0; j < continuation.size(); ++j) {
        const int pos = static_cast<int>(prompt.size()) - 1 + static_cast<int>(j);
        for (int d = 1; d <= lens.loops; ++d) table[j][static_cast<size_t>(d - 1)] = lens.at(pos, d).argmax;
    }
    AgreementMap m = agreementFromArgmax(table);
    m.prompt = prompt;
    m.continuation = continuation;
    return m;
}

double predictedAcceptance(const AgreementMap& map, int draftDepth) {
    if (draftDepth < 1 || draftDepth > map.finalDepth)
        badArg("draft_loops: " + std::to_string(draftDepth) + " is outside [1, " + std::to_string(map.finalDepth) + "]");
    int n = 0, ok = 0;
    for (int j = 1; j < map.positions(); ++j, ++n) ok += map.agrees(j, draftDepth) ? 1 : 0;
    return n > 0 ? double(ok) / n : 0.0;
}

ChainReplay replayChain(const AgreementMap& map, int draftDepth, int draftAhead, int maxTokens) {
    if (draftDepth < 1 || draftDepth >= map.finalDepth)
        badArg("draft_loops: " + std::to_string(draftDepth) + " is outside [1, " + std::to_string(map.finalDepth - 1) + "]");
    if (draftAhead < 1) badArg("draft_ahead: " + std::to_string(draftAhead) + " is outside [1, 32]");
    const int n = map.positions();
    const int cap = maxTokens > 0 ? std::min(maxTokens, n) : n;
    ChainReplay r;
    int e = std::min(1, cap);  // the first token comes from the prefill
    while (e < cap) {
        const int k = std::min(draftAhead, (maxTokens > 0 ? maxTokens : n) - e);
        int drafted = 0, a = 0;
        bool rejected = false;
        for (int i = 0; i < k && e + i < n; ++i) {
            ++drafted;
            if (!rejected && map.agrees(e + i, draftDepth)) ++a;
            else rejected = true;
        }
        r.cycles++;
        r.drafted += drafted;
        r.accepted += a;
        e += a + (a < drafted ? 1 : 0);
        if (drafted == 0) break;
    }
    r.emitted = std::min(e, cap);
    return r;
}

double predictedSpeedup(double alpha, int draftDepth, int verifyDepth, int draftAhead) {
    if (verifyDepth <= 0 || draftAhead <= 0) return 0.0;
    const double a = std::clamp(alpha, 0.0, 1.0);
    const double tokens = a >= 1.0 ? draftAhead : (1.0 - std::pow(a, draftAhead)) / (1.0 - a);
    const double passes = double(draftAhead) * draftDepth + double(verifyDepth - draftDepth);
    return tokens * verifyDepth / passes;
}

double SweepCell::predictedSpeedup(int verifyLoops) const {
    return tlui::predictedSpeedup(predictedAcceptance, draftLoops, verifyLoops, draftAhead);
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

Preset SweepResult::bestPreset() const {
    Preset p;
    const int b = bestCell();
    if (b < 0) return p;
    const SweepCell& c = cells[static_cast<size_t>(b)];
    p.mode = c.branches > 0 ? DecodeMode::Tree : DecodeMode::Speculative;
    p.config.max_tokens = spec.maxTokens;
    p.config.temperature = 0.0f;
    p.knobs.draft_loops = c.draftLoops;
    p.knobs.verify_loops = verifyLoops;
    p.knobs.draft_ahead = c.draftAhead;
    p.knobs.K_branches = c.branches > 0 ? c.branches : 2;
    p.name = QString("Sweep best %1 %2->%3 k=%4%5")
                 .arg(c.branches > 0 ? "tree" : "chain")
                 .arg(c.draftLoops)
                 .arg(verifyLoops)
                 .arg(c.draftAhead)
                 .arg(c.branches > 0 ? QString(" K=%1").arg(c.branches) : QString());
    p.description = QString("From the speculation sweep over %1 prompt(s), %2 tokens each: measured %3x over "
                            "greedy at depth %4, acceptance %5%.")
                        .arg(spec.prompts.size())
                        .arg(spec.maxTokens)
                        .arg(c.measuredSpeedup(), 0, 'f', 2)
                        .arg(verifyLoops)
                        .arg(100.0 * c.acceptance(), 0, 'f', 1);
    return p;
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
        ModeSpec g;
        g.mode = DecodeMode::Greedy;
        g.config.max_tokens = spec.maxTokens;
        g.config.loops = r.verifyLoops;
        ModeRun run = runMode(model, r.promptIds.back(), g, opts);
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
            ModeSpec s;
            s.mode = c.branches > 0 ? DecodeMode::Tree : DecodeMode::Speculative;
            s.config.max_tokens = spec.maxTokens;
            s.knobs.draft_loops = c.draftLoops;
            s.knobs.verify_loops = r.verifyLoops;
            s.knobs.draft_ahead = c.draftAhead;
            s.knobs.K_branches = c.branches > 0 ? c.branches : 2;
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
        ModeSpec g;
        g.mode = DecodeMode::Greedy;
        g.config.max_tokens = spec.maxTokens;
        g.config.loops = r.verifyLoops;
        const ModeRun run = runMode(model, r.promptIds[static_cast<size_t>(p)], g, opts);
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

// ---------------------------------------------------------------------------------------------

nlohmann::json agreementToJson(const AgreementMap& m) {
    nlohmann::json pred = nlohmann::json::object();
    for (int d = 1; d <= m.finalDepth && m.positions() > 0; ++d) pred[std::to_string(d)] = predictedAcceptance(m, d);
    return {{"final_depth", m.finalDepth},
            {"prompt_ids", m.prompt},
            {"continuation_ids", m.continuation},
            {"argmax", m.argmax},
            {"first_agree_depth", m.firstAgree},
            {"predicted_acceptance", pred}};
}

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

}  // namespace tlui
