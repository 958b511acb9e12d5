// tinyloop score MODEL (--text TEXT | --file F | --ids 1,2,3): per-token log-probabilities,
// total negative log-likelihood and perplexity at one loop depth; optionally the uncertainty
// signals (entropy, margin, prediction depth) and consistency escalation over depth rungs.
#include <algorithm>
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
        {"--kv-sharing", "MODES",
         "also measure KV sharing across passes: per-pass | last-pass | latest-m4 | compress-sK,\n"
         "                              a comma-separated list, or all (bytes/token and NLL change)",
         "a comma-separated list of per-pass, last-pass, latest-m4, compress-sK (K in 1..1024), or all", false, O},
        {"--prompt-tokens", "P", "--kv-sharing: tokens prefilled as the prompt, the rest fed one at a time\n"
         "                              (default: half the text)", "an integer in [1, n - 1]", false, O},
        {"--escalate", "DEPTHS", "increasing depth rungs, e.g. 2,4,8 (replaces --loops)",
         "a comma-separated list of increasing depths like 2,4,8", false, E},
        {"--signal", "S",
         "entropy (> X nats escalates; default) | margin (top-1 - top-2 < X) | disagreement\n"
         "                              (argmax changed from the depth before; no threshold)",
         "one of entropy, margin, disagreement", false, E},
        {"--threshold", "X", "escalation threshold (default 2.0 for entropy, 0.1 for margin)",
         "a number", false, E},
        {"--early-exit", "C", "score with early exit: l2 | margin | kl | entropy | argmax | gate | gate-select | reverse-kl | minp-kl | model (at --loops)",
         "one of l2, margin, kl, entropy, argmax, gate, gate-select, reverse-kl, minp-kl, model", false, "Early exit (--early-exit)"},
        {"--early-exit-threshold", "X", "stability threshold (default: the model's, else 0.05; margin: logit margin)",
         "a number > 0", false, "Early exit (--early-exit)"},
        {"--early-exit-patience", "P", "consecutive stable probes before exiting (default: the model's, else 1)",
         "an integer >= 1", false, "Early exit (--early-exit)"},
        {"--early-exit-min-l", "M", "first depth probed (default: the model's, else 2)", "an integer >= 1", false,
         "Early exit (--early-exit)"},
        {"--early-exit-peek-every", "E", "probe every E depths (default: the model's, else 1)", "an integer >= 1",
         false, "Early exit (--early-exit)"},
    };
    for (auto& o : common_options()) s.options.push_back(o);
    s.notes =
        "The first token has no log-probability (nothing precedes it); at least two are needed.\n"
        "Text output: one row per token (the logprob of that token given the ones before it,\n"
        "and with --uncertainty, --escalate or --early-exit how it was predicted: entropy,\n"
        "margin, prediction depth, the depth used), then a summary line per mode.\n"
        "\n"
        "--json prints one object: model, tokens (ids), token_texts, token_logprobs (n-1 values:\n"
        "log p(token[i+1] | tokens[..i])), total_nll, perplexity, loops, kv_cache (f32 | int8:\n"
        "the KV cache the scoring prefill went through).\n"
        "--uncertainty adds uncertainty{loops, entropy[n], margin[n], prediction_depth[n]}\n"
        "(position i's values describe the prediction of token i+1).\n"
        "--escalate: token_logprobs, total_nll and perplexity come from the depth each position\n"
        "used, loops is the deepest rung, and escalation{depths, signal, threshold, depth_used[n-1],\n"
        "escalated[n-1] (booleans), n_escalated, mean_depth, deepest, passes_run, passes_full\n"
        "(n x the deepest rung: what scoring everything at that depth runs)}.\n"
        "--early-exit: scoring with each position stopping where the policy says (teacher-forced,\n"
        "exact keys by state propagation); adds early_exit{criterion, threshold, patience, min_L,\n"
        "depth_used[n], mean_depth, n_exited (positions that stopped before loops)}. The text\n"
        "output says when no position exited (the threshold was never met).\n"
        "--last-token K adds last_token{loops, top_ids, top_texts, top_probs}.\n"
        "--kv-sharing adds kv_sharing: one object per mode {mode, prompt, loops, total_nll,\n"
        "exact_total_nll, delta_nll (nats per predicted token against per-pass), cache_bytes,\n"
        "bytes_per_token, exact_bytes_per_token, depth_used[n]}: the text's first P tokens\n"
        "prefilled, the rest fed one at a time as generate feeds its tokens (with --early-exit's\n"
        "policy when given), FORMAT.md §1c. \"all\" = per-pass, last-pass, latest-m4, compress-s4,\n"
        "compress-s8.\n";
    return s;
}

namespace {

// Everything the flags ask for, checked before the model loads.
struct ScoreFlags {
    std::optional<int> loops_given;
    int loops = 0;  // 0: the model's default_loops
    bool uncertainty = false;
    bool escalate = false;
    EscalationConfig esc;
    std::string signal_name = "entropy";
    bool early = false;
    GenerateConfig ee;  // the early-exit policy (score_early_exit)
    std::string crit_name = "l2";
    std::string ee_used;  // where the policy came from (cli_early_exit)
    KVCacheType kv_cache = KVCacheType::F32;
    int last_k = 0;
    std::vector<KVSharing> kv_sharing;  // --kv-sharing: the modes to measure
    std::optional<int> prompt_tokens;
};

void read_escalation_flags(const Args& args, ScoreFlags& f) {
    if (f.loops_given) throw UsageError("--loops: not used with --escalate (the rungs are the depths)");
    f.esc.depths.clear();
    for (const auto& item : split_list("--escalate", *args.value("--escalate")))
        f.esc.depths.push_back(static_cast<int>(
            parse_integer("--escalate", item, 1, INT32_MAX, "a depth in [1, max_loops]")));
    for (size_t i = 1; i < f.esc.depths.size(); ++i)
        if (f.esc.depths[i] <= f.esc.depths[i - 1])
            throw UsageError("--escalate: depths must increase, got '" + *args.value("--escalate") + "'");
    if (auto sig = args.value("--signal")) {
        f.signal_name = *sig;
        if (*sig == "entropy")
            f.esc.signal = EscalationSignal::Entropy;
        else if (*sig == "margin")
            f.esc.signal = EscalationSignal::Margin, f.esc.threshold = 0.1f;
        else if (*sig == "disagreement")
            f.esc.signal = EscalationSignal::Disagreement;
        else
            throw UsageError("--signal: expected one of entropy, margin, disagreement, got '" + *sig + "'");
    }
    if (auto t = args.get_float("--threshold")) {
        if (f.esc.signal == EscalationSignal::Disagreement)
            throw UsageError("--threshold: not used with --signal disagreement");
        f.esc.threshold = *t;
    }
}

// Early exit: teacher-forced, each position stops where the policy says (score_early_exit).
void read_early_exit_flags(const Args& args, ScoreFlags& f) {
    if (f.escalate) throw UsageError("--early-exit: not used with --escalate");
    read_criterion_flag("--early-exit", *args.value("--early-exit"), &f.ee.early_exit.criterion);
    f.ee.loops = f.loops;
    f.ee.early_exit.patience = args.get_int("--early-exit-patience").value_or(1);
    if (auto v = args.get_int("--early-exit-min-l")) f.ee.early_exit.min_L = *v;
    if (auto v = args.get_int("--early-exit-peek-every")) f.ee.early_exit.peek_every = *v;
    if (auto v = args.get_float("--early-exit-threshold")) f.ee.early_exit.threshold = *v;
    // The fields not given are the model's recommendation, else built-in: run_score resolves them.
}

ScoreFlags read_score_flags(const Args& args) {
    ScoreFlags f;
    f.loops_given = loops_flag(args);
    f.loops = f.loops_given.value_or(0);
    f.uncertainty = args.has("--uncertainty");
    f.escalate = args.has("--escalate");
    if (f.escalate) {
        read_escalation_flags(args, f);
    } else {
        for (const char* flag : {"--signal", "--threshold"})
            if (args.has(flag)) throw UsageError(std::string(flag) + ": only used with --escalate");
    }
    f.early = args.has("--early-exit");
    if (f.early) {
        read_early_exit_flags(args, f);
    } else {
        for (const char* flag : {"--early-exit-threshold", "--early-exit-patience", "--early-exit-min-l",
                                 "--early-exit-peek-every"})
            if (args.has(flag)) throw UsageError(std::string(flag) + ": only used with --early-exit");
    }
    if (auto k = args.value("--kv-cache")) {
        if (*k != "f32" && *k != "int8") throw UsageError("--kv-cache: expected one of f32, int8, got '" + *k + "'");
        if (f.escalate || f.early) throw UsageError("--kv-cache: not used with --escalate or --early-exit");
        f.kv_cache = parse_kv_cache_type(*k);
    }
    f.last_k = args.get_int("--last-token", 1, INT32_MAX).value_or(0);
    if (auto v = args.value("--kv-sharing")) {
        if (f.escalate) throw UsageError("--kv-sharing: not used with --escalate");
        const std::string list = *v == "all" ? "per-pass,last-pass,latest-m4,compress-s4,compress-s8" : *v;
        for (const auto& item : split_list("--kv-sharing", list)) {
            try {
                f.kv_sharing.push_back(parse_kv_sharing(item));
            } catch (const Error& e) {
                const std::string msg = e.what();
                throw UsageError("--kv-sharing: " + msg.substr(msg.find(": ") + 2));
            }
        }
    }
    if (args.has("--prompt-tokens")) {
        if (f.kv_sharing.empty()) throw UsageError("--prompt-tokens: only used with --kv-sharing");
        f.prompt_tokens = static_cast<int>(*args.get_int("--prompt-tokens", 1, INT32_MAX));
    }
    return f;
}

// What the engine computed.
struct ScoreOutputs {
    ScoreResult r;
    EscalationResult er;
    std::vector<int> ee_depth;  // --early-exit: each position's depth (n entries)
    LastTokenScore last;
    UncertaintyResult ur;
    int n_escalated = 0;
    double mean_depth = 0;     // --escalate
    long long passes_full = 0;
    int n_exited = 0;          // --early-exit: positions that stopped before r.loops
    double ee_mean_depth = 0;  // --early-exit
    std::vector<KVSharingScore> kvs;  // --kv-sharing, one per mode
};

ScoreOutputs run_scoring(Model* model, const std::vector<int32_t>& ids, const ScoreFlags& f) {
    const int n = static_cast<int>(ids.size());
    const std::vector<std::pair<std::string, std::string>> fields = {
        {"loops", "--loops"}, {"depths", "--escalate"}, {"threshold", "--threshold"},
        {"signal", "--signal"}, {"early_exit_threshold", "--early-exit-threshold"},
        {"early_exit_patience", "--early-exit-patience"}, {"early_exit_min_L", "--early-exit-min-l"},
        {"early_exit_peek_every", "--early-exit-peek-every"},
        {"early_exit_logit_margin", "--early-exit-threshold"}, {"prompt", "--prompt-tokens"},
        {"kv_sharing", "--kv-sharing"}};
    ScoreOutputs o;
    with_engine_fields(fields, [&] {
        if (f.escalate) {
            o.er = score_with_consistency_escalation(model, ids.data(), n, f.esc);
            o.r.token_logprobs = o.er.token_logprobs;
            o.r.total_nll = o.er.total_nll;
            o.r.perplexity = o.er.perplexity;
            o.r.loops = f.esc.depths.back();
        } else if (f.early) {
            o.r = score_early_exit(model, ids.data(), n, f.ee, &o.ee_depth);
        } else {
            o.r = score(model, ids.data(), n, f.loops, f.kv_cache);
        }
        if (f.last_k > 0) o.last = score_last_token(model, ids.data(), n, f.loops, f.last_k);
        for (const KVSharing& mode : f.kv_sharing) {
            GenerateConfig c = f.early ? f.ee : GenerateConfig{};
            c.loops = f.loops;
            c.kv_sharing = mode;
            o.kvs.push_back(score_kv_sharing(model, ids.data(), n, c, f.prompt_tokens.value_or(std::max(1, n / 2))));
        }
        if (f.uncertainty) o.ur = score_with_uncertainty(model, ids.data(), n, f.loops);
        return 0;
    });
    for (size_t i = 0; i < o.er.depth_used.size(); ++i) {
        o.n_escalated += o.er.escalated[i] ? 1 : 0;
        o.mean_depth += o.er.depth_used[i];
    }
    if (!o.er.depth_used.empty()) o.mean_depth /= static_cast<double>(o.er.depth_used.size());
    o.passes_full = static_cast<long long>(n) * (f.escalate ? f.esc.depths.back() : 0);
    for (int d : o.ee_depth) {
        o.ee_mean_depth += d;
        o.n_exited += d < o.r.loops ? 1 : 0;
    }
    if (!o.ee_depth.empty()) o.ee_mean_depth /= static_cast<double>(o.ee_depth.size());
    return o;
}

nlohmann::json score_json(const std::string& model_path, Model* model,
                          const std::vector<int32_t>& ids, const std::vector<std::string>& texts,
                          const ScoreFlags& f, const ScoreOutputs& o) {
    std::vector<double> lp;
    for (float v : o.r.token_logprobs) lp.push_back(static_cast<double>(v));
    std::vector<std::string> clean;
    for (const auto& t : texts) clean.push_back(sanitize_utf8(t));
    nlohmann::json j = {{"model", model_path},           {"tokens", ids},
                        {"token_texts", clean},          {"token_logprobs", lp},
                        {"total_nll", o.r.total_nll},    {"perplexity", o.r.perplexity},
                        {"loops", o.r.loops},            {"kv_cache", kv_cache_type_name(f.kv_cache)}};
    if (f.last_k > 0) {
        std::vector<std::string> tt;
        std::vector<double> tp;
        for (int32_t id : o.last.top_ids) tt.push_back(sanitize_utf8(token_text(model, id)));
        for (float v : o.last.top_probs) tp.push_back(f2d(v));
        j["last_token"] = {{"loops", o.last.loops}, {"top_ids", o.last.top_ids}, {"top_texts", tt}, {"top_probs", tp}};
    }
    if (f.uncertainty) {
        std::vector<double> ent, mar;
        for (float v : o.ur.entropy) ent.push_back(f2d(v));
        for (float v : o.ur.margin) mar.push_back(f2d(v));
        j["uncertainty"] = {{"loops", o.ur.loops}, {"entropy", ent}, {"margin", mar},
                            {"prediction_depth", o.ur.prediction_depth}};
    }
    if (f.escalate) {
        std::vector<bool> escd;
        for (char c : o.er.escalated) escd.push_back(c != 0);
        j["escalation"] = {
            {"depths", f.esc.depths},
            {"signal", f.signal_name},
            {"threshold", f.esc.signal == EscalationSignal::Disagreement ? nlohmann::json(nullptr)
                                                                         : nlohmann::json(f2d(f.esc.threshold))},
            {"depth_used", o.er.depth_used},
            {"escalated", escd},
            {"n_escalated", o.n_escalated},
            {"mean_depth", o.mean_depth},
            {"deepest", o.er.deepest},
            {"passes_run", o.er.passes_run},
            {"passes_full", o.passes_full}};
    }
    if (f.early)
        j["early_exit"] = {{"criterion", criterion_name(f.ee.early_exit.criterion)},  // the codec's name
                           {"threshold", f2d(f.ee.early_exit.threshold)},
                           {"patience", f.ee.early_exit.patience},
                           {"min_L", f.ee.early_exit.min_L},
                           {"depth_used", o.ee_depth},
                           {"mean_depth", o.ee_mean_depth},
                           {"n_exited", o.n_exited}};
    if (!o.kvs.empty()) {
        j["kv_sharing"] = nlohmann::json::array();
        for (const KVSharingScore& s : o.kvs)
            j["kv_sharing"].push_back({{"mode", s.kv_sharing},
                                       {"prompt", s.prompt},
                                       {"loops", s.loops},
                                       {"total_nll", s.score.total_nll},
                                       {"exact_total_nll", s.exact_total_nll},
                                       {"delta_nll", s.delta_nll},
                                       {"cache_bytes", s.cache_bytes},
                                       {"bytes_per_token", s.bytes_per_token},
                                       {"exact_bytes_per_token", s.exact_bytes_per_token},
                                       {"depth_used", s.depth_used}});
    }
    return j;
}

// One row per token: position i's extra columns describe the prediction of token i (made at
// position i-1), so each row reads "how this token was predicted".
std::string score_table(const std::vector<int32_t>& ids, const std::vector<std::string>& texts,
                        const ScoreFlags& f, const ScoreOutputs& o) {
    std::ostringstream out;
    out << "     #       id  logprob";
    if (f.uncertainty) out << "  entropy  margin  pred_d";
    if (f.escalate) out << "  depth esc";
    if (f.early) out << "  depth";
    out << "  token\n";
    for (size_t i = 0; i < ids.size(); ++i) {
        char line[160];
        if (i == 0)
            std::snprintf(line, sizeof(line), "%6zu %8d %8s", i, ids[i], "-");
        else
            std::snprintf(line, sizeof(line), "%6zu %8d %8.4f", i, ids[i],
                          i - 1 < o.r.token_logprobs.size() ? static_cast<double>(o.r.token_logprobs[i - 1]) : 0.0);
        out << line;
        if (f.uncertainty) {
            if (i == 0)
                std::snprintf(line, sizeof(line), "  %7s %7s %7s", "-", "-", "-");
            else
                std::snprintf(line, sizeof(line), "  %7.3f %7.3f %7d", static_cast<double>(o.ur.entropy[i - 1]),
                              static_cast<double>(o.ur.margin[i - 1]), o.ur.prediction_depth[i - 1]);
            out << line;
        }
        if (f.escalate) {
            if (i == 0)
                std::snprintf(line, sizeof(line), "  %5s %3s", "-", "-");
            else
                std::snprintf(line, sizeof(line), "  %5d %3s", o.er.depth_used[i - 1],
                              o.er.escalated[i - 1] ? "yes" : "");
            out << line;
        }
        if (f.early) {
            if (i == 0 || i - 1 >= o.ee_depth.size())
                std::snprintf(line, sizeof(line), "  %5s", "-");
            else
                std::snprintf(line, sizeof(line), "  %5d", o.ee_depth[i - 1]);
            out << line;
        }
        out << "  \"" << display_text(texts[i]) << "\"\n";
    }
    return out.str();
}

// The summary lines under the table.
std::string score_summary(Model* model, const std::vector<int32_t>& ids, const ScoreFlags& f,
                          const ScoreOutputs& o) {
    std::ostringstream out;
    char line[512];
    std::snprintf(line, sizeof(line), "total NLL %.4f nats over %s, perplexity %.4f, loops %d\n",
                  o.r.total_nll, plural(static_cast<long long>(ids.size()) - 1, "predicted token").c_str(),
                  o.r.perplexity, o.r.loops);
    out << line;
    if (f.escalate) {
        std::string rungs;
        for (int d : f.esc.depths) rungs += (rungs.empty() ? "" : ",") + std::to_string(d);
        std::snprintf(line, sizeof(line),
                      "escalation: rungs %s, signal %s, %d of %zu positions escalated, mean depth "
                      "%.2f, %lld loop passes run (%lld for all positions at depth %d)\n",
                      rungs.c_str(), f.signal_name.c_str(), o.n_escalated, o.er.depth_used.size(),
                      o.mean_depth, o.er.passes_run, o.passes_full, f.esc.depths.back());
        out << line;
    }
    if (f.early) {
        // Where the policy came from, on the same line: cli_early_exit's line ends with it
        // ("(recommended by the model)", "(the fields not given: recommended by the model)").
        std::string from;
        if (const size_t at = f.ee_used.rfind(" ("); at != std::string::npos &&
            f.ee_used.find("recommended by the model", at) != std::string::npos)
            from = f.ee_used.substr(at);
        std::snprintf(line, sizeof(line),
                      "early exit: %s, threshold %g, patience %d, first probe at depth %d: mean "
                      "depth %.2f of %d, %d of %zu positions exited early%s\n",
                      f.crit_name.c_str(), static_cast<double>(f.ee.early_exit.threshold),
                      f.ee.early_exit.patience, f.ee.early_exit.min_L, o.ee_mean_depth, o.r.loops,
                      o.n_exited, o.ee_depth.size(), from.c_str());
        out << line;
        if (o.n_exited == 0)
            out << "early exit: no position exited before depth " << o.r.loops
                << " (the criterion never met the threshold): every logprob above is the full "
                   "depth's; a looser --early-exit-threshold or another criterion exits earlier\n";
    }
    for (const KVSharingScore& s : o.kvs) {
        std::snprintf(line, sizeof(line),
                      "kv_sharing %-13s %9.0f bytes/token (per-pass %.0f, %.2fx less), NLL change %+.5f "
                      "nats/token (total %.4f vs %.4f), prompt %d, loops %d\n",
                      s.kv_sharing.c_str(), s.bytes_per_token, s.exact_bytes_per_token,
                      s.exact_bytes_per_token / std::max(1.0, s.bytes_per_token), s.delta_nll, s.score.total_nll,
                      s.exact_total_nll, s.prompt, s.loops);
        out << line;
    }
    if (f.last_k > 0) {
        out << "next token after the last position (depth " << o.last.loops << "):";
        for (size_t k = 0; k < o.last.top_ids.size(); ++k) {
            std::snprintf(line, sizeof(line), " %.4f", static_cast<double>(o.last.top_probs[k]));
            out << " '" << display_text(token_text(model, o.last.top_ids[k])) << "'" << line;
        }
        out << "\n";
    }
    return out.str();
}

}  // namespace

int run_score(const Args& args) {
    const std::string model_path = args.single_positional("MODEL");
    const TokenInput input = read_token_input(args);
    ScoreFlags f = read_score_flags(args);
    const LoadOptions load = load_options(args);

    ModelHandle model = open_model(model_path, load);
    if (f.early) {  // the flags given, else the model's recommendation, else the built-in defaults
        f.ee = cli_early_exit(model.get(), args, f.ee, &f.ee_used);
        f.crit_name = criterion_flag_name(f.ee.early_exit.criterion);
    }
    if (f.escalate) check_depths("--escalate", f.esc.depths, model_hparams(model.get()));
    const std::vector<int32_t> ids = input_tokens(input, model.get(), 2);
    const ScoreOutputs o = run_scoring(model.get(), ids, f);
    std::vector<std::string> texts;
    for (int32_t id : ids) texts.push_back(token_text(model.get(), id));

    if (args.has("--json")) {
        print_json(score_json(model_path, model.get(), ids, texts, f, o));
        return 0;
    }
    const std::string s = score_table(ids, texts, f, o) + score_summary(model.get(), ids, f, o);
    std::fwrite(s.data(), 1, s.size(), stdout);
    return 0;
}

}  // namespace tinyloop::cli
