// SIMD versions of the per-token ops (math and references: pointwise.cpp).
#pragma once

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/simd.h"

namespace tinyloop::kern::detail {
namespace {

// Sum of squares in V::W lanes plus one fixed horizontal sum, then y = x * inv * g.
void rmsnorm_simd(const float* x, const float* g, int n_tok, int d, float eps, float* y) {
    for (int t = 0; t < n_tok; ++t) {
        const float* xt = x + static_cast<size_t>(t) * d;
        float* yt = y + static_cast<size_t>(t) * d;
        V::T acc = V::zero();
        int i = 0;
        for (; i + V::W <= d; i += V::W) {
            const V::T v = V::load(xt + i);
            acc = V::fma(v, v, acc);
        }
        if (i < d) {
            const V::T v = V::load_n(xt + i, d - i);
            acc = V::fma(v, v, acc);
        }
        const float ms = V::hsum(acc) / static_cast<float>(d);
        const V::T inv = V::set1(1.0f / __builtin_sqrtf(ms + eps));
        for (i = 0; i + V::W <= d; i += V::W) {
            V::store(yt + i, V::mul(V::mul(V::load(xt + i), inv), V::load(g + i)));
        }
        if (i < d) {
            const int n = d - i;
            V::store_n(yt + i, V::mul(V::mul(V::load_n(xt + i, n), inv), V::load_n(g + i, n)), n);
        }
    }
}

// Products and sums as separate roundings (no fma) to match rope_ref bit for bit.
void rope_token_simd(float* x, int n_heads, int head_dim, const float* cs, const float* sn) {
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; ++h) {
        float* a = x + static_cast<size_t>(h) * head_dim;
        float* b = a + half;
        for (int i = 0; i < half; i += V::W) {
            const int n = half - i < V::W ? half - i : V::W;
            const V::T x0 = V::load_n(a + i, n), x1 = V::load_n(b + i, n);
            const V::T c = V::load_n(cs + i, n), s = V::load_n(sn + i, n);
            const V::T x0c = V::rounded(V::mul(x0, c)), x1s = V::rounded(V::mul(x1, s));
            const V::T x0s = V::rounded(V::mul(x0, s)), x1c = V::rounded(V::mul(x1, c));
            V::store_n(a + i, V::sub(x0c, x1s), n);
            V::store_n(b + i, V::add(x0s, x1c), n);
        }
    }
}

// out = g * u / (1 + e^-g)
void silu_mul_simd(const float* gate, const float* up, float* out, size_t n) {
    const V::T one = V::set1(1.0f);
    size_t i = 0;
    for (; i + V::W <= n; i += V::W) {
        const V::T g = V::load(gate + i);
        const V::T e = vexp(V::sub(V::zero(), g));
        V::store(out + i, V::div(V::mul(g, V::load(up + i)), V::add(one, e)));
    }
    if (i < n) {
        const int m = static_cast<int>(n - i);
        const V::T g = V::load_n(gate + i, m);
        const V::T e = vexp(V::sub(V::zero(), g));
        V::store_n(out + i, V::div(V::mul(g, V::load_n(up + i, m)), V::add(one, e)), m);
    }
}

void add_inplace_simd(float* y, const float* x, size_t n) {
    size_t i = 0;
    for (; i + V::W <= n; i += V::W) V::store(y + i, V::add(V::load(y + i), V::load(x + i)));
    if (i < n) {
        const int m = static_cast<int>(n - i);
        V::store_n(y + i, V::add(V::load_n(y + i, m), V::load_n(x + i, m)), m);
    }
}

}  // namespace
}  // namespace tinyloop::kern::detail
