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

// NQ queries of one head over the rows [b, e[j]) each (the same b, no extras), every query with
// exactly attend_one_simd's operations in its order, so each output has attend_one's bits: the
// saving is that a block of key rows and each value row are loaded once for all NQ queries (from
// L1 after the first) instead of once per query. head_dim must be a multiple of 4 * V::W.
template <int NQ>
void attend_multi_simd(const float* const* q, const float* k, const float* v, int kv_stride, int head_dim, int b,
                       const int* e, float scale, float* const* scratch, float* const* out) {
    int n[NQ], nmax = 0;
    for (int j = 0; j < NQ; ++j) {
        n[j] = e[j] - b;
        if (n[j] > nmax) nmax = n[j];
    }
    const V::T vscale = V::set1(scale);
    V::T vmx[NQ];
    for (int j = 0; j < NQ; ++j) vmx[j] = V::set1(-__builtin_inff());
    for (int i0 = 0; i0 < nmax; i0 += V::W) {
        for (int j = 0; j < NQ; ++j) {
            if (i0 >= n[j]) continue;
            const int m = n[j] - i0 < V::W ? n[j] - i0 : V::W;
            V::T acc[V::W];
            const float* kp[V::W];
            for (int r = 0; r < V::W; ++r) {
                acc[r] = V::zero();
                kp[r] = k + static_cast<size_t>(b + i0 + (r < m ? r : 0)) * kv_stride;
            }
            for (int d = 0; d < head_dim; d += V::W) {
                const V::T qd = V::load(q[j] + d);
                for (int r = 0; r < V::W; ++r) acc[r] = V::fma(qd, V::load(kp[r] + d), acc[r]);
            }
            const V::T sc = V::mul(V::hsum_rows(acc), vscale);
            V::store_n(scratch[j] + i0, sc, m);
            vmx[j] = V::max(vmx[j], sc);
        }
    }
    V::T inv[NQ];
    for (int j = 0; j < NQ; ++j) {
        float* sj = scratch[j];
        const V::T mx = V::set1(V::hmax(vmx[j]));
        V::T vsum = V::zero();
        int i = 0;
        for (; i + V::W <= n[j]; i += V::W) {
            const V::T w = vexp(V::sub(V::load(sj + i), mx));
            V::store(sj + i, w);
            vsum = V::add(vsum, w);
        }
        if (i < n[j]) {
            V::store_n(sj + i, vexp(V::sub(V::load_n(sj + i, n[j] - i), mx)), n[j] - i);
            vsum = V::add(vsum, V::load_n(sj + i, n[j] - i));
        }
        inv[j] = V::set1(1.0f / V::hsum(vsum));
    }
    for (int d0 = 0; d0 < head_dim; d0 += 4 * V::W) {
        V::T a[NQ][4];
        for (int j = 0; j < NQ; ++j) {
            for (int u = 0; u < 4; ++u) a[j][u] = V::zero();
        }
        for (int r = 0; r < nmax; ++r) {
            const float* vp = v + static_cast<size_t>(b + r) * kv_stride + d0;
            const V::T v0 = V::load(vp), v1 = V::load(vp + V::W), v2 = V::load(vp + 2 * V::W), v3 = V::load(vp + 3 * V::W);
            for (int j = 0; j < NQ; ++j) {
                if (r >= n[j]) continue;
                const V::T w = V::set1(scratch[j][r]);
                a[j][0] = V::fma(w, v0, a[j][0]);
                a[j][1] = V::fma(w, v1, a[j][1]);
                a[j][2] = V::fma(w, v2, a[j][2]);
                a[j][3] = V::fma(w, v3, a[j][3]);
            }
        }
        for (int j = 0; j < NQ; ++j) {
            for (int u = 0; u < 4; ++u) V::store(out[j] + d0 + u * V::W, V::mul(a[j][u], inv[j]));
        }
    }
}

// 1..4 queries (see attend_multi_simd); false (nothing done) when head_dim is not a multiple of
// 4 * V::W or nq is out of range: the caller then takes attend_one.
bool attend_multi_dispatch(const float* const* q, const float* k, const float* v, int kv_stride, int head_dim, int b,
                           const int* e, int nq, float scale, float* const* scratch, float* const* out) {
    if (head_dim % (4 * V::W) != 0 || nq < 1 || nq > 4) return false;
    switch (nq) {
        case 1: attend_multi_simd<1>(q, k, v, kv_stride, head_dim, b, e, scale, scratch, out); break;
        case 2: attend_multi_simd<2>(q, k, v, kv_stride, head_dim, b, e, scale, scratch, out); break;
        case 3: attend_multi_simd<3>(q, k, v, kv_stride, head_dim, b, e, scale, scratch, out); break;
        case 4: attend_multi_simd<4>(q, k, v, kv_stride, head_dim, b, e, scale, scratch, out); break;
        default: break;
    }
    return true;
}

}  // namespace
}  // namespace tinyloop::kern::detail
