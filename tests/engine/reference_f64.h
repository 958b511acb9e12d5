// The double-precision building blocks of the tests' literal references (FORMAT.md §1): a
// model's tensors read through the public header (tensor_as_f32) and the plain-loop math of a
// pre-norm block (matrix-vector product, RMSNorm, half-split RoPE, residual add). Each test
// writes its own model walk from these, so the engine is checked against the rule, not itself.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "tinyloop/model.h"
#include "tinyloop/tinyloop.h"

namespace tlref {

using Vec = std::vector<double>;

struct RMat {
    int rows = 0, cols = 0;
    Vec w;
};

inline Vec fetch(tinyloop::Model* m, const std::string& name) {
    const auto f = tinyloop::tensor_as_f32(m, name);
    return Vec(f.begin(), f.end());
}

inline Vec mv(const RMat& W, const Vec& x) {
    Vec y(static_cast<size_t>(W.rows), 0.0);
    for (int r = 0; r < W.rows; ++r) {
        double s = 0;
        for (int c = 0; c < W.cols; ++c) s += W.w[static_cast<size_t>(r) * W.cols + c] * x[static_cast<size_t>(c)];
        y[static_cast<size_t>(r)] = s;
    }
    return y;
}

inline Vec rms(const Vec& x, const Vec& g, double eps) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * g[i];
    return y;
}

// RoPE on the half-split pairs (i, i + hd/2) of each head, angle pos · theta^(-2i/hd).
inline void rope(Vec& v, int heads, int hd, int pos, double theta) {
    for (int h = 0; h < heads; ++h)
        for (int i = 0; i < hd / 2; ++i) {
            const double a = pos * std::pow(theta, -2.0 * i / hd);
            double& x0 = v[static_cast<size_t>(h * hd + i)];
            double& x1 = v[static_cast<size_t>(h * hd + i + hd / 2)];
            const double r0 = x0 * std::cos(a) - x1 * std::sin(a), r1 = x0 * std::sin(a) + x1 * std::cos(a);
            x0 = r0;
            x1 = r1;
        }
}

inline void add(Vec& y, const Vec& x) {
    for (size_t i = 0; i < y.size(); ++i) y[i] += x[i];
}

}  // namespace tlref
