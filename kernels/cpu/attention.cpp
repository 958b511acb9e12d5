// Causal attention over one KV-cache layer (contract: kernels.h, AttentionArgs).
//
// For query t, head h (kv head kh = h / (n_heads / n_kv_heads)), over its rows p: the range
// [kv_begin[t], kv_end[t]) and then, for tree attention, extra_rows[extra_offsets[t] ..
// extra_offsets[t+1]):
//   s_p = (q_th . k_p,kh) / sqrt(head_dim)
//   out_th = sum_p exp(s_p - max s) v_p,kh / sum_p exp(s_p - max s)
//
// attention_ref does this in double. The fast versions (attend_one_*) use two passes in float:
// scores and their max, then exponentials and the weighted sum of v, each in one fixed order
// over the row sequence (so a range and an extras list naming the same rows give the same
// bits). Every (t, h) is computed on its own: neither the batch nor the thread split changes a
// bit. A query with no rows at all gets zeros.
//
// Several queries (f32 cache, no extras): up to 4 consecutive queries of one head that start at
// the same row run together (attend_multi: a key block and a value row are loaded once for all of
// them), each with attend_one's operations in attend_one's order, so the bits are the same.
//
// INT8 cache (kq set): key/value p of kv head kh is ks[p, kh] * kq[p, kh, :]. The fast path
// dequantizes the query's rows of its kv head into per-thread float buffers (in the row
// sequence's order) and runs the same attend_one on them, so it is as batch-invariant as the f32
// path; attention_ref dequantizes inline in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_internal.h"

namespace tinyloop::kern {
namespace detail {

void attend_one_scalar(const float* q, const float* k, const float* v, int kv_stride, int head_dim,
                       int b, int e, const int* extra, int n_extra, float scale, float* scratch,
                       float* out) {
    const int nr = e - b, n = nr + n_extra;
    for (int d = 0; d < head_dim; ++d) out[d] = 0.0f;
    if (n <= 0) return;
    float mx = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < n; ++i) {
        const float* kp = k + static_cast<size_t>(i < nr ? b + i : extra[i - nr]) * kv_stride;
        float a[8] = {};
        for (int d = 0; d < head_dim; ++d) a[d & 7] += q[d] * kp[d];
        const float s = (((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))) * scale;
        scratch[i] = s;
        mx = std::max(mx, s);
    }
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float w = std::exp(scratch[i] - mx);
        sum += w;
        const float* vp = v + static_cast<size_t>(i < nr ? b + i : extra[i - nr]) * kv_stride;
        for (int d = 0; d < head_dim; ++d) out[d] += w * vp[d];
    }
    const float inv = 1.0f / sum;
    for (int d = 0; d < head_dim; ++d) out[d] *= inv;
}

}  // namespace detail

namespace {

// The rows of query t: its range, then its extras (if any).
void rows_of(const AttentionArgs& a, int t, std::vector<int>& rows) {
    rows.clear();
    for (int p = a.kv_begin[t]; p < a.kv_end[t]; ++p) rows.push_back(p);
    if (a.extra_offsets != nullptr) {
        for (int i = a.extra_offsets[t]; i < a.extra_offsets[t + 1]; ++i) rows.push_back(a.extra_rows[i]);
    }
}

int n_extra_of(const AttentionArgs& a, int t) {
    return a.extra_offsets ? a.extra_offsets[t + 1] - a.extra_offsets[t] : 0;
}

// Key (which = 0) or value element j of kv head kh at cache row p, as a float.
float kv_elem(const AttentionArgs& a, int which, int p, int kh, int j) {
    const size_t off = static_cast<size_t>(p) * a.kv_stride + static_cast<size_t>(kh) * a.head_dim + j;
    if (a.kq == nullptr) return which == 0 ? a.k[off] : a.v[off];
    const float s = (which == 0 ? a.ks : a.vs)[static_cast<size_t>(p) * a.scale_stride + kh];
    return s * static_cast<float>((which == 0 ? a.kq : a.vq)[off]);
}

}  // namespace

void quantize_kv_row(const float* x, int n_heads, int head_dim, int8_t* codes, float* scales) {
    for (int h = 0; h < n_heads; ++h) {
        const float* xh = x + static_cast<size_t>(h) * head_dim;
        int8_t* qh = codes + static_cast<size_t>(h) * head_dim;
        float amax = 0.0f;
        for (int j = 0; j < head_dim; ++j) amax = std::max(amax, std::fabs(xh[j]));
        const float s = amax / 127.0f;
        scales[h] = s;
        const float inv = s > 0.0f ? 1.0f / s : 0.0f;
        for (int j = 0; j < head_dim; ++j) {
            const float r = std::nearbyint(xh[j] * inv);
            qh[j] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
        }
    }
}

void dequantize_kv_row(const int8_t* codes, const float* scales, int n_heads, int head_dim, float* x) {
    for (int h = 0; h < n_heads; ++h) {
        for (int j = 0; j < head_dim; ++j) {
            const size_t i = static_cast<size_t>(h) * head_dim + j;
            x[i] = scales[h] * static_cast<float>(codes[i]);
        }
    }
}

void attention_ref(const AttentionArgs& a) {
    const int group = a.n_heads / a.n_kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(a.head_dim));
    std::vector<int> rows;
    std::vector<double> s, acc(static_cast<size_t>(a.head_dim));
    for (int t = 0; t < a.n_tok; ++t) {
        rows_of(a, t, rows);
        s.resize(rows.size());
        for (int h = 0; h < a.n_heads; ++h) {
            const float* q = a.q + (static_cast<size_t>(t) * a.n_heads + h) * a.head_dim;
            double mx = -std::numeric_limits<double>::infinity();
            for (size_t i = 0; i < rows.size(); ++i) {
                double d = 0.0;
                for (int j = 0; j < a.head_dim; ++j) d += static_cast<double>(q[j]) * kv_elem(a, 0, rows[i], h / group, j);
                s[i] = d * scale;
                mx = std::max(mx, s[i]);
            }
            std::fill(acc.begin(), acc.end(), 0.0);
            double sum = 0.0;
            for (size_t i = 0; i < rows.size(); ++i) {
                const double w = std::exp(s[i] - mx);
                sum += w;
                for (int j = 0; j < a.head_dim; ++j) acc[j] += w * kv_elem(a, 1, rows[i], h / group, j);
            }
            float* o = a.out + (static_cast<size_t>(t) * a.n_heads + h) * a.head_dim;
            for (int j = 0; j < a.head_dim; ++j) o[j] = rows.empty() ? 0.0f : static_cast<float>(acc[j] / sum);
        }
    }
}

void attention(const AttentionArgs& a, ThreadPool* pool) {
    if (a.n_tok <= 0 || a.n_heads <= 0) return;
    const auto attend = detail::active_isa().attend_one;
    const int group = a.n_heads / a.n_kv_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
    const int pairs = a.n_tok * a.n_heads;

    int max_rows = 0;
    double work = 0.0;
    for (int t = 0; t < a.n_tok; ++t) {
        const int n = std::max(0, a.kv_end[t] - a.kv_begin[t]) + n_extra_of(a, t);
        max_rows = std::max(max_rows, n);
        work += static_cast<double>(n) * a.n_heads * a.head_dim;
    }
    // Pairs [p0, p1), with this thread's scratch (padded: SIMD tails may touch a full vector).
    auto run = [&](int p0, int p1) {
        thread_local std::vector<float> scratch;
        if (scratch.size() < static_cast<size_t>(max_rows) + 16) scratch.resize(static_cast<size_t>(max_rows) + 16);
        int deq_t = -1, deq_kh = -1;  // INT8: the (query, kv head) whose rows kbuf/vbuf hold
        for (int pr = p0; pr < p1; ++pr) {
            const int t = pr / a.n_heads, h = pr % a.n_heads;
            const size_t koff = static_cast<size_t>(h / group) * a.head_dim;
            const size_t qoff = static_cast<size_t>(pr) * a.head_dim;
            const int* extra = a.extra_offsets ? a.extra_rows + a.extra_offsets[t] : nullptr;
            if (a.kq == nullptr) {
                attend(a.q + qoff, a.k + koff, a.v + koff, a.kv_stride, a.head_dim, a.kv_begin[t],
                       std::max(a.kv_begin[t], a.kv_end[t]), extra, n_extra_of(a, t), scale, scratch.data(),
                       a.out + qoff);
                continue;
            }
            thread_local std::vector<float> kbuf, vbuf;
            thread_local std::vector<int> rows;
            if (t != deq_t || h / group != deq_kh) {  // heads of one group share the dequantized rows
                deq_t = t;
                deq_kh = h / group;
                rows_of(a, t, rows);
                const size_t need = rows.size() * static_cast<size_t>(a.head_dim) + 16;
                if (kbuf.size() < need) {
                    kbuf.resize(need);
                    vbuf.resize(need);
                }
                for (size_t i = 0; i < rows.size(); ++i) {
                    const size_t src = static_cast<size_t>(rows[i]) * a.kv_stride + koff;
                    const size_t sc = static_cast<size_t>(rows[i]) * a.scale_stride + static_cast<size_t>(deq_kh);
                    dequantize_kv_row(a.kq + src, a.ks + sc, 1, a.head_dim, kbuf.data() + i * a.head_dim);
                    dequantize_kv_row(a.vq + src, a.vs + sc, 1, a.head_dim, vbuf.data() + i * a.head_dim);
                }
            }
            attend(a.q + qoff, kbuf.data(), vbuf.data(), a.head_dim, a.head_dim, 0, static_cast<int>(rows.size()),
                   nullptr, 0, scale, scratch.data(), a.out + qoff);
        }
    };
    const int threads = pool ? pool->size() : 1;
    // Work items [0, n) through fn(i0, i1): inline when small, else about 4 tasks per thread.
    const auto split = [&](int n, const auto& fn) {
        if (threads == 1 || work < 32.0 * 1024 || n == 1) {
            fn(0, n);
            return;
        }
        const int n_tasks = std::min(n, 4 * threads);
        pool->parallel_for(n_tasks, [&](int task) {
            fn(static_cast<int>(static_cast<long long>(n) * task / n_tasks),
               static_cast<int>(static_cast<long long>(n) * (task + 1) / n_tasks));
        });
    };
    // f32 cache, no extras, several queries (a prompt, a batch of rows): up to 4 consecutive
    // queries of one head that start at the same row share each key block's and value row's loads
    // (attend_multi; each output keeps attend_one's bits). Units: (head, first token, count).
    const auto multi = detail::active_isa().attend_multi;
    if (multi != nullptr && a.kq == nullptr && a.extra_offsets == nullptr && a.n_tok > 1) {
        struct Unit {
            int h, t0, nq;
        };
        std::vector<Unit> units;
        units.reserve(static_cast<size_t>(a.n_heads) * (a.n_tok + 3) / 4);
        for (int t = 0; t < a.n_tok;) {
            int nq = 1;
            if (a.kv_end[t] > a.kv_begin[t]) {
                while (nq < 4 && t + nq < a.n_tok && a.kv_begin[t + nq] == a.kv_begin[t] &&
                       a.kv_end[t + nq] > a.kv_begin[t + nq])
                    ++nq;
            }
            for (int h = 0; h < a.n_heads; ++h) units.push_back({h, t, nq});
            t += nq;
        }
        const auto run_units = [&](int u0, int u1) {
            thread_local std::vector<float> scratch;
            const size_t each = static_cast<size_t>(max_rows) + 16;
            if (scratch.size() < 4 * each) scratch.resize(4 * each);
            for (int u = u0; u < u1; ++u) {
                const Unit& un = units[static_cast<size_t>(u)];
                const size_t koff = static_cast<size_t>(un.h / group) * a.head_dim;
                const float* qs[4];
                float* outs[4];
                float* sc[4];
                int ends[4];
                for (int j = 0; j < un.nq; ++j) {
                    const size_t qoff = (static_cast<size_t>(un.t0 + j) * a.n_heads + un.h) * a.head_dim;
                    qs[j] = a.q + qoff;
                    outs[j] = a.out + qoff;
                    sc[j] = scratch.data() + static_cast<size_t>(j) * each;
                    ends[j] = a.kv_end[un.t0 + j];
                }
                const int b = a.kv_begin[un.t0];
                if (a.kv_end[un.t0] > b &&
                    multi(qs, a.k + koff, a.v + koff, a.kv_stride, a.head_dim, b, ends, un.nq, scale, sc, outs))
                    continue;
                for (int j = 0; j < un.nq; ++j) {
                    const int t = un.t0 + j;
                    attend(qs[j], a.k + koff, a.v + koff, a.kv_stride, a.head_dim, a.kv_begin[t],
                           std::max(a.kv_begin[t], a.kv_end[t]), nullptr, 0, scale, sc[0], outs[j]);
                }
            }
        };
        split(static_cast<int>(units.size()), run_units);
        return;
    }
    split(pairs, run);
}

}  // namespace tinyloop::kern
