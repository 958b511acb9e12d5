// Scoring: log-probabilities of a text's tokens at a chosen depth.
#include <algorithm>
#include <cmath>
#include <limits>

#include "forward/executor.h"
#include "scoring/scoring.h"

namespace tinyloop {

void check_score_tokens(const Model& m, const int32_t* tokens, int n, int min_n) {
    if (n < min_n) throw Error(ErrorCode::InvalidArgument, "n: " + std::to_string(n) + " tokens; need at least " + std::to_string(min_n));
    if (n > m.max_seq_len)
        throw Error(ErrorCode::InvalidArgument, "n: " + std::to_string(n) + " tokens exceed max_seq_len " + std::to_string(m.max_seq_len));
    if (!tokens) throw Error(ErrorCode::InvalidArgument, "tokens: must not be null");
    check_token_ids(tokens, static_cast<size_t>(n), m.hp.vocab_size, "tokens");
}

std::vector<float> all_pass_states(const Executor& ex, const Model& m, const int32_t* tokens, int n, int loops,
                                   bool readouts) {
    const int d = m.hp.d_model;
    std::vector<float> states(static_cast<size_t>(loops) * n * d);
    PassHook hook = [&](int pass, int row0, const float* x, int rows) {
        std::copy(x, x + static_cast<size_t>(rows) * d,
                  states.begin() + (static_cast<size_t>(pass - 1) * n + row0) * d);
    };
    // The whole sequence in one prefill at depth `loops` through a fresh cache.
    const std::unique_ptr<ExecSequence> seq = ex.sequence({.loops = loops, .capacity = n});
    seq->run_passes({.tokens = tokens, .n = n, .pos0 = 0, .on_readout = readouts ? &hook : nullptr,
                     .on_state = readouts ? nullptr : &hook});
    return states;
}

double row_logprob(const float* row, int vocab, int32_t id) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < vocab; ++j) mx = std::max(mx, row[j]);
    double s = 0;
    for (int j = 0; j < vocab; ++j) s += std::exp(static_cast<double>(row[j]) - mx);
    return static_cast<double>(row[id]) - mx - std::log(s);
}

std::vector<float> forward_logits(Model* model, const int32_t* tokens, int n, int loops, KVCacheType kv_cache) {
    const Model& m = checked(model);
    loops = resolve_loops(m, loops);
    check_score_tokens(m, tokens, n, 1);
    if (kv_cache != KVCacheType::F32 && kv_cache != KVCacheType::Int8)
        throw Error(ErrorCode::InvalidArgument, "kv_cache: " + std::to_string(static_cast<int>(kv_cache)) +
                                                    " is not one of f32 (0), int8 (1)");
    // The call's one back end (executor.h): the device's prefill, or the CPU's.
    const std::unique_ptr<Executor> ex =
        run_executor(m, kv_cache == KVCacheType::F32 ? std::vector<ExecOp>{ExecOp::SequenceLogits}
                                                     : std::vector<ExecOp>{ExecOp::SequenceLogits, ExecOp::Int8Cache});
    return ex->sequence_logits(tokens, n, loops, kv_cache);
}

ScoreResult score(Model* model, const int32_t* tokens, int n, int loops, KVCacheType kv_cache) {
    const Model& m = checked(model);
    const int L = resolve_loops(m, loops);
    check_score_tokens(m, tokens, n, 2);
    const std::vector<float> logits = forward_logits(model, tokens, n, L, kv_cache);
    const int V = m.hp.vocab_size;
    ScoreResult r;
    r.loops = L;
    for (int i = 0; i + 1 < n; ++i) {
        const double lp = row_logprob(logits.data() + static_cast<size_t>(i) * V, V, tokens[i + 1]);
        r.token_logprobs.push_back(static_cast<float>(lp));
        r.total_nll -= lp;
    }
    r.perplexity = std::exp(r.total_nll / (n - 1));
    return r;
}

}  // namespace tinyloop
