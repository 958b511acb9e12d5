// Huginn-0125's adaptive-compute exit criteria (raven_modeling_minimal.py, the *ExitEvaluator
// classes of generate_with_adaptive_compute) against the engine's criteria. Each naive version
// here is written as the published code computes it (log-softmax, F.kl_div(cur, prev,
// log_target=True) = Σ exp(prev)·(prev − cur), the min-p mask at 0.1·max p), in double, and shares
// nothing with engine/src/decode/early_exit.cpp:
//   latent-diff      ‖x_t − x_{t−1}‖ / ‖x_t‖          = hidden_l2 (the same formula)
//   entropy-diff     |H(p_t) − H(p_{t−1})|            = entropy_delta (Huginn adds 1e-10 in the log)
//   kl               KL(p_{t−1} ‖ p_t)                 = reverse_kl (kl is KL(p_t ‖ p_{t−1}))
//   minp-kl          KL(m_{t−1} ‖ m_t)                 = minp_kl
//   argmax-stability the same argmax k times in a row  = argmax_stable with patience k
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "decode/early_exit.h"

using namespace tinyloop;

namespace {

using Vec = std::vector<double>;

Vec log_softmax(const std::vector<float>& z) {
    double mx = -1e300, s = 0;
    for (float v : z) mx = std::max(mx, static_cast<double>(v));
    for (float v : z) s += std::exp(v - mx);
    Vec out;
    for (float v : z) out.push_back(v - mx - std::log(s));
    return out;
}

// MinKLExitEvaluator._calc_minp_log_probs
Vec minp_log_probs(const std::vector<float>& z) {
    const Vec lp = log_softmax(z);
    Vec p;
    for (double v : lp) p.push_back(std::exp(v));
    const double mx = *std::max_element(p.begin(), p.end());
    const double V = static_cast<double>(z.size());
    for (double& v : p)
        if (v < 0.1 * mx) v = 1.0 / V;
    double s = 0;
    for (double v : p) s += v;
    Vec out;
    for (double v : p) out.push_back(std::log(v / s));
    return out;
}

// F.kl_div(input=cur, target=prev, reduction="none", log_target=True).sum(-1)
double kl_div_log_target(const Vec& cur, const Vec& prev) {
    double s = 0;
    for (size_t i = 0; i < cur.size(); ++i) s += std::exp(prev[i]) * (prev[i] - cur[i]);
    return s;
}

double entropy_plus_eps(const Vec& lp) {  // EntropyDiffExitEvaluator: −Σ p log(p + 1e-10)
    double e = 0;
    for (double v : lp) e -= std::exp(v) * std::log(std::exp(v) + 1e-10);
    return e;
}

// Logits of a few shapes: flat, peaked (min-p masks most of the vocabulary) and two near-ties.
std::vector<std::vector<float>> logit_rows(int V, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<std::vector<float>> rows;
    for (float scale : {0.3f, 1.0f, 3.0f, 6.0f}) {
        std::vector<float> z(static_cast<size_t>(V));
        for (float& v : z) v = scale * n(g);
        rows.push_back(z);
    }
    return rows;
}

void check_close(double got, double want, const char* what, int a, int b) {
    EXPECT_NEAR(got, want, 1e-5 * std::max(1.0, std::fabs(want))) << what << " rows " << a << " -> " << b;
}

}  // namespace

TEST(ExitCriteriaHuginn, ReverseKlIsHuginnsKl) {
    const auto rows = logit_rows(300, 7);
    int asymmetric = 0;
    for (size_t a = 0; a < rows.size(); ++a)
        for (size_t b = 0; b < rows.size(); ++b) {
            if (a == b) continue;
            const Vec prev = log_softmax(rows[a]), cur = log_softmax(rows[b]);
            const double huginn = kl_div_log_target(cur, prev);
            const float got = exit_signal(EarlyExitCriterion::ReverseKL, nullptr, nullptr, 0, rows[a].data(),
                                          rows[b].data(), 300);
            check_close(got, huginn, "reverse_kl", static_cast<int>(a), static_cast<int>(b));
            // The engine's kl is the other direction: not Huginn's criterion (they differ here).
            const float kl = exit_signal(EarlyExitCriterion::KL, nullptr, nullptr, 0, rows[a].data(), rows[b].data(), 300);
            asymmetric += std::fabs(kl - huginn) > 1e-3 * huginn;
        }
    EXPECT_GT(asymmetric, 0);
}

TEST(ExitCriteriaHuginn, MinPKlIsHuginnsMinPKl) {
    const auto rows = logit_rows(300, 11);
    for (size_t a = 0; a < rows.size(); ++a)
        for (size_t b = 0; b < rows.size(); ++b) {
            const double huginn = kl_div_log_target(minp_log_probs(rows[b]), minp_log_probs(rows[a]));
            const float got =
                exit_signal(EarlyExitCriterion::MinPKL, nullptr, nullptr, 0, rows[a].data(), rows[b].data(), 300);
            if (a == b) EXPECT_NEAR(got, 0.0, 1e-7);
            else check_close(got, huginn, "minp_kl", static_cast<int>(a), static_cast<int>(b));
        }
}

TEST(ExitCriteriaHuginn, LatentDiffIsHiddenL2AndEntropyDiffIsEntropyDelta) {
    std::mt19937_64 g(3);
    std::normal_distribution<float> n(0.0f, 1.0f);
    const int d = 64;
    std::vector<float> x0(d), x1(d);
    for (int i = 0; i < d; ++i) {
        x0[i] = n(g);
        x1[i] = x0[i] + 0.1f * n(g);
    }
    double diff = 0, norm = 0;
    for (int i = 0; i < d; ++i) {
        diff += (static_cast<double>(x1[i]) - x0[i]) * (static_cast<double>(x1[i]) - x0[i]);
        norm += static_cast<double>(x1[i]) * x1[i];
    }
    EXPECT_NEAR(exit_signal(EarlyExitCriterion::HiddenL2, x0.data(), x1.data(), d, nullptr, nullptr, 0),
                std::sqrt(diff) / std::sqrt(norm), 1e-6);
    const auto rows = logit_rows(300, 5);
    for (size_t a = 0; a + 1 < rows.size(); ++a) {
        const double huginn =
            std::fabs(entropy_plus_eps(log_softmax(rows[a + 1])) - entropy_plus_eps(log_softmax(rows[a])));
        // Huginn's 1e-10 inside the log moves H by at most V·1e-10.
        EXPECT_NEAR(exit_signal(EarlyExitCriterion::EntropyDelta, nullptr, nullptr, 0, rows[a].data(),
                                rows[a + 1].data(), 300),
                    huginn, 1e-5);
    }
}
