// Pearson's chi-square of sampled continuations against their exact probabilities, for the
// losslessness tests of speculative sampling (chain, draft-model, pipelined): N draws counted per
// continuation (`seen`) against N x its probability (`expected`); cells with an expected count
// below 5 pooled into one. The caller compares the statistic with the critical value for
// cells - 1 degrees of freedom.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace tltest {

struct ChiSquare {
    double chi2 = 0;
    int cells = 0;  // cells compared, the pooled one included
};

inline ChiSquare pooled_chi_square(const std::map<std::vector<int32_t>, double>& expected,
                                   const std::map<std::vector<int32_t>, int>& seen, int n) {
    ChiSquare r;
    double pooled_e = 0, pooled_o = 0;
    for (const auto& [k, pr] : expected) {
        const double e = pr * n;
        const auto it = seen.find(k);
        const double o = it == seen.end() ? 0 : it->second;
        if (e < 5) {
            pooled_e += e;
            pooled_o += o;
            continue;
        }
        r.chi2 += (o - e) * (o - e) / e;
        ++r.cells;
    }
    if (pooled_e > 0) {
        r.chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
        ++r.cells;
    }
    return r;
}

}  // namespace tltest
