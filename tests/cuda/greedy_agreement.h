// When a greedy continuation on one back end agrees with another's (the CUDA forward against
// the CPU): token for token, each token's log-probability within a tolerance, and where the
// two first choose differently, only at a near tie of the reference's logits (the top two
// within a stated gap, each back end's pick within that gap of its own best). Past such a
// divergence the contexts differ and nothing more is compared. Different reduction orders make
// float logits differ in the last bits, so exact equality fails at the first near tie; this is
// the rule the device test uses (tests/cuda/test_cuda_forward.cpp), and the host test checks it
// on the CPU's own logits (tests/cuda/test_cuda_host.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace tltest {

// A greedy run: the tokens chosen and, per token, the logits it was chosen from ([n, vocab]).
struct GreedyTrace {
    std::vector<int32_t> tokens;
    std::vector<float> logits;
};

struct GreedyBounds {
    // A divergence is accepted when the reference's top two logits are within this gap (logit
    // units; f32 through ~40 layers in another order moves a logit by ~1e-4) ...
    double near_tie_gap = 1e-2;
    // ... and while the tokens agree, each token's log-probability (log-softmax of its row)
    // agrees within this many nats.
    double logprob_tol = 5e-3;
};

struct GreedyAgreement {
    bool ok = true;
    int compared = 0;              // steps with equal tokens and close log-probabilities
    int diverged_at = -1;          // the near tie where the runs parted (-1: they never did)
    double max_logprob_diff = 0;   // over the compared steps
    std::string why;               // when !ok: the step and the figures
};

inline double log_softmax_at(const float* z, int vocab, int id) {
    double m = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < vocab; ++j)
        if (!std::isnan(z[j])) m = std::max(m, double(z[j]));
    double s = 0;
    for (int j = 0; j < vocab; ++j)
        if (!std::isnan(z[j])) s += std::exp(double(z[j]) - m);
    return double(z[id]) - m - std::log(s);
}

// The largest and second largest logit of a row (NaN skipped).
inline void top2(const float* z, int vocab, double* first, double* second) {
    double a = -std::numeric_limits<double>::infinity(), b = a;
    for (int j = 0; j < vocab; ++j) {
        const double v = z[j];
        if (std::isnan(v)) continue;
        if (v > a) {
            b = a;
            a = v;
        } else if (v > b) {
            b = v;
        }
    }
    *first = a;
    *second = b;
}

inline GreedyAgreement compare_greedy(const GreedyTrace& ref, const GreedyTrace& got, int vocab,
                                      const GreedyBounds& b = {}) {
    GreedyAgreement r;
    auto fail = [&](const std::string& why) {
        r.ok = false;
        r.why = why;
        return r;
    };
    const size_t n = std::min(ref.tokens.size(), got.tokens.size());
    if (ref.logits.size() != ref.tokens.size() * size_t(vocab) || got.logits.size() != got.tokens.size() * size_t(vocab))
        return fail("a trace's logits are not [tokens, vocab]");
    for (size_t i = 0; i < n; ++i) {
        const float* zr = ref.logits.data() + i * vocab;
        const float* zg = got.logits.data() + i * vocab;
        const int32_t tr = ref.tokens[i], tg = got.tokens[i];
        if (tr < 0 || tr >= vocab || tg < 0 || tg >= vocab) return fail("step " + std::to_string(i) + ": a token is outside the vocabulary");
        if (tr == tg) {
            const double d = std::fabs(log_softmax_at(zr, vocab, tr) - log_softmax_at(zg, vocab, tg));
            r.max_logprob_diff = std::max(r.max_logprob_diff, d);
            if (!(d <= b.logprob_tol)) {
                std::ostringstream o;
                o << "step " << i << ": token " << tr << "'s log-probability differs by " << d << " > " << b.logprob_tol;
                return fail(o.str());
            }
            ++r.compared;
            continue;
        }
        double r1, r2, g1, g2;
        top2(zr, vocab, &r1, &r2);
        top2(zg, vocab, &g1, &g2);
        const double gap = r1 - r2;
        // each pick within the bound of the other side's best: both rows hold the same near tie
        const bool tie = gap <= b.near_tie_gap && r1 - zr[tg] <= b.near_tie_gap && g1 - zg[tr] <= b.near_tie_gap;
        if (!tie) {
            std::ostringstream o;
            o << "step " << i << ": the reference chose " << tr << ", the other " << tg << "; the reference's top-2 gap "
              << gap << ", its logit of " << tg << " is " << r1 - zr[tg] << " below its best, the other's logit of " << tr
              << " " << g1 - zg[tr] << " below its best (a near tie needs all three <= " << b.near_tie_gap << ")";
            return fail(o.str());
        }
        r.diverged_at = int(i);
        return r;
    }
    if (ref.tokens.size() != got.tokens.size())
        return fail("the runs have " + std::to_string(ref.tokens.size()) + " and " + std::to_string(got.tokens.size()) +
                    " tokens without a divergence");
    return r;
}

}  // namespace tltest
