// tinyloop bench MODEL --sweep 1,2,4,8 --forced-acceptance 0.5,0.7,0.9: what one weight sweep of
// verification costs over K rows (measure_sweep_cost), and what chain speculation gains at a
// forced acceptance rate (GenerateOptions::forced_draft) and, with --pipelined, what self-speculation
// pipelined over depth gains at the same rates, per thread count, side by side in one run (bench's
// notes: the flags and fields).
#include <algorithm>
#include <cstdio>
#include <optional>

#include "commands.h"
#include "common.h"

namespace tinyloop::cli {

namespace {

const char kText[] =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
    "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. ";

std::vector<int32_t> text_prompt(Model* m, int P) {
    std::string text;
    std::vector<int32_t> ids;
    while (static_cast<int>(ids.size()) < P) {
        text += kText;
        ids = tokenize(m, text);
    }
    ids.resize(static_cast<size_t>(P));
    return ids;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// One decode run: the decode window (first token to the end) and the counters the table needs.
struct DecodeRun {
    std::vector<int32_t> output;
    double decode_ms = 0;
    int tokens = 0;  // emitted after the first
    int cycles = 0, drafted = 0, accepted = 0, rejected = 0;
    int sweeps = 0;  // pipelined: the sweeps the wave ran
};

DecodeRun finish_run(const GenerateResult& r, int rejected) {
    DecodeRun d;
    d.output.assign(r.tokens.begin() + r.prompt_len, r.tokens.end());
    d.decode_ms = r.stats.total_ms - r.stats.first_token_ms;
    d.tokens = std::max(0, r.stats.tokens_emitted - 1);
    d.cycles = r.stats.spec_cycles;
    d.drafted = r.stats.spec_drafted;
    d.accepted = r.stats.spec_accepted;
    d.rejected = rejected;
    d.sweeps = r.stats.spec_sweeps;
    return d;
}

DecodeRun run_plain(Model* m, const std::vector<int32_t>& prompt, int N, int L) {
    GenerateConfig g;
    g.max_tokens = N;
    g.loops = L;
    g.ignore_eos = true;
    return finish_run(generate_ex(m, prompt.data(), static_cast<int>(prompt.size()), g), 0);
}

DecodeRun run_forced(Model* m, const std::vector<int32_t>& prompt, int N, int L, int D, int K, const ForcedDraft& fd) {
    SpeculativeConfig c;
    c.max_tokens = N;
    c.draft_loops = D;
    c.verify_loops = L;
    c.draft_ahead = K;
    c.ignore_eos = true;
    GenerateOptions o;
    o.forced_draft = &fd;
    int rejected = 0;
    o.observer = [&rejected](const TokenEvent& ev) {
        if (ev.index > 0 && ev.from_verifier) ++rejected;  // a correction: the verifier disagreed
        return true;
    };
    // The observer counts while the call runs: read `rejected` only after it returns.
    const GenerateResult r = generate_speculative_ex(m, prompt.data(), static_cast<int>(prompt.size()), c, o);
    return finish_run(r, rejected);
}

DecodeRun run_pipelined(Model* m, const std::vector<int32_t>& prompt, int N, int L, int D, const ForcedDraft& fd) {
    SpeculativeConfig c;
    c.max_tokens = N;
    c.draft_loops = D;
    c.verify_loops = L;
    c.ignore_eos = true;
    GenerateOptions o;
    o.forced_draft = &fd;
    const GenerateResult r = generate_pipelined_ex(m, prompt.data(), static_cast<int>(prompt.size()), c, o);
    return finish_run(r, r.stats.spec_tested - r.stats.spec_accepted);
}

}  // namespace

int run_bench_sweep(const Args& args) {
    for (const char* f : {"--random", "--dtypes", "--group-size", "--modes", "--early-exit", "--early-exit-threshold",
                          "--branches", "--batch", "--kv-cache", "--draft-model", "--gamma", "--no-machine"})
        if (args.has(f)) throw UsageError(std::string(f) + ": not used with --sweep / --forced-acceptance");
    const bool forced_mode = args.has("--forced-acceptance");
    const bool pipelined = args.has("--pipelined");
    if (!forced_mode)
        for (const char* f : {"--tokens", "--loops", "--draft-loops", "--draft-ahead", "--pipelined"})
            if (args.has(f)) throw UsageError(std::string(f) + ": only used with --forced-acceptance");
    const std::string model_path = args.single_positional("MODEL");
    std::vector<int> ks;
    if (auto v = args.value("--sweep"))
        for (const auto& item : split_list("--sweep", *v)) {
            const int k = static_cast<int>(parse_integer("--sweep", item, 1, 64, "a list of row counts in [1, 64]"));
            if (std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
        }
    std::vector<double> rates;
    if (auto v = args.value("--forced-acceptance"))
        for (const auto& item : split_list("--forced-acceptance", *v)) {
            const float r = parse_number("--forced-acceptance", item, "a list of numbers in [0, 1]");
            if (!(r >= 0.0f && r <= 1.0f))
                throw UsageError("--forced-acceptance: expected a list of numbers in [0, 1], got '" + item + "'");
            rates.push_back(f2d(r));
        }
    const int repeat = args.get_int("--repeat", 1, 100).value_or(3);
    const int P = args.get_int("--prompt-tokens", 1, 1000000).value_or(64);
    const int N = args.get_int("--tokens", 1, 100000).value_or(64);
    const std::optional<int> loops_flag = args.get_int("--loops", 2, 1 << 16);
    const int D = args.get_int("--draft-loops", 1, 1 << 16).value_or(1);
    const int K = args.get_int("--draft-ahead", 1, 32).value_or(4);
    std::vector<int> threads;
    if (auto t = args.value("--threads")) {
        for (const auto& item : split_list("--threads", *t)) {
            const int v = static_cast<int>(parse_integer("--threads", item, 1, 256, "a list of integers in [1, 256]"));
            if (std::find(threads.begin(), threads.end(), v) == threads.end()) threads.push_back(v);
        }
    } else {
        threads.push_back(0);  // the engine's default: all cores
    }
    check_file_readable("MODEL", model_path);

    nlohmann::json sweep_rows = nlohmann::json::array(), forced_rows = nlohmann::json::array();
    int L = 0;
    const bool json = args.has("--json");
    const auto fields = std::vector<std::pair<std::string, std::string>>{
        {"verify_loops", "--loops"}, {"loops", "--loops"}, {"draft_loops", "--draft-loops"},
        {"draft_ahead", "--draft-ahead"}, {"max_tokens", "--tokens"}, {"context", "--prompt-tokens"},
        {"rows", "--sweep"}, {"repeat", "--repeat"}};
    for (int t : threads) {
        LoadOptions lo;
        if (auto b = args.value("--backend")) {
            if (*b == "cpu") lo.backend = Backend::Cpu;
            else if (*b == "cuda") lo.backend = Backend::Cuda;
            else if (*b == "auto") lo.backend = Backend::Auto;
            else throw UsageError("--backend: expected one of cpu, cuda, auto, got '" + *b + "'");
        }
        if (t > 0) lo.threads = t;
        ModelHandle model = open_model(model_path, lo);
        const HParams& hp = model_hparams(model.get());
        const int nthreads = model_info(model.get()).threads;
        L = loops_flag.value_or(hp.default_loops);
        if (!ks.empty()) {
            const std::vector<SweepCost> cost =
                with_engine_fields(fields, [&] { return measure_sweep_cost(model.get(), ks, P, repeat); });
            for (const SweepCost& c : cost) {
                sweep_rows.push_back({{"threads", nthreads},
                                      {"rows", c.rows},
                                      {"pass_ms", c.pass_ms},
                                      {"pass_vs_first", c.pass_ms / cost[0].pass_ms},
                                      {"pass_cpu_ms", c.pass_cpu_ms},
                                      {"pass_cpu_vs_first", c.pass_cpu_ms / cost[0].pass_cpu_ms},
                                      {"head_ms", c.head_ms},
                                      {"head_vs_first", c.head_ms / cost[0].head_ms},
                                      {"pass_runs_ms", c.pass_runs_ms}});
            }
        }
        if (forced_mode) {
            if (P + N + K > hp.max_seq_len)
                throw UsageError("--prompt-tokens " + std::to_string(P) + " + --tokens " + std::to_string(N) +
                                 " + --draft-ahead exceed the model's max_seq_len " + std::to_string(hp.max_seq_len));
            const std::vector<int32_t> prompt = text_prompt(model.get(), P);
            with_engine_fields(fields, [&] {
                // Warm-up and the reference: plain greedy decoding.
                const DecodeRun ref = run_plain(model.get(), prompt, N, L);
                std::vector<ForcedDraft> fds;
                for (size_t i = 0; i < rates.size(); ++i) fds.push_back({ref.output, rates[i], 1 + i});
                run_forced(model.get(), prompt, std::min(N, 8), L, D, K, fds[0]);
                if (pipelined) run_pipelined(model.get(), prompt, std::min(N, 8), L, D, fds[0]);
                // runs[0] plain, then chain at each rate, then (--pipelined) pipelined at each rate
                const size_t R = rates.size();
                std::vector<std::vector<DecodeRun>> runs(1 + R * (pipelined ? 2 : 1));
                for (int r = 0; r < repeat; ++r) {
                    runs[0].push_back(run_plain(model.get(), prompt, N, L));
                    for (size_t i = 0; i < R; ++i) {
                        runs[i + 1].push_back(run_forced(model.get(), prompt, N, L, D, K, fds[i]));
                        if (pipelined) runs[1 + R + i].push_back(run_pipelined(model.get(), prompt, N, L, D, fds[i]));
                    }
                }
                auto med_ms = [](const std::vector<DecodeRun>& v) {
                    std::vector<double> ms;
                    for (const auto& d : v) ms.push_back(d.decode_ms);
                    return median(ms);
                };
                const double plain_ms = med_ms(runs[0]);
                for (size_t i = 0; i < runs.size(); ++i) {
                    const DecodeRun& d = runs[i].front();  // the counters are the same every run (seeded)
                    const bool wave = i > R;
                    bool same = true;
                    for (const auto& x : runs[i]) same = same && x.output == ref.output;
                    const double sweeps = i == 0 ? static_cast<double>(d.tokens) * L
                                          : wave ? static_cast<double>(d.sweeps)
                                                 : static_cast<double>(D) * d.drafted + static_cast<double>(L - D) * d.cycles;
                    const double ms = med_ms(runs[i]);
                    nlohmann::json row = {{"threads", nthreads},
                                          {"mode", i == 0 ? "plain" : wave ? "pipelined" : "chain"},
                                          {"rate", i == 0 ? nlohmann::json(nullptr) : nlohmann::json(rates[(i - 1) % R])},
                                          {"acceptance", nullptr},
                                          {"tokens_per_cycle", nullptr},
                                          {"tokens_per_sweep", sweeps > 0 ? d.tokens / sweeps : 0.0},
                                          {"decode_ms", ms},
                                          {"speedup_vs_plain", ms > 0 ? plain_ms / ms : 0.0},
                                          {"identical", same}};
                    if (i > 0) {
                        const int compared = d.accepted + d.rejected;
                        row["acceptance"] = compared > 0 ? static_cast<double>(d.accepted) / compared : 0.0;
                        if (!wave) row["tokens_per_cycle"] = d.cycles > 0 ? static_cast<double>(d.tokens) / d.cycles : 0.0;
                    }
                    forced_rows.push_back(row);
                }
                return 0;
            });
        }
    }

    if (json) {
        print_json({{"model", model_path},
                    {"loops", L},
                    {"context_tokens", P},
                    {"tokens", forced_mode ? nlohmann::json(N) : nlohmann::json(nullptr)},
                    {"draft_loops", forced_mode ? nlohmann::json(D) : nlohmann::json(nullptr)},
                    {"draft_ahead", forced_mode ? nlohmann::json(K) : nlohmann::json(nullptr)},
                    {"repeat", repeat},
                    {"sweep", sweep_rows},
                    {"forced", forced_rows}});
        return 0;
    }
    if (!ks.empty()) {
        std::printf("verification's weight sweep: %s, one pass of the loop block over K rows after %d tokens, "
                    "median of %d (K interleaved)\n",
                    model_path.c_str(), P, repeat);
        std::printf("%7s %5s %10s %9s %11s %9s %10s %9s\n", "threads", "K", "ms/pass", "vs first", "CPU ms/pass",
                    "vs first", "head ms", "vs first");
        for (const auto& r : sweep_rows)
            std::printf("%7d %5d %10.2f %8.2fx %11.2f %8.2fx %10.2f %8.2fx\n", r["threads"].get<int>(),
                        r["rows"].get<int>(), r["pass_ms"].get<double>(), r["pass_vs_first"].get<double>(),
                        r["pass_cpu_ms"].get<double>(), r["pass_cpu_vs_first"].get<double>(),
                        r["head_ms"].get<double>(), r["head_vs_first"].get<double>());
    }
    if (forced_mode) {
        if (!ks.empty()) std::printf("\n");
        std::printf("forced acceptance: %s, chain speculation%s, draft %d of %d passes, %d drafted per cycle, "
                    "%d greedy tokens after %d, median of %d (interleaved)\n",
                    model_path.c_str(), pipelined ? " and pipelined" : "", D, L, K, N, P, repeat);
        std::printf("%7s %9s %6s %11s %10s %10s %10s %9s %5s\n", "threads", "mode", "rate", "acceptance", "tok/cycle",
                    "tok/sweep", "decode ms", "speedup", "same");
        for (const auto& r : forced_rows) {
            const bool plain = r["rate"].is_null();
            char rate[16], acc[16], tpc[16];
            std::snprintf(rate, sizeof rate, "%s", plain ? "plain" : "");
            if (!plain) std::snprintf(rate, sizeof rate, "%.2f", r["rate"].get<double>());
            std::snprintf(acc, sizeof acc, "%s", "-");
            std::snprintf(tpc, sizeof tpc, "%s", "-");
            if (!plain) {
                std::snprintf(acc, sizeof acc, "%.3f", r["acceptance"].get<double>());
                if (!r["tokens_per_cycle"].is_null())
                    std::snprintf(tpc, sizeof tpc, "%.2f", r["tokens_per_cycle"].get<double>());
            }
            std::printf("%7d %9s %6s %11s %10s %10.3f %10.1f %8.2fx %5s\n", r["threads"].get<int>(),
                        r["mode"].get<std::string>().c_str(), rate, acc, tpc,
                        r["tokens_per_sweep"].get<double>(), r["decode_ms"].get<double>(),
                        r["speedup_vs_plain"].get<double>(), r["identical"].get<bool>() ? "yes" : "NO");
        }
    }
    return 0;
}

}  // namespace tinyloop::cli
