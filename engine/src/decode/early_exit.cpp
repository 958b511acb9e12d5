#include "decode/early_exit.h"
#include "forward/executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "decode/sampling.h"

namespace tinyloop {

EarlyExitPolicy effective_exit_policy(const EarlyExitPolicy& c) {
    EarlyExitPolicy p = c;
    if (c.logit_margin > 0) {  // the seed: a margin > 0 switches to logit-margin stability
        p.criterion = EarlyExitCriterion::LogitMargin;
        p.threshold = c.logit_margin;
        p.logit_margin = 0.0f;
    }
    return p;
}

bool is_gate_criterion(EarlyExitCriterion c) {
    return c == EarlyExitCriterion::GateStop || c == EarlyExitCriterion::GateSelect;
}

bool criterion_needs_logits(EarlyExitCriterion c) { return c != EarlyExitCriterion::HiddenL2 && !is_gate_criterion(c); }

double exit_gate_lambda(const Model& m, const float* h) {
    // the same sum, in the same order and precision, as exit_gate_per_pass (scoring/lens.cpp)
    double s = m.exit_gate_b[0];
    for (int i = 0; i < m.hp.d_model; ++i) s += static_cast<double>(m.exit_gate_w[i]) * h[i];
    return 1.0 / (1.0 + std::exp(-s));
}

namespace {

// softmax in double, in place into p.
void softmax(const float* z, int n, std::vector<double>& p) {
    p.resize(static_cast<size_t>(n));
    double mx = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(z[i]));
    double s = 0;
    for (int i = 0; i < n; ++i) s += p[i] = std::exp(z[i] - mx);
    for (double& x : p) x /= s;
}

// Huginn's min-p distribution (MinKLExitEvaluator): every p < 0.1·max p becomes 1/V, then renormalised.
void minp_probs(const float* z, int n, std::vector<double>& p) {
    softmax(z, n, p);
    const double mx = *std::max_element(p.begin(), p.end());
    double s = 0;
    for (double& x : p) {
        if (x < 0.1 * mx) x = 1.0 / n;
        s += x;
    }
    for (double& x : p) x /= s;
}

// KL(a ‖ b) = Σ a_i (log a_i − log b_i).
double kl_div(const std::vector<double>& a, const std::vector<double>& b) {
    double kl = 0;
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i] > 0) kl += a[i] * (std::log(a[i]) - std::log(std::max(b[i], 1e-300)));
    return kl;
}

double entropy(const std::vector<double>& p) {
    double e = 0;
    for (double x : p)
        if (x > 0) e -= x * std::log(x);
    return e;
}

}  // namespace

float exit_signal(EarlyExitCriterion c, const float* prev_h, const float* cur_h, int d, const float* prev_logits,
                  const float* cur_logits, int vocab) {
    switch (c) {
        case EarlyExitCriterion::HiddenL2: {
            double diff = 0, norm = 0;
            for (int i = 0; i < d; ++i) {
                const double x = static_cast<double>(cur_h[i]) - prev_h[i];
                diff += x * x;
                norm += static_cast<double>(cur_h[i]) * cur_h[i];
            }
            return static_cast<float>(std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30));
        }
        case EarlyExitCriterion::LogitMargin: {
            float a = -std::numeric_limits<float>::infinity(), b = a;
            for (int i = 0; i < vocab; ++i) {
                const float x = cur_logits[i];
                if (x > a) {
                    b = a;
                    a = x;
                } else if (x > b) {
                    b = x;
                }
            }
            return -(a - b);
        }
        case EarlyExitCriterion::KL: {
            std::vector<double> p, q;
            softmax(cur_logits, vocab, p);
            softmax(prev_logits, vocab, q);
            double kl = 0;
            for (int i = 0; i < vocab; ++i)
                if (p[i] > 0) kl += p[i] * (std::log(p[i]) - std::log(std::max(q[i], 1e-300)));
            return static_cast<float>(kl);
        }
        case EarlyExitCriterion::EntropyDelta: {
            std::vector<double> p, q;
            softmax(cur_logits, vocab, p);
            softmax(prev_logits, vocab, q);
            return static_cast<float>(std::fabs(entropy(p) - entropy(q)));
        }
        case EarlyExitCriterion::ArgmaxStable:
            return argmax(cur_logits, vocab) == argmax(prev_logits, vocab) ? 0.0f : 1.0f;
        case EarlyExitCriterion::ReverseKL: {
            std::vector<double> p, q;
            softmax(cur_logits, vocab, p);
            softmax(prev_logits, vocab, q);
            return static_cast<float>(kl_div(q, p));
        }
        case EarlyExitCriterion::MinPKL: {
            std::vector<double> p, q;
            minp_probs(cur_logits, vocab, p);
            minp_probs(prev_logits, vocab, q);
            return static_cast<float>(kl_div(q, p));
        }
        case EarlyExitCriterion::GateStop:
        case EarlyExitCriterion::GateSelect:
            break;  // not a comparison of two passes: decode_step_adaptive reads the gate itself
    }
    return std::numeric_limits<float>::infinity();
}

bool exit_stable(const EarlyExitPolicy& p, float signal) {
    switch (p.criterion) {
        case EarlyExitCriterion::LogitMargin: return -signal >= p.threshold;
        case EarlyExitCriterion::ArgmaxStable: return signal == 0.0f;
        default: return signal < p.threshold;
    }
}

bool exit_probe_at(const EarlyExitPolicy& p, int pass, int loops) {
    return pass < loops && pass >= p.min_L && (pass - p.min_L) % p.peek_every == 0;
}

bool exit_after_probe(const EarlyExitPolicy& p, float signal, int& stable) {
    stable = exit_stable(p, signal) ? stable + 1 : 0;
    return stable >= p.patience;
}

void propagate_exited_state(const Model& m, KVCache& kv, Workspace& ws, const float* h_e, const float* input, int pos,
                            int e, int loops) {
    if (e >= loops) return;
    if (!kv.takes_propagation(pos, e)) return;  // kv_sharing latest-m4 / compress (FORMAT.md §1c)
    const HParams& hp = m.hp;
    // FORMAT.md §1a/§1b: a deeper pass's input is the frozen state as that pass would take it in
    // (h_e + e_p with "add", adapter·[h_e; e_p] with "adapter"): the same for every pass > e.
    std::vector<float> injected;
    if (injects_input(hp)) {
        injected.assign(h_e, h_e + hp.d_model);
        inject_input(m, e + 1, injected.data(), input, 1, ws);
        h_e = injected.data();
    }
    for (int j = 0; j < hp.n_loop_layers; ++j) {
        const LayerWeights& w = m.loop[static_cast<size_t>(j)];
        kern::rmsnorm(h_e, w.attn_norm, 1, hp.d_model, hp.norm_eps, ws.a.data());
        kern::matmul(w.wk, ws.a.data(), 1, ws.k.data(), m.pool.get());
        kern::matmul(w.wv, ws.a.data(), 1, ws.v.data(), m.pool.get());
        if (w.bk) kern::add_inplace(ws.k.data(), w.bk, static_cast<size_t>(w.wk.rows));  // qk_bias (§1b)
        kern::rope(ws.k.data(), 1, hp.n_kv_heads, hp.head_dim, &pos, hp.rope_theta);
        for (int l = e + 1; l <= loops; ++l) kv.store(loop_layer_index(hp, l, j), pos, ws.k.data(), ws.v.data());
    }
}

int decode_step_adaptive(const Model& m, KVCache& kv, Workspace& ws, int32_t token, int pos, int loops, int window,
                         const EarlyExitPolicy& policy, std::vector<float>& h, const PassHook* on_pass) {
    const HParams& hp = m.hp;
    const int d = hp.d_model;
    const int V = hp.vocab_size;
    ws.reserve(hp, 1);
    set_rows(ws, pos, 1, window);
    h.resize(static_cast<size_t>(d));
    std::vector<float> input(injects_input(hp) ? static_cast<size_t>(d) : 0);  // §1a/§1b: the prelude output e
    run_prelude(m, kv, ws, &token, 1, h.data(), input.data());

    const bool need_logits = criterion_needs_logits(policy.criterion);
    std::vector<float> prev(static_cast<size_t>(d)), prev_logits, cur_logits;
    if (need_logits) {
        prev_logits.resize(static_cast<size_t>(V));
        cur_logits.resize(static_cast<size_t>(V));
    }
    bool prev_logits_valid = false;
    int stable = 0;
    // §1b: the readout input of a state (the coda's output with a coda, which also writes this
    // position's coda keys/values from that state; the state itself otherwise). Every exit ends
    // with the readout at the exit depth, so later positions read that depth's coda.
    std::vector<float> rbuf;
    auto readout = [&](const float* x) { return readout_rows(m, kv, ws, x, 1, rbuf); };
    auto finish = [&](int e) {
        if (hp.n_coda_blocks > 0) {
            readout(h.data());
            h.assign(rbuf.begin(), rbuf.end());
        }
        return e;
    };
    if (is_gate_criterion(policy.criterion)) {
        // Ouro's threshold exit (modeling_ouro.py, exit_threshold): the first pass t whose
        // cumulative exit probability 1 − Π_{j<=t}(1 − λ_j) reaches q; the last pass otherwise.
        const bool select = policy.criterion == EarlyExitCriterion::GateSelect;
        double remaining = 1.0;
        int e = loops;
        std::vector<float> h_exit;
        for (int pass = 1; pass <= loops; ++pass) {
            run_pass(m, kv, ws, pass, h.data(), input.data(), 1);
            if (on_pass && *on_pass) (*on_pass)(pass, 0, readout(h.data()), 1);
            if (pass == loops || e < loops) continue;  // select: the passes after the exit still run
            remaining *= 1.0 - exit_gate_lambda(m, h.data());
            if (1.0 - remaining < policy.threshold) continue;
            e = pass;
            if (!select) {
                set_rows(ws, pos, 1, window);
                propagate_exited_state(m, kv, ws, h.data(), input.data(), pos, pass, loops);
                return finish(e);
            }
            h_exit = h;
        }
        // select: every pass wrote its own keys/values from the full depth; the token is read at e
        if (e < loops) h.swap(h_exit);
        return finish(e);
    }
    for (int pass = 1; pass <= loops; ++pass) {
        std::copy(h.begin(), h.end(), prev.begin());
        run_pass(m, kv, ws, pass, h.data(), input.data(), 1);
        if (on_pass && *on_pass) (*on_pass)(pass, 0, readout(h.data()), 1);
        if (pass == loops) break;
        if (!exit_probe_at(policy, pass, loops)) {
            prev_logits_valid = false;
            continue;
        }
        if (need_logits) {
            if (!prev_logits_valid) compute_logits(m, readout(prev.data()), 1, prev_logits.data(), ws);
            compute_logits(m, readout(h.data()), 1, cur_logits.data(), ws);
        }
        const float s = exit_signal(policy.criterion, prev.data(), h.data(), d, prev_logits.data(), cur_logits.data(), V);
        const bool exits = exit_after_probe(policy, s, stable);
        if (need_logits) {
            std::swap(prev_logits, cur_logits);
            prev_logits_valid = true;
        }
        if (exits) {
            // rows must be set again: compute_logits may not touch them, but keep it explicit
            set_rows(ws, pos, 1, window);
            propagate_exited_state(m, kv, ws, h.data(), input.data(), pos, pass, loops);
            return finish(pass);
        }
    }
    return finish(loops);
}

}  // namespace tinyloop

// ---------------------------------------------------------------------------------------------

#include "scoring/scoring.h"

namespace tinyloop {

ScoreResult score_early_exit(Model* model, const int32_t* tokens, int n, const GenerateConfig& config,
                             std::vector<int>* depth_used) {
    require_host(checked(model), {ExecOp::EarlyExit});
    const Model& m = checked(model);
    check_score_tokens(m, tokens, n, 2);
    validate_config(model, 1, config);
    const int L = config.loops > 0 ? config.loops : m.hp.default_loops;
    const EarlyExitPolicy policy = effective_exit_policy(config.early_exit);
    const int V = m.hp.vocab_size;
    KVCache kv;
    kv.allocate(exec_layers(m.hp, L), n, m.hp.n_kv_heads * m.hp.head_dim);
    Workspace ws;
    std::vector<float> h, logits(static_cast<size_t>(V));
    ScoreResult r;
    r.loops = L;
    if (depth_used) depth_used->clear();
    for (int p = 0; p < n; ++p) {
        int e = L;
        if (policy.enabled()) {
            e = decode_step_adaptive(m, kv, ws, tokens[p], p, L, config.cache_window, policy, h, nullptr);
        } else {
            ForwardArgs fa;
            fa.tokens = tokens + p;
            fa.n = 1;
            fa.pos0 = p;
            fa.loops = L;
            fa.window = config.cache_window;
            forward(m, kv, ws, fa, h);
        }
        if (depth_used) depth_used->push_back(e);
        if (p + 1 < n) {
            compute_logits(m, h.data(), 1, logits.data(), ws);
            const double lp = row_logprob(logits.data(), V, tokens[p + 1]);
            r.token_logprobs.push_back(static_cast<float>(lp));
            r.total_nll -= lp;
        }
    }
    r.perplexity = std::exp(r.total_nll / (n - 1));
    return r;
}

}  // namespace tinyloop

// ---------------------------------------------------------------------------------------------

namespace tinyloop {

ExitSignals early_exit_signals(Model* model, const int32_t* tokens, int n, int loops) {
    require_host(checked(model), {ExecOp::EarlyExit});
    const Model& m = checked(model);
    check_score_tokens(m, tokens, n, 1);
    const int L = resolve_loops(m, loops);
    const HParams& hp = m.hp;
    const int d = hp.d_model;
    const int V = hp.vocab_size;
    constexpr int n_criteria = 5;
    ExitSignals r;
    r.n_positions = n;
    r.loops = L;
    r.values.assign(static_cast<size_t>(n_criteria) * n * L, 0.0f);
    KVCache kv;
    kv.allocate(exec_layers(hp, L), n, hp.n_kv_heads * hp.head_dim);
    Workspace ws;
    std::vector<float> h(static_cast<size_t>(d)), prev(static_cast<size_t>(d)), input;
    std::vector<float> prev_logits(static_cast<size_t>(V)), cur_logits(static_cast<size_t>(V));
    // One row at a time through the same calls decode_step_adaptive makes, so every value is
    // the one the decode would compare with its threshold (with a coda, the readouts of §1b: the
    // last one at L, what a decode that never exits leaves for later positions).
    std::vector<float> rbuf;
    input.resize(injects_input(hp) ? static_cast<size_t>(d) : 0);
    for (int p = 0; p < n; ++p) {
        ws.reserve(hp, 1);
        set_rows(ws, p, 1, 0);
        run_prelude(m, kv, ws, tokens + p, 1, h.data(), input.data());
        compute_logits(m, readout_rows(m, kv, ws, h.data(), 1, rbuf), 1, prev_logits.data(), ws);
        for (int pass = 1; pass <= L; ++pass) {
            std::copy(h.begin(), h.end(), prev.begin());
            run_pass(m, kv, ws, pass, h.data(), input.data(), 1);
            compute_logits(m, readout_rows(m, kv, ws, h.data(), 1, rbuf), 1, cur_logits.data(), ws);
            for (int c = 0; c < n_criteria; ++c)
                r.values[(static_cast<size_t>(c) * n + p) * L + static_cast<size_t>(pass - 1)] =
                    exit_signal(static_cast<EarlyExitCriterion>(c), prev.data(), h.data(), d, prev_logits.data(),
                                cur_logits.data(), V);
            std::swap(prev_logits, cur_logits);
        }
    }
    return r;
}

}  // namespace tinyloop
