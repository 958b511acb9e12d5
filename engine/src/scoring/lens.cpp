#include "scoring/lens.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "forward/backend.h"

namespace tinyloop {

int32_t argmax_of(const float* logits, int vocab) { return argmax(logits, vocab); }

LensDepth lens_entry(const float* logits, int vocab, int depth, int top_k, int32_t emitted) {
    LensDepth e;
    e.depth = depth;
    float mx = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < vocab; ++i) mx = std::max(mx, logits[i]);
    std::vector<double> p(static_cast<size_t>(vocab));
    double s = 0;
    for (int i = 0; i < vocab; ++i) s += p[i] = std::exp(static_cast<double>(logits[i]) - mx);
    double ent = 0;
    for (double& x : p) {
        x /= s;
        if (x > 0) ent -= x * std::log(x);
    }
    e.entropy = static_cast<float>(ent);
    if (emitted >= 0 && emitted < vocab) e.p_emitted = static_cast<float>(p[emitted]);
    const int k = std::clamp(top_k, 1, vocab);
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (int i = 0; i < k; ++i) {
        e.top_ids.push_back(idx[i]);
        e.top_probs.push_back(static_cast<float>(p[idx[i]]));
    }
    return e;
}

}  // namespace tinyloop

// ---------------------------------------------------------------------------------------------
// The scoring family built on the lens.
// ---------------------------------------------------------------------------------------------

#include "forward/executor.h"
#include "scoring/scoring.h"

namespace tinyloop {

namespace {

void softmax_row(const float* z, int n, std::vector<double>& p) {
    p.resize(static_cast<size_t>(n));
    double mx = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(z[i]));
    double s = 0;
    for (int i = 0; i < n; ++i) s += p[i] = std::exp(static_cast<double>(z[i]) - mx);
    for (double& x : p) x /= s;
}

// The lens logits of every position at each depth 1..L of one sequence. On an executor that
// keeps per-pass states (the CPU's) from the states of one L-pass forward (every pass kept);
// elsewhere (the device) depth l is a sequence_logits of l passes: the state after pass l of an
// L-pass run is the final state of an l-pass run (a pass never reads a later one), so the answers
// are the same, for L(L+1)/2 passes in all instead of L (the device's prefill against the host's
// softmaxes over the vocabulary).
class DepthLogits {
public:
    DepthLogits(const Model& m, const int32_t* tokens, int n, int L)
        : m_(m), tokens_(tokens), n_(n), ex_(run_executor(m, {ExecOp::SequenceLogits})) {
        if (ex_->supports(ExecOp::PassStates)) states_ = all_pass_states(*ex_, m, tokens, n, L, /*readouts=*/true);
    }
    // out = the logits [n, vocab] at `depth`.
    void at(int depth, std::vector<float>& out) {
        if (states_.empty()) {
            out = ex_->sequence_logits(tokens_, n_, depth, KVCacheType::F32);
            return;
        }
        out.resize(static_cast<size_t>(n_) * m_.hp.vocab_size);
        compute_logits(m_, states_.data() + static_cast<size_t>(depth - 1) * n_ * m_.hp.d_model, n_, out.data(), ws_);
    }

private:
    const Model& m_;
    const int32_t* tokens_;
    int n_;
    std::unique_ptr<Executor> ex_;
    std::vector<float> states_;
    Workspace ws_;
};

}  // namespace

std::vector<float> forward_lens_logits(Model* model, const int32_t* tokens, int n, int loops) {
    const Model& m = checked(model);
    const int L = resolve_loops(m, loops);
    check_score_tokens(m, tokens, n, 1);
    DepthLogits lens(m, tokens, n, L);
    const size_t per = static_cast<size_t>(n) * m.hp.vocab_size;
    std::vector<float> out(per * L), depth;
    for (int l = 1; l <= L; ++l) {
        lens.at(l, depth);
        std::copy(depth.begin(), depth.end(), out.begin() + static_cast<std::ptrdiff_t>(per * (l - 1)));
    }
    return out;
}

std::vector<float> exit_gate_per_pass(Model* model, const int32_t* tokens, int n, int loops) {
    const Model& m = checked(model);
    if (!m.hp.exit_gate)
        throw Error(ErrorCode::InvalidArgument, "exit_gate_per_pass: this model has no exit gate (hparams.exit_gate "
                                                "is false; FORMAT.md §1b)");
    // The states after every pass through run_passes' per-pass hook (the device has it too), the
    // gate on the host.
    const std::unique_ptr<Executor> ex = run_executor(m, {ExecOp::PassReadouts});
    const int L = resolve_loops(m, loops);
    check_score_tokens(m, tokens, n, 1);
    const int d = m.hp.d_model;
    const std::vector<float> states = all_pass_states(*ex, m, tokens, n, L);
    std::vector<float> out(static_cast<size_t>(L) * n);
    for (size_t r = 0; r < out.size(); ++r) {
        const float* h = states.data() + r * d;
        double s = m.exit_gate_b[0];
        for (int i = 0; i < d; ++i) s += static_cast<double>(m.exit_gate_w[i]) * h[i];
        out[r] = static_cast<float>(1.0 / (1.0 + std::exp(-s)));
    }
    return out;
}

LastTokenScore score_last_token(Model* model, const int32_t* tokens, int n, int loops, int top_k) {
    const Model& m = checked(model);
    const int L = resolve_loops(m, loops);
    check_score_tokens(m, tokens, n, 1);
    if (top_k < 1 || top_k > m.hp.vocab_size)
        throw Error(ErrorCode::InvalidArgument, "top_k: " + std::to_string(top_k) + " is outside [1, " +
                                                    std::to_string(m.hp.vocab_size) + "]");
    const std::vector<float> all = forward_logits(model, tokens, n, L);
    LastTokenScore r;
    r.loops = L;
    const int V = m.hp.vocab_size;
    r.logits.assign(all.end() - V, all.end());
    const LensDepth e = lens_entry(r.logits.data(), V, L, top_k, -1);
    r.top_ids = e.top_ids;
    r.top_probs = e.top_probs;
    return r;
}

LensResult score_logit_lens(Model* model, const int32_t* tokens, int n, int loops, int top_k) {
    const Model& m = checked(model);
    const int L = resolve_loops(m, loops);
    check_score_tokens(m, tokens, n, 1);
    if (top_k < 1 || top_k > 64)
        throw Error(ErrorCode::InvalidArgument, "top_k: " + std::to_string(top_k) + " is outside [1, 64]");
    const int V = m.hp.vocab_size;
    DepthLogits lens(m, tokens, n, L);
    std::vector<float> final_logits, logits;
    lens.at(L, final_logits);
    std::vector<std::vector<double>> final_p(static_cast<size_t>(n));
    std::vector<int32_t> final_arg(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
        softmax_row(final_logits.data() + static_cast<size_t>(i) * V, V, final_p[i]);
        final_arg[i] = argmax_of(final_logits.data() + static_cast<size_t>(i) * V, V);
    }
    LensResult r;
    r.n_positions = n;
    r.loops = L;
    r.top_k = top_k;
    r.cells.resize(static_cast<size_t>(n) * L);
    std::vector<double> p;
    for (int l = 1; l <= L; ++l) {
        if (l == L) logits = final_logits;
        else lens.at(l, logits);
        for (int i = 0; i < n; ++i) {
            const float* row = logits.data() + static_cast<size_t>(i) * V;
            const int32_t next = i + 1 < n ? tokens[i + 1] : -1;
            const LensDepth e = lens_entry(row, V, l, top_k, next);
            LensCell& c = r.cells[static_cast<size_t>(i) * L + (l - 1)];
            c.top_ids = e.top_ids;
            c.top_probs = e.top_probs;
            c.argmax = argmax_of(row, V);
            c.entropy = e.entropy;
            c.p_next = next >= 0 ? e.p_emitted : -1.0f;
            softmax_row(row, V, p);
            c.p_final_argmax = static_cast<float>(p[final_arg[i]]);
            double kl = 0;
            for (int j = 0; j < V; ++j)
                if (p[j] > 0) kl += p[j] * (std::log(p[j]) - std::log(std::max(final_p[i][j], 1e-300)));
            c.kl_to_final = static_cast<float>(std::max(0.0, kl));
        }
    }
    return r;
}

UncertaintyResult score_with_uncertainty(Model* model, const int32_t* tokens, int n, int loops) {
    const Model& m = checked(model);
    const int L = resolve_loops(m, loops);
    check_score_tokens(m, tokens, n, 1);
    const int V = m.hp.vocab_size;
    DepthLogits lens(m, tokens, n, L);
    std::vector<float> logits;
    std::vector<std::vector<int32_t>> args(static_cast<size_t>(L), std::vector<int32_t>(static_cast<size_t>(n)));
    UncertaintyResult r;
    r.loops = L;
    std::vector<double> p;
    for (int l = 1; l <= L; ++l) {
        lens.at(l, logits);
        for (int i = 0; i < n; ++i) args[l - 1][i] = argmax_of(logits.data() + static_cast<size_t>(i) * V, V);
    }
    // logits now holds the final depth.
    for (int i = 0; i < n; ++i) {
        const float* row = logits.data() + static_cast<size_t>(i) * V;
        softmax_row(row, V, p);
        double ent = 0, a = 0, b = 0;
        for (double x : p) {
            if (x > 0) ent -= x * std::log(x);
            if (x > a) {
                b = a;
                a = x;
            } else if (x > b) {
                b = x;
            }
        }
        r.entropy.push_back(static_cast<float>(ent));
        r.margin.push_back(static_cast<float>(a - b));
        int depth = L;
        while (depth > 1 && args[depth - 2][i] == args[L - 1][i]) --depth;
        r.prediction_depth.push_back(depth);
        if (i + 1 < n) r.token_logprobs.push_back(static_cast<float>(row_logprob(row, V, tokens[i + 1])));
    }
    return r;
}

}  // namespace tinyloop
