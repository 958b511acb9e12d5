// The per-token ops: rmsnorm, rope, silu_mul, add_inplace. References here, the SIMD versions in
// pointwise_simd.h; each fast version treats every token (or element) on its own, so results
// never depend on how many tokens a call carries.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_internal.h"

namespace tinyloop::kern {
namespace detail {
namespace {

// A product rounded to float before it meets an add: keeps rope's x0*c - x1*s two roundings
// even when a build enables FMA here (GCC fuses a*b+c by default when it can).
inline float rounded(float v) {
#if defined(__x86_64__) || defined(__i386__)
    asm("" : "+x"(v));
#endif
    return v;
}

// RoPE for pair i at position p: angle = p * theta^(-2i/head_dim), in double; cos/sin rounded
// to float once. The reference and every fast version use these exact floats and then
// x0*c - x1*s, x0*s + x1*c (two products, one add, no fma), so all levels agree bit for bit.
void rope_cos_sin(int p, int i, int head_dim, float theta, float* c, float* s) {
    const double ang =
        static_cast<double>(p) * std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    *c = static_cast<float>(std::cos(ang));
    *s = static_cast<float>(std::sin(ang));
}

// cos/sin tables per position, filled lazily (decode revisits the same positions every layer);
// positions past kMaxCached are computed per call into a spare slot.
struct RopeCache {
    static constexpr size_t kMaxCached = 8192;
    int head_dim = 0;
    float theta = 0.0f;
    std::vector<float> cs, sn;  // [position][head_dim/2]
    std::vector<char> ready;
    std::vector<float> spare;
    const float* get(int p, const float** sn_out) {
        const size_t half = static_cast<size_t>(head_dim / 2);
        if (p < 0 || static_cast<size_t>(p) >= kMaxCached) {
            spare.resize(2 * half);
            for (size_t i = 0; i < half; ++i) {
                rope_cos_sin(p, static_cast<int>(i), head_dim, theta, &spare[i], &spare[half + i]);
            }
            *sn_out = spare.data() + half;
            return spare.data();
        }
        if (static_cast<size_t>(p) >= ready.size()) {
            const size_t n = std::min(kMaxCached, std::max<size_t>(static_cast<size_t>(p) + 1, ready.size() * 2));
            ready.resize(n, 0);
            cs.resize(n * half);
            sn.resize(n * half);
        }
        float* c = cs.data() + p * half;
        float* s = sn.data() + p * half;
        if (!ready[p]) {
            for (size_t i = 0; i < half; ++i) rope_cos_sin(p, static_cast<int>(i), head_dim, theta, c + i, s + i);
            ready[p] = 1;
        }
        *sn_out = s;
        return c;
    }
};

}  // namespace

void rmsnorm_scalar(const float* x, const float* g, int n_tok, int d, float eps, float* y) {
    for (int t = 0; t < n_tok; ++t) {
        const float* xt = x + static_cast<size_t>(t) * d;
        float* yt = y + static_cast<size_t>(t) * d;
        float a[8] = {};
        for (int i = 0; i < d; ++i) a[i & 7] += xt[i] * xt[i];
        const float ss = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
        const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
        for (int i = 0; i < d; ++i) yt[i] = xt[i] * inv * g[i];
    }
}

void rope_token_scalar(float* x, int n_heads, int head_dim, const float* cs, const float* sn) {
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; ++h) {
        float* xh = x + static_cast<size_t>(h) * head_dim;
        for (int i = 0; i < half; ++i) {
            const float x0 = xh[i], x1 = xh[i + half];
            xh[i] = rounded(x0 * cs[i]) - rounded(x1 * sn[i]);
            xh[i + half] = rounded(x0 * sn[i]) + rounded(x1 * cs[i]);
        }
    }
}

void silu_mul_scalar(const float* gate, const float* up, float* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = gate[i] * up[i] / (1.0f + std::exp(-gate[i]));
}

void add_inplace_scalar(float* y, const float* x, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace detail

// y = x / sqrt(mean(x^2) + eps) * g   (sum of squares in double)
void rmsnorm_ref(const float* x, const float* g, int n_tok, int d, float eps, float* y) {
    for (int t = 0; t < n_tok; ++t) {
        const float* xt = x + static_cast<size_t>(t) * d;
        float* yt = y + static_cast<size_t>(t) * d;
        double ss = 0.0;
        for (int i = 0; i < d; ++i) ss += static_cast<double>(xt[i]) * xt[i];
        const double inv = 1.0 / std::sqrt(ss / d + eps);
        for (int i = 0; i < d; ++i) yt[i] = static_cast<float>(xt[i] * inv * g[i]);
    }
}

void rmsnorm(const float* x, const float* g, int n_tok, int d, float eps, float* y) {
    detail::active_isa().rmsnorm(x, g, n_tok, d, eps, y);
}

// (x_i, x_{i+half}) <- (x_i c - x_{i+half} s, x_i s + x_{i+half} c), c/s of p * theta^(-2i/hd)
void rope_ref(float* x, int n_tok, int n_heads, int head_dim, const int* positions, float theta) {
    const int half = head_dim / 2;
    for (int t = 0; t < n_tok; ++t) {
        for (int i = 0; i < half; ++i) {
            float c, s;
            detail::rope_cos_sin(positions[t], i, head_dim, theta, &c, &s);
            for (int h = 0; h < n_heads; ++h) {
                float* xh = x + (static_cast<size_t>(t) * n_heads + h) * head_dim;
                const float x0 = xh[i], x1 = xh[i + half];
                xh[i] = detail::rounded(x0 * c) - detail::rounded(x1 * s);
                xh[i + half] = detail::rounded(x0 * s) + detail::rounded(x1 * c);
            }
        }
    }
}

void rope(float* x, int n_tok, int n_heads, int head_dim, const int* positions, float theta) {
    thread_local detail::RopeCache cache;
    if (cache.head_dim != head_dim || cache.theta != theta) {
        cache = detail::RopeCache{};
        cache.head_dim = head_dim;
        cache.theta = theta;
    }
    const auto rot = detail::active_isa().rope_token;
    for (int t = 0; t < n_tok; ++t) {
        const float* sn;
        const float* cs = cache.get(positions[t], &sn);
        rot(x + static_cast<size_t>(t) * n_heads * head_dim, n_heads, head_dim, cs, sn);
    }
}

// silu(g) * u = g / (1 + e^-g) * u   (in double)
void silu_mul_ref(const float* gate, const float* up, float* out, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const double g = gate[i];
        out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
    }
}

void silu_mul(const float* gate, const float* up, float* out, size_t n) {
    detail::active_isa().silu_mul(gate, up, out, n);
}

void add_inplace(float* y, const float* x, size_t n) { detail::active_isa().add_inplace(y, x, n); }

}  // namespace tinyloop::kern
