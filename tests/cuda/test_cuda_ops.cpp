// Every CUDA op against its CPU reference (kernels/kernels.h *_ref, the engine's argmax and
// lens_entry), table-driven: fresh random inputs of awkward sizes per run, a normalised error
// bound per op and dtype, every output element checked (outputs are poisoned with NaN / -1
// first, so an element the kernel never wrote fails). Plus the device contracts the engine
// builds on: batch invariance of matmul and attention (bit for bit), a range and a tree extras
// list naming the same rows giving the same bits, out-of-memory as an error.
//
// Without a usable device every test reports "skipped: no CUDA device (<reason>)" and CTest
// counts it as skipped (tests/cuda/CMakeLists.txt). The seed is printed on failure;
// TL_TEST_SEED=<n> replays one run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"
#include "scoring/lens.h"
#include "decode/sampling.h"

namespace tinyloop::kern {
namespace {

namespace kc = tinyloop::kern::cuda;

uint64_t test_seed() {
    static const uint64_t seed = []() -> uint64_t {
        if (const char* s = std::getenv("TL_TEST_SEED")) return std::strtoull(s, nullptr, 10);
        return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    }();
    return seed;
}

struct Rng {
    std::mt19937_64 g;
    explicit Rng(uint64_t salt) : g(test_seed() ^ (salt * 0x9e3779b97f4a7c15ull)) {}
    float normal(float sd = 1.0f) { return std::normal_distribution<float>(0.0f, sd)(g); }
    float uniform(float a, float b) { return std::uniform_real_distribution<float>(a, b)(g); }
    int integer(int a, int b) { return std::uniform_int_distribution<int>(a, b)(g); }
    std::vector<float> normals(size_t n, float sd = 1.0f) {
        std::vector<float> v(n);
        for (auto& x : v) x = normal(sd);
        return v;
    }
};

const kc::DeviceProbe& probe() {
    static const kc::DeviceProbe p = kc::probe_device();
    return p;
}

#define TL_REQUIRE_DEVICE()                                                                   \
    do {                                                                                      \
        if (!probe().usable) GTEST_SKIP() << "skipped: no CUDA device (" << probe().reason << ")"; \
    } while (0)

kc::Context& ctx() {
    static kc::Context c(probe().device);
    return c;
}

// Device copies of host vectors, and poisoned outputs.
template <class T>
kc::DeviceBuffer up(const std::vector<T>& v) {
    kc::DeviceBuffer b(ctx(), v.size() * sizeof(T));
    ctx().upload(b.get(), v.data(), b.size());
    return b;
}
kc::DeviceBuffer poisoned(size_t bytes) {
    kc::DeviceBuffer b(ctx(), bytes);
    ctx().memset(b.get(), 0xff, bytes);  // f32 NaN, int -1
    return b;
}
template <class T>
std::vector<T> down(const kc::DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    ctx().download(v.data(), b.get(), n * sizeof(T));
    return v;
}

// max |got - want| / max(max |want|, floor); any non-finite `got` where `want` is finite fails.
struct Cmp {
    double max_err = 0.0, max_ref = 0.0;
    size_t bad = 0, first_bad = 0;
};
Cmp compare(const std::vector<float>& got, const std::vector<float>& want) {
    Cmp c;
    for (size_t i = 0; i < want.size(); ++i) {
        c.max_ref = std::max(c.max_ref, static_cast<double>(std::fabs(want[i])));
        if (!std::isfinite(got[i]) && std::isfinite(want[i])) {
            if (c.bad++ == 0) c.first_bad = i;
            continue;
        }
        c.max_err = std::max(c.max_err, std::fabs(static_cast<double>(got[i]) - want[i]));
    }
    return c;
}
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double bound, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    const Cmp c = compare(got, want);
    EXPECT_EQ(c.bad, 0u) << what << ": " << c.bad << " elements not written or not finite, first at " << c.first_bad;
    const double rel = c.max_err / std::max(c.max_ref, 1e-30);
    EXPECT_LE(rel, bound) << what << ": max|err| " << c.max_err << " / max|ref| " << c.max_ref;
}

// ---- weights (FORMAT.md §2) on host and device ---------------------------------------------

const char* type_name(WType t) {
    switch (t) {
        case WType::F32: return "f32";
        case WType::F16: return "f16";
        case WType::Q8: return "q8";
        case WType::Q4: return "q4";
        case WType::Q2: return "q2";
    }
    return "?";
}

struct Weights {
    WeightView host, dev;
    std::vector<uint8_t> data;
    std::vector<uint16_t> scales, zeros;
    kc::DeviceBuffer d_data, d_scales, d_zeros;

    Weights(WType t, int rows, int cols, int gs, Rng& rng) {
        host.type = t;
        host.rows = rows;
        host.cols = cols;
        host.group_size = (t == WType::F32 || t == WType::F16) ? 0 : gs;
        if (t == WType::F32) {
            std::vector<float> w = rng.normals(static_cast<size_t>(rows) * cols, 0.5f);
            data.resize(w.size() * 4);
            std::memcpy(data.data(), w.data(), data.size());
        } else if (t == WType::F16) {
            data.resize(static_cast<size_t>(rows) * cols * 2);
            uint16_t* p = reinterpret_cast<uint16_t*>(data.data());
            for (size_t i = 0; i < static_cast<size_t>(rows) * cols; ++i) p[i] = f32_to_f16(rng.normal(0.5f));
        } else {
            const int bits = wtype_bits(t);
            data.resize(static_cast<size_t>(rows) * cols * bits / 8);
            for (auto& b : data) b = static_cast<uint8_t>(rng.integer(0, 255));
            const size_t ng = static_cast<size_t>(rows) * (cols / gs);
            scales.resize(ng);
            zeros.resize(ng);
            for (size_t i = 0; i < ng; ++i) {
                scales[i] = f32_to_f16(rng.uniform(0.005f, 0.1f));
                zeros[i] = f32_to_f16(rng.uniform(0.0f, static_cast<float>((1 << bits) - 1)));
            }
        }
        host.data = data.data();
        host.scales = scales.empty() ? nullptr : scales.data();
        host.zeros = zeros.empty() ? nullptr : zeros.data();
        dev = host;
        d_data = up(data);
        dev.data = static_cast<const uint8_t*>(d_data.get());
        if (!scales.empty()) {
            d_scales = up(scales);
            d_zeros = up(zeros);
            dev.scales = static_cast<const uint16_t*>(d_scales.get());
            dev.zeros = static_cast<const uint16_t*>(d_zeros.get());
        }
    }
};

// ---- the table -------------------------------------------------------------------------------

struct OpCase {
    std::string name;
    std::function<void(Rng&)> run;
};

std::vector<OpCase> cases() {
    std::vector<OpCase> v;
    const WType types[] = {WType::F32, WType::F16, WType::Q8, WType::Q4, WType::Q2};

    // embedding: every dtype, ids in any order, repeated; one id out of range gives NaN.
    for (WType t : types) {
        v.push_back({std::string("embedding_") + type_name(t), [t](Rng& rng) {
                         const int rows = 53, cols = (t == WType::F32 || t == WType::F16) ? 203 : 192;
                         Weights W(t, rows, cols, 64, rng);
                         std::vector<int> ids = {0, rows - 1, 7, 7, rng.integer(0, rows - 1), rng.integer(0, rows - 1)};
                         auto d_ids = up(ids);
                         auto out = poisoned(ids.size() * cols * 4);
                         kc::embedding(ctx(), W.dev, d_ids.i32(), static_cast<int>(ids.size()), out.f32());
                         std::vector<float> want(ids.size() * cols);
                         for (size_t i = 0; i < ids.size(); ++i) dequant_row(W.host, ids[i], want.data() + i * cols);
                         const auto got = down<float>(out, want.size());
                         EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << "embedding not exact";
                         std::vector<int> badid = {rows};
                         auto d_bad = up(badid);
                         kc::embedding(ctx(), W.dev, d_bad.i32(), 1, out.f32());
                         const auto nan_row = down<float>(out, cols);
                         for (float x : nan_row) ASSERT_TRUE(std::isnan(x)) << "an out-of-range id must give NaN";
                     }});
    }

    for (int d : {1, 203, 384, 1000}) {
        v.push_back({"rmsnorm_d" + std::to_string(d), [d](Rng& rng) {
                         const int n = 5;
                         auto x = rng.normals(static_cast<size_t>(n) * d, 2.0f);
                         auto g = rng.normals(d);
                         std::vector<float> want(x.size());
                         rmsnorm_ref(x.data(), g.data(), n, d, 1e-5f, want.data());
                         auto dx = up(x), dg = up(g);
                         auto y = poisoned(x.size() * 4);
                         kc::rmsnorm(ctx(), dx.f32(), dg.f32(), n, d, 1e-5f, y.f32());
                         expect_close(down<float>(y, x.size()), want, 2e-6, "rmsnorm");
                         kc::rmsnorm(ctx(), dx.f32(), dg.f32(), n, d, 1e-5f, dx.f32());  // in place
                         expect_close(down<float>(dx, x.size()), want, 2e-6, "rmsnorm in place");
                     }});
    }

    for (int hd : {2, 34, 64, 128}) {
        v.push_back({"rope_hd" + std::to_string(hd), [hd](Rng& rng) {
                         const int n = 7, heads = 3;
                         auto x = rng.normals(static_cast<size_t>(n) * heads * hd);
                         std::vector<int> pos(n);
                         for (auto& p : pos) p = rng.integer(0, 9000);
                         pos[0] = 0;
                         std::vector<float> want = x;
                         rope_ref(want.data(), n, heads, hd, pos.data(), 10000.0f);
                         auto dx = up(x), dp = up(pos);
                         kc::rope(ctx(), dx.f32(), n, heads, hd, dp.i32(), 10000.0f);
                         const auto got = down<float>(dx, x.size());
                         expect_close(got, want, 1e-6, "rope");
                         size_t exact = 0;
                         for (size_t i = 0; i < got.size(); ++i) exact += got[i] == want[i];
                         ::testing::Test::RecordProperty("rope_exact_fraction", std::to_string(double(exact) / got.size()));
                     }});
    }

    v.push_back({"silu_mul_and_add", [](Rng& rng) {
                     const size_t n = 1001;
                     auto g = rng.normals(n, 3.0f), u = rng.normals(n);
                     std::vector<float> want(n);
                     silu_mul_ref(g.data(), u.data(), want.data(), n);
                     auto dg = up(g), du = up(u);
                     auto out = poisoned(n * 4);
                     kc::silu_mul(ctx(), dg.f32(), du.f32(), out.f32(), n);
                     expect_close(down<float>(out, n), want, 1e-6, "silu_mul");
                     std::vector<float> sum(n);
                     for (size_t i = 0; i < n; ++i) sum[i] = g[i] + u[i];
                     kc::add_inplace(ctx(), dg.f32(), du.f32(), n);
                     const auto got = down<float>(dg, n);
                     EXPECT_EQ(0, std::memcmp(got.data(), sum.data(), n * 4)) << "add_inplace not exact";
                 }});

    // matmul: every dtype and group size, token counts that straddle the kernel's tiles, a
    // column count off the vector path; each row also computed alone must give the same bits.
    for (WType t : types) {
        const bool quant = t != WType::F32 && t != WType::F16;
        for (int gs : quant ? std::vector<int>{32, 64, 128} : std::vector<int>{0}) {
            for (int cols : quant ? std::vector<int>{256, 384} : std::vector<int>{256, 203}) {
                const std::string name = std::string("matmul_") + type_name(t) + (quant ? "_g" + std::to_string(gs) : "") +
                                         "_c" + std::to_string(cols);
                v.push_back({name, [t, gs, cols](Rng& rng) {
                                 const int rows = 67;
                                 Weights W(t, rows, cols, gs, rng);
                                 for (int n : {1, 2, 3, 8, 13}) {
                                     auto x = rng.normals(static_cast<size_t>(n) * cols);
                                     std::vector<float> want(static_cast<size_t>(n) * rows);
                                     matmul_ref(W.host, x.data(), n, want.data());
                                     auto dx = up(x);
                                     auto y = poisoned(want.size() * 4);
                                     kc::matmul(ctx(), W.dev, dx.f32(), n, y.f32());
                                     const auto got = down<float>(y, want.size());
                                     expect_close(got, want, 3e-6, "matmul n_tok " + std::to_string(n));
                                     // batch invariance: the last row alone
                                     auto y1 = poisoned(static_cast<size_t>(rows) * 4);
                                     kc::matmul(ctx(), W.dev, dx.f32() + static_cast<size_t>(n - 1) * cols, 1, y1.f32());
                                     const auto one = down<float>(y1, rows);
                                     EXPECT_EQ(0, std::memcmp(one.data(), got.data() + static_cast<size_t>(n - 1) * rows, rows * 4))
                                         << "matmul is not batch-invariant at n_tok " << n;
                                 }
                             }});
            }
        }
    }

    // the fused forms: y += W x and silu(G x) * (U x), the same bits as the unfused ops
    for (WType t : {WType::F32, WType::F16, WType::Q4}) {
        v.push_back({std::string("matmul_fused_") + type_name(t), [t](Rng& rng) {
                         const int rows = 45, cols = 128, gs = 32;
                         Weights G(t, rows, cols, gs, rng), U(t, rows, cols, gs, rng);
                         for (int n : {1, 6}) {
                             auto x = rng.normals(static_cast<size_t>(n) * cols);
                             auto y0 = rng.normals(static_cast<size_t>(n) * rows);
                             auto dx = up(x), dy = up(y0);
                             auto plain = poisoned(y0.size() * 4);
                             kc::matmul(ctx(), G.dev, dx.f32(), n, plain.f32());
                             kc::matmul(ctx(), G.dev, dx.f32(), n, dy.f32(), true);
                             const auto p = down<float>(plain, y0.size()), acc = down<float>(dy, y0.size());
                             for (size_t i = 0; i < y0.size(); ++i)
                                 ASSERT_EQ(acc[i], y0[i] + p[i]) << "matmul accumulate, element " << i;
                             auto gu = poisoned(y0.size() * 4), uu = poisoned(y0.size() * 4), sw = poisoned(y0.size() * 4);
                             auto fused = poisoned(y0.size() * 4);
                             kc::matmul(ctx(), G.dev, dx.f32(), n, gu.f32());
                             kc::matmul(ctx(), U.dev, dx.f32(), n, uu.f32());
                             kc::silu_mul(ctx(), gu.f32(), uu.f32(), sw.f32(), y0.size());
                             kc::matmul_swiglu(ctx(), G.dev, U.dev, dx.f32(), n, fused.f32());
                             const auto a = down<float>(sw, y0.size()), b = down<float>(fused, y0.size());
                             EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "matmul_swiglu differs from the unfused ops";
                             std::vector<float> g(y0.size()), u(y0.size()), want(y0.size());
                             matmul_ref(G.host, x.data(), n, g.data());
                             matmul_ref(U.host, x.data(), n, u.data());
                             silu_mul_ref(g.data(), u.data(), want.data(), want.size());
                             expect_close(b, want, 1e-5, "matmul_swiglu vs the CPU");
                         }
                     }});
    }

    // q/k/v in one launch, and RoPE + the cache writes in one launch: the unfused ops' bits
    for (WType t : {WType::F32, WType::Q8, WType::Q2}) {
        v.push_back({std::string("matmul3_rope_store_") + type_name(t), [t](Rng& rng) {
                         const int d = 96, heads = 6, kv_heads = 2, hd = 16, cap = 40;
                         Weights A(t, heads * hd, d, 32, rng), B(t, kv_heads * hd, d, 32, rng), C(t, kv_heads * hd, d, 32, rng);
                         for (int n : {1, 5}) {
                             auto x = rng.normals(static_cast<size_t>(n) * d);
                             auto dx = up(x);
                             const size_t nq = size_t(n) * heads * hd, nk = size_t(n) * kv_heads * hd;
                             auto qa = poisoned(nq * 4), ka = poisoned(nk * 4), va = poisoned(nk * 4);
                             auto qb = poisoned(nq * 4), kb = poisoned(nk * 4), vb = poisoned(nk * 4);
                             kc::matmul(ctx(), A.dev, dx.f32(), n, qa.f32());
                             kc::matmul(ctx(), B.dev, dx.f32(), n, ka.f32());
                             kc::matmul(ctx(), C.dev, dx.f32(), n, va.f32());
                             kc::matmul3(ctx(), A.dev, B.dev, C.dev, dx.f32(), n, qb.f32(), kb.f32(), vb.f32());
                             EXPECT_EQ(down<float>(qa, nq), down<float>(qb, nq)) << "matmul3 q";
                             EXPECT_EQ(down<float>(ka, nk), down<float>(kb, nk)) << "matmul3 k";
                             EXPECT_EQ(down<float>(va, nk), down<float>(vb, nk)) << "matmul3 v";
                             {
                                 std::vector<float> hq(nq), hk(nk);
                                 matmul_ref(A.host, x.data(), n, hq.data());
                                 matmul_ref(B.host, x.data(), n, hk.data());
                                 expect_close(down<float>(qb, nq), hq, 3e-6, "matmul3 vs the CPU");
                                 expect_close(down<float>(kb, nk), hk, 3e-6, "matmul3 vs the CPU");
                             }
                             std::vector<int> pos(n), rows(n);
                             for (int i = 0; i < n; ++i) {
                                 pos[i] = rng.integer(0, 3000);
                                 rows[i] = (7 * i + 3) % cap;
                             }
                             auto dp = up(pos), dr = up(rows);
                             const size_t cache = size_t(cap) * kv_heads * hd;
                             auto kc1 = poisoned(cache * 4), vc1 = poisoned(cache * 4), kc2 = poisoned(cache * 4), vc2 = poisoned(cache * 4);
                             kc::rope(ctx(), qa.f32(), n, heads, hd, dp.i32(), 10000.0f);
                             kc::rope(ctx(), ka.f32(), n, kv_heads, hd, dp.i32(), 10000.0f);
                             kc::store_rows(ctx(), ka.f32(), n, kv_heads * hd, kc1.f32(), dr.i32());
                             kc::store_rows(ctx(), va.f32(), n, kv_heads * hd, vc1.f32(), dr.i32());
                             kc::rope_store(ctx(), qb.f32(), kb.f32(), vb.f32(), n, heads, kv_heads, hd, dp.i32(), 10000.0f,
                                            kc2.f32(), vc2.f32(), dr.i32());
                             EXPECT_EQ(down<float>(qa, nq), down<float>(qb, nq)) << "rope_store q";
                             const auto c1 = down<float>(kc1, cache), c2 = down<float>(kc2, cache);
                             const auto w1 = down<float>(vc1, cache), w2 = down<float>(vc2, cache);
                             EXPECT_EQ(0, std::memcmp(c1.data(), c2.data(), cache * 4)) << "rope_store k cache";
                             EXPECT_EQ(0, std::memcmp(w1.data(), w2.data(), cache * 4)) << "rope_store v cache";
                         }
                     }});
    }

    // gemm (cuBLAS) for prefill: f32 accumulate, and TF32 with its looser bound.
    for (WType t : types) {
        for (bool tf32 : {false, true}) {
            v.push_back({std::string("gemm_") + type_name(t) + (tf32 ? "_tf32" : ""), [t, tf32](Rng& rng) {
                             const int rows = 131, cols = 256, n = 77;
                             Weights W(t, rows, cols, 64, rng);
                             auto x = rng.normals(static_cast<size_t>(n) * cols);
                             std::vector<float> want(static_cast<size_t>(n) * rows);
                             matmul_ref(W.host, x.data(), n, want.data());
                             auto dx = up(x);
                             auto y = poisoned(want.size() * 4);
                             kc::DeviceBuffer scratch(ctx(), kc::gemm_scratch_bytes(W.dev));
                             kc::gemm(ctx(), W.dev, dx.f32(), n, y.f32(), scratch.f32(), tf32);
                             expect_close(down<float>(y, want.size()), want, tf32 ? 5e-3 : 1e-5, "gemm");
                         }});
        }
    }

    // attention: decode (one query, long range), chunked prefill (causal ranges, a window),
    // GQA, head sizes through every template, and tree extras.
    struct Att {
        const char* name;
        int n_tok, heads, kv_heads, hd, ctx_len;
        bool window, tree;
    };
    for (Att c : {Att{"decode_mha_hd64", 1, 4, 4, 64, 517, false, false}, Att{"decode_gqa_hd40", 1, 6, 2, 40, 300, false, false},
                  Att{"prefill_gqa_hd16", 9, 4, 2, 16, 40, false, false}, Att{"prefill_window_hd130", 11, 2, 1, 130, 64, true, false},
                  Att{"prefill_hd256", 5, 2, 2, 256, 33, false, false}, Att{"tree_gqa_hd64", 6, 4, 2, 64, 50, false, true}}) {
        v.push_back({std::string("attention_") + c.name, [c](Rng& rng) {
                         const int kv_row = c.kv_heads * c.hd, cap = c.ctx_len + c.n_tok + 8;
                         auto k = rng.normals(static_cast<size_t>(cap) * kv_row), vv = rng.normals(static_cast<size_t>(cap) * kv_row);
                         auto q = rng.normals(static_cast<size_t>(c.n_tok) * c.heads * c.hd, 0.5f);
                         std::vector<int> b(c.n_tok), e(c.n_tok), extra, offs;
                         const int base = c.ctx_len;  // query t sits at position base + t
                         for (int t = 0; t < c.n_tok; ++t) {
                             e[t] = base + t + 1;
                             b[t] = c.window ? std::max(0, e[t] - 17) : 0;
                         }
                         if (c.tree) {  // ranges end at the prefix; each query adds a random path of tree rows
                             offs.push_back(0);
                             for (int t = 0; t < c.n_tok; ++t) {
                                 e[t] = base;
                                 for (int r = base; r < base + c.n_tok; ++r)
                                     if (r == base + t || rng.integer(0, 1)) extra.push_back(r);
                                 offs.push_back(static_cast<int>(extra.size()));
                             }
                         }
                         AttentionArgs a;
                         a.n_tok = c.n_tok;
                         a.n_heads = c.heads;
                         a.n_kv_heads = c.kv_heads;
                         a.head_dim = c.hd;
                         a.kv_stride = kv_row;
                         std::vector<float> want(q.size());
                         a.q = q.data();
                         a.k = k.data();
                         a.v = vv.data();
                         a.kv_begin = b.data();
                         a.kv_end = e.data();
                         a.out = want.data();
                         if (c.tree) {
                             a.extra_rows = extra.data();
                             a.extra_offsets = offs.data();
                         }
                         attention_ref(a);
                         auto dq = up(q), dk = up(k), dv = up(vv), db = up(b), de = up(e);
                         kc::DeviceBuffer dx, doff;
                         auto out = poisoned(q.size() * 4);
                         AttentionArgs g = a;
                         g.q = dq.f32();
                         g.k = dk.f32();
                         g.v = dv.f32();
                         g.kv_begin = db.i32();
                         g.kv_end = de.i32();
                         g.out = out.f32();
                         if (c.tree) {
                             dx = up(extra);
                             doff = up(offs);
                             g.extra_rows = dx.i32();
                             g.extra_offsets = doff.i32();
                         }
                         kc::attention(ctx(), g);
                         const auto got = down<float>(out, q.size());
                         expect_close(got, want, 2e-5, "attention");
                         // the last query alone gives the same bits (batch invariance)
                         const int t = c.n_tok - 1;
                         const size_t row = static_cast<size_t>(c.heads) * c.hd;
                         AttentionArgs one = g;
                         one.n_tok = 1;
                         one.q = dq.f32() + t * row;
                         one.kv_begin = db.i32() + t;
                         one.kv_end = de.i32() + t;
                         if (c.tree) one.extra_offsets = doff.i32() + t;
                         auto out1 = poisoned(row * 4);
                         one.out = out1.f32();
                         kc::attention(ctx(), one);
                         const auto got1 = down<float>(out1, row);
                         EXPECT_EQ(0, std::memcmp(got1.data(), got.data() + t * row, row * 4)) << "attention is not batch-invariant";
                         if (c.tree) {  // the same rows as a plain range (query 0: prefix + itself) give the same bits
                             std::vector<int> b2 = {0}, e2 = {base + 1};
                             auto db2 = up(b2), de2 = up(e2);
                             std::vector<int> x1 = {base}, o1 = {0, 1};
                             auto dx1 = up(x1), do1 = up(o1);
                             AttentionArgs r = g, tr = g;
                             r.n_tok = tr.n_tok = 1;
                             r.extra_rows = nullptr;
                             r.extra_offsets = nullptr;
                             r.kv_begin = db2.i32();
                             r.kv_end = de2.i32();
                             tr.kv_begin = db.i32();
                             tr.kv_end = de.i32();  // [0, base)
                             tr.extra_rows = dx1.i32();
                             tr.extra_offsets = do1.i32();
                             auto o_r = poisoned(row * 4), o_t = poisoned(row * 4);
                             r.out = o_r.f32();
                             tr.out = o_t.f32();
                             kc::attention(ctx(), r);
                             kc::attention(ctx(), tr);
                             const auto gr = down<float>(o_r, row), gt = down<float>(o_t, row);
                             EXPECT_EQ(0, std::memcmp(gr.data(), gt.data(), row * 4)) << "range and extras differ";
                         }
                     }});
    }

    // lens: softmax, top-k (ties, masked ids), entropy, p(emitted), against lens_entry.
    for (int k : {1, 5, 64}) {
        v.push_back({"lens_topk_k" + std::to_string(k), [k](Rng& rng) {
                         const int rows = 4, vocab = 1037;
                         auto z = rng.normals(static_cast<size_t>(rows) * vocab, 3.0f);
                         z[5] = z[9] = z[700] = 12.0f;  // a three-way tie at the top of row 0
                         for (int i = 1000; i < vocab; ++i) z[static_cast<size_t>(vocab) + i] = -INFINITY;  // row 1: masked ids
                         std::vector<int> em = {9, 3, -1, vocab - 1};
                         auto dz = up(z), dem = up(em);
                         auto ids = poisoned(static_cast<size_t>(rows) * k * 4), probs = poisoned(static_cast<size_t>(rows) * k * 4);
                         auto ent = poisoned(rows * 4), pe = poisoned(rows * 4);
                         kc::lens_topk(ctx(), dz.f32(), rows, vocab, k, dem.i32(), ids.i32(), probs.f32(), ent.f32(), pe.f32());
                         const auto gi = down<int>(ids, static_cast<size_t>(rows) * k);
                         const auto gp = down<float>(probs, static_cast<size_t>(rows) * k);
                         const auto ge = down<float>(ent, rows), gpe = down<float>(pe, rows);
                         for (int r = 0; r < rows; ++r) {
                             const LensDepth want = lens_entry(z.data() + static_cast<size_t>(r) * vocab, vocab, 1, k, em[r]);
                             for (int j = 0; j < k; ++j) {
                                 EXPECT_EQ(gi[static_cast<size_t>(r) * k + j], want.top_ids[j]) << "row " << r << " rank " << j;
                                 EXPECT_NEAR(gp[static_cast<size_t>(r) * k + j], want.top_probs[j], 1e-5 * std::max(1.0f, want.top_probs[j]));
                             }
                             EXPECT_NEAR(ge[r], want.entropy, 1e-4 * std::max(1.0f, want.entropy)) << "entropy row " << r;
                             EXPECT_NEAR(gpe[r], want.p_emitted, 1e-6 + 1e-5 * want.p_emitted) << "p_emitted row " << r;
                         }
                     }});
    }

    v.push_back({"argmax", [](Rng& rng) {
                     const int rows = 5, vocab = 3001, n_valid = 2900;
                     auto z = rng.normals(static_cast<size_t>(rows) * vocab);
                     z[100] = z[2000] = 50.0f;                                   // row 0: tie, lower id wins
                     z[static_cast<size_t>(vocab) + 2950] = 99.0f;               // row 1: best id is masked
                     for (int i = 0; i < vocab; ++i) z[2 * static_cast<size_t>(vocab) + i] = NAN;  // row 2: all NaN
                     z[3 * static_cast<size_t>(vocab) + 17] = NAN;               // row 3: a NaN
                     auto dz = up(z);
                     auto out = poisoned(rows * 4);
                     kc::argmax(ctx(), dz.f32(), rows, vocab, n_valid, out.i32());
                     const auto got = down<int>(out, rows);
                     for (int r = 0; r < rows; ++r) {
                         std::vector<float> row(z.begin() + static_cast<size_t>(r) * vocab, z.begin() + static_cast<size_t>(r + 1) * vocab);
                         mask_undecodable(row.data(), vocab, n_valid);
                         EXPECT_EQ(got[r], tinyloop::argmax(row.data(), vocab)) << "row " << r;
                     }
                     EXPECT_EQ(got[0], 100);
                 }});
    return v;
}

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

class CudaOps : public ::testing::TestWithParam<OpCase> {};

TEST_P(CudaOps, MatchesCpuReference) {
    TL_REQUIRE_DEVICE();
    SCOPED_TRACE("TL_TEST_SEED=" + std::to_string(test_seed()));
    Rng rng(std::hash<std::string>{}(GetParam().name));
    GetParam().run(rng);
}

INSTANTIATE_TEST_SUITE_P(All, CudaOps, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<OpCase>& i) { return i.param.name; });

// Out of device memory is an error the caller can catch, and the context stays usable.
TEST(CudaDevice, OutOfMemoryIsAnError) {
    TL_REQUIRE_DEVICE();
    try {
        kc::DeviceBuffer huge(ctx(), size_t{1} << 50);
        FAIL() << "a 1 PiB allocation succeeded";
    } catch (const kc::CudaError& e) {
        EXPECT_TRUE(e.out_of_memory()) << e.what();
    }
    std::vector<float> x = {1, 2, 3};
    auto d = up(x);
    EXPECT_EQ(down<float>(d, 3), x);
}

// A graph captured once and replayed gives what the direct launches give.
TEST(CudaDevice, GraphReplayMatchesDirectLaunch) {
    TL_REQUIRE_DEVICE();
    Rng rng(99);
    const int n = 3, d = 96;
    auto x = rng.normals(static_cast<size_t>(n) * d), g = rng.normals(d);
    auto dx = up(x), dg = up(g);
    auto y = poisoned(x.size() * 4);
    kc::rmsnorm(ctx(), dx.f32(), dg.f32(), n, d, 1e-5f, y.f32());
    const auto direct = down<float>(y, x.size());
    ctx().memset(y.get(), 0xff, y.size());
    ctx().begin_capture();
    kc::rmsnorm(ctx(), dx.f32(), dg.f32(), n, d, 1e-5f, y.f32());
    kc::Graph graph = ctx().end_capture();
    ctx().launch(graph);
    EXPECT_EQ(down<float>(y, x.size()), direct);
}

}  // namespace
}  // namespace tinyloop::kern
