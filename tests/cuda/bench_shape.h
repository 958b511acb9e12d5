// bench_cuda's workload shape and rates, host-only (tested in test_cuda_host): a model whose
// context (max_seq_len) is shorter than prompt + tokens gets a shorter prompt, never fewer
// decoded tokens than asked (down to a one-token prompt), and a rate with nothing timed is 0,
// never a negative or infinite figure.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

namespace tltest {

struct BenchShape {
    int prompt = 0, tokens = 0;
    bool prompt_shrunk = false;  // the prompt was cut to leave the tokens (or the context)
    bool tokens_cut = false;     // even a one-token prompt could not leave all the tokens
};

// The decode runs time tokens - kBenchUntimedTokens steps (the prefill's token and the capture).
constexpr int kBenchUntimedTokens = 2;

inline BenchShape bench_shape(int prompt, int tokens, int max_seq_len) {
    if (prompt < 1) throw std::invalid_argument("--prompt: " + std::to_string(prompt) + " is outside [1, max_seq_len - 1]");
    if (tokens < 1) throw std::invalid_argument("--tokens: " + std::to_string(tokens) + " is outside [1, max_seq_len - 1]");
    if (max_seq_len < 2) throw std::invalid_argument("max_seq_len: " + std::to_string(max_seq_len) + " is below 2");
    BenchShape s;
    s.tokens = tokens;
    if (s.tokens > max_seq_len - 1) {
        s.tokens = max_seq_len - 1;
        s.tokens_cut = true;
    }
    s.prompt = prompt;
    if (s.prompt + s.tokens > max_seq_len) {
        s.prompt = max_seq_len - s.tokens;
        s.prompt_shrunk = true;
    }
    return s;
}

// n / seconds, or 0 when nothing was timed (n <= 0) or the time is not a positive figure.
inline double bench_rate(double n, double seconds) {
    if (!(n > 0) || !(seconds > 0) || !std::isfinite(n) || !std::isfinite(seconds)) return 0.0;
    return n / seconds;
}

}  // namespace tltest
