#include <tinyloop_analysis/exit_calibration.h>

#include <algorithm>
#include <stdexcept>

#include <tinyloop/json.h>
#include <tinyloop/mode_rules.h>

namespace tinyloop::analysis {

namespace {

void check_cancel(const std::atomic<bool>* cancel) {
    if (cancel && cancel->load()) throw std::runtime_error("cancelled");
}

[[noreturn]] void bad(const std::string& m) { throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, m); }

}  // namespace

CalibData collect_calibration(tinyloop::Model* model, const std::vector<int32_t>& prompt, int max_tokens, int loops,
                              const std::atomic<bool>* cancel) {
    if (max_tokens < 2 || max_tokens > 1024) bad("max_tokens: " + std::to_string(max_tokens) + " is outside [2, 1024]");
    if (prompt.empty()) bad("prompt: must hold at least one token");
    const tinyloop::HParams& hp = tinyloop::model_hparams(model);
    CalibData d;
    d.loops = tinyloop::resolve_loops(hp, loops);
    tinyloop::RunSpec greedy;
    greedy.mode = tinyloop::DecodeMode::Greedy;
    greedy.config.max_tokens = max_tokens;
    greedy.config.loops = d.loops;
    const tinyloop::GenerateResult g =
        tinyloop::run_decode(model, prompt.data(), static_cast<int>(prompt.size()), greedy);
    check_cancel(cancel);
    d.tokens = g.tokens;
    d.prompt_len = g.prompt_len;
    const int n = static_cast<int>(d.tokens.size());
    for (int32_t t : d.tokens) d.pieces.push_back(tinyloop::detokenize_text(model, &t, 1));
    d.exits = tinyloop::early_exit_signals(model, d.tokens.data(), n, d.loops);
    check_cancel(cancel);
    // The greedy pick of each depth's lens, over the ids the tokenizer can decode (as decode's).
    const std::vector<float> lens = tinyloop::forward_lens_logits(model, d.tokens.data(), n, d.loops);
    const int V = hp.vocab_size;
    const int ids = std::min(V, tinyloop::model_info(model).tokenizer_vocab);
    d.lens_argmax.assign(static_cast<size_t>(n) * d.loops, 0);
    for (int l = 1; l <= d.loops; ++l)
        for (int p = 0; p < n; ++p) {
            const float* row = lens.data() + (static_cast<size_t>(l - 1) * n + p) * V;
            d.lens_argmax[static_cast<size_t>(p) * d.loops + (l - 1)] =
                static_cast<int32_t>(std::max_element(row, row + ids) - row);
        }
    return d;
}

float display_signal(tinyloop::EarlyExitCriterion c, float s) {
    return c == tinyloop::EarlyExitCriterion::LogitMargin ? -s : s;
}

const char* criterion_label(tinyloop::EarlyExitCriterion c) { return tinyloop::criterion_name(c); }

std::vector<CalibToken> rescore_calibration(const CalibData& d, const EarlyExitPolicy& given) {
    tinyloop::validate_early_exit(given, d.loops, "");
    if (given.patience < 1) bad("patience: " + std::to_string(given.patience) + " must be >= 1");
    const EarlyExitPolicy p = tinyloop::effective_exit_policy(given);
    std::vector<CalibToken> out;
    for (int i = 1; i < d.emitted(); ++i) {
        CalibToken t;
        t.index = i;
        t.row = d.prompt_len + i - 1;
        t.full_token = d.tokens[static_cast<size_t>(d.prompt_len + i)];
        // decode_step_adaptive's rule, on the recorded signals
        t.exit_depth = d.loops;
        int stable = 0;
        for (int pass = 1; pass < d.loops; ++pass) {
            if (!tinyloop::exit_probe_at(p, pass, d.loops)) continue;
            if (tinyloop::exit_after_probe(p, d.exits.at(p.criterion, t.row, pass), stable)) {
                t.exit_depth = pass;
                break;
            }
        }
        t.exit_token = d.argmax_at(t.row, t.exit_depth);
        t.flagged = t.exit_token != t.full_token;
        out.push_back(t);
    }
    return out;
}

nlohmann::json calibration_json(const CalibData& d, const EarlyExitPolicy& p, const std::vector<CalibToken>& scored) {
    nlohmann::json j;
    j["view"] = "early-exit calibration";
    j["loops"] = d.loops;
    j["prompt_len"] = d.prompt_len;
    j["tokens"] = d.tokens;
    j["pieces"] = d.pieces;
    j["policy"] = tinyloop::early_exit_policy_to_json(p);
    nlohmann::json traces = nlohmann::json::object();
    const int n = static_cast<int>(d.tokens.size());
    for (int c = 0; c < 5; ++c) {
        const auto crit = static_cast<tinyloop::EarlyExitCriterion>(c);
        nlohmann::json rows = nlohmann::json::array();
        for (int pos = 0; pos < n; ++pos) {
            nlohmann::json row = nlohmann::json::array();
            for (int l = 1; l <= d.loops; ++l) row.push_back(display_signal(crit, d.exits.at(crit, pos, l)));
            rows.push_back(row);
        }
        traces[criterion_label(crit)] = rows;  // [position][pass-1], display units
    }
    j["traces"] = traces;
    nlohmann::json toks = nlohmann::json::array();
    int flagged = 0;
    for (const CalibToken& t : scored) {
        toks.push_back({{"index", t.index}, {"row", t.row}, {"exit_depth", t.exit_depth},
                        {"full_token", t.full_token}, {"exit_token", t.exit_token}, {"flagged", t.flagged}});
        flagged += t.flagged;
    }
    j["scored"] = toks;
    j["flagged"] = flagged;
    return j;
}

}  // namespace tinyloop::analysis
