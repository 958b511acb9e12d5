// score_kv_sharing: a text run as generate runs it (prompt prefilled, then one token at a time)
// with a kv_sharing layout and with per-pass keys/values, side by side (FORMAT.md §1c).
#include <cmath>
#include <memory>

#include "decode/early_exit.h"
#include "forward/executor.h"
#include "scoring/scoring.h"

namespace tinyloop {

namespace {

struct SharedRun {
    ScoreResult r;
    std::vector<int> depth;
    size_t bytes = 0;
};

SharedRun run_with(const Model& m, const int32_t* tokens, int n, const GenerateConfig& config, const KVSharing& sharing,
                   int prompt) {
    const HParams& hp = m.hp;
    const int L = resolve_loops(m, config.loops);
    const int V = hp.vocab_size;
    const EarlyExitPolicy policy = effective_exit_policy(config.early_exit);
    KVCache kv;
    if (sharing.exact()) kv.allocate(hp, exec_layers(hp, L), n, KVCacheType::F32);
    else kv.allocate_shared(hp, exec_layers(hp, L), n, KVCacheType::F32, sharing, prompt);
    Workspace ws;
    std::vector<float> h, logits(static_cast<size_t>(prompt) * V);
    SharedRun out;
    out.r.loops = L;
    auto take = [&](const float* row, int p) {
        const double lp = row_logprob(row, V, tokens[p + 1]);
        out.r.token_logprobs.push_back(static_cast<float>(lp));
        out.r.total_nll -= lp;
    };
    ForwardArgs fa;  // the prompt: one prefill at full depth, as decode runs it
    fa.tokens = tokens;
    fa.n = prompt;
    fa.loops = L;
    fa.window = config.cache_window;
    forward(m, kv, ws, fa, h);
    compute_logits(m, h.data(), prompt, logits.data(), ws);
    for (int p = 0; p < prompt; ++p) {
        out.depth.push_back(L);
        take(logits.data() + static_cast<size_t>(p) * V, p);
    }
    out.bytes = kv.bytes();
    for (int p = prompt; p + 1 < n; ++p) {
        int e = L;
        if (policy.enabled()) {
            const std::unique_ptr<ExecRow> row = make_cpu_row(m, kv, ws, h, config.cache_window);
            e = early_exit_step(m, *row, tokens[p], p, L, policy, nullptr);
        }
        else {
            fa.tokens = tokens + p;
            fa.n = 1;
            fa.pos0 = p;
            forward(m, kv, ws, fa, h);
        }
        out.depth.push_back(e);
        compute_logits(m, h.data(), 1, logits.data(), ws);
        take(logits.data(), p);
    }
    out.r.perplexity = std::exp(out.r.total_nll / (n - 1));
    return out;
}

}  // namespace

KVSharingScore score_kv_sharing(Model* model, const int32_t* tokens, int n, const GenerateConfig& config, int prompt) {
    const Model& m = checked(model);
    check_score_tokens(m, tokens, n, 2);
    if (prompt < 1 || prompt > n - 1)
        throw Error(ErrorCode::InvalidArgument, "prompt: " + std::to_string(prompt) + " is outside [1, n - 1 = " +
                                                    std::to_string(n - 1) + "] (a prompt and at least one fed token)");
    validate_config(model, prompt, config);
    std::vector<ExecOp> needs{ExecOp::KVSharing};
    if (effective_exit_policy(config.early_exit).enabled()) needs.push_back(ExecOp::EarlyExit);
    require_host(m, needs);
    const SharedRun exact = run_with(m, tokens, n, config, KVSharing{}, prompt);
    const SharedRun shared = config.kv_sharing.exact() ? exact : run_with(m, tokens, n, config, config.kv_sharing, prompt);
    KVSharingScore s;
    s.kv_sharing = kv_sharing_name(config.kv_sharing);
    s.prompt = prompt;
    s.loops = shared.r.loops;
    s.score = shared.r;
    s.depth_used = shared.depth;
    s.exact_total_nll = exact.r.total_nll;
    s.delta_nll = (shared.r.total_nll - exact.r.total_nll) / (n - 1);
    s.cache_bytes = shared.bytes;
    s.exact_cache_bytes = exact.bytes;
    s.bytes_per_token = static_cast<double>(shared.bytes) / n;
    s.exact_bytes_per_token = static_cast<double>(exact.bytes) / n;
    return s;
}

}  // namespace tinyloop
