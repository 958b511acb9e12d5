// llama_cpu_time MODEL.tinyloop MODEL.gguf --loops L [--prompt P] [--tokens N] [--rounds R]
//
// Prefill and decode speed of our engine and of llama.cpp on the same weights (MODEL.gguf from
// `tinyloop export-gguf`), one thread each, timed in CPU seconds of this process rather than wall
// seconds, so that other programs sharing the cores slow neither side's figure (cache thrashing
// by them still does). Rounds alternate the two; prints every round and the best of each.
//   ours:      generate(prompt, max_tokens 1) = prefill; generate(prompt, max_tokens N + 1) minus
//              that = N decoded tokens (greedy, EOS ignored, f32 KV cache)
//   llama.cpp: llama_decode of the P-token prompt in one batch = prefill; then N one-token
//              llama_decode calls = decode (its default f16 KV cache, like llama-bench)
// A tool, not a test: it asserts nothing.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama.h"
#include "tinyloop/tinyloop.h"

namespace {

double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void quiet_log(ggml_log_level level, const char* text, void*) {
    if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

struct Rates {
    double prefill = 0, decode = 0;  // tokens per CPU second
};

Rates time_ours(tinyloop::Model* m, const std::vector<int32_t>& prompt, int tokens, int loops) {
    tinyloop::GenerateConfig cfg;
    cfg.loops = loops;
    cfg.ignore_eos = true;
    cfg.max_tokens = 1;
    double t0 = cpu_seconds();
    tinyloop::generate(m, prompt.data(), static_cast<int>(prompt.size()), cfg);
    const double prefill = cpu_seconds() - t0;
    cfg.max_tokens = tokens + 1;
    t0 = cpu_seconds();
    tinyloop::generate(m, prompt.data(), static_cast<int>(prompt.size()), cfg);
    const double both = cpu_seconds() - t0;
    return {static_cast<double>(prompt.size()) / prefill, tokens / std::max(both - prefill, 1e-9)};
}

Rates time_llama(llama_model* lm, const std::vector<int32_t>& prompt, int tokens) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(prompt.size() + tokens + 8);
    cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(prompt.size());
    cp.n_threads = cp.n_threads_batch = 1;
    llama_context* ctx = llama_init_from_model(lm, cp);
    if (!ctx) throw std::runtime_error("llama.cpp cannot make a context");
    std::vector<llama_token> p(prompt.begin(), prompt.end());
    double t0 = cpu_seconds();
    if (llama_decode(ctx, llama_batch_get_one(p.data(), static_cast<int32_t>(p.size()))) != 0)
        throw std::runtime_error("llama_decode (prompt) failed");
    const double prefill = cpu_seconds() - t0;
    const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(lm));
    t0 = cpu_seconds();
    for (int i = 0; i < tokens; ++i) {
        const float* l = llama_get_logits_ith(ctx, -1);
        llama_token next = static_cast<llama_token>(std::max_element(l, l + vocab) - l);
        if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) throw std::runtime_error("llama_decode failed");
    }
    const double decode = cpu_seconds() - t0;
    llama_free(ctx);
    return {static_cast<double>(prompt.size()) / prefill, tokens / decode};
}

int run(int argc, char** argv) {
    if (argc < 3) {
        std::fputs("usage: llama_cpu_time MODEL.tinyloop MODEL.gguf --loops L [--prompt P] [--tokens N] [--rounds R]\n",
                   stderr);
        return 2;
    }
    int loops = 0, prompt_tokens = 256, tokens = 128, rounds = 5;
    for (int i = 3; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        const int v = std::atoi(argv[i + 1]);
        if (flag == "--loops") loops = v;
        else if (flag == "--prompt") prompt_tokens = v;
        else if (flag == "--tokens") tokens = v;
        else if (flag == "--rounds") rounds = v;
        else throw std::runtime_error("unknown flag " + flag);
    }
    if (loops < 1 || prompt_tokens < 1 || tokens < 1 || rounds < 1)
        throw std::runtime_error("--loops, --prompt, --tokens and --rounds must be >= 1");
    tinyloop::LoadOptions lo;
    lo.backend = tinyloop::Backend::Cpu;
    lo.threads = 1;
    tinyloop::Model* ours = tinyloop::load_model(argv[1], lo);
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model* lm = llama_model_load_from_file(argv[2], llama_model_default_params());
    if (!lm) throw std::runtime_error(std::string("llama.cpp cannot load ") + argv[2]);
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
    for (int i = 0; i < prompt_tokens; ++i) prompt[i] = 32 + (i * 37) % 90;  // printable bytes
    time_ours(ours, std::vector<int32_t>(prompt.begin(), prompt.begin() + 16), 4, loops);  // warm up
    time_llama(lm, std::vector<int32_t>(prompt.begin(), prompt.begin() + 16), 4);
    Rates best_ours, best_llama;
    for (int r = 0; r < rounds; ++r) {
        const bool ours_first = r % 2 == 0;
        Rates a, b;
        if (ours_first) a = time_ours(ours, prompt, tokens, loops);
        b = time_llama(lm, prompt, tokens);
        if (!ours_first) a = time_ours(ours, prompt, tokens, loops);
        std::printf("round %d  prefill ours %8.1f llama.cpp %8.1f (%.2fx)   decode ours %7.1f llama.cpp %7.1f (%.2fx)\n",
                    r + 1, a.prefill, b.prefill, a.prefill / b.prefill, a.decode, b.decode, a.decode / b.decode);
        std::fflush(stdout);
        best_ours = {std::max(best_ours.prefill, a.prefill), std::max(best_ours.decode, a.decode)};
        best_llama = {std::max(best_llama.prefill, b.prefill), std::max(best_llama.decode, b.decode)};
    }
    std::printf("best     prefill ours %8.1f llama.cpp %8.1f (%.2fx)   decode ours %7.1f llama.cpp %7.1f (%.2fx)"
                "   tok per CPU second\n",
                best_ours.prefill, best_llama.prefill, best_ours.prefill / best_llama.prefill, best_ours.decode,
                best_llama.decode, best_ours.decode / best_llama.decode);
    llama_model_free(lm);
    llama_backend_free();
    tinyloop::free_model(ours);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llama_cpu_time: %s\n", e.what());
        return 2;
    }
}
