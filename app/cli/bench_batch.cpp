// tinyloop bench MODEL --batch 1,4,16: aggregate decode tokens/s of the continuous-batching
// engine at several batch sizes, measured side by side in one run (the sizes interleaved, the
// median of R runs). B requests with different prompts decode N greedy tokens each (EOS
// ignored); the clock starts once every request has its first token (prefill done) and stops
// when the last one ends, so the figure is decode only: tokens emitted in that window / time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "commands.h"
#include "common.h"
#include "tinyloop/mode_rules.h"

namespace tinyloop::cli {

namespace {

using Clock = std::chrono::steady_clock;

const char kText[] =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
    "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. "
    "And God said, Let there be light: and there was light. And God saw the light, that it was good: and "
    "God divided the light from the darkness. And God called the light Day, and the darkness he called "
    "Night. And the evening and the morning were the first day. ";

// P tokens of KJV text starting `offset` tokens in (so every request has its own prompt).
std::vector<int32_t> prompt_at(Model* m, int P, int offset) {
    std::string text;
    std::vector<int32_t> ids;
    while (static_cast<int>(ids.size()) < P + offset) {
        text += kText;
        ids = tokenize(m, text);
    }
    return std::vector<int32_t>(ids.begin() + offset, ids.begin() + offset + P);
}

struct BatchSample {
    double decode_tok_s = 0;   // aggregate over the batch
    double decode_ms = 0;
    double decode_cpu_ms = 0;  // process CPU time in the decode window (all threads)
    double cpu_tok_s = 0;      // decode tokens per CPU second: the work's cost, less sensitive to a busy machine
    long long decode_tokens = 0;
    double prefill_ms = 0;     // engine start -> every request has its first token
    size_t kv_bytes = 0;       // KV bytes the batch's requests held (sum of their pages)
    long long steps = 0;
};

BatchSample run_batch(Model* m, int B, int P, int N, int L, KVCacheType kv) {
    BatchEngineOptions o;
    o.max_batch = B;
    o.prefill_chunk = std::min(4096, B * P);
    const HParams& hp = model_hparams(m);
    o.kv_pages = std::max(1, B * ((P + N + o.page_size - 1) / o.page_size) * (hp.n_pre_blocks + hp.n_coda_blocks + L * hp.n_loop_layers));
    Owned<BatchEngine> e(create_batch_engine(m, o));
    long long emitted = 0;
    std::vector<uint64_t> ids;
    for (int b = 0; b < B; ++b) {
        BatchRequest r;
        r.prompt = prompt_at(m, P, 3 * b);
        r.config.max_tokens = N;
        r.config.loops = L;
        r.config.ignore_eos = true;
        r.config.kv_cache = kv;
        r.on_token = [&emitted](int32_t, int) {
            ++emitted;
            return true;
        };
        ids.push_back(batch_submit(e.get(), std::move(r)));
    }
    const auto t0 = Clock::now();
    Clock::time_point t_start{};
    std::clock_t c_start = 0;
    long long at_start = -1;
    BatchSample s;
    while (true) {
        const int left = batch_step(e.get());
        if (at_start < 0) {
            // All prompts prefill in the first step (prefill_chunk = B * P), which gives every
            // request its first token: the decode window starts after it.
            if (emitted >= B || left == 0) {
                t_start = Clock::now();
                c_start = std::clock();
                at_start = emitted;
                s.prefill_ms = std::chrono::duration<double, std::milli>(t_start - t0).count();
            }
        }
        if (left == 0) break;
    }
    const auto t_end = Clock::now();
    const std::clock_t c_end = std::clock();
    s.decode_ms = std::chrono::duration<double, std::milli>(t_end - t_start).count();
    s.decode_cpu_ms = 1000.0 * static_cast<double>(c_end - c_start) / CLOCKS_PER_SEC;
    s.decode_tokens = emitted - at_start;
    s.cpu_tok_s = s.decode_cpu_ms > 0 ? static_cast<double>(s.decode_tokens) * 1000.0 / s.decode_cpu_ms : 0.0;
    s.decode_tok_s = s.decode_ms > 0 ? static_cast<double>(s.decode_tokens) * 1000.0 / s.decode_ms : 0.0;
    s.steps = batch_stats(e.get()).steps;
    for (uint64_t id : ids) s.kv_bytes += batch_result(e.get(), id).stats.kv_cache_bytes;
    return s;
}

}  // namespace

int run_bench_batch(const Args& args) {
    for (const char* f : {"--random", "--dtypes", "--group-size", "--modes", "--early-exit", "--early-exit-threshold",
                          "--draft-loops", "--draft-ahead", "--branches"})
        if (args.has(f)) throw UsageError(std::string(f) + ": not used with --batch");
    const std::string model_path = args.single_positional("MODEL");
    std::vector<int> sizes;
    for (const auto& item : split_list("--batch", *args.value("--batch"))) {
        const int b = static_cast<int>(parse_integer("--batch", item, 1, 256, "a list of batch sizes in [1, 256]"));
        if (std::find(sizes.begin(), sizes.end(), b) == sizes.end()) sizes.push_back(b);
    }
    const int N = args.get_int("--tokens", 1, 100000).value_or(128);
    const int P = args.get_int("--prompt-tokens", 1, 1000000).value_or(32);
    const std::optional<int> loops_flag = args.get_int("--loops", 1, 1 << 16);
    const int repeat = args.get_int("--repeat", 1, 100).value_or(3);
    KVCacheType kv = KVCacheType::F32;
    if (auto k = args.value("--kv-cache")) {
        if (*k != "f32" && *k != "int8") throw UsageError("--kv-cache: expected one of f32, int8, got '" + *k + "'");
        kv = parse_kv_cache_type(*k);
    }
    if (args.has("--threads") && split_list("--threads", *args.value("--threads")).size() != 1)
        throw UsageError("--threads: --batch takes one thread count");
    check_file_readable("MODEL", model_path);
    LoadOptions lo = load_options(args);
    ModelHandle model = open_model(model_path, lo);
    const HParams& hp = model_hparams(model.get());
    const int L = loops_flag ? *loops_flag : resolve_loops(hp, 0);  // absent: the model's default depth
    if (L > hp.max_loops)
        throw UsageError("--loops: " + std::to_string(L) + " is deeper than the model's max_loops " +
                         std::to_string(hp.max_loops));
    if (P + N > hp.max_seq_len)
        throw UsageError("--prompt-tokens " + std::to_string(P) + " + --tokens " + std::to_string(N) +
                         " exceed the model's max_seq_len " + std::to_string(hp.max_seq_len));

    const auto fields = std::vector<std::pair<std::string, std::string>>{{"loops", "--loops"}, {"max_tokens", "--tokens"}};
    std::vector<std::vector<BatchSample>> samples(sizes.size());
    with_engine_fields(fields, [&] {
        for (int b : sizes) run_batch(model.get(), b, P, std::min(N, 8), L, kv);  // warm-up
        for (int r = 0; r < repeat; ++r)
            for (size_t i = 0; i < sizes.size(); ++i) samples[i].push_back(run_batch(model.get(), sizes[i], P, N, L, kv));
        return 0;
    });
    auto median = [](std::vector<BatchSample> v) {
        std::sort(v.begin(), v.end(), [](const BatchSample& a, const BatchSample& b) { return a.decode_tok_s < b.decode_tok_s; });
        return v[v.size() / 2];
    };
    std::vector<BatchSample> med;
    for (const auto& v : samples) med.push_back(median(v));
    const double base = med[0].decode_tok_s;

    if (args.has("--json")) {
        nlohmann::json rows = nlohmann::json::array();
        for (size_t i = 0; i < sizes.size(); ++i) {
            nlohmann::json runs = nlohmann::json::array();
            for (const auto& s : samples[i]) runs.push_back(s.decode_tok_s);
            rows.push_back({{"batch", sizes[i]},
                            {"decode_tok_s", med[i].decode_tok_s},
                            {"per_sequence_tok_s", med[i].decode_tok_s / sizes[i]},
                            {"speedup_vs_first", base > 0 ? med[i].decode_tok_s / base : 0.0},
                            {"decode_tokens", med[i].decode_tokens},
                            {"decode_ms", med[i].decode_ms},
                            {"decode_cpu_ms", med[i].decode_cpu_ms},
                            {"cpu_tok_s", med[i].cpu_tok_s},
                            {"prefill_ms", med[i].prefill_ms},
                            {"steps", med[i].steps},
                            {"kv_cache_bytes", med[i].kv_bytes},
                            {"runs_tok_s", runs}});
        }
        print_json({{"model", model_path},
                    {"mode", "batch"},
                    {"loops", L},
                    {"prompt_tokens", P},
                    {"tokens", N},
                    {"kv_cache", kv_cache_type_name(kv)},
                    {"threads", model_info(model.get()).threads},
                    {"repeat", repeat},
                    {"batches", rows}});
        return 0;
    }
    std::printf("continuous batching: %s, L=%d, %d-token prompts, %d greedy tokens each, kv %s, %s, median of %d\n",
                model_path.c_str(), L, P, N, kv_cache_type_name(kv),
                plural(model_info(model.get()).threads, "thread").c_str(), repeat);
    std::printf("%6s %14s %14s %9s %14s %9s %7s %12s\n", "batch", "decode tok/s", "per seq tok/s", "vs first",
                "tok/CPU-s", "vs first", "steps", "KV bytes");
    const double cbase = med[0].cpu_tok_s;
    for (size_t i = 0; i < sizes.size(); ++i)
        std::printf("%6d %14.1f %14.1f %8.2fx %14.1f %8.2fx %7lld %12s\n", sizes[i], med[i].decode_tok_s,
                    med[i].decode_tok_s / sizes[i], base > 0 ? med[i].decode_tok_s / base : 0.0, med[i].cpu_tok_s,
                    cbase > 0 ? med[i].cpu_tok_s / cbase : 0.0, med[i].steps, human_bytes(med[i].kv_bytes).c_str());
    return 0;
}

}  // namespace tinyloop::cli
