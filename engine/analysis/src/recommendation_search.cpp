// Finding a checkpoint's recommended settings (recommendation_search.h).
#include "tinyloop_analysis/recommendation_search.h"

#include <algorithm>
#include <cmath>

#include <tinyloop/json.h>

namespace tinyloop::analysis {

namespace {

using tinyloop::EarlyExitCriterion;

[[noreturn]] void bad_arg(const std::string& m) { throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, m); }

struct GridLine {
    EarlyExitCriterion criterion;
    std::vector<float> thresholds;
};

// Thresholds on each criterion's own scale, loose to strict enough to span "every position exits
// at the first probe" to "none does" on the bundled models.
const std::vector<GridLine>& exit_grid() {
    static const std::vector<GridLine> g = {
        {EarlyExitCriterion::HiddenL2, {0.05f, 0.1f, 0.2f, 0.3f, 0.5f}},
        {EarlyExitCriterion::KL, {0.01f, 0.03f, 0.1f, 0.3f}},
        {EarlyExitCriterion::EntropyDelta, {0.05f, 0.1f, 0.2f, 0.5f}},
        {EarlyExitCriterion::LogitMargin, {1.0f, 2.0f, 4.0f}},
        {EarlyExitCriterion::ArgmaxStable, {0.5f}},
    };
    return g;
}

// Multiply-adds per token, per the hyperparameters: one block, the head.
double block_macs(const tinyloop::HParams& hp) {
    const double d = hp.d_model, H = double(hp.n_heads) * hp.head_dim, Hkv = double(hp.n_kv_heads) * hp.head_dim;
    return d * H * 2 + d * Hkv * 2 + 3.0 * d * hp.d_ff;
}

// A position's cost relative to the fixed depth: the prelude, its passes, the head once, and a
// head per probe for the criteria that read the lens (all but hidden_l2, which compares states).
double relative_cost(const tinyloop::HParams& hp, const ExitCandidate& c, int loops) {
    const double block = block_macs(hp), head = double(hp.vocab_size) * hp.d_model;
    const double pre = hp.n_pre_blocks * block, pass = hp.n_loop_layers * block;
    const double probe = c.policy.criterion == EarlyExitCriterion::HiddenL2 ? 0.0 : head;
    double probes = 0, positions = 0;
    for (size_t i = 0; i < c.depth_counts.size(); ++i) {
        const int depth = static_cast<int>(i) + 1;
        probes += c.depth_counts[i] * std::max(0, std::min(depth, loops - 1) - c.policy.min_L + 1);
        positions += c.depth_counts[i];
    }
    const double mean_probes = positions > 0 ? probes / positions : 0.0;
    return (pre + c.mean_depth * pass + head + mean_probes * probe) / (pre + loops * pass + head);
}

}  // namespace

ExitSearch search_exit_policy(tinyloop::Model* model, const std::vector<int32_t>& tokens, double nll_tolerance,
                              const std::atomic<bool>* cancel, const std::function<void(int, int)>& progress) {
    const auto& hp = tinyloop::model_hparams(model);
    const int n = static_cast<int>(tokens.size());
    if (n < 2 || n > hp.max_seq_len)
        bad_arg("text: " + std::to_string(n) + " tokens is outside [2, max_seq_len = " + std::to_string(hp.max_seq_len) + "]");
    if (!(nll_tolerance >= 0 && nll_tolerance <= 1))
        bad_arg("nll_tolerance: " + std::to_string(nll_tolerance) + " is outside [0, 1]");
    ExitSearch s;
    s.loops = hp.default_loops;
    s.nll_tolerance = nll_tolerance;
    s.base_nll = tinyloop::score(model, tokens.data(), n, s.loops).total_nll / (n - 1);
    std::vector<ExitCandidate> plan;
    for (const GridLine& line : exit_grid())
        for (float t : line.thresholds)
            for (int patience : {1, 2})
                for (int min_L : {1, 2})
                    if (min_L < s.loops) {
                        ExitCandidate c;
                        c.policy.criterion = line.criterion;
                        c.policy.threshold = t;
                        c.policy.patience = patience;
                        c.policy.min_L = min_L;
                        plan.push_back(std::move(c));
                    }
    int done = 0;
    for (ExitCandidate c : plan) {
        if (cancel && cancel->load()) break;
        tinyloop::GenerateConfig cfg;
        cfg.loops = s.loops;
        cfg.early_exit = c.policy;
        std::vector<int> depth;
        c.nll = tinyloop::score_early_exit(model, tokens.data(), n, cfg, &depth).total_nll / (n - 1);
        c.depth_counts.assign(static_cast<size_t>(s.loops), 0);
        double sum = 0;
        for (int d : depth) {
            ++c.depth_counts[static_cast<size_t>(std::clamp(d, 1, s.loops) - 1)];
            sum += d;
        }
        c.mean_depth = depth.empty() ? s.loops : sum / static_cast<double>(depth.size());
        c.relative_cost = relative_cost(hp, c, s.loops);
        s.candidates.push_back(std::move(c));
        if (progress) progress(++done, static_cast<int>(plan.size()));
    }
    const double limit = s.base_nll * (1.0 + nll_tolerance);
    for (size_t i = 0; i < s.candidates.size(); ++i) {
        const ExitCandidate& c = s.candidates[i];
        if (c.nll > limit || c.mean_depth >= s.loops || c.relative_cost >= 1.0) continue;
        // The cheapest wins; at equal cost (within 1%) the lower NLL.
        if (s.best < 0) {
            s.best = static_cast<int>(i);
            continue;
        }
        const ExitCandidate& b = s.candidates[static_cast<size_t>(s.best)];
        if (c.relative_cost < b.relative_cost - 0.01 ||
            (std::fabs(c.relative_cost - b.relative_cost) <= 0.01 && c.nll < b.nll))
            s.best = static_cast<int>(i);
    }
    return s;
}

double modelled_speedup(const SweepCell& c, int verify_loops) {
    if (c.cycles <= 0) return 0.0;
    const double tokens_per_cycle = static_cast<double>(c.tokens) / c.cycles;
    const double passes = double(c.draft_ahead) * c.draft_loops + double(verify_loops - c.draft_loops);
    return passes > 0 ? tokens_per_cycle * verify_loops / passes : 0.0;
}

int best_paying_cell(const SweepResult& sweep, bool tree) {
    int best = -1;
    for (size_t i = 0; i < sweep.cells.size(); ++i) {
        const SweepCell& c = sweep.cells[i];
        if (!c.error.empty() || c.runs == 0 || !c.equals_greedy || (c.branches > 0) != tree) continue;
        // Only a cell faster than greedy beyond the noise of the same run counts (the sweep view's
        // rule for "best", timing_stats.h), and among those the measured wall speedup decides: the
        // model of passes counts a batched verification as one pass and a draft pass as a full
        // pass, which on a CPU over-rates long drafts (v4 prose: a cell modelled at 1.83x measured
        // 1.16x while a shorter one measured more).
        if (!c.speedup().beyond_noise) continue;
        if (best < 0 || c.measured_speedup() > sweep.cells[static_cast<size_t>(best)].measured_speedup())
            best = static_cast<int>(i);
    }
    return best;
}

tinyloop::Recommendation recommendation_from(const ExitSearch* exits, const SweepResult* sweep) {
    tinyloop::Recommendation r;
    if (exits && exits->best >= 0) {
        const ExitCandidate& c = exits->candidates[static_cast<size_t>(exits->best)];
        r.early_exit = c.policy;
    }
    if (sweep) {
        const int chain = best_paying_cell(*sweep, false);
        const int tree = best_paying_cell(*sweep, true);
        // one draft depth for both kinds (the file holds one): the chain's when it pays, else the tree's
        if (chain >= 0) {
            r.set_draft_loops(sweep->cells[static_cast<size_t>(chain)].draft_loops);
            r.chain.draft_ahead = sweep->cells[static_cast<size_t>(chain)].draft_ahead;
        }
        if (tree >= 0) {
            r.tree.draft_ahead = sweep->cells[static_cast<size_t>(tree)].draft_ahead;
            r.tree.branches = sweep->cells[static_cast<size_t>(tree)].branches;
            if (chain < 0) r.set_draft_loops(sweep->cells[static_cast<size_t>(tree)].draft_loops);
        }
    }
    return r;
}

namespace {

nlohmann::json candidate_json(const ExitCandidate& c) {
    nlohmann::json j = tinyloop::early_exit_policy_to_json(c.policy);
    j.erase("peek_every");  // every candidate probes each pass: the record keeps its shape
    j.update({{"nll_per_token", c.nll},
            {"mean_depth", c.mean_depth},
            {"relative_cost", c.relative_cost},
            {"depth_counts", c.depth_counts}});
    return j;
}

nlohmann::json cell_json(const SweepCell& c, int verify_loops) {
    return {{"draft_loops", c.draft_loops},
            {"verify_loops", verify_loops},
            {"draft_ahead", c.draft_ahead},
            {"branches", c.branches},
            {"acceptance", c.acceptance()},
            {"tokens_per_cycle", c.cycles > 0 ? double(c.tokens) / c.cycles : 0.0},
            {"modelled_speedup", modelled_speedup(c, verify_loops)},
            {"measured_speedup", c.measured_speedup()},
            {"equals_greedy", c.equals_greedy}};
}

}  // namespace

nlohmann::json exit_search_to_json(const ExitSearch& s) {
    nlohmann::json all = nlohmann::json::array();
    for (const ExitCandidate& c : s.candidates) all.push_back(candidate_json(c));
    return {{"loops", s.loops},
            {"nll_per_token_at_loops", s.base_nll},
            {"nll_tolerance", s.nll_tolerance},
            {"chosen", s.best >= 0 ? candidate_json(s.candidates[static_cast<size_t>(s.best)]) : nlohmann::json(nullptr)},
            {"candidates", all}};
}

nlohmann::json speculation_choice_to_json(const SweepResult& sweep) {
    const int chain = best_paying_cell(sweep, false);
    const int tree = best_paying_cell(sweep, true);
    auto pick = [&](int i) { return i >= 0 ? cell_json(sweep.cells[static_cast<size_t>(i)], sweep.verify_loops) : nlohmann::json(nullptr); };
    nlohmann::json cells = nlohmann::json::array();
    for (const SweepCell& c : sweep.cells) cells.push_back(cell_json(c, sweep.verify_loops));
    return {{"prompts", sweep.spec.prompts.size()}, {"max_tokens", sweep.spec.max_tokens}, {"verify_loops", sweep.verify_loops},
            {"chain", pick(chain)}, {"tree", pick(tree)}, {"cells", cells}};
}

std::string metadata_with_recommendation(const std::string& metadata_json, const tinyloop::Recommendation& rec,
                                         const nlohmann::json& measured) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::parse(metadata_json.empty() ? "{}" : metadata_json);
    if (!meta.is_object()) bad_arg("metadata: expected a JSON object");
    nlohmann::ordered_json& out = meta["recommended"];
    if (!out.is_object()) out = nlohmann::ordered_json::object();
    // A part measured now replaces the stored one, also when the search found nothing that pays
    // (a setting copied from another file by `tinyloop quantize` must not outlive a measurement
    // that rejects it); a part not measured now is kept.
    const nlohmann::json parts = tinyloop::recommendation_to_json(rec);
    for (const char* part : {"speculation", "early_exit"}) {
        if (parts.contains(part)) out[part] = nlohmann::ordered_json::parse(parts[part].dump());
        else if (measured.contains(part)) out.erase(part);
        if (!measured.contains(part)) continue;
        // The chosen setting and what it was compared with; the whole grid stays out of the file.
        nlohmann::json m = measured[part];
        m.erase("candidates");
        m.erase("cells");
        out["measured"][part] = nlohmann::ordered_json::parse(m.dump());
    }
    return meta.dump();
}

}  // namespace tinyloop::analysis
