// The op table (ggml's test-backend-ops pattern): every op of the back-end interface
// (engine/src/backend.h) on every back end this build and machine offer — the CPU at each SIMD
// level it has (Q8/Q4 matmul in both of its activation modes), CUDA where a device is present —
// against the scalar reference (kernels.h *_ref, the engine's argmax), on fresh random inputs of
// awkward sizes, every output element checked (outputs are poisoned with NaN / -1 first, so an
// element never written fails), with a normalised error bound per op. Plus the contracts the
// forward builds on, per back end: batch invariance (a row alone gives the bits it gets in a
// batch), the fused ops giving the unfused ops' bits, a tree-extras list naming the rows of a
// range giving the range's bits.
//
// Adding an op means adding a case here. The CUDA rows (suite BackendOpsCuda, CTest label cuda)
// report "skipped: no CUDA device (<reason>)" without one. TL_TEST_SEED=<n> replays a run.
// "cuda-fast" is the CUDA back end with the fast decode step's ops (CudaOps::set_fast: one-row
// products through decode_fast.cu's kernels, norms folded into them, split attention), held to
// the same cases, so the table compares the fast path with the reference op by op; the
// folded_norm cases check that a norm folded into its product gives the unfused bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <tuple>

#include "forward/backend.h"
#include "kernels/op_test_util.h"
#include "decode/sampling.h"

namespace tinyloop {
namespace {

using namespace tinyloop::kern;
using namespace tinyloop::kern::testing;
using tinyloop::kern::testing::Rng;
using tinyloop::kern::testing::Weights;

// A back end under test: host vectors up into its memory and back.
struct Dev {
    BackendOps& be;
    bool cpu = true;
    std::vector<std::unique_ptr<BackendBuffer>> held;

    void* raw(size_t bytes) {
        held.push_back(be.alloc(std::max<size_t>(bytes, 4)));
        return held.back()->data();
    }
    template <class T>
    T* up(const std::vector<T>& v) {
        T* p = static_cast<T*>(raw(v.size() * sizeof(T)));
        be.upload(p, v.data(), v.size() * sizeof(T));
        return p;
    }
    template <class T>
    T* poisoned(size_t n) {
        return reinterpret_cast<T*>(up(std::vector<uint8_t>(n * sizeof(T), 0xff)));  // f32 NaN, int -1
    }
    template <class T>
    std::vector<T> down(const T* p, size_t n) {
        std::vector<T> v(n);
        be.download(v.data(), p, n * sizeof(T));
        return v;
    }
    WeightView weights(const Weights& w) {
        WeightView v = w.view();
        v.data = up(w.data);
        if (!w.scales.empty()) {
            v.scales = up(w.scales);
            v.zeros = up(w.zeros);
        }
        return v;
    }
};

// max |got - want| / max(max |want|, floor); a non-finite `got` where `want` is finite fails.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double bound, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double max_err = 0.0, max_ref = 0.0;
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        max_ref = std::max(max_ref, static_cast<double>(std::fabs(want[i])));
        if (!std::isfinite(got[i]) && std::isfinite(want[i])) {
            if (bad++ == 0) first_bad = i;
            continue;
        }
        max_err = std::max(max_err, std::fabs(static_cast<double>(got[i]) - want[i]));
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements not written or not finite, first at " << first_bad;
    EXPECT_LE(max_err / std::max(max_ref, 1e-30), bound) << what << ": max|err| " << max_err << " / max|ref| " << max_ref;
}

struct OpCase {
    std::string name;
    std::function<void(Dev&, Rng&)> run;
};

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

const WType kTypes[] = {WType::F32, WType::F16, WType::BF16, WType::Q8, WType::Q4, WType::Q2};

void add_pointwise_cases(std::vector<OpCase>& v) {
    for (WType t : kTypes) {
        v.push_back({std::string("embedding_") + type_name(t), [t](Dev& dev, Rng& rng) {
                         const int rows = 53, cols = 192;
                         const Weights w(t, rows, cols, 64, rng);
                         const std::vector<int> ids = {0, rows - 1, 7, 7, rng.integer(0, rows - 1)};
                         float* out = dev.poisoned<float>(ids.size() * cols);
                         dev.be.embedding(dev.weights(w), dev.up(ids), static_cast<int>(ids.size()), out);
                         const auto got = dev.down(out, ids.size() * cols);
                         for (size_t i = 0; i < ids.size(); ++i)
                             for (int c = 0; c < cols; ++c)
                                 ASSERT_EQ(got[i * cols + c], w.at(ids[i], c)) << "row " << i << " column " << c;
                     }});
    }
    for (int d : {1, 7, 203, 384, 1411}) {
        v.push_back({"rmsnorm_d" + std::to_string(d), [d](Dev& dev, Rng& rng) {
                         const int n = 5;
                         const auto x = rng.normals(static_cast<size_t>(n) * d, 3.0f);
                         const auto g = rng.normals(d);
                         std::vector<float> want(x.size());
                         rmsnorm_ref(x.data(), g.data(), n, d, 1e-5f, want.data());
                         float *dx = dev.up(x), *dg = dev.up(g), *y = dev.poisoned<float>(x.size());
                         dev.be.rmsnorm(dx, dg, n, d, 1e-5f, y);
                         const auto got = dev.down(y, x.size());
                         expect_close(got, want, 1e-5, "rmsnorm");
                         float* one = dev.poisoned<float>(d);  // the last row alone: the same bits
                         dev.be.rmsnorm(dx + static_cast<size_t>(n - 1) * d, dg, 1, d, 1e-5f, one);
                         EXPECT_TRUE(bits_equal(dev.down(one, d).data(), got.data() + static_cast<size_t>(n - 1) * d, d));
                         dev.be.rmsnorm(dx, dg, n, d, 1e-5f, dx);  // in place
                         EXPECT_EQ(dev.down(dx, x.size()), got) << "rmsnorm in place";
                     }});
    }
    for (int hd : {2, 18, 64, 128}) {
        v.push_back({"rope_hd" + std::to_string(hd), [hd](Dev& dev, Rng& rng) {
                         const std::vector<int> pos = {0, 1, 7, 511, 4095, 3, 100000};
                         const int n = static_cast<int>(pos.size()), heads = 3;
                         const auto x = rng.normals(static_cast<size_t>(n) * heads * hd);
                         for (float theta : {10000.0f, 500000.0f}) {
                             auto want = x;
                             rope_ref(want.data(), n, heads, hd, pos.data(), theta);
                             float* dx = dev.up(x);
                             dev.be.rope(dx, n, heads, hd, dev.up(pos), theta);
                             const auto got = dev.down(dx, x.size());
                             // The CPU's sequence is the reference's, bit for bit; the device's
                             // double cos/sin may round differently.
                             if (dev.cpu) EXPECT_TRUE(bits_equal(got.data(), want.data(), got.size())) << "theta " << theta;
                             else expect_close(got, want, 1e-6, "rope");
                         }
                     }});
    }
    for (size_t n : {size_t{1}, size_t{17}, size_t{1408}, size_t{4099}}) {
        v.push_back({"silu_mul_add_n" + std::to_string(n), [n](Dev& dev, Rng& rng) {
                         std::vector<float> g(n), u = rng.normals(n);
                         for (auto& x : g) x = rng.uniform(-20.0f, 20.0f);
                         std::vector<float> want(n), sum(n);
                         silu_mul_ref(g.data(), u.data(), want.data(), n);
                         for (size_t i = 0; i < n; ++i) sum[i] = g[i] + u[i];
                         float *dg = dev.up(g), *du = dev.up(u), *out = dev.poisoned<float>(n);
                         dev.be.silu_mul(dg, du, out, n);
                         expect_close(dev.down(out, n), want, 2e-6, "silu_mul");
                         dev.be.add_inplace(dg, du, n);
                         EXPECT_EQ(dev.down(dg, n), sum) << "add_inplace is one float add per element";
                     }});
    }
    // FORMAT.md §1b's row ops: qk_bias (add_rows), embed_scale (scale), the adapter's input
    // (concat_rows). One float operation or a copy per element: every back end gives the same bits.
    for (int cols : {1, 17, 96, 1411}) {
        v.push_back({"rows_ops_cols" + std::to_string(cols), [cols](Dev& dev, Rng& rng) {
                         const int n = 5, db = cols + 3;
                         const auto y = rng.normals(static_cast<size_t>(n) * cols), b = rng.normals(cols),
                                    a2 = rng.normals(static_cast<size_t>(n) * db);
                         std::vector<float> biased(y), scaled(y), cat;
                         for (int t = 0; t < n; ++t)
                             for (int c = 0; c < cols; ++c) biased[static_cast<size_t>(t) * cols + c] += b[c];
                         for (auto& x : scaled) x *= 8.0000005f;
                         for (int t = 0; t < n; ++t) {
                             cat.insert(cat.end(), y.begin() + static_cast<size_t>(t) * cols, y.begin() + static_cast<size_t>(t + 1) * cols);
                             cat.insert(cat.end(), a2.begin() + static_cast<size_t>(t) * db, a2.begin() + static_cast<size_t>(t + 1) * db);
                         }
                         float *dy = dev.up(y), *ds = dev.up(y), *da = dev.up(a2), *out = dev.poisoned<float>(cat.size());
                         dev.be.concat_rows(out, dy, da, n, cols, db);
                         EXPECT_EQ(dev.down(out, cat.size()), cat) << "concat_rows";
                         dev.be.add_rows(dy, dev.up(b), n, cols);
                         EXPECT_EQ(dev.down(dy, y.size()), biased) << "add_rows";
                         dev.be.scale(ds, 8.0000005f, y.size());
                         EXPECT_EQ(dev.down(ds, y.size()), scaled) << "scale";
                     }});
    }
}

// matmul against matmul_ref (matmul_int8_ref where the back end quantizes activations), with
// the bound |y - ref| <= 2e-5 * sum_c |W[r,c] x[t,c]|; every row alone gives its batch bits.
void check_matmul(Dev& dev, Rng& rng, WType t, int gs, int rows, int cols) {
    const Weights w(t, rows, cols, gs, rng);
    const WeightView dw = dev.weights(w);
    const int max_tok = 17;
    const auto x = rng.normals(static_cast<size_t>(max_tok) * cols);
    std::vector<float> want(static_cast<size_t>(max_tok) * rows);
    if (dev.be.int8_activations(w.view())) matmul_int8_ref(w.view(), x.data(), max_tok, want.data());
    else matmul_ref(w.view(), x.data(), max_tok, want.data());
    const float* dx = dev.up(x);
    for (int n : {1, 2, 5, 13, 17}) {
        float* y = dev.poisoned<float>(static_cast<size_t>(n) * rows);
        dev.be.matmul(dw, dx, n, y);
        const auto got = dev.down(y, static_cast<size_t>(n) * rows);
        for (int tk = 0; tk < n; ++tk)
            for (int r = 0; r < rows; ++r) {
                double norm = 0.0;
                for (int c = 0; c < cols; ++c) norm += std::fabs(double(w.at(r, c)) * x[size_t(tk) * cols + c]);
                const size_t i = static_cast<size_t>(tk) * rows + r;
                ASSERT_LE(std::fabs(double(got[i]) - want[i]), 2e-5 * norm + 1e-30)
                    << type_name(t) << " gs " << gs << " " << rows << "x" << cols << " n " << n << " element " << i
                    << ": " << got[i] << " vs " << want[i];
            }
        float* one = dev.poisoned<float>(rows);
        dev.be.matmul(dw, dx + static_cast<size_t>(n - 1) * cols, 1, one);
        ASSERT_TRUE(bits_equal(dev.down(one, rows).data(), got.data() + static_cast<size_t>(n - 1) * rows, rows))
            << "matmul is not batch-invariant at n " << n;
    }
}

// The CPU's float-activation path for a scope (kernels.h: set_int8_activations); the setting
// before is restored after.
struct FloatActivations {
    bool saved = int8_activations();
    FloatActivations() { set_int8_activations(false); }
    ~FloatActivations() { set_int8_activations(saved); }
    FloatActivations(const FloatActivations&) = delete;
    FloatActivations& operator=(const FloatActivations&) = delete;
};

void add_matmul_cases(std::vector<OpCase>& v) {
    struct Shape {
        WType type;
        int gs;
        std::vector<int> cols;
    };
    const std::vector<Shape> shapes = {
        // Every shape the per-level matmul test had before the table (test_ops.cpp at 9e8e98b).
        {WType::F32, 0, {1, 17, 96, 100, 1411}}, {WType::F16, 0, {3, 16, 160, 1408}},
        {WType::Q8, 32, {96, 160, 352, 1408}},   {WType::Q4, 32, {96, 160, 352, 1408}},
        {WType::Q2, 32, {96, 160, 352, 1408}},   {WType::Q8, 64, {128, 320, 1408}},
        {WType::Q4, 64, {128, 320, 1408}},       {WType::Q2, 64, {128, 320, 1408}},
        {WType::Q8, 128, {128, 384, 1408}},      {WType::Q4, 128, {128, 384, 1408}},
        {WType::Q2, 128, {128, 384, 1408}},
        // bf16: widths that leave a tail for the masked (AVX-512) and copied (AVX2) loads.
        {WType::BF16, 0, {1, 17, 100, 160, 1411}},
    };
    for (const Shape& s : shapes)
        for (int cols : s.cols) {
            const std::string name = std::string("matmul_") + type_name(s.type) +
                                     (s.gs ? "_g" + std::to_string(s.gs) : "") + "_c" + std::to_string(cols);
            v.push_back({name, [s, cols](Dev& dev, Rng& rng) {
                             for (int rows : {1, 7, 33, 67, 257}) check_matmul(dev, rng, s.type, s.gs ? s.gs : 32, rows, cols);
                         }});
        }
    // The CPU's other activation mode: Q8/Q4 with float activations (set_int8_activations(false),
    // or TINYLOOP_INT8_ACT=0), against matmul_ref with the same bound, at every SIMD level, up to
    // 257 rows and 1408 columns; group sizes outside FORMAT.md (the loader refuses them; they
    // always take this path) included. The switch is the CPU's: a device back end has one mode,
    // checked by the cases above.
    const std::vector<Shape> float_act = {
        {WType::Q8, 32, {96, 160, 352, 1408}}, {WType::Q4, 32, {96, 160, 352, 1408}},
        {WType::Q8, 64, {128, 320, 1408}},     {WType::Q4, 64, {128, 320, 1408}},
        {WType::Q8, 128, {128, 384, 1408}},    {WType::Q4, 128, {128, 384, 1408}},
        {WType::Q4, 16, {96, 160}},            {WType::Q8, 48, {96, 144}},
    };
    for (const Shape& s : float_act)
        for (int cols : s.cols) {
            const std::string name = std::string("matmul_") + type_name(s.type) + "_g" + std::to_string(s.gs) + "_c" +
                                     std::to_string(cols) + "_float_act";
            v.push_back({name, [s, cols](Dev& dev, Rng& rng) {
                             if (!dev.cpu) GTEST_SKIP() << "the int8/float activation switch is the CPU back end's";
                             const FloatActivations scope;
                             ASSERT_FALSE(dev.be.int8_activations(WeightView{s.type, 1, cols, s.gs}));  // so: matmul_ref
                             for (int rows : {1, 7, 33, 257}) check_matmul(dev, rng, s.type, s.gs, rows, cols);
                         }});
        }
    // A norm followed by the product that reads it (one row: the fast step folds the norm into
    // the product, "cuda-fast") gives the bits of the norm run alone and then the product, and
    // leaves the normalized row in memory as the norm alone does; for matmul, matmul_add,
    // matmul_swiglu and matmul_qkv, at d_model-like and d_ff-like widths.
    for (WType t : {WType::F32, WType::F16, WType::Q8, WType::Q4}) {
        for (int cols : {128, 1408}) {
            v.push_back({std::string("folded_norm_") + type_name(t) + "_c" + std::to_string(cols), [t, cols](Dev& dev, Rng& rng) {
                             const int rows = 45, kr = 16;
                             const Weights G(t, rows, cols, 32, rng), U(t, rows, cols, 32, rng), K(t, kr, cols, 32, rng);
                             const WeightView dg = dev.weights(G), du = dev.weights(U), dk = dev.weights(K);
                             const auto x = rng.normals(cols, 3.0f), gain = rng.normals(cols), y0 = rng.normals(rows);
                             float *dx = dev.up(x), *dgain = dev.up(gain);
                             // the unfused sequence: the norm's row downloaded (launched alone) first
                             float* a = dev.poisoned<float>(cols);
                             dev.be.rmsnorm(dx, dgain, 1, cols, 1e-5f, a);
                             const auto a_ref = dev.down(a, cols);
                             float *y = dev.poisoned<float>(rows), *acc = dev.up(y0), *sw = dev.poisoned<float>(rows);
                             float *q = dev.poisoned<float>(rows), *k = dev.poisoned<float>(kr), *v = dev.poisoned<float>(rows);
                             float* tmp = dev.poisoned<float>(rows);
                             dev.be.matmul(dg, a, 1, y);
                             dev.be.matmul_add(dg, a, 1, acc, tmp);
                             dev.be.matmul_swiglu(dg, du, a, 1, sw, tmp);
                             dev.be.matmul_qkv(dg, dk, du, a, 1, q, k, v);
                             const auto y_ref = dev.down(y, rows), acc_ref = dev.down(acc, rows), sw_ref = dev.down(sw, rows);
                             const auto q_ref = dev.down(q, rows), k_ref = dev.down(k, kr), v_ref = dev.down(v, rows);
                             // each product straight after its norm (every buffer made before: an
                             // upload between the two would launch the norm alone)
                             float *y2 = dev.poisoned<float>(rows), *acc2 = dev.up(y0), *sw2 = dev.poisoned<float>(rows);
                             float *q2 = dev.poisoned<float>(rows), *k2 = dev.poisoned<float>(kr), *v2 = dev.poisoned<float>(rows);
                             float* a2 = dev.poisoned<float>(cols);
                             dev.be.rmsnorm(dx, dgain, 1, cols, 1e-5f, a2);
                             dev.be.matmul(dg, a2, 1, y2);
                             dev.be.rmsnorm(dx, dgain, 1, cols, 1e-5f, a2);
                             dev.be.matmul_add(dg, a2, 1, acc2, tmp);
                             dev.be.rmsnorm(dx, dgain, 1, cols, 1e-5f, a2);
                             dev.be.matmul_swiglu(dg, du, a2, 1, sw2, tmp);
                             dev.be.rmsnorm(dx, dgain, 1, cols, 1e-5f, a2);
                             dev.be.matmul_qkv(dg, dk, du, a2, 1, q2, k2, v2);  // deferred: the download launches it
                             EXPECT_EQ(dev.down(y2, rows), y_ref) << "norm + matmul";
                             EXPECT_EQ(dev.down(acc2, rows), acc_ref) << "norm + matmul_add";
                             EXPECT_EQ(dev.down(sw2, rows), sw_ref) << "norm + matmul_swiglu";
                             EXPECT_EQ(dev.down(q2, rows), q_ref) << "norm + matmul_qkv q";
                             EXPECT_EQ(dev.down(k2, kr), k_ref) << "norm + matmul_qkv k";
                             EXPECT_EQ(dev.down(v2, rows), v_ref) << "norm + matmul_qkv v";
                             EXPECT_EQ(dev.down(a2, cols), a_ref) << "the norm's row after a deferred q/k/v product";
                         }});
        }
    }
    // The fused forms give the unfused ops' bits: y += W x, q/k/v at once, silu(G x) * (U x).
    for (WType t : {WType::F32, WType::F16, WType::BF16, WType::Q8, WType::Q4}) {
        v.push_back({std::string("matmul_fused_") + type_name(t), [t](Dev& dev, Rng& rng) {
                         const int rows = 45, cols = 128;
                         const Weights G(t, rows, cols, 32, rng), U(t, rows, cols, 32, rng), K(t, 16, cols, 32, rng);
                         const WeightView dg = dev.weights(G), du = dev.weights(U), dk = dev.weights(K);
                         for (int n : {1, 6}) {
                             const size_t ny = static_cast<size_t>(n) * rows, nk = static_cast<size_t>(n) * 16;
                             const auto x = rng.normals(static_cast<size_t>(n) * cols);
                             const auto y0 = rng.normals(ny);
                             float *dx = dev.up(x), *acc = dev.up(y0), *tmp = dev.poisoned<float>(ny);
                             float *g = dev.poisoned<float>(ny), *u = dev.poisoned<float>(ny), *k = dev.poisoned<float>(nk);
                             dev.be.matmul(dg, dx, n, g);
                             dev.be.matmul(du, dx, n, u);
                             dev.be.matmul(dk, dx, n, k);
                             const auto pg = dev.down(g, ny), pu = dev.down(u, ny), pk = dev.down(k, nk);
                             dev.be.matmul_add(dg, dx, n, acc, tmp);
                             const auto a = dev.down(acc, ny);
                             for (size_t i = 0; i < ny; ++i) ASSERT_EQ(a[i], y0[i] + pg[i]) << "matmul_add, element " << i;
                             float *q2 = dev.poisoned<float>(ny), *k2 = dev.poisoned<float>(nk), *v2 = dev.poisoned<float>(ny);
                             dev.be.matmul_qkv(dg, dk, du, dx, n, q2, k2, v2);
                             EXPECT_EQ(dev.down(q2, ny), pg) << "matmul_qkv q";
                             EXPECT_EQ(dev.down(k2, nk), pk) << "matmul_qkv k";
                             EXPECT_EQ(dev.down(v2, ny), pu) << "matmul_qkv v";
                             float *sw = dev.poisoned<float>(ny), *fused = dev.poisoned<float>(ny);
                             dev.be.silu_mul(g, u, sw, ny);
                             dev.be.matmul_swiglu(dg, du, dx, n, fused, tmp);
                             EXPECT_EQ(dev.down(fused, ny), dev.down(sw, ny)) << "matmul_swiglu differs from the unfused ops";
                         }
                     }});
    }
}

struct AttnShape {
    const char* name;
    int n_tok, heads, kv_heads, hd, ctx_len, window;
    bool tree;
    bool int8 = false;  // the INT8 cache: codes and per (row, kv head) scales (quantize_kv_row)
};

void check_attention(Dev& dev, Rng& rng, const AttnShape& c) {
    const int kv_row = c.kv_heads * c.hd, stride = kv_row + 3, cap = c.ctx_len + c.n_tok + 8;
    const auto k = rng.normals(static_cast<size_t>(cap) * stride, 2.0f), vv = rng.normals(static_cast<size_t>(cap) * stride);
    const auto q = rng.normals(static_cast<size_t>(c.n_tok) * c.heads * c.hd, 2.0f);
    std::vector<int> b(c.n_tok), e(c.n_tok), extra, offs;
    const int base = c.ctx_len;  // query t sits at position base + t
    for (int t = 0; t < c.n_tok; ++t) {
        e[t] = base + t + 1;
        b[t] = c.window ? std::max(0, e[t] - c.window) : 0;
    }
    if (c.tree) {  // ranges end at the prefix; each query adds itself and a random path of tree rows
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
    a.kv_stride = stride;
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
    std::vector<int8_t> kq, vq;
    std::vector<float> ks, vs;
    if (c.int8) {  // every row of the cache quantized as the CPU's KV cache stores it
        kq.assign(k.size(), 0);
        vq.assign(vv.size(), 0);
        ks.assign(static_cast<size_t>(cap) * c.kv_heads, 0.0f);
        vs.assign(ks.size(), 0.0f);
        for (int p = 0; p < cap; ++p) {
            const size_t at = static_cast<size_t>(p) * stride, sat = static_cast<size_t>(p) * c.kv_heads;
            quantize_kv_row(k.data() + at, c.kv_heads, c.hd, kq.data() + at, ks.data() + sat);
            quantize_kv_row(vv.data() + at, c.kv_heads, c.hd, vq.data() + at, vs.data() + sat);
        }
        a.k = a.v = nullptr;
        a.kq = kq.data();
        a.vq = vq.data();
        a.ks = ks.data();
        a.vs = vs.data();
        a.scale_stride = c.kv_heads;
    }
    attention_ref(a);
    AttentionArgs g = a;
    g.q = dev.up(q);
    if (c.int8) {
        g.kq = dev.up(kq);
        g.vq = dev.up(vq);
        g.ks = dev.up(ks);
        g.vs = dev.up(vs);
    } else {
        g.k = dev.up(k);
        g.v = dev.up(vv);
    }
    g.kv_begin = dev.up(b);
    g.kv_end = dev.up(e);
    g.out = dev.poisoned<float>(q.size());
    if (c.tree) {
        g.extra_rows = dev.up(extra);
        g.extra_offsets = dev.up(offs);
    }
    dev.be.attention(g);
    const auto got = dev.down(g.out, q.size());
    expect_close(got, want, 2e-5, "attention");
    const size_t row = static_cast<size_t>(c.heads) * c.hd;
    for (int t = 0; t < c.n_tok; ++t) {  // each query alone gives its batch bits
        AttentionArgs one = g;
        one.n_tok = 1;
        one.q = g.q + t * row;
        one.kv_begin = g.kv_begin + t;
        one.kv_end = g.kv_end + t;
        if (c.tree) one.extra_offsets = g.extra_offsets + t;
        one.out = dev.poisoned<float>(row);
        dev.be.attention(one);
        ASSERT_TRUE(bits_equal(dev.down(one.out, row).data(), got.data() + t * row, row)) << "query " << t << " alone";
    }
    if (c.tree) {  // query 0 as a plain range [0, base + 1) and as [0, base) + {base}: the same bits
        AttentionArgs r = g, x = g;
        r.n_tok = x.n_tok = 1;
        r.extra_rows = nullptr;
        r.extra_offsets = nullptr;
        r.kv_end = dev.up(std::vector<int>{base + 1});
        x.extra_rows = dev.up(std::vector<int>{base});
        x.extra_offsets = dev.up(std::vector<int>{0, 1});
        r.out = dev.poisoned<float>(row);
        x.out = dev.poisoned<float>(row);
        dev.be.attention(r);
        dev.be.attention(x);
        EXPECT_EQ(dev.down(r.out, row), dev.down(x.out, row)) << "a range and an extras list of the same rows differ";
    }
}

void add_attention_and_argmax_cases(std::vector<OpCase>& v) {
    for (AttnShape c : {AttnShape{"decode_hd2", 1, 1, 1, 2, 1, 0, false}, AttnShape{"decode_mha_hd64", 1, 4, 4, 64, 517, 0, false},
                        AttnShape{"decode_gqa_hd40", 1, 6, 2, 40, 300, 0, false},
                        AttnShape{"prefill_gqa_hd18", 9, 2, 1, 18, 33, 0, false},
                        AttnShape{"prefill_window_hd40", 17, 6, 3, 40, 70, 16, false},
                        AttnShape{"prefill_hd128", 17, 8, 2, 128, 129, 0, false},
                        AttnShape{"tree_gqa_hd64", 6, 4, 2, 64, 50, 0, true},
                        AttnShape{"int8_decode_gqa_hd64", 1, 8, 2, 64, 300, 0, false, true},
                        AttnShape{"int8_prefill_window_hd40", 9, 6, 3, 40, 70, 16, false, true},
                        AttnShape{"int8_tree_mha_hd128", 5, 2, 2, 128, 40, 0, true, true}}) {
        v.push_back({std::string("attention_") + c.name, [c](Dev& dev, Rng& rng) { check_attention(dev, rng, c); }});
    }
    v.push_back({"argmax", [](Dev& dev, Rng& rng) {
                     const int rows = 5, vocab = 3001, n_valid = 2900;
                     auto z = rng.normals(static_cast<size_t>(rows) * vocab);
                     z[100] = z[2000] = 50.0f;                                                    // a tie: lower id wins
                     z[static_cast<size_t>(vocab) + 2950] = 99.0f;                                // best id past n_valid
                     for (int i = 0; i < vocab; ++i) z[2 * static_cast<size_t>(vocab) + i] = NAN;  // all NaN
                     z[3 * static_cast<size_t>(vocab) + 17] = NAN;                                // one NaN
                     int* out = dev.poisoned<int>(rows);
                     dev.be.argmax(dev.up(z), rows, vocab, n_valid, out);
                     const auto got = dev.down(out, rows);
                     EXPECT_EQ(got[0], 100);
                     for (int r = 0; r < rows; ++r) {  // the engine's pick: padded ids read -inf, NaN skipped
                         std::vector<float> row(z.begin() + static_cast<size_t>(r) * vocab, z.begin() + static_cast<size_t>(r + 1) * vocab);
                         mask_undecodable(row.data(), vocab, n_valid);
                         EXPECT_EQ(got[r], tinyloop::argmax(row.data(), vocab)) << "row " << r;
                     }
                 }});
}

std::vector<OpCase> all_cases() {
    std::vector<OpCase> v;
    add_pointwise_cases(v);
    add_matmul_cases(v);
    add_attention_and_argmax_cases(v);
    return v;
}

const std::vector<BackendEntry>& entries() {
    static const std::vector<BackendEntry> e = backend_entries();
    return e;
}

std::vector<std::string> backend_names(bool cuda) {
    std::vector<std::string> out;
    // Every entry, run or not: a level this CPU (or TINYLOOP_SIMD) rules out is listed as skipped
    // with the reason, so the count of cases is the same on every machine.
    for (const BackendEntry& e : entries())
        if ((e.name.rfind("cuda", 0) == 0) == cuda) out.push_back(e.name);  // "cuda" and "cuda-fast"
    return out;
}

using Param = std::tuple<std::string, OpCase>;

void run_case(const Param& p) {
    const auto& [name, op] = p;
    const BackendEntry& e = *std::find_if(entries().begin(), entries().end(), [&](const BackendEntry& x) { return x.name == name; });
    if (!e.unavailable.empty()) GTEST_SKIP() << "skipped: " << e.unavailable;
    SCOPED_TRACE("TL_TEST_SEED=" + std::to_string(test_seed()));
    static ThreadPool pool(3);
    const std::string saved = simd_level();
    std::unique_ptr<BackendOps> be = e.make(e.name, &pool);
    Dev dev{*be, name.rfind("cuda", 0) != 0, {}};
    Rng rng(std::hash<std::string>{}(op.name));
    op.run(dev, rng);
    dev.held.clear();
    force_simd_level(saved.c_str());
}

std::string param_name(const ::testing::TestParamInfo<Param>& i) {
    std::string s = std::get<0>(i.param) + "_" + std::get<1>(i.param).name;
    std::replace(s.begin(), s.end(), '-', '_');
    return s;
}

class BackendOps : public ::testing::TestWithParam<Param> {};
class BackendOpsCuda : public ::testing::TestWithParam<Param> {};

TEST_P(BackendOps, MatchesReference) { run_case(GetParam()); }
TEST_P(BackendOpsCuda, MatchesReference) { run_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps,
                         ::testing::Combine(::testing::ValuesIn(backend_names(false)), ::testing::ValuesIn(all_cases())),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Device, BackendOpsCuda,
                         ::testing::Combine(::testing::ValuesIn(backend_names(true)), ::testing::ValuesIn(all_cases())),
                         param_name);

// Every back end the table names is either run or skipped with its reason.
TEST(BackendEntries, NameEveryBackEndAndSayWhyOneIsMissing) {
    bool cpu = false;
    for (const BackendEntry& e : entries()) {
        EXPECT_TRUE(e.make != nullptr || !e.unavailable.empty()) << e.name;
        cpu = cpu || (e.name.rfind("cpu-", 0) == 0 && e.unavailable.empty());
        std::printf("[ info ] back end %-18s %s\n", e.name.c_str(), e.unavailable.empty() ? "runs" : e.unavailable.c_str());
    }
    EXPECT_TRUE(cpu) << "no CPU back end";
}

}  // namespace
}  // namespace tinyloop
