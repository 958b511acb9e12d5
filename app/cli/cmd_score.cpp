// tinyloop score MODEL (--text TEXT | --file F | --ids 1,2,3): per-token log-probabilities,
// total negative log-likelihood and perplexity at one loop depth; optionally the uncertainty
// signals (entropy, margin, prediction depth) and consistency escalation over depth rungs.
#include <cstdio>
#include <sstream>

#include "commands.h"
#include "common.h"

namespace tinyloop::cli {

CommandSpec score_spec() {
    CommandSpec s;
    s.name = "score";
    s.synopsis =
        "MODEL (--text TEXT | --file F | --ids 1,2,3) [--loops L] [--uncertainty]\n"
        "       [--escalate DEPTHS [--signal entropy|margin|disagreement] [--threshold X]] [--json]";
    s.summary =
        "Scores a text: the log-probability of every token given the ones before it, the total\n"
        "negative log-likelihood and the perplexity, at loop depth L. --uncertainty adds per\n"
        "position the entropy and top-1/top-2 margin of the final distribution and the depth from\n"
        "which its argmax stays put. --escalate scores at the first depth rung and sends only the\n"
        "positions whose signal crosses the threshold on to deeper rungs.";
    const std::string I = "Input", O = "Scoring", E = "Escalation (--escalate)";
    s.options = {
        {"--text", "TEXT", "the text to score", "", false, I},
        {"--file", "F", "read the text from file F (- for stdin)", "", false, I},
        {"--ids", "IDS", "token ids to score: 1,2,3", "", false, I},
        {"--parse-special", "", "treat special-token strings (<|endoftext|>) in the text as tokens",
         "", false, I},
        {"--loops", "L", "loop depth, 1..max_loops (default: the model's default_loops)",
         "an integer in [1, max_loops]", false, O},
        {"--last-token", "K", "add the last position's top-K next tokens (score_last_token)", "an integer >= 1",
         false, O},
        {"--kv-cache", "T", "KV cache the scoring prefill goes through: f32 (default) | int8",
         "one of f32, int8", false, O},
        {"--uncertainty", "", "add entropy, margin and prediction depth per position", "", false,
         O},
        {"--escalate", "DEPTHS", "increasing depth rungs, e.g. 2,4,8 (replaces --loops)",
         "a comma-separated list of increasing depths like 2,4,8", false, E},
        {"--signal", "S",
         "entropy (> X nats escalates; default) | margin (top-1 - top-2 < X) | disagreement\n"
         "                              (argmax changed from the depth before; no threshold)",
         "one of entropy, margin, disagreement", false, E},
        {"--threshold", "X", "escalation threshold (default 2.0 for entropy, 0.1 for margin)",
         "a number", false, E},
        {"--early-exit", "C", "score with early exit: l2 | margin | kl | entropy | argmax (at --loops)",
         "one of l2, margin, kl, entropy, argmax", false, "Early exit (--early-exit)"},
        {"--early-exit-threshold", "X", "stability threshold (default 0.05; margin: logit margin)",
         "a number > 0", false, "Early exit (--early-exit)"},
        {"--early-exit-patience", "P", "consecutive stable probes before exiting (default 1)",
         "an integer >= 1", false, "Early exit (--early-exit)"},
        {"--early-exit-min-l", "M", "first depth probed (default 2)", "an integer >= 1", false,
         "Early exit (--early-exit)"},
    };
    for (auto& o : common_options()) s.options.push_back(o);
    s.notes =
        "The first token has no log-probability (nothing precedes it); at least two are needed.\n"
        "\n"
        "--json prints one object: model, tokens (ids), token_texts, token_logprobs (n-1 values:\n"
        "log p(token[i+1] | tokens[..i])), total_nll, perplexity, loops.\n"
        "--uncertainty adds uncertainty{loops, entropy[n], margin[n], prediction_depth[n]}\n"
        "(position i's values describe the prediction of token i+1).\n"
        "--escalate: token_logprobs, total_nll and perplexity come from the depth each position\n"
        "used, loops is the deepest rung, and escalation{depths, signal, threshold, depth_used[n-1],\n"
        "escalated[n-1] (booleans), n_escalated, mean_depth, deepest, passes_run,\n"
        "--last-token K adds last_token{loops, top_ids, top_texts, top_probs}.\n"
        "--early-exit: scoring with each position stopping where the policy says (teacher-forced,\n"
        "exact keys by state propagation); adds early_exit{criterion, threshold, patience, min_L,\n"
        "depth_used[n], mean_depth}.\n"
        "passes_full (n x the deepest rung: what scoring everything at that depth runs)}.\n";
    return s;
}

int run_score(const Args& args) {
    const std::string model_path = args.single_positional("MODEL");
    const TokenInput input = read_token_input(args);
    const std::optional<int> loops_flag = args.get_int("--loops");
    const int loops = loops_flag.value_or(0);
    const bool want_uncertainty = args.has("--uncertainty");

    const bool escalate = args.has("--escalate");
    EscalationConfig esc;
    std::string signal_name = "entropy";
    if (escalate) {
        if (loops_flag)
            throw UsageError("--loops: not used with --escalate (the rungs are the depths)");
        esc.depths.clear();
        for (const auto& item : split_list("--escalate", *args.value("--escalate")))
            esc.depths.push_back(static_cast<int>(
                parse_integer("--escalate", item, 1, 1 << 16, "a depth (an integer >= 1)")));
        for (size_t i = 1; i < esc.depths.size(); ++i)
            if (esc.depths[i] <= esc.depths[i - 1])
                throw UsageError("--escalate: depths must increase, got '" +
                                 *args.value("--escalate") + "'");
        if (auto sig = args.value("--signal")) {
            signal_name = *sig;
            if (*sig == "entropy")
                esc.signal = EscalationSignal::Entropy;
            else if (*sig == "margin")
                esc.signal = EscalationSignal::Margin, esc.threshold = 0.1f;
            else if (*sig == "disagreement")
                esc.signal = EscalationSignal::Disagreement;
            else
                throw UsageError("--signal: expected one of entropy, margin, disagreement, got '" +
                                 *sig + "'");
        }
        if (auto t = args.get_float("--threshold")) {
            if (esc.signal == EscalationSignal::Disagreement)
                throw UsageError("--threshold: not used with --signal disagreement");
            esc.threshold = *t;
        }
    } else {
        for (const char* f : {"--signal", "--threshold"})
            if (args.has(f)) throw UsageError(std::string(f) + ": only used with --escalate");
    }
    // Early exit: teacher-forced, each position stops where the policy says (score_early_exit).
    const bool early = args.has("--early-exit");
    GenerateConfig ee;
    std::string crit_name = "l2";
    if (early) {
        if (escalate) throw UsageError("--early-exit: not used with --escalate");
        crit_name = *args.value("--early-exit");
        static const std::pair<const char*, EarlyExitCriterion> crits[] = {
            {"l2", EarlyExitCriterion::HiddenL2}, {"margin", EarlyExitCriterion::LogitMargin},
            {"kl", EarlyExitCriterion::KL}, {"entropy", EarlyExitCriterion::EntropyDelta},
            {"argmax", EarlyExitCriterion::ArgmaxStable}};
        bool found = false;
        for (const auto& [name, c] : crits)
            if (crit_name == name) ee.early_exit_criterion = c, found = true;
        if (!found)
            throw UsageError("--early-exit: expected one of l2, margin, kl, entropy, argmax, got '" + crit_name + "'");
        ee.loops = loops;
        ee.early_exit_patience = args.get_int("--early-exit-patience").value_or(1);
        if (auto v = args.get_int("--early-exit-min-l")) ee.early_exit_min_L = *v;
        if (auto v = args.get_float("--early-exit-threshold")) ee.early_exit_threshold = *v;
        if (ee.early_exit_criterion == EarlyExitCriterion::LogitMargin)
            ee.early_exit_logit_margin = ee.early_exit_threshold;
    } else {
        for (const char* f : {"--early-exit-threshold", "--early-exit-patience", "--early-exit-min-l"})
            if (args.has(f)) throw UsageError(std::string(f) + ": only used with --early-exit");
    }
    KVCacheType kv_cache = KVCacheType::F32;
    if (auto k = args.value("--kv-cache")) {
        if (*k != "f32" && *k != "int8") throw UsageError("--kv-cache: expected one of f32, int8, got '" + *k + "'");
        if (escalate || early) throw UsageError("--kv-cache: not used with --escalate or --early-exit");
        kv_cache = parse_kv_cache_type(*k);
    }
    const LoadOptions load = load_options(args);

    ModelPtr model = open_model(model_path, load);
    const std::vector<int32_t> ids = input_tokens(input, model.get(), 2);
    const int n = static_cast<int>(ids.size());
    const std::vector<std::pair<std::string, std::string>> fields = {
        {"loops", "--loops"}, {"depths", "--escalate"}, {"threshold", "--threshold"},
        {"signal", "--signal"}, {"early_exit_threshold", "--early-exit-threshold"},
        {"early_exit_patience", "--early-exit-patience"}, {"early_exit_min_L", "--early-exit-min-l"},
        {"early_exit_logit_margin", "--early-exit-threshold"}};
    auto engine = [&](auto&& f) {
        try {
            return f();
        } catch (const Error& e) {
            throw Error(e.code(), with_flag_name(e.what(), fields));
        }
    };

    ScoreResult r;
    EscalationResult er;
    std::vector<int> ee_depth;
    if (escalate) {
        er = engine([&] { return score_with_consistency_escalation(model.get(), ids.data(), n, esc); });
        r.token_logprobs = er.token_logprobs;
        r.total_nll = er.total_nll;
        r.perplexity = er.perplexity;
        r.loops = esc.depths.back();
    } else if (early) {
        r = engine([&] { return score_early_exit(model.get(), ids.data(), n, ee, &ee_depth); });
    } else {
        r = engine([&] { return score(model.get(), ids.data(), n, loops, kv_cache); });
    }
    const int last_k = static_cast<int>(args.get_int("--last-token").value_or(0));
    if (args.has("--last-token") && last_k < 1) throw UsageError("--last-token: expected an integer >= 1");
    LastTokenScore last;
    if (last_k > 0) last = engine([&] { return score_last_token(model.get(), ids.data(), n, loops, last_k); });
    UncertaintyResult ur;
    if (want_uncertainty)
        ur = engine([&] { return score_with_uncertainty(model.get(), ids.data(), n, loops); });

    std::vector<std::string> texts;
    for (int32_t id : ids) texts.push_back(token_text(model.get(), id));

    int n_escalated = 0;
    double mean_depth = 0;
    for (size_t i = 0; i < er.depth_used.size(); ++i) {
        n_escalated += er.escalated[i] ? 1 : 0;
        mean_depth += er.depth_used[i];
    }
    if (!er.depth_used.empty()) mean_depth /= static_cast<double>(er.depth_used.size());
    const long long passes_full = static_cast<long long>(n) * (escalate ? esc.depths.back() : 0);

    if (args.has("--json")) {
        std::vector<double> lp;
        for (float v : r.token_logprobs) lp.push_back(static_cast<double>(v));
        std::vector<std::string> clean;
        for (const auto& t : texts) clean.push_back(sanitize_utf8(t));
        nlohmann::json j = {{"model", model_path},
                            {"tokens", ids},
                            {"token_texts", clean},
                            {"token_logprobs", lp},
                            {"total_nll", r.total_nll},
                            {"perplexity", r.perplexity},
                            {"loops", r.loops},
                            {"kv_cache", kv_cache_type_name(kv_cache)}};
        if (last_k > 0) {
            std::vector<std::string> tt;
            std::vector<double> tp;
            for (int32_t id : last.top_ids) tt.push_back(sanitize_utf8(token_text(model.get(), id)));
            for (float v : last.top_probs) tp.push_back(f2d(v));
            j["last_token"] = {{"loops", last.loops}, {"top_ids", last.top_ids}, {"top_texts", tt}, {"top_probs", tp}};
        }
        if (want_uncertainty) {
            std::vector<double> ent, mar;
            for (float v : ur.entropy) ent.push_back(f2d(v));
            for (float v : ur.margin) mar.push_back(f2d(v));
            j["uncertainty"] = {{"loops", ur.loops},
                                {"entropy", ent},
                                {"margin", mar},
                                {"prediction_depth", ur.prediction_depth}};
        }
        if (escalate) {
            std::vector<bool> escd;
            for (char c : er.escalated) escd.push_back(c != 0);
            j["escalation"] = {
                {"depths", esc.depths},
                {"signal", signal_name},
                {"threshold", esc.signal == EscalationSignal::Disagreement
                                  ? nlohmann::json(nullptr)
                                  : nlohmann::json(f2d(esc.threshold))},
                {"depth_used", er.depth_used},
                {"escalated", escd},
                {"n_escalated", n_escalated},
                {"mean_depth", mean_depth},
                {"deepest", er.deepest},
                {"passes_run", er.passes_run},
                {"passes_full", passes_full}};
        }
        if (early) {
            double md = 0;
            for (int dd : ee_depth) md += dd;
            j["early_exit"] = {{"criterion", crit_name},
                               {"threshold", f2d(ee.early_exit_threshold)},
                               {"patience", ee.early_exit_patience},
                               {"min_L", ee.early_exit_min_L},
                               {"depth_used", ee_depth},
                               {"mean_depth", ee_depth.empty() ? 0.0 : md / ee_depth.size()}};
        }
        print_json(j);
        return 0;
    }

    std::ostringstream o;
    o << "     #       id  logprob";
    if (want_uncertainty) o << "  entropy  margin  pred_d";
    if (escalate) o << "  depth esc";
    o << "  token\n";
    for (size_t i = 0; i < ids.size(); ++i) {
        char line[160];
        if (i == 0)
            std::snprintf(line, sizeof(line), "%6zu %8d %8s", i, ids[i], "-");
        else
            std::snprintf(line, sizeof(line), "%6zu %8d %8.4f", i, ids[i],
                          i - 1 < r.token_logprobs.size()
                              ? static_cast<double>(r.token_logprobs[i - 1])
                              : 0.0);
        o << line;
        // Position i's uncertainty describes the prediction of token i+1; shown on token i+1's
        // row beside its logprob, so each row reads "how this token was predicted".
        if (want_uncertainty) {
            if (i == 0)
                std::snprintf(line, sizeof(line), "  %7s %7s %7s", "-", "-", "-");
            else
                std::snprintf(line, sizeof(line), "  %7.3f %7.3f %7d",
                              static_cast<double>(ur.entropy[i - 1]),
                              static_cast<double>(ur.margin[i - 1]), ur.prediction_depth[i - 1]);
            o << line;
        }
        if (escalate) {
            if (i == 0)
                std::snprintf(line, sizeof(line), "  %5s %3s", "-", "-");
            else
                std::snprintf(line, sizeof(line), "  %5d %3s", er.depth_used[i - 1],
                              er.escalated[i - 1] ? "yes" : "");
            o << line;
        }
        o << "  \"" << display_text(texts[i]) << "\"\n";
    }
    char summary[400];
    std::snprintf(summary, sizeof(summary),
                  "total NLL %.4f nats over %zu predicted tokens, perplexity %.4f, loops %d\n",
                  r.total_nll, ids.size() - 1, r.perplexity, r.loops);
    o << summary;
    if (escalate) {
        std::string rungs;
        for (int d : esc.depths) rungs += (rungs.empty() ? "" : ",") + std::to_string(d);
        std::snprintf(summary, sizeof(summary),
                      "escalation: rungs %s, signal %s, %d of %zu positions escalated, mean depth "
                      "%.2f, %lld loop passes run (%lld for all positions at depth %d)\n",
                      rungs.c_str(), signal_name.c_str(), n_escalated, er.depth_used.size(),
                      mean_depth, er.passes_run, passes_full, esc.depths.back());
        o << summary;
    }
    if (last_k > 0) {
        o << "next token after the last position (depth " << last.loops << "):";
        for (size_t k = 0; k < last.top_ids.size(); ++k) {
            char cell[64];
            std::snprintf(cell, sizeof(cell), " %.4f", static_cast<double>(last.top_probs[k]));
            o << " '" << display_text(token_text(model.get(), last.top_ids[k])) << "'" << cell;
        }
        o << "\n";
    }
    std::string s = o.str();
    std::fwrite(s.data(), 1, s.size(), stdout);
    return 0;
}

}  // namespace tinyloop::cli
