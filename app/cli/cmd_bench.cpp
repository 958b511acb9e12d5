// tinyloop bench (MODEL | --random SPEC): prefill and decode speed per dtype x thread count x
// decode mode, measured side by side in one run, with the effective weight bandwidth and
// FLOP rate as fractions of this machine's measured ceilings (bench_machine.cpp).
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "bench_machine.h"
#include "commands.h"
#include "common.h"
#include "tinyloop/mode_rules.h"

namespace tinyloop::cli {

namespace fs = std::filesystem;

CommandSpec bench_spec() {
    CommandSpec s;
    s.name = "bench";
    s.synopsis =
        "(MODEL | --random SPEC) [--tokens N] [--prompt-tokens P] [--modes M,...]\n"
        "       [--dtypes T,...] [--loops L] [--threads N,...] [--repeat R] [--json]";
    s.summary =
        "Measures prefill tokens/s on a P-token prompt and decode tokens/s over N greedy tokens\n"
        "(EOS ignored) for every dtype x thread count x mode, all in one run: a warm-up, then the\n"
        "median of R runs, the modes interleaved. Reports the effective weight bandwidth (matrix\n"
        "bytes read per token x tokens/s) and GFLOP/s, as fractions of this machine's read\n"
        "bandwidth and FMA peak (measured first), and the early-exit / speculative / tree speedups\n"
        "over plain decoding at the same depth; speculative and tree output must equal plain greedy.";
    const std::string M = "Model", W = "Workload", MO = "Modes", O = "Output";
    s.options = {
        {"--random", "SPEC",
         "bench a random model: key=value,... with keys d_model, n_heads, d_ff,\n"
         "                              vocab, n_pre, n_loop, loops, n_kv_heads, head_dim,\n"
         "                              max_loops, max_seq_len, seed (see below)",
         "key=value pairs like d_model=512,n_heads=8", false, M},
        {"--dtypes", "T,...", "f32,f16,bf16,q8,q4,q2 (default: the model's own; f32 with --random)",
         "a list of f32, f16, bf16, q8, q4, q2", false, M},
        {"--group-size", "G", "quantization group for --dtypes q*: 32, 64, 128 (default 32)",
         "one of 32, 64, 128", false, M},
        {"--tokens", "N", "decoded tokens per run, 1..100000 (default 128)",
         "an integer in [1, 100000]", false, W},
        {"--prompt-tokens", "P", "prompt length for prefill, 1..max_seq_len (default 256)",
         "an integer in [1, 1000000]", false, W},
        {"--loops", "L", "loop depth (default: the model's default_loops)", "an integer in [1, max_loops]",
         false, W},
        {"--threads", "N,...", "CPU thread counts to compare, e.g. 1,2 (default: all cores)",
         "a list of integers in [1, 256]", false, W},
        {"--repeat", "R", "timed runs per cell, median reported, 1..100 (default 3)",
         "an integer in [1, 100]", false, W},
        {"--no-machine", "", "skip measuring the machine's bandwidth and FMA peak", "", false, W},
        {"--modes", "M,...",
         "plain,early-exit,speculative,tree,draft,pipelined (default: the first four; plain always runs)",
         "a list of plain, early-exit, speculative, tree, draft, pipelined", false, MO},
        {"--early-exit", "C", "early-exit criterion: l2 | margin | kl | entropy | argmax | gate | gate-select | reverse-kl | minp-kl | model (default: the model's, else l2)",
         "one of l2, margin, kl, entropy, argmax, gate, gate-select, reverse-kl, minp-kl, model", false, MO},
        {"--early-exit-threshold", "X", "early-exit threshold (default: the model's, else 0.05)", "a number >= 0",
         false, MO},
        {"--draft-loops", "D", "draft depth for speculative/tree/pipelined, and the draft model's depth for draft (default: the model's, else min(2, L-1))",
         "an integer >= 1", false, MO},
        {"--draft-ahead", "K", "tokens drafted / tree nodes run per cycle (default: the model's, else 4)",
         "an integer >= 1", false, MO},
        {"--branches", "B", "tree candidates per node (default: the model's, else 2)", "an integer >= 1", false, MO},
        {"--draft-model", "FILE", "draft model of --modes draft (default: MODEL quantized to q4)", "",
         false, MO},
        {"--gamma", "N", "tokens the draft model drafts per cycle, 1..32 (default 4)",
         "an integer >= 1", false, MO},
        {"--batch", "B,...",
         "continuous batching instead: aggregate decode tok/s of the batch engine at each batch\n"
         "                              size (e.g. 1,4,16), side by side; --prompt-tokens defaults to 32",
         "a list of batch sizes in [1, 256]", false, MO},
        {"--kv-cache", "T", "KV cache of the plain / early-exit / batch runs: f32 | int8 (default f32)",
         "one of f32, int8", false, MO},
        {"--sweep", "K,...",
         "verification's weight sweep instead: ms of one pass (and of the head) over K rows at once,\n"
         "                              for each K (e.g. 1,2,4,8) and --threads count, side by side",
         "a list of row counts in [1, 64]", false, MO},
        {"--forced-acceptance", "R,...",
         "chain speculation with the draft forced to agree with plain greedy at rate R (e.g.\n"
         "                              0.5,0.7,0.9): tokens per weight sweep, decode speedup over plain",
         "a list of numbers in [0, 1]", false, MO},
        {"--pipelined", "",
         "with --forced-acceptance: also self-speculation pipelined over depth at each rate (the\n"
         "                              next token drafted while the current one runs its deeper passes)",
         "", false, MO},
    };
    for (auto& o : common_options())
        if (o.name != "--threads") s.options.push_back(o);
    s.notes =
        "--batch B,...: B requests with different P-token prompts (default 32) decode N greedy tokens\n"
        "each (EOS ignored) through one BatchEngine, for each batch size, sizes interleaved, median\n"
        "of R runs. The clock starts after the step that prefilled every prompt (each request then\n"
        "has its first token) and stops when the last request ends: aggregate decode tok/s = tokens\n"
        "emitted in that window / time. Takes MODEL, --tokens, --prompt-tokens, --loops, --repeat,\n"
        "--kv-cache and one --threads count. Table: batch, decode tok/s, per-sequence tok/s, ratio\n"
        "to the first size, decode tokens per process CPU second (all threads; the work's cost,\n"
        "steadier than wall time on a busy machine) and its ratio, steps, KV bytes held by the\n"
        "batch. --json: model, mode \"batch\", loops, prompt_tokens, tokens, kv_cache, threads,\n"
        "repeat, batches[{batch, decode_tok_s, per_sequence_tok_s, speedup_vs_first,\n"
        "decode_tokens, decode_ms, decode_cpu_ms, cpu_tok_s, prefill_ms, steps, kv_cache_bytes,\n"
        "runs_tok_s}].\n"
        "\n"
        "--sweep K,... and --forced-acceptance R,... (either or both, in one run) take MODEL,\n"
        "--threads (a list), --repeat, --prompt-tokens (default 64: the context before the rows)\n"
        "and, for forced acceptance, --tokens (default 64), --loops, --draft-loops (default 1) and\n"
        "--draft-ahead (default 4). --sweep: one pass of the loop block (pass 2, resumed from the\n"
        "rows' pass-1 states: what a verify cycle runs per pass over its K drafted rows) and the\n"
        "head over the K rows, the K interleaved after a warm-up round, median of R rounds, in wall\n"
        "and in process CPU milliseconds (all threads; steadier on a busy machine); ratios are to\n"
        "the first K. --forced-acceptance: plain greedy decoding of N tokens (EOS ignored) gives the\n"
        "reference; chain speculation then runs with GenerateOptions::forced_draft (the draft\n"
        "proposes the reference token with probability R, seeded, else another token; the verifier\n"
        "decides, so the output must equal plain greedy: 'same'). Plain and the rates interleaved,\n"
        "median of R runs. Acceptance = accepted / (accepted + rejections), per compared token;\n"
        "weight sweeps = passes over the loop block, a batched pass over many rows counting once\n"
        "(plain: L per token; chain: D per drafted row + L - D per cycle; the head is not counted);\n"
        "decode ms excludes the prompt and the first token. --pipelined adds, after chain's rows,\n"
        "pipelined speculation at each rate (generate_pipelined_ex; weight sweeps = the sweeps its\n"
        "wave ran, all rows in flight counting once). --json: model, loops, context_tokens,\n"
        "tokens, draft_loops, draft_ahead, repeat, sweep[{threads, rows, pass_ms, pass_vs_first,\n"
        "pass_cpu_ms, pass_cpu_vs_first, head_ms, head_vs_first, pass_runs_ms}], forced[{threads,\n"
        "mode (plain, chain, pipelined), rate (null: plain), acceptance, tokens_per_cycle (null:\n"
        "pipelined), tokens_per_sweep, decode_ms,\n"
        "speedup_vs_plain, identical}].\n"
        "\n"
        "--random SPEC defaults: d_model=512, n_heads=8, d_ff=1408, vocab=4096, n_pre=2, n_loop=2,\n"
        "loops=7, n_kv_heads=n_heads, head_dim=d_model/n_heads, max_loops=max(16, 2*loops),\n"
        "max_seq_len=1024, seed=1. The model is written once per dtype into a temporary directory\n"
        "(deleted after); with MODEL, --dtypes other than the model's own are made with quantize.\n"
        "--modes draft: a second model (--draft-model, default MODEL quantized to q4) drafts\n"
        "--gamma tokens per cycle at --draft-loops (default: the self-speculation draft depth, the\n"
        "model's recommendation, else min(2, L-1)) and MODEL verifies them. --modes pipelined:\n"
        "self-speculation pipelined over depth (generate --mode pipelined: a drafted token rides\n"
        "the deeper passes' sweep) at --draft-loops, else the chain's draft depth.\n"
        "\n"
        "Bytes per token = prelude (and coda) + loop block (and adapter) x depth + head (the\n"
        "matrices as stored) + the keys and values every layer pass reads at the mean context (as\n"
        "the KV cache stores them);\n"
        "FLOPs per token = 2 x (matrix MACs at that depth + attention MACs at the mean context).\n"
        "GB/s and GFLOP/s are those per-token figures x decode tokens/s (plain and early-exit only:\n"
        "speculation reads the weights once per verified batch). Fractions use the machine figures\n"
        "measured with the same thread count. The shared loop block is counted once per pass, so a\n"
        "bandwidth fraction above 100% means its re-reads are served from cache (the looped\n"
        "model's edge), not that DRAM went faster.\n"
        "\n"
        "--json prints one object: model, random_spec, hparams, prompt_tokens, tokens, loops,\n"
        "repeat, group_size, machine{hardware_threads, fma_isa, per_threads[{threads, read_gbs,\n"
        "cache_read_gbs, fma_gflops}]} (null with --no-machine), rows[{dtype, threads, mode, loops,\n"
        "weight_bytes, load_ms, resident_bytes, prefill_tok_s, decode_tok_s, total_ms, tokens_emitted,\n"
        "mean_depth, speedup_vs_plain, bytes_per_token, kv_bytes_per_token, flops_per_token, gb_s,\n"
        "gflop_s, bw_fraction, cache_bound_tok_s, peak_fraction, acceptance_rate, mean_accepted,\n"
        "identical, draft_loops, draft_ahead, branches, early_exit, early_exit_threshold}] (fields\n"
        "that do not apply are null). load_ms: opening the file for that dtype x thread count\n"
        "(its pages already read once by bench); resident_bytes: the process's resident set after\n"
        "that cell's runs, the model still open.\n";
    return s;
}

namespace {

struct TempDir {
    std::string path;
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "tinyloop_bench_XXXXXX").string();
        if (!mkdtemp(tmpl.data())) throw Error(ErrorCode::Io, "bench: cannot create a temporary directory");
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

HParams parse_random_spec(const std::string& text, uint64_t* seed) {
    std::map<std::string, int64_t> kv;
    static const char* kKeys[] = {"d_model", "n_heads",   "d_ff",      "vocab",       "n_pre",
                                  "n_loop",  "loops",     "n_kv_heads", "head_dim",   "max_loops",
                                  "max_seq_len", "seed"};
    for (const auto& item : split_list("--random", text)) {
        size_t eq = item.find('=');
        if (eq == std::string::npos)
            throw UsageError("--random: expected key=value, got '" + item + "'");
        std::string key = item.substr(0, eq);
        bool known = false;
        for (const char* k : kKeys) known = known || key == k;
        if (!known)
            throw UsageError("--random: unknown key '" + key +
                             "' (keys: d_model, n_heads, d_ff, vocab, n_pre, n_loop, loops, "
                             "n_kv_heads, head_dim, max_loops, max_seq_len, seed)");
        if (kv.count(key)) throw UsageError("--random: key '" + key + "' given twice");
        const int64_t lo = key == "n_pre" || key == "seed" ? 0 : 1, hi = 1 << 22;
        kv[key] = parse_integer("--random", item.substr(eq + 1), lo, hi,
                                key + "=N with N in [" + std::to_string(lo) + ", " +
                                    std::to_string(hi) + "]");
    }
    auto get = [&](const char* k, int64_t def) { return kv.count(k) ? kv[k] : def; };
    HParams hp;
    hp.d_model = static_cast<int>(get("d_model", 512));
    hp.n_heads = static_cast<int>(get("n_heads", 8));
    hp.d_ff = static_cast<int>(get("d_ff", 1408));
    hp.vocab_size = static_cast<int>(get("vocab", 4096));
    hp.n_pre_blocks = static_cast<int>(get("n_pre", 2));
    hp.n_loop_layers = static_cast<int>(get("n_loop", 2));
    hp.default_loops = static_cast<int>(get("loops", 7));
    hp.n_kv_heads = static_cast<int>(get("n_kv_heads", hp.n_heads));
    hp.head_dim = static_cast<int>(get("head_dim", hp.d_model / std::max(1, hp.n_heads)));
    hp.max_loops = static_cast<int>(get("max_loops", std::max(16, 2 * hp.default_loops)));
    hp.max_seq_len = static_cast<int>(get("max_seq_len", 1024));
    *seed = static_cast<uint64_t>(get("seed", 1));
    const uint64_t d = hp.d_model, q = uint64_t(hp.n_heads) * hp.head_dim,
                   kvd = uint64_t(hp.n_kv_heads) * hp.head_dim, ff = hp.d_ff;
    const uint64_t params = uint64_t(hp.vocab_size) * d +
                            uint64_t(hp.n_pre_blocks + hp.n_loop_layers) * (d * q * 2 + d * kvd * 2 + d * ff * 3);
    if (params > 2'000'000'000ull)
        throw UsageError("--random: the model would have " + grouped(params) +
                         " parameters; bench writes at most 2,000,000,000");
    return hp;
}

// What a decoded token reads and computes, from the tensors as stored.
struct Costs {
    double pre_bytes = 0, loop_bytes = 0, head_bytes = 0;
    double pre_macs = 0, loop_macs = 0, head_macs = 0;
    uint64_t weight_bytes = 0;
    std::string matrix_dtype;
};

Costs model_costs(const ModelInfo& info) {
    Costs c;
    bool has_head = false;
    for (const auto& t : info.tensors) has_head = has_head || t.name == "head";
    std::map<std::string, uint64_t> dtype_bytes;
    for (const auto& t : info.tensors) {
        const double macs = t.shape.size() == 2 ? double(t.shape[0]) * double(t.shape[1]) : 0.0;
        // Unshared blocks (the prelude, Huginn's coda) run once per token; the loop block and
        // Huginn's adapter (it multiplies [state; e] at the start of every pass) once per pass.
        if (t.name.rfind("pre.", 0) == 0 || t.name.rfind("coda.", 0) == 0) {
            c.pre_bytes += double(t.bytes), c.pre_macs += macs;
        } else if (t.name.rfind("loop.", 0) == 0 || t.name == "adapter") {
            c.loop_bytes += double(t.bytes), c.loop_macs += macs;
        } else if (t.name == "head" || (t.name == "embed" && !has_head)) {
            c.head_bytes += double(t.bytes), c.head_macs += macs;
        } else if (t.name == "final_norm") {
            c.head_bytes += double(t.bytes);
        }
        if (t.shape.size() == 2) dtype_bytes[dtype_name(t.dtype)] += t.bytes;
    }
    uint64_t best = 0;
    for (const auto& [name, b] : dtype_bytes)
        if (b > best) best = b, c.matrix_dtype = name;
    c.weight_bytes = info.weight_bytes;
    return c;
}

// The prompt: an English paragraph, repeated to P tokens (a trained model sees text it knows).
std::vector<int32_t> bench_prompt(Model* m, int P) {
    static const char* kText =
        "In the beginning God created the heaven and the earth. And the earth was without form, "
        "and void; and darkness was upon the face of the deep. And the Spirit of God moved upon "
        "the face of the waters. And God said, Let there be light: and there was light. ";
    std::vector<int32_t> base = tokenize(m, kText);
    std::vector<int32_t> ids;
    while (static_cast<int>(ids.size()) < P) ids.insert(ids.end(), base.begin(), base.end());
    ids.resize(P);
    return ids;
}

struct Sample {
    double prefill_tok_s = 0, decode_tok_s = 0, total_ms = 0, mean_depth = 0;
    double acceptance = 0, mean_accepted = 0;
    int emitted = 0;
    bool identical = true;
};

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

nlohmann::json num_or_null(bool ok, double v) { return ok ? nlohmann::json(v) : nlohmann::json(nullptr); }

// The flags of one bench run, checked before anything loads.
struct BenchFlags {
    KVCacheType kv_cache = KVCacheType::F32;
    bool random = false, json = false;
    std::string model_path;
    uint64_t seed = 1;
    HParams rhp;
    std::vector<std::string> dtypes;
    int group = 32, N = 128, P = 256, repeat = 3;
    std::optional<int> loops_flag, draft_flag;
    std::vector<int> threads;
    std::vector<std::string> modes;
    GenerateConfig early_exit_flags;     // the early-exit flags' values; resolved with the model
    const Args* args = nullptr;          // for cli_early_exit: which flags were given
    std::optional<int> ahead, branches;  // 0 / absent: the model's recommendation, else built-in
    int gamma = kDraftModelGamma;
    LoadOptions base_load;
    bool has_mode(const char* m) const { return std::find(modes.begin(), modes.end(), m) != modes.end(); }
};

// MODEL or --random, --dtypes, --group-size, the workload and --threads.
void read_bench_workload(const Args& args, BenchFlags& f) {
    if (auto k = args.value("--kv-cache")) {
        if (*k != "f32" && *k != "int8") throw UsageError("--kv-cache: expected one of f32, int8, got '" + *k + "'");
        f.kv_cache = parse_kv_cache_type(*k);
    }
    f.random = args.has("--random");
    if (f.random) {
        if (!args.positionals().empty())
            throw UsageError("MODEL and --random cannot be used together");
        f.rhp = parse_random_spec(*args.value("--random"), &f.seed);
    } else {
        f.model_path = args.single_positional("MODEL (or --random SPEC)");
    }
    if (auto d = args.value("--dtypes"))
        for (const auto& t : split_list("--dtypes", *d)) {
            if (t != "f32" && t != "f16" && t != "bf16" && t != "q8" && t != "q4" && t != "q2")
                throw UsageError("--dtypes: expected items among f32, f16, bf16, q8, q4, q2, got '" + t + "'");
            if (std::find(f.dtypes.begin(), f.dtypes.end(), t) == f.dtypes.end()) f.dtypes.push_back(t);
        }
    f.group = args.get_int("--group-size", 1, 1 << 20).value_or(32);
    if (f.group != 32 && f.group != 64 && f.group != 128)
        throw UsageError("--group-size: expected one of 32, 64, 128, got '" + *args.value("--group-size") + "'");
    f.N = args.get_int("--tokens", 1, 100000).value_or(128);
    f.P = args.get_int("--prompt-tokens", 1, 1000000).value_or(256);
    f.loops_flag = args.get_int("--loops", 1, 1 << 16);
    f.repeat = args.get_int("--repeat", 1, 100).value_or(3);
    if (auto t = args.value("--threads")) {
        for (const auto& item : split_list("--threads", *t)) {
            int v = static_cast<int>(parse_integer("--threads", item, 1, 256, "a list of integers in [1, 256]"));
            if (std::find(f.threads.begin(), f.threads.end(), v) == f.threads.end()) f.threads.push_back(v);
        }
    } else {
        f.threads.push_back(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    }
}

// --modes and the flags only some modes take; refuses a flag no listed mode uses.
void read_bench_modes(const Args& args, BenchFlags& f) {
    f.modes = {"plain"};
    if (auto m = args.value("--modes")) {
        for (const auto& item : split_list("--modes", *m)) {
            if (item != "plain" && item != "early-exit" && item != "speculative" && item != "tree" &&
                item != "draft" && item != "pipelined")
                throw UsageError("--modes: expected items among plain, early-exit, speculative, tree, draft, pipelined, got '" +
                                 item + "'");
            if (std::find(f.modes.begin(), f.modes.end(), item) == f.modes.end()) f.modes.push_back(item);
        }
    } else {
        f.modes = {"plain", "early-exit", "speculative", "tree"};
    }
    f.args = &args;
    if (auto c = args.value("--early-exit")) read_criterion_flag("--early-exit", *c, &f.early_exit_flags.early_exit.criterion);
    if (auto t = args.get_float("--early-exit-threshold")) {
        if (*t < 0) throw UsageError("--early-exit-threshold: expected a number >= 0, got '" +
                                     *args.value("--early-exit-threshold") + "'");
        f.early_exit_flags.early_exit.threshold = *t;
    }
    f.draft_flag = args.get_int("--draft-loops", 1, 1 << 16);
    f.ahead = args.get_int("--draft-ahead", 1, 1 << 16);
    f.branches = args.get_int("--branches", 1, 1 << 16);
    for (const char* flag : {"--early-exit", "--early-exit-threshold"})
        if (args.has(flag) && !f.has_mode("early-exit"))
            throw UsageError(std::string(flag) + ": only used with --modes early-exit");
    for (const char* flag : {"--draft-loops", "--draft-ahead"})
        if (args.has(flag) && !f.has_mode("speculative") && !f.has_mode("tree") &&
            !((f.has_mode("draft") || f.has_mode("pipelined")) && std::string(flag) == "--draft-loops"))
            throw UsageError(std::string(flag) + ": only used with --modes speculative or tree" +
                             (std::string(flag) == "--draft-loops" ? " (or draft, pipelined)" : ""));
    f.gamma = args.get_int("--gamma", 1, 1 << 16).value_or(kDraftModelGamma);
    for (const char* flag : {"--gamma", "--draft-model"})
        if (args.has(flag) && !f.has_mode("draft"))
            throw UsageError(std::string(flag) + ": only used with --modes draft");
    if (auto d = args.value("--draft-model")) check_file_readable("--draft-model", *d);
    if (args.has("--branches") && !f.has_mode("tree")) throw UsageError("--branches: only used with --modes tree");
}

BenchFlags read_bench_flags(const Args& args) {
    BenchFlags f;
    read_bench_workload(args, f);
    read_bench_modes(args, f);
    if (auto b = args.value("--backend")) {
        if (*b == "cpu") f.base_load.backend = Backend::Cpu;
        else if (*b == "cuda") f.base_load.backend = Backend::Cuda;
        else if (*b == "auto") f.base_load.backend = Backend::Auto;
        else throw UsageError("--backend: expected one of cpu, cuda, auto, got '" + *b + "'");
    }
    f.json = args.has("--json");
    if (!f.random) check_file_readable("MODEL", f.model_path);
    return f;
}

// This machine's read bandwidth and FMA peak per thread count (--no-machine: none).
struct Ceiling {
    double read_gbs = 0, fma_gflops = 0, cache_read_gbs = 0;
};
struct Machine {
    nlohmann::json json = nullptr;
    std::map<int, Ceiling> ceilings;  // per thread count
};

Machine measure_machine(const Args& args, const BenchFlags& f) {
    Machine m;
    if (args.has("--no-machine")) return m;
    m.json = {{"hardware_threads", std::thread::hardware_concurrency()}};
    nlohmann::json per = nlohmann::json::array();
    std::string isa;
    for (int t : f.threads) {
        const double gbs = measure_read_bandwidth_gbs(t);
        const double gf = measure_fma_gflops(t, &isa);
        // A decode step re-reads a working set (weights + KV) of a few to a few tens of MiB:
        // on most machines that is last-level-cache bandwidth, not DRAM's.
        const double cache_gbs = measure_read_bandwidth_gbs(t, size_t(32) << 20);
        m.ceilings[t] = {gbs, gf, cache_gbs};
        per.push_back({{"threads", t}, {"read_gbs", gbs}, {"cache_read_gbs", cache_gbs}, {"fma_gflops", gf}});
    }
    m.json["fma_isa"] = isa;
    m.json["per_threads"] = per;
    return m;
}

// The model files, one per dtype (quantized into `tmp` where the model is not in it already),
// and the draft model of --modes draft: the flag's, else the model quantized to q4.
struct Variant {
    std::string dtype, path;
};
std::vector<Variant> bench_variants(const Args& args, BenchFlags& f, const TempDir& tmp, std::string* draft_file) {
    std::vector<Variant> variants;
    if (f.random) {
        if (f.dtypes.empty()) f.dtypes = {"f32"};
        for (const auto& d : f.dtypes) {
            const std::string path = tmp.path + "/random-" + d + ".tinyloop";
            try {
                save_model(path, random_model_spec(f.rhp, f.seed, parse_dtype(d), f.group));
            } catch (const Error& e) {
                throw Error(e.code(), "--random: " + std::string(e.what()));
            }
            variants.push_back({d, path});
        }
    } else {
        std::string own;
        {
            LoadOptions lo = f.base_load;
            lo.threads = 1;
            ModelHandle m = open_model(f.model_path, lo);
            own = model_costs(model_info(m.get())).matrix_dtype;
        }
        if (f.dtypes.empty()) f.dtypes = {own};
        for (const auto& d : f.dtypes) {
            if (d == own) {
                variants.push_back({d, f.model_path});
                continue;
            }
            const std::string path = tmp.path + "/model-" + d + ".tinyloop";
            quantize_model_file(f.model_path, path, parse_dtype(d), f.group);
            variants.push_back({d, path});
        }
    }
    if (f.has_mode("draft")) {
        if (auto d = args.value("--draft-model")) {
            *draft_file = *d;
        } else {
            *draft_file = tmp.path + "/draft-q4.tinyloop";
            quantize_model_file(f.random ? variants.front().path : f.model_path, *draft_file, DType::Q4, f.group);
        }
    }
    return variants;
}

// A bench mode as the engine's run specification: greedy decoding at depth L, EOS ignored.
RunSpec bench_run_spec(const BenchFlags& f, const std::string& mode, int max_tokens, int L, int draft,
                       const GenerateConfig& early_exit, Model* draft_model) {
    RunSpec spec;
    spec.config.max_tokens = max_tokens;
    spec.config.loops = L;
    spec.config.ignore_eos = true;
    if (mode == "plain" || mode == "early-exit") {
        spec.config.kv_cache = f.kv_cache;
        spec.mode = DecodeMode::Greedy;
        if (mode == "early-exit") {
            spec.mode = DecodeMode::EarlyExit;
            spec.config.early_exit = early_exit.early_exit;
        }
        return spec;
    }
    if (mode == "pipelined") {  // the chain's draft and verify depths in one wave (no draft_ahead)
        spec.mode = DecodeMode::Pipelined;
        spec.speculation = {.verify_loops = L, .draft_loops = f.draft_flag.value_or(0)};
        return spec;
    }
    spec.mode = mode == "draft" ? DecodeMode::DraftModel : mode == "speculative" ? DecodeMode::Speculative : DecodeMode::Tree;
    // Knobs left at 0 are the model's recommendation, else the built-in (resolved_speculation).
    spec.speculation = {.verify_loops = L, .draft_loops = f.draft_flag.value_or(0), .draft_ahead = f.ahead.value_or(0),
                        .branches = f.branches.value_or(0), .draft_model = draft_model, .gamma = f.gamma};
    if (mode == "draft") spec.speculation.draft_loops = draft;
    return spec;
}

// One row of the table: a dtype, a mode, a thread count, its samples and its model's costs.
struct Row {
    std::string dtype, mode;
    int threads;
    std::vector<Sample> samples;
    Costs costs;
    double load_ms = 0;           // open_model of this dtype x thread count (the file already read once)
    uint64_t resident_bytes = 0;  // the process's VmRSS after this cell's runs, the model still open
};

// This process's resident set (VmRSS of /proc/self/status) in bytes; 0 where there is none.
uint64_t resident_bytes_now() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
    return 0;
}

struct Runs {
    std::vector<Row> table;
    HParams hp;
    int L = 0, draft = 0;
    GenerateConfig early_exit;           // the early-exit policy run (flags, else model, else built-in)
    SpeculationPolicy chain, tree, pipelined;  // the knobs run, resolved
    std::vector<std::string> used;       // "early exit: ... (recommended by the model)", per mode
};

Sample sample_of(const GenerateResult& res, int P, int L, const std::vector<int32_t>& reference) {
    const GenerateStats& st = res.stats;
    Sample s;
    s.prefill_tok_s = st.prefill_ms > 0 ? P * 1000.0 / st.prefill_ms : 0.0;
    s.decode_tok_s = st.decode_tokens_per_s();
    s.total_ms = st.total_ms;
    s.emitted = st.tokens_emitted;
    double depth = 0;
    for (int dd : st.depth_per_token) depth += dd;
    s.mean_depth = st.depth_per_token.empty() ? L : depth / st.depth_per_token.size();
    s.acceptance = st.spec_acceptance_rate();
    s.mean_accepted = st.spec_mean_accepted();
    s.identical = res.tokens == reference;
    return s;
}

// What early exit and speculation run with on this model: the flags, else its recommendation,
// else the built-in defaults; and the lines saying so.
void resolve_bench_defaults(const BenchFlags& f, const Model* model, int L, Runs& out) {
    out.used.clear();
    GenerateConfig ee = f.early_exit_flags;
    ee.early_exit.patience = 1;
    std::string line;
    out.early_exit = cli_early_exit(model, *f.args, ee, &line);
    if (f.has_mode("early-exit")) out.used.push_back(line);
    // --modes draft runs the draft model at the depth self-speculation drafts at: --draft-loops,
    // else the model's recommendation, else the built-in (the resolver's, resolved_speculation).
    RunSpec self;
    self.mode = DecodeMode::Speculative;
    self.config.loops = L;
    self.speculation.draft_loops = f.draft_flag.value_or(0);
    out.draft = resolved_speculation(model, self).draft_loops;
    for (bool tree : {false, true}) {
        RunSpec rs;
        rs.mode = tree ? DecodeMode::Tree : DecodeMode::Speculative;
        rs.config.loops = L;
        rs.speculation = {.verify_loops = L, .draft_loops = f.draft_flag.value_or(0), .draft_ahead = f.ahead.value_or(0),
                          .branches = f.branches.value_or(0)};
        if (L < 2) continue;
        const ResolvedRun r = resolve_cli_run(model, rs, {.draft_loops = f.draft_flag.has_value(), .verify_loops = true,
                                                          .draft_ahead = f.ahead.has_value(),
                                                          .branches = f.branches.has_value()});
        (tree ? out.tree : out.chain) = r.spec.speculation;
        if (f.has_mode(tree ? "tree" : "speculative"))
            out.used.push_back((tree ? "tree " : "chain ") + speculation_used_line(r));
    }
    if (L >= 2) {
        RunSpec rs;
        rs.mode = DecodeMode::Pipelined;
        rs.config.loops = L;
        rs.speculation = {.verify_loops = L, .draft_loops = f.draft_flag.value_or(0)};
        const ResolvedRun r =
            resolve_cli_run(model, rs, {.draft_loops = f.draft_flag.has_value(), .verify_loops = true});
        out.pipelined = r.spec.speculation;
        if (f.has_mode("pipelined")) out.used.push_back(speculation_used_line(r));  // "..., pipelined"
    }
}

// Every dtype x thread count: a warm-up, then `repeat` rounds of the modes interleaved.
Runs run_rows(const BenchFlags& f, const std::vector<Variant>& variants, const std::string& draft_file) {
    Runs out;
    const auto fields = std::vector<std::pair<std::string, std::string>>{
        {"loops", "--loops"},           {"verify_loops", "--loops"},
        {"draft_loops", "--draft-loops"}, {"draft_ahead", "--draft-ahead"},
        {"K_branches", "--branches"},   {"branches", "--branches"},
        {"max_tokens", "--tokens"},
        {"gamma", "--gamma"},           {"draft", "--draft-model"},
        {"early_exit_threshold", "--early-exit-threshold"}};
    const int P = f.P, N = f.N;
    for (const auto& v : variants) {
        for (int t : f.threads) {
            LoadOptions lo = f.base_load;
            lo.threads = t;
            const auto load_start = std::chrono::steady_clock::now();
            ModelHandle model = open_model(v.path, lo);
            const double load_ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start).count();
            const HParams& hp = model_hparams(model.get());
            out.hp = hp;
            const int L = out.L = f.loops_flag ? *f.loops_flag : resolve_loops(hp, 0);  // absent: the default depth
            if (L > hp.max_loops)
                throw UsageError("--loops: " + std::to_string(L) + " is deeper than the model's max_loops " +
                                 std::to_string(hp.max_loops));
            resolve_bench_defaults(f, model.get(), L, out);
            if ((f.has_mode("speculative") || f.has_mode("tree") || f.has_mode("pipelined")) && L < 2)
                throw UsageError("--loops: speculative, tree and pipelined modes need a depth >= 2, got " +
                                 std::to_string(L));
            if (P + N > hp.max_seq_len)
                throw UsageError("--prompt-tokens " + std::to_string(P) + " + --tokens " + std::to_string(N) +
                                 " exceed the model's max_seq_len " + std::to_string(hp.max_seq_len));
            const Costs costs = model_costs(model_info(model.get()));
            const std::vector<int32_t> prompt = bench_prompt(model.get(), P);
            ModelHandle draft_model;
            if (f.has_mode("draft")) draft_model = open_model(draft_file, lo);
            auto run_mode = [&](const std::string& mode, int max_tokens) {
                const RunSpec spec = bench_run_spec(f, mode, max_tokens, L, out.draft, out.early_exit, draft_model.get());
                return with_engine_fields(fields, [&] { return run_decode(model.get(), prompt.data(), P, spec); });
            };
            for (const auto& mode : f.modes) run_mode(mode, std::min(N, 8));  // warm-up
            std::vector<Row> rows_here;
            for (const auto& mode : f.modes) rows_here.push_back({v.dtype, mode, t, {}, costs});
            std::vector<int32_t> reference;
            for (int r = 0; r < f.repeat; ++r) {
                for (size_t k = 0; k < f.modes.size(); ++k) {
                    GenerateResult res = run_mode(f.modes[k], N);
                    if (f.modes[k] == "plain" && reference.empty()) reference = res.tokens;
                    rows_here[k].samples.push_back(sample_of(res, P, L, reference));
                }
            }
            const uint64_t rss = resident_bytes_now();
            for (auto& r : rows_here) r.load_ms = load_ms, r.resident_bytes = rss, out.table.push_back(std::move(r));
        }
    }
    return out;
}

// A row's medians over its samples.
struct Med {
    double prefill, decode, total, depth, acc, mean_acc, emitted;
    bool identical;
};

Med medians(const Row& r) {
    auto col = [&](double Sample::*f) {
        std::vector<double> v;
        for (const auto& s : r.samples) v.push_back(s.*f);
        return median(v);
    };
    Med m{col(&Sample::prefill_tok_s), col(&Sample::decode_tok_s), col(&Sample::total_ms),
          col(&Sample::mean_depth),    col(&Sample::acceptance),   col(&Sample::mean_accepted),
          0, true};
    std::vector<double> em;
    for (const auto& s : r.samples) em.push_back(s.emitted), m.identical = m.identical && s.identical;
    m.emitted = median(em);
    return m;
}

// What one row's medians come to per token: bytes and FLOPs read and done, the rates, the
// speedup over plain decoding and the fractions of the machine's ceilings.
struct Derived {
    bool weights_model, spec, have_machine;
    double depth, kv_bytes, bytes, flops, gbs, gflops, speedup, bwf, pkf, bound;
};

Derived derive(const Row& r, const Med& m, const Runs& runs, const BenchFlags& f, const Machine& machine,
               double plain_decode) {
    const HParams& hp = runs.hp;
    const double ctx = std::min<double>(f.P + f.N / 2.0, hp.max_seq_len);
    const double attn_macs_per_layer = 2.0 * hp.n_heads * hp.head_dim * ctx;
    // Keys and values one layer-pass reads at the mean context, as the cache stores them (f32, or
    // int8 codes plus one f32 scale per row and kv head).
    const double kv_elem_bytes = f.kv_cache == KVCacheType::Int8 ? 1.0 + 4.0 / hp.head_dim : 4.0;
    const double kv_bytes_per_layer = 2.0 * ctx * hp.n_kv_heads * hp.head_dim * kv_elem_bytes;
    Derived d{};
    d.weights_model = r.mode == "plain" || r.mode == "early-exit";
    d.spec = r.mode == "speculative" || r.mode == "tree" || r.mode == "draft" || r.mode == "pipelined";
    d.depth = m.depth;
    const double layers = hp.n_pre_blocks + hp.n_coda_blocks + hp.n_loop_layers * d.depth;
    d.kv_bytes = kv_bytes_per_layer * layers;
    d.bytes = r.costs.pre_bytes + r.costs.loop_bytes * d.depth + r.costs.head_bytes + d.kv_bytes;
    d.flops = 2.0 * (r.costs.pre_macs + r.costs.loop_macs * d.depth + r.costs.head_macs + attn_macs_per_layer * layers);
    d.gbs = d.bytes * m.decode / 1e9;
    d.gflops = d.flops * m.decode / 1e9;
    d.speedup = plain_decode > 0 ? m.decode / plain_decode : 0.0;
    d.have_machine = machine.ceilings.count(r.threads) != 0;
    const Ceiling ce = d.have_machine ? machine.ceilings.at(r.threads) : Ceiling{};
    d.bwf = ce.read_gbs > 0 ? d.gbs / ce.read_gbs : 0;
    d.pkf = ce.fma_gflops > 0 ? d.gflops / ce.fma_gflops : 0;
    // The decode rate at which this token's bytes would take all of the cache read bandwidth.
    d.bound = ce.cache_read_gbs > 0 && d.bytes > 0 ? ce.cache_read_gbs * 1e9 / d.bytes : 0;
    return d;
}

nlohmann::json row_json(const Row& r, const Med& m, const Derived& d, const Runs& runs, const BenchFlags& f) {
    const bool wm = d.weights_model, spec = d.spec, mach = d.weights_model && d.have_machine;
    const nlohmann::json null = nullptr;
    return {{"dtype", r.dtype},
            {"threads", r.threads},
            {"mode", r.mode},
            {"loops", runs.L},
            {"weight_bytes", r.costs.weight_bytes},
            {"load_ms", r.load_ms},
            {"resident_bytes", r.resident_bytes},
            {"prefill_tok_s", m.prefill},
            {"decode_tok_s", m.decode},
            {"total_ms", m.total},
            {"tokens_emitted", m.emitted},
            {"mean_depth", num_or_null(!spec, d.depth)},
            {"speedup_vs_plain", d.speedup},
            {"bytes_per_token", num_or_null(wm, d.bytes)},
            {"kv_bytes_per_token", num_or_null(wm, d.kv_bytes)},
            {"flops_per_token", num_or_null(wm, d.flops)},
            {"gb_s", num_or_null(wm, d.gbs)},
            {"gflop_s", num_or_null(wm, d.gflops)},
            {"bw_fraction", num_or_null(mach, d.bwf)},
            {"cache_bound_tok_s", num_or_null(mach, d.bound)},
            {"peak_fraction", num_or_null(mach, d.pkf)},
            {"acceptance_rate", num_or_null(spec, m.acc)},
            {"mean_accepted", num_or_null(spec, m.mean_acc)},
            {"identical", m.identical},
            {"draft_loops", spec ? nlohmann::json(r.mode == "tree"        ? runs.tree.draft_loops
                                                  : r.mode == "draft"     ? runs.draft
                                                  : r.mode == "pipelined" ? runs.pipelined.draft_loops
                                                                          : runs.chain.draft_loops)
                                 : null},
            {"draft_ahead", spec && r.mode != "pipelined"  // the wave drafts one token per sweep
                                ? nlohmann::json(r.mode == "draft" ? f.gamma : r.mode == "tree" ? runs.tree.draft_ahead : runs.chain.draft_ahead)
                                : null},
            {"branches", r.mode == "tree" ? nlohmann::json(runs.tree.branches) : null},
            // the policy in the codec's one form (early_exit_policy_to_json), as score --json writes it
            {"early_exit", r.mode == "early-exit" ? early_exit_policy_to_json(runs.early_exit.early_exit) : null}};
}

std::string row_line(const Row& r, const Med& m, const Derived& d) {
    char line[320], dcol[16], gb[16], bwp[16], bnd[16], gf[16], pkp[16], acc[16], macc[16];
    auto fmt = [](char* b, bool ok, const char* f, double v) {
        if (ok) std::snprintf(b, 16, f, v);
        else std::snprintf(b, 16, "-");
    };
    const bool mach = d.weights_model && d.have_machine;
    fmt(dcol, !d.spec, "%.2f", d.depth);
    fmt(gb, d.weights_model, "%.2f", d.gbs);
    fmt(bwp, mach, "%.0f%%", 100 * d.bwf);
    fmt(bnd, mach, "%.0f", d.bound);
    fmt(gf, d.weights_model, "%.2f", d.gflops);
    fmt(pkp, mach, "%.1f%%", 100 * d.pkf);
    fmt(acc, d.spec, "%.0f%%", 100 * m.acc);
    fmt(macc, d.spec, "%.2f", m.mean_acc);
    std::snprintf(line, sizeof(line), "%-5s %3d %-12s %5s %10.1f %9.1f %7.2fx %7s %5s %8s %8s %6s %7s %8s  %s\n",
                  r.dtype.c_str(), r.threads, r.mode.c_str(), dcol, m.prefill, m.decode, d.speedup, gb, bwp, bnd,
                  gf, pkp, acc, macc, m.identical ? "yes" : "NO");
    return line;
}

std::string table_header(const Args& args, const BenchFlags& f, const Machine& machine, const Runs& runs) {
    const int L = runs.L;
    std::ostringstream o;
    char line[320];
    std::snprintf(line, sizeof(line), "tinyloop bench: %s, prompt %s, %d decoded, depth %d, median of %d\n",
                  f.random ? ("random " + *args.value("--random")).c_str() : f.model_path.c_str(),
                  plural(f.P, "token").c_str(), f.N, L, f.repeat);
    o << line;
    if (!machine.json.is_null()) {
        for (const auto& pt : machine.json["per_threads"]) {
            std::snprintf(line, sizeof(line),
                          "machine: %d thread%s: read %.1f GB/s (256 MiB), %.1f GB/s (32 MiB, cache), FMA peak %.1f "
                          "GFLOP/s (%s)\n",
                          pt["threads"].get<int>(), pt["threads"].get<int>() == 1 ? "" : "s",
                          pt["read_gbs"].get<double>(), pt["cache_read_gbs"].get<double>(), pt["fma_gflops"].get<double>(),
                          machine.json["fma_isa"].get<std::string>().c_str());
            o << line;
        }
    }
    for (const std::string& u : runs.used) o << u << "\n";
    o << "\ndtype thr mode         depth  prefill/s  decode/s  speedup    GB/s   %bw  bound/s  GFLOP/s  %peak  accept  acc/cyc  same\n";
    return o.str();
}

// The table (or --json's object) from the runs' medians.
int report(const Args& args, const BenchFlags& f, const Machine& machine, const Runs& runs) {
    std::vector<Med> meds;
    std::map<std::pair<std::string, int>, double> plain_decode;
    for (const auto& r : runs.table) {
        meds.push_back(medians(r));
        if (r.mode == "plain") plain_decode[{r.dtype, r.threads}] = meds.back().decode;
    }
    nlohmann::json rows = nlohmann::json::array();
    std::string text = f.json ? "" : table_header(args, f, machine, runs);
    for (size_t i = 0; i < runs.table.size(); ++i) {
        const Row& r = runs.table[i];
        const Derived d = derive(r, meds[i], runs, f, machine, plain_decode[{r.dtype, r.threads}]);
        if (f.json) rows.push_back(row_json(r, meds[i], d, runs, f));
        else text += row_line(r, meds[i], d);
    }
    if (f.json) {
        print_json({{"model", f.random ? nlohmann::json(nullptr) : nlohmann::json(f.model_path)},
                    {"random_spec", f.random ? nlohmann::json(*args.value("--random")) : nlohmann::json(nullptr)},
                    {"hparams", hparams_json(runs.hp)},
                    {"prompt_tokens", f.P},
                    {"tokens", f.N},
                    {"loops", runs.L},
                    {"repeat", f.repeat},
                    {"group_size", f.group},
                    {"machine", machine.json},
                    {"rows", rows}});
        return 0;
    }
    text +=
        "\nspeedup: decode tok/s over plain at the same dtype and threads; same: output tokens equal\n"
        "plain greedy's. GB/s counts the loop block once per pass: over 100% of the measured read\n"
        "bandwidth means its re-reads hit the cache. bound/s: the decode rate at which each token's\n"
        "bytes (weights + KV) would take all of the measured cache (32 MiB) read bandwidth; a decode\n"
        "whose working set is larger than the core's private cache cannot pass it.\n";
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
}

}  // namespace

int run_bench_batch(const Args& args);  // bench_batch.cpp
int run_bench_sweep(const Args& args);  // bench_sweep.cpp

// The modes run through the engine's one entry (run_decode), so bench measures exactly what
// generate runs.
int run_bench(const Args& args) {
    if (args.has("--batch")) return run_bench_batch(args);
    if (args.has("--sweep") || args.has("--forced-acceptance")) return run_bench_sweep(args);
    BenchFlags f = read_bench_flags(args);
    const Machine machine = measure_machine(args, f);
    TempDir tmp;
    std::string draft_file;
    const std::vector<Variant> variants = bench_variants(args, f, tmp, &draft_file);
    const Runs runs = run_rows(f, variants, draft_file);
    return report(args, f, machine, runs);
}

}  // namespace tinyloop::cli
