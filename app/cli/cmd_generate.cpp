// tinyloop generate MODEL (--prompt TEXT | --prompt-file F | --prompt-ids 1,2,3) [options]
//
// Flags fill a GenerateConfig; the engine validates its ranges (validate_config) so range
// messages come from one place, and this file only prefixes them with the flag's name.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <optional>
#include <sstream>

#include "commands.h"
#include "common.h"
#include "generate_output.h"
#include "tinyloop/mode_rules.h"

namespace tinyloop::cli {

CommandSpec generate_spec() {
    CommandSpec s;
    s.name = "generate";
    s.synopsis = "MODEL (--prompt TEXT | --prompt-file F | --prompt-ids 1,2,3) [options]";
    s.summary =
        "Generates a continuation of the prompt. Text streams to stdout as tokens arrive and ends\n"
        "with a newline; timing goes to stderr; --json prints one object instead.";
    const std::string P = "Prompt", D = "Decoding", S = "Stopping",
                      SP = "Self-speculation (--mode speculative, tree and pipelined)",
                      DM = "Draft-model speculation (greedy or sample)",
                      B = "Beam search (--mode beam)", E = "Early exit (adaptive loop depth)",
                      G = "Constrained decoding", O = "Output";
    s.options = {
        {"--prompt", "TEXT", "the prompt text", "", false, P},
        {"--prompt-file", "F", "read the prompt text from file F (- for stdin)", "", false, P},
        {"--prompt-ids", "IDS", "the prompt as token ids: 1,2,3", "", false, P},
        {"--parse-special", "", "treat special-token strings (<|endoftext|>) in the text as tokens",
         "", false, P},

        {"--max-tokens", "N", "most tokens to emit (default 64, fewer where the context ends sooner)", "an integer >= 0", false, D},
        {"--loops", "L", "loop depth, 1..max_loops (default: the model's default_loops)",
         "an integer in [1, max_loops]", false, D},
        {"--mode", "M",
         "greedy|sample|speculative|tree|pipelined|beam (default: by --temperature)",
         "one of greedy, sample, speculative, tree, pipelined, beam", false, D},
        {"--temperature", "T",
         ">= 0; <= 0.01 is greedy (default 0; 0.8 with --mode sample)",
         "a number >= 0", false, D},
        {"--top-k", "K", "keep the K most likely tokens when sampling, >= 1 (default 50)",
         "an integer >= 1", false, D},
        {"--top-p", "P", "nucleus threshold in (0, 1]; 1 disables (default 1)",
         "a number in (0, 1]", false, D},
        {"--min-p", "P", "drop tokens with p < P * p_max, in [0, 1]; 0 disables (default 0)",
         "a number in [0, 1]", false, D},
        {"--repetition-penalty", "R", "HF-style penalty > 0 over prompt + output; 1 disables",
         "a number > 0", false, D},
        {"--frequency-penalty", "F", "minus F * count(token in output), in [-2, 2] (default 0)",
         "a number in [-2, 2]", false, D},
        {"--presence-penalty", "P", "minus P if the token is in the output, in [-2, 2] (default 0)",
         "a number in [-2, 2]", false, D},
        {"--logit-bias", "ID:BIAS", "add BIAS in [-100, 100] to token ID's logit (repeatable)",
         "ID:BIAS like 10:-100", true, D},
        {"--seed", "S", "sampling seed, 0..2^64-1 (default 0); same seed, same output",
         "an integer in [0, 2^64-1]", false, D},
        {"--no-repeat-ngram", "N", "never repeat an N-gram of prompt + output; 0 disables (default)",
         "an integer >= 0", false, D},
        {"--bad-words", "IDS", "never emit this token sequence, e.g. 13 or 50,51 (repeatable)",
         "a comma-separated list of token ids", true, D},
        {"--min-new-tokens", "N", "never end (EOS) before N tokens are emitted; 0 disables (default)",
         "an integer >= 0", false, D},
        {"--min-length", "N", "never end (EOS) before prompt + output hold N tokens; 0 disables (default)",
         "an integer >= 0", false, D},
        {"--forced-eos-token-id", "ID", "the only token allowed as the last of --max-tokens (HF); -1 off (default)",
         "an integer >= -1", false, D},
        {"--exponential-decay-length-penalty", "START,FACTOR",
         "past START new tokens, raise EOS's score by |s| * (FACTOR^(n - START) - 1) (HF)",
         "START,FACTOR like 10,1.05", false, D},
        {"--suppress-tokens", "IDS", "never emit these token ids, e.g. 13,50 (repeatable)",
         "a comma-separated list of token ids", true, D},
        {"--begin-suppress-tokens", "IDS", "never emit these token ids as the first new token (repeatable)",
         "a comma-separated list of token ids", true, D},
        {"--typical-p", "P", "sampling: locally typical mass in (0, 1]; 1 disables (default 1)",
         "a number in (0, 1]", false, D},
        {"--epsilon-cutoff", "E", "sampling: drop tokens with p < E, in [0, 1); 0 disables (default 0)",
         "a number in [0, 1)", false, D},
        {"--eta-cutoff", "E", "sampling: drop p < min(E, sqrt(E) * e^-entropy), in [0, 1); 0 disables",
         "a number in [0, 1)", false, D},
        {"--cache-window", "W", "attend to the last W positions only; 0 = unlimited (default)",
         "an integer >= 0", false, D},
        {"--kv-cache", "T", "KV cache layout: f32 (default) | int8 (per-head, per-position scales)",
         "one of f32, int8", false, D},
        {"--kv-sharing", "MODE",
         "keys/values across passes (FORMAT.md §1c): per-pass (exact, default) | last-pass |\n"
         "                              latest-m4 | compress-sK (K ring slots per position)",
         "one of per-pass, last-pass, latest-m4, compress-sK with K in [1, 1024]", false, D},

        {"--stop", "TEXT", "stop when the output text contains TEXT; TEXT is left out (repeatable)",
         "a non-empty text", true, S},
        {"--stop-ids", "IDS", "stop when the output ends with these token ids (repeatable)",
         "a comma-separated list of token ids", true, S},
        {"--ignore-eos", "", "keep generating past the model's end-of-text token", "", false, S},
        {"--max-time", "SEC", "stop after SEC seconds of wall clock; 0 = no limit (default)",
         "a number of seconds >= 0", false, S},

        {"--draft-loops", "D", "draft depth, 1..V-1 (default: the model's recommendation, else min(2, V-1))", "an integer >= 1",
         false, SP},
        {"--verify-loops", "V", "verify depth (default --loops, else the model's default_loops)",
         "an integer >= 2", false, SP},
        {"--draft-ahead", "K", "tokens drafted per cycle, 1..32 (tree: nodes run per cycle, 1..8; default: the model's, else 4)",
         "an integer >= 1", false, SP},
        {"--branches", "B", "candidates per draft step, 1..8 (--mode tree; default: the model's, else 2)",
         "an integer >= 1", false, SP},

        {"--draft-model", "DRAFT",
         "a model with the same vocabulary (e.g. a q4 copy) that drafts for MODEL", "", false,
         DM},
        {"--gamma", "N", "tokens the draft model drafts per cycle, 1..32 (default 4)",
         "an integer in [1, 32]", false, DM},

        {"--beam-size", "N", "beams, >= 2 (default 4 with --mode beam)", "an integer >= 2", false,
         B},
        {"--length-penalty", "X", "rank beams by logprob / len^X (default 1)", "a number", false,
         B},
        {"--early-stopping", "E",
         "true: end when N beams finished | false: also when no live beam can win by HF's estimate "
         "(default) | never: only when none can",
         "one of true, false, never", false, B},
        {"--renormalize-logits", "", "log-softmax the beam scores again after the penalties and bans",
         "", false, B},
        {"--num-beam-groups", "G", "diverse beam search: G groups of N/G beams each (default 1)",
         "an integer >= 1 dividing --beam-size", false, B},
        {"--diversity-penalty", "X",
         "with --num-beam-groups: a group loses X per earlier group's beam that chose the token",
         "a number in [0, 100]", false, B},
        {"--force-words", "IDS",
         "constrained beam search: the output must hold these ids, e.g. 50,51; 50,51|60 is either (repeatable)",
         "a comma-separated list of token ids, alternatives separated by |", true, B},
        {"--num-return-sequences", "N",
         "N outputs: beam's best N (N <= --beam-size) or N samples (seeds --seed .. --seed+N-1)",
         "an integer in [1, 64]", false, B},

        {"--early-exit", "C", "stop looping a token early: l2 | margin | kl | entropy | argmax | gate | gate-select | reverse-kl | minp-kl | model",
         "one of l2, margin, kl, entropy, argmax, gate, gate-select, reverse-kl, minp-kl, model", false, E},
        {"--early-exit-patience", "P",
         "consecutive stable probes before exiting (default: the model's, else 1)",
         "an integer >= 1", false, E},
        {"--early-exit-min-l", "M", "first depth probed (default: the model's, else 2)", "an integer >= 1", false, E},
        {"--early-exit-peek-every", "E", "probe every E depths (default 1)", "an integer >= 1",
         false, E},
        {"--early-exit-threshold", "X",
         "stability threshold (default: the model's, else 0.05; margin: the logit margin)", "a number >= 0",
         false, E},

        {"--grammar", "FILE",
         "constrain the output with a GBNF grammar file (greedy, sample; beam is refused)", "",
         false, G},

        {"--events", "", "per-token events: stderr table, or \"events\" in --json", "", false, O},
        {"--lens", "", "add the logit lens (per depth top-k) to each event; implies --events", "",
         false, O},
        {"--lens-top-k", "K", "lens entries per depth, 1..64 (default 5)", "an integer in [1, 64]",
         false, O},
        {"--quiet", "", "no timing on stderr and no newline added: stdout is the text exactly", "",
         false, O},
    };
    for (auto& o : common_options()) s.options.push_back(o);
    s.notes =
        "Modes: greedy is temperature 0 (argmax). sample uses --temperature, 0.8 when not given.\n"
        "beam sets --beam-size (default 4). speculative drafts at --draft-loops and verifies at\n"
        "--verify-loops (exact greedy output at temperature 0; with --temperature it samples\n"
        "losslessly through --top-k/--top-p as sample does); no penalties, bias, stops or cache window.\n"
        "tree drafts --branches candidates per step, --draft-ahead steps deep, and verifies the\n"
        "whole tree in one forward; greedy only (exact greedy output at --verify-loops; to sample\n"
        "with self-speculation use --mode speculative --temperature T).\n"
        "pipelined drafts the next token at --draft-loops while the current one runs its deeper\n"
        "passes, all rows in flight sharing each sweep of the loop block's weights (a wavefront\n"
        "over tokens and passes); exact greedy output at --verify-loops at temperature 0, with\n"
        "--temperature it samples losslessly as speculative does; no --draft-ahead (the depths\n"
        "decide how many tokens are in flight).\n"
        "--grammar FILE (GBNF: rule ::= ..., \"literals\", [classes], ( ), |, ?, *, +, start rule\n"
        "root) allows only tokens that keep the output inside the grammar; a malformed file is\n"
        "refused with FILE:LINE:COL; the stop reason GRAMMAR_DEAD_END means nothing was allowed.\n"
        "--draft-model DRAFT speculates with a second model that has the same vocabulary (e.g.\n"
        "a quantized copy): it drafts --gamma tokens, MODEL verifies them in one forward. The\n"
        "output is MODEL's own (greedy: identical; sampled: the same distribution), with every\n"
        "penalty, bias, ban, stop and --grammar; --draft-loops sets the draft's depth (default\n"
        "its default_loops). Not with --mode speculative/tree/beam or --early-exit.\n"
        "Defaults of early exit and speculation: a flag given, else the model file's recommendation\n"
        "(metadata \"recommended\", written by tinyloop recommend; for early exit only when its\n"
        "criterion is the one asked for, or --early-exit model), else the built-in default (patience 1,\n"
        "threshold 0.05, min depth 2; draft min(2, V-1), draft_ahead 4, branches 2). The gate\n"
        "criteria's threshold on an imported checkpoint is its config's early_exit_threshold (Ouro's\n"
        "1.0 runs every step) unless given. stderr says which was used.\n"
        "\n"
        "--json prints one object: model, backend, prompt_ids, output_ids (the continuation),\n"
        "text, stats{prefill_ms, first_token_ms, decode_ms, total_ms, prompt_tokens,\n"
        "tokens_emitted, stop_reason, loops_used, decode_tokens_per_s, depth_per_token,\n"
        "kv_cache_bytes, spec_cycles, spec_drafted, spec_tested, spec_accepted, spec_accept_hist,\n"
        "spec_acceptance_rate, spec_mean_accepted, draft_ms, verify_ms, spec_sweeps (pipelined: the\n"
        "sweeps of the loop block after the prompt) (zero when not speculating)}, config (every GenerateConfig field by its engine name, as the engine's\n"
        "JSON codec writes it, with the mode and the depth used), and with --events:\n"
        "events[{token, position, index, piece, depth, prob, lens?[{depth, top_ids, top_probs,\n"
        "p_emitted, entropy}], and for speculative modes cycle, drafted, accepted,\n"
        "from_verifier; with a model that has the exit gate (Ouro), exit_gate and exit_gate_cdf:\n"
        "the gate's lambda per pass the token's row ran and 1 - prod(1 - lambda) after each}]. With --num-return-sequences N > 1 also sequences[{output_ids, text,\n"
        "stop_reason, score}] (beam: best first; output_ids/text/stats/events are the first);\n"
        "without --json each output is printed under a line naming its rank, score and stop.\n"
        "\n"
        "Ctrl-C stops the generation after the current token (stop reason CALLBACK_ABORT, exit 130).\n";
    return s;
}

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) { g_interrupted = 1; }

// Restores SIGINT's previous disposition when generation ends.
class SigintGuard {
public:
    SigintGuard() {
        struct sigaction sa {};
        sa.sa_handler = on_sigint;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C kills as usual
        installed_ = sigaction(SIGINT, &sa, &old_) == 0;
    }
    ~SigintGuard() {
        if (installed_) sigaction(SIGINT, &old_, nullptr);
    }

private:
    struct sigaction old_ {};
    bool installed_ = false;
};

// Engine field names -> the flags that set them, for messages.
const std::vector<std::pair<std::string, std::string>>& field_flags() {
    static const std::vector<std::pair<std::string, std::string>> f = {
        {"max_tokens", "--max-tokens"},
        {"loops", "--loops"},
        {"temperature", "--temperature"},
        {"top_k", "--top-k"},
        {"top_p", "--top-p"},
        {"min_p", "--min-p"},
        {"cache_window", "--cache-window"},
        {"kv_sharing", "--kv-sharing"},
        {"repetition_penalty", "--repetition-penalty"},
        {"frequency_penalty", "--frequency-penalty"},
        {"presence_penalty", "--presence-penalty"},
        {"logit_bias", "--logit-bias"},
        {"stop_sequences", "--stop-ids"},
        {"stop_strings", "--stop"},
        {"max_time", "--max-time"},
        {"no_repeat_ngram_size", "--no-repeat-ngram"},
        {"bad_words", "--bad-words"},
        {"beam_size", "--beam-size"},
        {"length_penalty", "--length-penalty"},
        {"early_stopping", "--early-stopping"},
        {"renormalize_logits", "--renormalize-logits"},
        {"num_return_sequences", "--num-return-sequences"},
        {"num_beam_groups", "--num-beam-groups"},
        {"diversity_penalty", "--diversity-penalty"},
        {"force_words", "--force-words"},
        {"min_new_tokens", "--min-new-tokens"},
        {"min_length", "--min-length"},
        {"forced_eos_token_id", "--forced-eos-token-id"},
        {"exponential_decay_length_penalty", "--exponential-decay-length-penalty"},
        {"suppress_tokens", "--suppress-tokens"},
        {"begin_suppress_tokens", "--begin-suppress-tokens"},
        {"typical_p", "--typical-p"},
        {"epsilon_cutoff", "--epsilon-cutoff"},
        {"eta_cutoff", "--eta-cutoff"},
        {"early_exit_patience", "--early-exit-patience"},
        {"early_exit_min_L", "--early-exit-min-l"},
        {"early_exit_peek_every", "--early-exit-peek-every"},
        {"early_exit_logit_margin", "--early-exit-threshold"},
        {"early_exit_criterion", "--early-exit"},
        {"early_exit_threshold", "--early-exit-threshold"},
        {"sample_seed", "--seed"},
        {"grammar", "--grammar"},
        {"lens_top_k", "--lens-top-k"},
        {"draft_loops", "--draft-loops"},
        {"verify_loops", "--verify-loops"},
        {"draft_ahead", "--draft-ahead"},
        {"K_branches", "--branches"},
        {"gamma", "--gamma"},
        {"draft", "--draft-model"},
    };
    return f;
}

// Runs f; an engine error naming a config field gets the flag's name in front.
template <class F>
auto with_flag_messages(F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const Error& e) {
        throw Error(e.code(), with_flag_name(e.what(), field_flags()));
    }
}

// The speculative knobs as given on the command line.
struct SpeculativeFlags {
    std::optional<int> draft_loops, verify_loops, draft_ahead, branches;
};

// Flags the speculative configs have no field for: refused rather than silently ignored.
void check_speculative_flags(const Args& args, const std::string& mode) {
    for (const char* f : {"--min-p", "--repetition-penalty", "--frequency-penalty",
                          "--presence-penalty", "--logit-bias", "--stop", "--stop-ids",
                          "--cache-window", "--no-repeat-ngram", "--bad-words", "--max-time", "--kv-cache", "--kv-sharing",
                          "--beam-size", "--length-penalty", "--early-stopping", "--renormalize-logits",
                          "--num-beam-groups", "--diversity-penalty", "--num-return-sequences", "--force-words",
                          "--min-new-tokens", "--min-length", "--forced-eos-token-id",
                          "--exponential-decay-length-penalty", "--suppress-tokens", "--begin-suppress-tokens",
                          "--typical-p", "--epsilon-cutoff", "--eta-cutoff", "--early-exit",
                          "--early-exit-patience", "--grammar"})
        if (args.has(f)) throw UsageError(std::string(f) + ": not used by --mode " + mode);
    DecodeMode dm = DecodeMode::Greedy;
    if (parse_decode_mode(mode, &dm) && greedy_only(dm))
        for (const char* f : {"--top-k", "--top-p", "--seed"})
            if (args.has(f)) throw UsageError(std::string(f) + ": not used by --mode " + mode + " (greedy only)");
    if (mode == "pipelined" && args.has("--draft-ahead"))
        throw UsageError("--draft-ahead: not used by --mode pipelined (the depths decide the tokens in flight)");
    auto loops = loops_flag(args), verify = args.get_int("--verify-loops");
    if (loops && verify && *loops != *verify)
        throw UsageError("--loops " + std::to_string(*loops) + " and --verify-loops " +
                         std::to_string(*verify) + " disagree (with --mode " + mode +
                         ", --loops is the verify depth)");
}

// The engine's run specification for the parsed flags: the decode mode (--mode, else
// --draft-model, --beam-size, --early-exit, --temperature decide) and the speculation knobs
// (unset ones stay 0 / default: the engine resolves them).
RunSpec run_spec_of(const std::string& mode, const SpeculativeFlags& flags, const GenerateConfig& cfg,
                    Model* draft, std::optional<int> gamma) {
    RunSpec rs;
    rs.config = cfg;
    if (mode == "speculative") rs.mode = DecodeMode::Speculative;
    else if (mode == "tree") rs.mode = DecodeMode::Tree;
    else if (mode == "pipelined") rs.mode = DecodeMode::Pipelined;
    else if (mode == "beam") rs.mode = DecodeMode::Beam;  // the resolver refuses a beam_size below 2
    else if (draft) rs.mode = DecodeMode::DraftModel;
    else rs.mode = config_mode(cfg);
    SpeculationPolicy& k = rs.speculation;
    k.verify_loops = flags.verify_loops.value_or(0);
    k.draft_loops = flags.draft_loops.value_or(0);
    k.draft_ahead = flags.draft_ahead.value_or(k.draft_ahead);
    k.branches = flags.branches.value_or(k.branches);
    k.draft_model = draft;
    k.gamma = gamma.value_or(k.gamma);
    return rs;
}

// The speculation settings a run uses (as the engine resolves them), for --json's config.
nlohmann::json speculation_echo(const RunSpec& rs, const std::optional<std::string>& draft_path) {
    const SpeculationPolicy& k = rs.speculation;
    if (rs.mode == DecodeMode::DraftModel)
        return {{"draft_model", *draft_path}, {"gamma", k.gamma}, {"draft_loops", k.draft_loops}};
    if (!self_speculative(rs.mode)) return nlohmann::json::object();
    if (rs.mode == DecodeMode::Pipelined) return {{"draft_loops", k.draft_loops}, {"verify_loops", k.verify_loops}};
    nlohmann::json echo = {{"draft_loops", k.draft_loops}, {"verify_loops", k.verify_loops}, {"draft_ahead", k.draft_ahead}};
    if (rs.mode == DecodeMode::Tree) echo["branches"] = k.branches;
    return echo;
}

}  // namespace

namespace {

// Hugging Face's sampling-side GenerationConfig knobs.
void read_hf_sampling_flags(const Args& args, GenerateConfig& cfg) {
    if (auto v = args.get_int("--forced-eos-token-id")) cfg.forced_eos_token_id = *v;
    if (auto v = args.value("--exponential-decay-length-penalty")) {
        const std::string flag = "--exponential-decay-length-penalty", expect = "START,FACTOR like 10,1.05";
        const size_t comma = v->find(',');
        if (comma == std::string::npos) throw UsageError(flag + ": expected " + expect + ", got '" + *v + "'");
        const int start = static_cast<int>(
            parse_integer(flag, v->substr(0, comma), 0, INT32_MAX, "an integer >= 0 before ',' (START)"));
        cfg.exponential_decay_length_penalty.emplace(
            start, parse_number(flag, v->substr(comma + 1), "a number in (0, 10] after ',' (FACTOR)"));
    }
    for (const auto& s : args.values("--suppress-tokens")) {
        const std::vector<int32_t> ids = parse_id_list("--suppress-tokens", s);
        cfg.suppress_tokens.insert(cfg.suppress_tokens.end(), ids.begin(), ids.end());
    }
    for (const auto& s : args.values("--begin-suppress-tokens")) {
        const std::vector<int32_t> ids = parse_id_list("--begin-suppress-tokens", s);
        cfg.begin_suppress_tokens.insert(cfg.begin_suppress_tokens.end(), ids.begin(), ids.end());
    }
    if (auto v = args.get_float("--typical-p")) cfg.typical_p = *v;
    if (auto v = args.get_float("--epsilon-cutoff")) cfg.epsilon_cutoff = *v;
    if (auto v = args.get_float("--eta-cutoff")) cfg.eta_cutoff = *v;
}

// The decoding knobs that fill GenerateConfig fields one to one.
GenerateConfig read_decoding_flags(const Args& args) {
    GenerateConfig cfg;
    if (auto v = args.get_int("--max-tokens")) cfg.max_tokens = *v;
    if (auto v = loops_flag(args)) cfg.loops = *v;
    if (auto v = args.get_int("--top-k")) cfg.top_k = *v;
    if (auto v = args.get_float("--top-p")) cfg.top_p = *v;
    if (auto v = args.get_float("--min-p")) cfg.min_p = *v;
    if (auto v = args.get_float("--repetition-penalty")) cfg.repetition_penalty = *v;
    if (auto v = args.get_float("--frequency-penalty")) cfg.frequency_penalty = *v;
    if (auto v = args.get_float("--presence-penalty")) cfg.presence_penalty = *v;
    if (auto v = args.get_u64("--seed")) cfg.sample_seed = *v;
    if (auto v = args.get_int("--cache-window")) cfg.cache_window = *v;
    if (auto v = args.value("--kv-cache")) {
        if (*v != "f32" && *v != "int8") throw UsageError("--kv-cache: expected one of f32, int8, got '" + *v + "'");
        cfg.kv_cache = parse_kv_cache_type(*v);
    }
    if (auto v = args.value("--kv-sharing")) {
        try {
            cfg.kv_sharing = parse_kv_sharing(*v);
        } catch (const Error& e) {
            const std::string msg = e.what();
            throw UsageError("--kv-sharing: " + msg.substr(msg.find(": ") + 2));
        }
    }
    for (const auto& item : args.values("--logit-bias")) {
        const std::string expect = "ID:BIAS like 10:-100";
        size_t colon = item.find(':');
        if (colon == std::string::npos)
            throw UsageError("--logit-bias: expected " + expect + ", got '" + item + "'");
        int32_t id = static_cast<int32_t>(parse_integer(
            "--logit-bias", item.substr(0, colon), 0, INT32_MAX, "a token id (an integer >= 0) before ':'"));
        float bias = parse_number("--logit-bias", item.substr(colon + 1),
                                  "a number in [-100, 100] after ':'");
        cfg.logit_bias.emplace_back(id, bias);
    }
    for (const auto& s : args.values("--stop")) {
        if (s.empty()) throw UsageError("--stop: expected a non-empty text, got ''");
        cfg.stop_strings.push_back(s);
    }
    for (const auto& s : args.values("--stop-ids"))
        cfg.stop_sequences.push_back(parse_id_list("--stop-ids", s));
    cfg.ignore_eos = args.has("--ignore-eos");
    if (auto v = args.get_float("--max-time")) cfg.max_time = *v;
    if (auto v = args.get_int("--no-repeat-ngram")) cfg.no_repeat_ngram_size = *v;
    for (const auto& s : args.values("--bad-words"))
        cfg.bad_words.push_back(parse_id_list("--bad-words", s));
    if (auto v = args.get_int("--min-new-tokens")) cfg.min_new_tokens = *v;
    if (auto v = args.get_int("--min-length")) cfg.min_length = *v;
    read_hf_sampling_flags(args, cfg);
    return cfg;
}

// The decoding mode and the flags only some modes take.
struct ModeFlags {
    std::string mode;          // as given; "" without --mode
    bool speculative = false;  // --mode speculative, tree or pipelined
    SpeculativeFlags spec;
    std::optional<std::string> draft_path;  // --draft-model
    std::optional<int> gamma;
};

// --mode, --temperature, the speculative, draft-model and beam flags; refuses the combinations
// that would be ignored. Sets cfg.temperature and cfg.beam_size.
ModeFlags read_mode_flags(const Args& args, GenerateConfig& cfg) {
    ModeFlags m;
    m.mode = args.value("--mode").value_or("");
    const std::string& mode = m.mode;
    if (args.has("--mode") && (mode.empty() || (mode != "greedy" && mode != "sample" &&
                                                mode != "speculative" && mode != "tree" &&
                                                mode != "pipelined" && mode != "beam")))
        throw UsageError("--mode: expected one of greedy, sample, speculative, tree, pipelined, beam, got '" +
                         mode + "'");
    const std::optional<float> temperature = args.get_float("--temperature");
    // The mode's rules are the engine's: check_mode_temperature refuses a temperature the named
    // mode does not take (greedy, tree and pipelined above 0.01, sample at or below it; the
    // resolver applies the same function), mode_config gives the defaults.
    DecodeMode named = DecodeMode::Greedy;
    if (temperature && parse_decode_mode(mode, &named)) {
        try {
            check_mode_temperature(named, *temperature);
        } catch (const Error& e) {
            throw UsageError(std::string("--temperature: ") + e.what());
        }
    }
    if (mode == "greedy") cfg = mode_config(DecodeMode::Greedy, cfg);
    if (temperature) cfg.temperature = *temperature;
    else if (mode == "sample") cfg.temperature = mode_config(DecodeMode::Sample, cfg).temperature;

    // 0 is "the default" to the engine: given depths are >= 1 (--draft-loops 0 with
    // --draft-model is the draft's default_loops).
    m.spec.draft_loops = args.get_int("--draft-loops", args.has("--draft-model") ? 0 : 1);
    m.spec.verify_loops = args.get_int("--verify-loops", 1);
    m.spec.draft_ahead = args.get_int("--draft-ahead");
    m.spec.branches = args.get_int("--branches");
    // 0 is "the model's recommendation" to the engine; on the command line a knob given is a value.
    if (m.spec.draft_ahead && *m.spec.draft_ahead < 1)
        throw UsageError("--draft-ahead: draft_ahead " + std::to_string(*m.spec.draft_ahead) +
                         " is outside [1, 32] (tree: [1, 8])");
    if (m.spec.branches && *m.spec.branches < 1)
        throw UsageError("--branches: " + std::to_string(*m.spec.branches) + " is outside [1, 8]");
    m.speculative = mode == "speculative" || mode == "tree" || mode == "pipelined";
    if (m.speculative) check_speculative_flags(args, mode);
    m.draft_path = args.value("--draft-model");
    if (m.draft_path) {
        if (m.draft_path->empty()) throw UsageError("--draft-model: expected a model file, got ''");
        if (m.speculative || mode == "beam")
            throw UsageError("--draft-model: not used with --mode " + mode +
                             " (draft-model speculation decodes greedy or sample)");
    }
    m.gamma = args.get_int("--gamma");
    if (m.gamma && !m.draft_path) throw UsageError("--gamma: only used with --draft-model");
    for (const char* f : {"--draft-loops", "--verify-loops", "--draft-ahead"})
        if (args.has(f) && !m.speculative && !(m.draft_path && std::string(f) == "--draft-loops"))
            throw UsageError(std::string(f) + ": only used with --mode speculative, tree or pipelined" +
                             (m.draft_path ? "" : " (--draft-loops also with --draft-model)"));
    if (args.has("--branches") && mode != "tree")
        throw UsageError("--branches: only used with --mode tree");

    if (auto v = args.get_int("--beam-size")) {
        if (!mode.empty() && mode != "beam")
            throw UsageError("--beam-size: only used with --mode beam, not --mode " + mode);
        cfg.beam_size = *v;
    }
    if (mode == "beam" && !args.has("--beam-size")) cfg.beam_size = mode_config(DecodeMode::Beam, cfg).beam_size;
    if (auto v = args.get_float("--length-penalty")) {
        if (mode != "beam" && !args.has("--beam-size"))
            throw UsageError("--length-penalty: only used with --mode beam");
        cfg.length_penalty = *v;
    }
    const bool beam = mode == "beam" || args.has("--beam-size");
    if (auto v = args.value("--early-stopping")) {
        if (!beam) throw UsageError("--early-stopping: only used with --mode beam");
        if (*v == "true") cfg.early_stopping = EarlyStopping::WhenFull;
        else if (*v == "false") cfg.early_stopping = EarlyStopping::Heuristic;
        else if (*v == "never") cfg.early_stopping = EarlyStopping::Never;
        else throw UsageError("--early-stopping: expected one of true, false, never, got '" + *v + "'");
    }
    if (args.has("--renormalize-logits") && !beam) throw UsageError("--renormalize-logits: only used with --mode beam");
    cfg.renormalize_logits = args.has("--renormalize-logits");
    for (const char* f : {"--num-beam-groups", "--diversity-penalty", "--force-words"})
        if (args.has(f) && !beam) throw UsageError(std::string(f) + ": only used with --mode beam");
    for (const auto& v : args.values("--force-words")) {  // "1,2|3": alternatives by '|'
        std::vector<std::vector<int32_t>> alternatives;
        std::istringstream in(v);
        std::string part;
        while (std::getline(in, part, '|')) alternatives.push_back(parse_id_list("--force-words", part));
        if (alternatives.empty() || v.back() == '|')
            throw UsageError("--force-words: expected token ids like 1,2 or alternatives like 1,2|3, got '" + v + "'");
        cfg.force_words.push_back(std::move(alternatives));
    }
    if (auto v = args.get_int("--num-beam-groups")) cfg.num_beam_groups = *v;
    if (auto v = args.get_float("--diversity-penalty")) cfg.diversity_penalty = *v;
    if (auto v = args.get_int("--num-return-sequences")) cfg.num_return_sequences = *v;
    return m;
}

void read_early_exit_flags(const Args& args, GenerateConfig& cfg) {
    const bool early = args.has("--early-exit") || args.has("--early-exit-patience");
    if (auto c = args.value("--early-exit")) {
        read_criterion_flag("--early-exit", *c, &cfg.early_exit.criterion);
        cfg.early_exit.patience = 1;  // on; the value is resolved with the model (cli_early_exit)
    }
    if (auto v = args.get_int("--early-exit-patience")) cfg.early_exit.patience = *v;
    for (const char* f : {"--early-exit-min-l", "--early-exit-peek-every", "--early-exit-threshold"})
        if (args.has(f) && !early)
            throw UsageError(std::string(f) + ": only used with --early-exit");
    if (auto v = args.get_int("--early-exit-min-l")) cfg.early_exit.min_L = *v;
    if (auto v = args.get_int("--early-exit-peek-every")) cfg.early_exit.peek_every = *v;
    if (auto v = args.get_float("--early-exit-threshold")) {
        cfg.early_exit.threshold = *v;
        // The seed's knob for the margin criterion is early_exit_logit_margin; keep both in step.
        if (cfg.early_exit.criterion == EarlyExitCriterion::LogitMargin)
            cfg.early_exit.logit_margin = *v;
    }
}

// The settings used, for --json's "config": the engine codec's GenerateConfig, every field once by
// its codec name (sample_seed, stop_strings, stop_sequences, no_repeat_ngram_size, the flat
// early_exit_* fields; the flags' names are input aliases only), with the depth resolved, the mode
// the engine ran (decode_mode_name) and the grammar file.
nlohmann::json config_json(const GenerateConfig& cfg, const Args& args, DecodeMode mode, int resolved_loops) {
    nlohmann::json j = config_to_json(cfg);
    j["mode"] = decode_mode_name(mode);
    j["loops"] = resolved_loops;
    j["parse_special"] = args.has("--parse-special");
    j["grammar"] = args.has("--grammar") ? nlohmann::json(*args.value("--grammar")) : nlohmann::json(nullptr);
    return j;
}

// The grammar, parsed before the model loads so that a malformed one fails fast.
Owned<Grammar> read_grammar(const Args& args) {
    Owned<Grammar> grammar;
    if (auto g = args.value("--grammar")) {
        if (g->empty()) throw UsageError("--grammar: expected a grammar file, got ''");
        try {
            check_file_readable("--grammar", *g);
            grammar.reset(load_grammar_file(*g));
        } catch (const Error& e) {
            throw Error(e.code(), std::string("--grammar: ") + e.what());
        }
    }
    return grammar;
}

}  // namespace

int run_generate(const Args& args) {
    const std::string model_path = args.single_positional("MODEL");
    const bool json = args.has("--json");

    // ---- the prompt source ----
    const std::string source = args.exclusive({"--prompt", "--prompt-file", "--prompt-ids"});
    if (source.empty())
        throw UsageError("missing prompt: give --prompt TEXT, --prompt-file F or --prompt-ids 1,2,3");
    std::string prompt_text;
    std::vector<int32_t> prompt_ids;
    if (source == "--prompt") prompt_text = *args.value("--prompt");
    if (source == "--prompt-file") prompt_text = read_text_file(source, *args.value(source));
    if (source == "--prompt-ids") prompt_ids = parse_id_list(source, *args.value(source));
    if (source == "--prompt-ids" && args.has("--parse-special"))
        throw UsageError("--parse-special applies to prompt text, not to --prompt-ids");

    // ---- the flags, all checked before the model loads ----
    GenerateConfig cfg = read_decoding_flags(args);
    const ModeFlags m = read_mode_flags(args, cfg);
    read_early_exit_flags(args, cfg);
    GenerateOptions options;
    options.lens = args.has("--lens");
    if (auto v = args.get_int("--lens-top-k")) {
        if (!options.lens) throw UsageError("--lens-top-k: only used with --lens");
        options.lens_top_k = *v;
    }
    const bool want_events = args.has("--events") || options.lens;
    const LoadOptions load = load_options(args);
    const auto grammar = read_grammar(args);
    cfg.grammar = grammar.get();

    // ---- the model and the prompt ----
    ModelHandle model = open_model(model_path, load);
    const HParams& hp = model_hparams(model.get());
    if (source == "--prompt-ids") {
        try {
            check_token_ids(prompt_ids.data(), prompt_ids.size(), hp.vocab_size, "--prompt-ids");
        } catch (const Error& e) {
            throw UsageError(e.what());
        }
    } else {
        const bool parse_special = args.has("--parse-special");
        if (!parse_special) hint_special_tokens("tinyloop generate", source, model.get(), prompt_text);
        prompt_ids = tokenize(model.get(), prompt_text, parse_special);
    }
    if (prompt_ids.empty())
        throw UsageError(source + ": the prompt is empty (at least one token is needed)");
    const int prompt_len = static_cast<int>(prompt_ids.size());
    // The default length stops where the context ends instead of being refused, so a model with a
    // short context (the bundled reasoner's is 64 tokens) answers without --max-tokens.
    if (!args.has("--max-tokens"))
        cfg.max_tokens = std::max(0, std::min(cfg.max_tokens, hp.max_seq_len - prompt_len));

    // Early exit: the flags given, else the model's recommendation, else the built-in default.
    std::string used_line;
    if (cfg.early_exit.patience > 0) cfg = cli_early_exit(model.get(), args, cfg, &used_line);
    if (!m.speculative) with_flag_messages([&] { validate_config(model.get(), prompt_len, cfg); });
    ModelHandle draft_model;
    if (m.draft_path) {
        try {
            check_file_readable("--draft-model", *m.draft_path);
            draft_model = open_model(*m.draft_path, load);
        } catch (const Error& e) {
            throw Error(e.code(), std::string("--draft-model: ") + e.what());
        }
    }
    const ResolvedRun resolved = with_flag_messages([&] {
        return resolve_cli_run(model.get(), run_spec_of(m.mode, m.spec, cfg, draft_model.get(), m.gamma),
                               {.draft_loops = m.spec.draft_loops.has_value(),
                                .verify_loops = m.spec.verify_loops.has_value(),
                                .draft_ahead = m.spec.draft_ahead.has_value(),
                                .branches = m.spec.branches.has_value()});
    });
    const RunSpec& run = resolved.spec;
    const nlohmann::json spec_echo = speculation_echo(run, m.draft_path);
    if (m.speculative) used_line = speculation_used_line(resolved);
    const bool speculating = m.speculative || m.draft_path.has_value();

    // ---- generate ----
    StreamPrinter printer(cfg.stop_strings);
    std::vector<TokenEvent> events;
    g_interrupted = 0;
    const bool several = cfg.num_return_sequences > 1;  // printed one after another at the end
    options.observer = [&](const TokenEvent& ev) {
        if (!json && !several) printer.push(ev.piece);
        if (want_events) events.push_back(ev);
        return g_interrupted == 0;
    };
    GenerateResult result;
    {
        SigintGuard guard;
        result = with_flag_messages(
            [&] { return run_decode(model.get(), prompt_ids.data(), prompt_len, run, options); });
    }
    const int exit_status = g_interrupted != 0 ? 130 : 0;
    const GenerateStats& st = result.stats;
    const std::string mode_used = decode_mode_name(run.mode);  // the mode the engine ran

    if (json) {
        const int resolved_loops = m.speculative ? run.speculation.verify_loops : run.config.loops;
        const size_t skip = std::min<size_t>(result.tokens.size(), static_cast<size_t>(result.prompt_len));
        nlohmann::json j;
        j["model"] = model_path;
        j["backend"] = model_info(model.get()).backend;
        j["prompt_ids"] = prompt_ids;
        j["output_ids"] = std::vector<int32_t>(result.tokens.begin() + skip, result.tokens.end());
        j["text"] = result.text;
        j["stats"] = stats_to_json(st);
        if (!result.sequences.empty()) j["sequences"] = sequences_to_json(result.sequences);
        j["config"] = config_json(run.config, args, run.mode, resolved_loops);
        for (const auto& [k, v] : spec_echo.items()) j["config"][k] = v;
        if (want_events) {
            nlohmann::json ev = nlohmann::json::array();
            for (const auto& e : events) ev.push_back(event_to_json(e));
            j["events"] = ev;
        }
        print_json(j);
        return exit_status;
    }

    if (several) print_sequences(result.sequences, mode_used);
    else printer.finish(result.text);
    // Text for a person ends its line, so that the timing and the events table on stderr never
    // run on from it; --quiet leaves stdout exactly the generated text.
    if (!args.has("--quiet") && !printer.printed().empty() && printer.printed().back() != '\n')
        std::fputs("\n", stdout);
    std::fflush(stdout);
    if (want_events) print_events_table(model.get(), events);
    if (!args.has("--quiet") && !used_line.empty()) std::fprintf(stderr, "tinyloop: %s\n", used_line.c_str());
    if (!args.has("--quiet")) print_timing(st, mode_used, speculating, exit_status != 0);
    return exit_status;
}

}  // namespace tinyloop::cli
