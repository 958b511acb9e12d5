// SIMD attention for one (query, head) over its row sequence (range, then extras; math and
// reference: attention.cpp). Scores: V::W cache rows at a time, a dot in V::W lanes per row, then
// hsum_rows (each row's bits equal hsum of its lanes). Exponentials: vexp over the score array, summed in lanes.
// Output: per slice of up to 4 vectors of head_dim, sum over rows in order, times 1/sum.
#pragma once

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/simd.h"

namespace tinyloop::kern::detail {
namespace {

void attend_one_simd(const float* q, const float* k, const float* v, int kv_stride, int head_dim,
                     int b, int e, const int* extra, int n_extra, float scale, float* scratch,
                     float* out) {
    const int nr = e - b, n = nr + n_extra;
    if (n <= 0) {
        for (int d = 0; d < head_dim; ++d) out[d] = 0.0f;
        return;
    }
    const int full = head_dim / V::W * V::W, tail = head_dim - full;
    // Scores V::W rows at a time: one accumulator per row (the same fma sequence as a one-row
    // dot), then hsum_rows, which gives each row exactly hsum's bits. In the last block the rows
    // past n repeat the block's first row and their scores are dropped (accumulators are
    // independent, so the kept ones do not change).
    const V::T vscale = V::set1(scale);
    V::T vmx = V::set1(-__builtin_inff());
    for (int i0 = 0; i0 < n; i0 += V::W) {
        const int m = n - i0 < V::W ? n - i0 : V::W;
        V::T acc[V::W];
        const float* kp[V::W];
        for (int r = 0; r < V::W; ++r) {
            acc[r] = V::zero();
            const int i = i0 + (r < m ? r : 0);
            kp[r] = k + static_cast<size_t>(i < nr ? b + i : extra[i - nr]) * kv_stride;
        }
        for (int d = 0; d < full; d += V::W) {  // a compile-time row count keeps acc in registers
            const V::T qd = V::load(q + d);
            for (int r = 0; r < V::W; ++r) acc[r] = V::fma(qd, V::load(kp[r] + d), acc[r]);
        }
        if (tail) {
            const V::T qd = V::load_n(q + full, tail);
            for (int r = 0; r < V::W; ++r) acc[r] = V::fma(qd, V::load_n(kp[r] + full, tail), acc[r]);
        }
        // hsum's product: hsum(acc) * scale, one rounding each, as the one-row version did. The
        // repeated rows of a last block hold its first row's score, so the max is unaffected.
        const V::T s = V::mul(V::hsum_rows(acc), vscale);
        V::store_n(scratch + i0, s, m);
        vmx = V::max(vmx, s);
    }
    const V::T mx = V::set1(V::hmax(vmx));  // every lane holds the max
    V::T vsum = V::zero();
    int i = 0;
    for (; i + V::W <= n; i += V::W) {
        const V::T w = vexp(V::sub(V::load(scratch + i), mx));
        V::store(scratch + i, w);
        vsum = V::add(vsum, w);
    }
    if (i < n) {
        V::store_n(scratch + i, vexp(V::sub(V::load_n(scratch + i, n - i), mx)), n - i);
        vsum = V::add(vsum, V::load_n(scratch + i, n - i));  // masked lanes read as 0
    }
    const V::T inv = V::set1(1.0f / V::hsum(vsum));
    for (int d0 = 0; d0 < head_dim; d0 += 4 * V::W) {
        V::T acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
        const int nv = (head_dim - d0 + V::W - 1) / V::W < 4 ? (head_dim - d0 + V::W - 1) / V::W : 4;
        if (head_dim - d0 >= 4 * V::W) {
            // A full slice: the same fma sequence as the loop below, with the four accumulators
            // named so they stay in registers (an array indexed by a run-time bound went through
            // the stack: a store-forwarding round trip per row and vector).
            V::T a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
            for (int r = 0; r < n; ++r) {
                const float* vp = v + static_cast<size_t>(r < nr ? b + r : extra[r - nr]) * kv_stride + d0;
                const V::T w = V::set1(scratch[r]);
                a0 = V::fma(w, V::load(vp), a0);
                a1 = V::fma(w, V::load(vp + V::W), a1);
                a2 = V::fma(w, V::load(vp + 2 * V::W), a2);
                a3 = V::fma(w, V::load(vp + 3 * V::W), a3);
            }
            V::store(out + d0, V::mul(a0, inv));
            V::store(out + d0 + V::W, V::mul(a1, inv));
            V::store(out + d0 + 2 * V::W, V::mul(a2, inv));
            V::store(out + d0 + 3 * V::W, V::mul(a3, inv));
            continue;
        }
        for (int r = 0; r < n; ++r) {
            const float* vp = v + static_cast<size_t>(r < nr ? b + r : extra[r - nr]) * kv_stride + d0;
            const V::T w = V::set1(scratch[r]);
            for (int u = 0; u < nv; ++u) {
                const int m = head_dim - d0 - u * V::W;
                const V::T x = m >= V::W ? V::load(vp + u * V::W) : V::load_n(vp + u * V::W, m);
                acc[u] = V::fma(w, x, acc[u]);
            }
        }
        for (int u = 0; u < nv; ++u) {
            const int m = head_dim - d0 - u * V::W;
            if (m >= V::W) {
                V::store(out + d0 + u * V::W, V::mul(acc[u], inv));
            } else {
                V::store_n(out + d0 + u * V::W, V::mul(acc[u], inv), m);
            }
        }
    }
}

}  // namespace
}  // namespace tinyloop::kern::detail
