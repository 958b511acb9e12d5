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

void GateTrace::at(int pass, double l) {
    if (static_cast<int>(lambda.size()) < pass) lambda.resize(static_cast<size_t>(pass), 0.0);
    lambda[static_cast<size_t>(pass - 1)] = l;
}

void GateTrace::to_event(std::vector<float>& lam, std::vector<float>& cdf) const {
    lam.clear();
    cdf.clear();
    double remaining = 1.0;
    for (double l : lambda) {
        remaining *= 1.0 - l;
        lam.push_back(static_cast<float>(l));
        cdf.push_back(static_cast<float>(1.0 - remaining));
    }
}

PassHook gate_trace_hook(const Model& m, GateTrace& trace) {
    const int d = m.hp.d_model;
    return [&m, &trace, d](int pass, int, const float* h, int n) {
        trace.at(pass, exit_gate_lambda(m, h + static_cast<size_t>(n - 1) * d));
    };
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

int early_exit_step(const Model& m, ExecRow& row, int32_t token, int pos, int loops, const EarlyExitPolicy& policy,
                    const PassHook* on_pass, GateTrace* gate) {
    const HParams& hp = m.hp;
    const int d = hp.d_model;
    const int V = hp.vocab_size;
    row.begin(token, pos);
    if (gate) gate->clear();

    const bool need_logits = criterion_needs_logits(policy.criterion);
    std::vector<float> prev(static_cast<size_t>(d)), prev_logits, cur_logits;
    if (need_logits) {
        prev_logits.resize(static_cast<size_t>(V));
        cur_logits.resize(static_cast<size_t>(V));
    }
    bool prev_logits_valid = false;
    int stable = 0;
    // §1b: every exit ends with the readout at the exit depth (row.finish), so later positions
    // read that depth's coda.
    auto finish = [&](int e) {
        row.finish();
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
            row.pass(pass);
            if (on_pass && *on_pass) (*on_pass)(pass, 0, row.readout(row.state()), 1);
            // select: the passes after the exit still run (and are recorded), but decide nothing
            const bool decides = pass < loops && e == loops;
            if (!decides && !gate) continue;
            const float* h = row.state();
            const double lambda = exit_gate_lambda(m, h);
            if (gate) gate->at(pass, lambda);
            if (!decides) continue;
            remaining *= 1.0 - lambda;
            if (1.0 - remaining < policy.threshold) continue;
            e = pass;
            if (!select) {
                row.propagate(pass, loops);
                return finish(e);
            }
            h_exit.assign(h, h + d);
        }
        // select: every pass wrote its own keys/values from the full depth; the token is read at e
        if (e < loops) row.set_state(h_exit.data());
        return finish(e);
    }
    for (int pass = 1; pass <= loops; ++pass) {
        const float* h0 = row.state();
        std::copy(h0, h0 + d, prev.begin());
        row.pass(pass);
        if (gate) gate->at(pass, exit_gate_lambda(m, row.state()));
        if (on_pass && *on_pass) (*on_pass)(pass, 0, row.readout(row.state()), 1);
        if (pass == loops) break;
        if (!exit_probe_at(policy, pass, loops)) {
            prev_logits_valid = false;
            continue;
        }
        if (need_logits) {
            if (!prev_logits_valid) row.logits(row.readout(prev.data()), prev_logits.data());
            row.logits(row.readout(row.state()), cur_logits.data());
        }
        const float s =
            exit_signal(policy.criterion, prev.data(), row.state(), d, prev_logits.data(), cur_logits.data(), V);
        const bool exits = exit_after_probe(policy, s, stable);
        if (need_logits) {
            std::swap(prev_logits, cur_logits);
            prev_logits_valid = true;
        }
        if (exits) {
            row.propagate(pass, loops);
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
    const Model& m = checked(model);
    const std::unique_ptr<Executor> ex = run_executor(m, {ExecOp::EarlyExit});
    check_score_tokens(m, tokens, n, 2);
    validate_config(model, 1, config);
    const int L = resolve_loops(m, config.loops);
    const EarlyExitPolicy policy = effective_exit_policy(config.early_exit);
    const int V = m.hp.vocab_size;
    const std::unique_ptr<ExecSequence> seq = ex->sequence({.loops = L, .capacity = n, .window = config.cache_window});
    std::vector<float> logits(static_cast<size_t>(V));
    ScoreResult r;
    r.loops = L;
    if (depth_used) depth_used->clear();
    for (int p = 0; p < n; ++p) {
        int e = L;
        if (policy.enabled())
            e = early_exit_step(m, seq->row(config.cache_window), tokens[p], p, L, policy, nullptr);
        else
            seq->run(tokens + p, 1, p, nullptr);
        if (depth_used) depth_used->push_back(e);
        if (p + 1 < n) {
            seq->last_logits(logits.data());
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
    const Model& m = checked(model);
    const std::unique_ptr<Executor> ex = run_executor(m, {ExecOp::EarlyExit});
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
    const std::unique_ptr<ExecSequence> seq = ex->sequence({.loops = L, .capacity = n});
    ExecRow& row = seq->row(0);
    std::vector<float> prev(static_cast<size_t>(d));
    std::vector<float> prev_logits(static_cast<size_t>(V)), cur_logits(static_cast<size_t>(V));
    // One row at a time through the same calls early_exit_step makes, so every value is the one
    // the decode would compare with its threshold (with a coda, the readouts of §1b: the last one
    // at L, what a decode that never exits leaves for later positions).
    for (int p = 0; p < n; ++p) {
        row.begin(tokens[p], p);
        row.logits(row.readout(row.state()), prev_logits.data());
        for (int pass = 1; pass <= L; ++pass) {
            const float* h0 = row.state();
            std::copy(h0, h0 + d, prev.begin());
            row.pass(pass);
            row.logits(row.readout(row.state()), cur_logits.data());
            for (int c = 0; c < n_criteria; ++c)
                r.values[(static_cast<size_t>(c) * n + p) * L + static_cast<size_t>(pass - 1)] =
                    exit_signal(static_cast<EarlyExitCriterion>(c), prev.data(), row.state(), d, prev_logits.data(),
                                cur_logits.data(), V);
            std::swap(prev_logits, cur_logits);
        }
    }
    return r;
}

}  // namespace tinyloop
