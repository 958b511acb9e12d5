// What only the CUDA back end has, against the CPU reference: the fused RoPE + cache-write op the
// device session uses, cuBLAS gemm for large prefills, the lens on the device, out-of-memory as
// an error and graph replay. Every op of the back-end interface (backend.h) is in the op table,
// tests/kernels/test_backend_ops.cpp, which runs it on every back end, CUDA included.
// The fast decode step's kernels (decode_fast.cu, suite CudaFastOps) against the reference ops
// they replace: the same bits for the fused products and q/k/v + RoPE + KV store, a rounding
// bound for the split attention, with and without programmatic dependent launch.
//
// Without a usable device every test reports "skipped: no CUDA device (<reason>)" and CTest
// counts it as skipped (tests/cuda/cuda.cmake). TL_TEST_SEED=<n> replays one run.
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

#include "cuda/device_probe.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_helpers.h"
#include "kernels/kernels.h"
#include "scoring/lens.h"
#include "decode/sampling.h"
#include "forward/kv_cache.h"
#include "kernels/op_test_util.h"

namespace tinyloop::kern {
namespace {

namespace kc = tinyloop::kern::cuda;
using namespace tinyloop::kern::testing;

const kc::DeviceProbe& probe() { return tltest::device_probe(); }

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

// A random weight matrix (op_test_util.h) and its device copy.
struct DevWeights {
    testing::Weights w;
    WeightView host, dev;
    kc::DeviceBuffer d_data, d_scales, d_zeros;
    DevWeights(WType t, int rows, int cols, int gs, Rng& rng) : w(t, rows, cols, gs, rng) {
        host = dev = w.view();
        d_data = up(w.data);
        dev.data = static_cast<const uint8_t*>(d_data.get());
        if (!w.scales.empty()) {
            d_scales = up(w.scales);
            d_zeros = up(w.zeros);
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
    const WType types[] = {WType::F32, WType::F16, WType::BF16, WType::Q8, WType::Q4, WType::Q2};

    // q/k/v in one launch, and RoPE + the cache writes in one launch: the unfused ops' bits
    for (WType t : {WType::F32, WType::BF16, WType::Q8, WType::Q2}) {
        v.push_back({std::string("matmul3_rope_store_") + type_name(t), [t](Rng& rng) {
                         const int d = 96, heads = 6, kv_heads = 2, hd = 16, cap = 40;
                         DevWeights A(t, heads * hd, d, 32, rng), B(t, kv_heads * hd, d, 32, rng), C(t, kv_heads * hd, d, 32, rng);
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
                             auto kc2 = poisoned(cache * 4), vc2 = poisoned(cache * 4);
                             // rope_store reads the host's cos/sin table: the CPU's rope_ref bit for bit
                             std::vector<float> q1 = down<float>(qa, nq), k1 = down<float>(ka, nk);
                             const std::vector<float> v1 = down<float>(va, nk);
                             tinyloop::kern::rope_ref(q1.data(), n, heads, hd, pos.data(), 10000.0f);
                             tinyloop::kern::rope_ref(k1.data(), n, kv_heads, hd, pos.data(), 10000.0f);
                             auto table = up(kc::rope_table(3001, hd, 10000.0f));
                             kc::rope_store(ctx(), qb.f32(), kb.f32(), vb.f32(), n, heads, kv_heads, hd, dp.i32(), table.f32(),
                                            kc2.f32(), vc2.f32(), dr.i32());
                             EXPECT_EQ(down<float>(qb, nq), q1) << "rope_store q";
                             const auto c2 = down<float>(kc2, cache), w2 = down<float>(vc2, cache);
                             const size_t kvr = size_t(kv_heads) * hd;
                             for (int i = 0; i < n; ++i) {
                                 EXPECT_EQ(0, std::memcmp(c2.data() + rows[i] * kvr, k1.data() + i * kvr, kvr * 4)) << "rope_store k row " << i;
                                 EXPECT_EQ(0, std::memcmp(w2.data() + rows[i] * kvr, v1.data() + i * kvr, kvr * 4)) << "rope_store v row " << i;
                             }
                         }
                     }});
    }

    // the INT8 cache's store: RoPE as rope_store, then each (row, kv head) quantized; the CPU's
    // rope_ref and quantize_kv_row bit for bit (codes and scales), and with no table (the state
    // propagation's rows, already rotated) the rows as given
    for (const bool rotate : {true, false}) {
        v.push_back({std::string("rope_store_int8") + (rotate ? "" : "_no_rotation"), [rotate](Rng& rng) {
                         const int heads = 6, kv_heads = 2, hd = 64, cap = 40, n = 5;
                         const size_t nq = size_t(n) * heads * hd, nk = size_t(n) * kv_heads * hd, kvr = size_t(kv_heads) * hd;
                         auto q = rng.normals(nq), k = rng.normals(nk, 3.0f), val = rng.normals(nk);
                         for (int j = 0; j < hd; ++j) k[kvr + j] = 0.0f;  // a zero head: scale 0, codes 0
                         std::vector<int> pos(n), rows(n);
                         for (int i = 0; i < n; ++i) {
                             pos[i] = rng.integer(0, 3000);
                             rows[i] = (7 * i + 3) % cap;
                         }
                         auto dq = up(q), dk = up(k), dv = up(val), dp = up(pos), dr = up(rows);
                         auto table = up(kc::rope_table(3001, hd, 10000.0f));
                         auto kq = poisoned(size_t(cap) * kvr), vq = poisoned(size_t(cap) * kvr);
                         auto ks = poisoned(size_t(cap) * kv_heads * 4), vs = poisoned(size_t(cap) * kv_heads * 4);
                         kc::rope_store_int8(ctx(), rotate ? dq.f32() : nullptr, dk.f32(), dv.f32(), n, rotate ? heads : 0,
                                             kv_heads, hd, dp.i32(), rotate ? table.f32() : nullptr,
                                             static_cast<int8_t*>(kq.get()), static_cast<int8_t*>(vq.get()), ks.f32(),
                                             vs.f32(), dr.i32());
                         std::vector<float> q1 = q, k1 = k;
                         if (rotate) {
                             tinyloop::kern::rope_ref(q1.data(), n, heads, hd, pos.data(), 10000.0f);
                             tinyloop::kern::rope_ref(k1.data(), n, kv_heads, hd, pos.data(), 10000.0f);
                             EXPECT_EQ(down<float>(dq, nq), q1) << "q rotated";
                         }
                         const auto gkq = down<int8_t>(kq, size_t(cap) * kvr), gvq = down<int8_t>(vq, size_t(cap) * kvr);
                         const auto gks = down<float>(ks, size_t(cap) * kv_heads), gvs = down<float>(vs, size_t(cap) * kv_heads);
                         for (int i = 0; i < n; ++i) {
                             std::vector<int8_t> wk(kvr), wv(kvr);
                             std::vector<float> wks(kv_heads), wvs(kv_heads);
                             tinyloop::kern::quantize_kv_row(k1.data() + i * kvr, kv_heads, hd, wk.data(), wks.data());
                             tinyloop::kern::quantize_kv_row(val.data() + i * kvr, kv_heads, hd, wv.data(), wvs.data());
                             const size_t r = size_t(rows[i]);
                             EXPECT_EQ(std::vector<int8_t>(gkq.begin() + r * kvr, gkq.begin() + (r + 1) * kvr), wk) << "k codes, row " << i;
                             EXPECT_EQ(std::vector<int8_t>(gvq.begin() + r * kvr, gvq.begin() + (r + 1) * kvr), wv) << "v codes, row " << i;
                             EXPECT_EQ(std::vector<float>(gks.begin() + r * kv_heads, gks.begin() + (r + 1) * kv_heads), wks) << "k scales, row " << i;
                             EXPECT_EQ(std::vector<float>(gvs.begin() + r * kv_heads, gvs.begin() + (r + 1) * kv_heads), wvs) << "v scales, row " << i;
                         }
                     }});
    }

    // The batch engine's paged caches: two sequences' pages interleaved in one pool (as the engine
    // takes them, step by step); paged_rows gives KVCache::phys for every store row and list entry
    // at every layer, and attention over those lists (empty ranges) gives the bits of attention
    // over the same rows as each sequence's contiguous range, a window included.
    v.push_back({"paged_rows_attention", [](Rng& rng) {
                     tinyloop::HParams hp;
                     hp.n_kv_heads = 2;
                     hp.head_dim = 32;
                     const int heads = 4, layers = 3, cap = 30, ps = 4, kvr = hp.n_kv_heads * hp.head_dim;
                     tinyloop::KVPagePool pool;
                     pool.allocate(hp, tinyloop::KVCacheType::F32, 64, ps, /*host=*/false);
                     tinyloop::KVCache a, b;
                     pool.attach(a, layers, cap);
                     pool.attach(b, layers, cap);
                     for (int end = ps; end <= cap + ps; end += ps) {
                         pool.ensure(a, std::min(end, cap));
                         pool.ensure(b, std::min(end, cap));
                     }
                     struct Row { const tinyloop::KVCache* kv; int pos, window; };
                     const std::vector<Row> rows = {{&a, 5, 0}, {&a, 17, 0}, {&a, 29, 0}, {&b, 12, 8}, {&b, 20, 8}};
                     const int n = int(rows.size());
                     std::vector<int> tables(a.pages), table_at, blocks, pos, begin, off{0};
                     tables.insert(tables.end(), b.pages.begin(), b.pages.end());
                     for (const Row& r : rows) {
                         table_at.push_back(r.kv == &a ? 0 : int(a.pages.size()));
                         blocks.push_back(r.kv->blocks);
                         pos.push_back(r.pos);
                         begin.push_back(r.window > 0 ? std::max(0, r.pos + 1 - r.window) : 0);
                         off.push_back(off.back() + r.pos + 1 - begin.back());
                     }
                     auto dt = up(tables), dat = up(table_at), db = up(blocks), dp = up(pos), dbg = up(begin), doff = up(off);
                     auto ddst = poisoned(size_t(n) * 4), dlist = poisoned(size_t(off.back()) * 4);
                     const size_t pool_rows = pool.storage.rows;
                     const auto K = rng.normals(pool_rows * kvr), V = rng.normals(pool_rows * kvr);
                     auto dK = up(K), dV = up(V);
                     const auto q = rng.normals(size_t(n) * heads * hp.head_dim);
                     auto dq = up(q);
                     for (int layer = 0; layer < layers; ++layer) {
                         kc::paged_rows(ctx(), dt.i32(), dat.i32(), db.i32(), ps, layer, dp.i32(), dbg.i32(), doff.i32(), n,
                                        ddst.i32(), dlist.i32());
                         const auto dst = down<int>(ddst, size_t(n)), list = down<int>(dlist, size_t(off.back()));
                         for (int t = 0; t < n; ++t) {
                             const tinyloop::KVCache& kv = *rows[t].kv;
                             EXPECT_EQ(dst[t], int(kv.phys(layer, pos[t]))) << "layer " << layer << " row " << t;
                             for (int i = 0; i < off[t + 1] - off[t]; ++i)
                                 ASSERT_EQ(list[size_t(off[t] + i)], int(kv.phys(layer, begin[t] + i)))
                                     << "layer " << layer << " row " << t << " entry " << i;
                         }
                         // attention over the lists (one call, both sequences) against each row's range over
                         // a contiguous copy of its own sequence's rows
                         const std::vector<int> zeros(size_t(n), 0);
                         auto dz = up(zeros);
                         const size_t H = size_t(heads) * hp.head_dim;
                         auto out_list = poisoned(size_t(n) * H * 4);
                         const tinyloop::kern::AttentionArgs at{.q = dq.f32(), .n_tok = n, .n_heads = heads,
                                                                .n_kv_heads = hp.n_kv_heads, .head_dim = hp.head_dim,
                                                                .k = dK.f32(), .v = dV.f32(), .kv_stride = kvr,
                                                                .kv_begin = dz.i32(), .kv_end = dz.i32(),
                                                                .out = out_list.f32(), .extra_rows = dlist.i32(),
                                                                .extra_offsets = doff.i32()};
                         kc::attention(ctx(), at);
                         const auto got = down<float>(out_list, size_t(n) * H);
                         for (int t = 0; t < n; ++t) {
                             const tinyloop::KVCache& kv = *rows[t].kv;
                             std::vector<float> ck(size_t(cap) * kvr), cv(size_t(cap) * kvr);
                             for (int p = 0; p <= pos[t]; ++p) {
                                 const size_t r = kv.phys(layer, p);
                                 std::copy_n(K.begin() + std::ptrdiff_t(r * kvr), kvr, ck.begin() + std::ptrdiff_t(size_t(p) * kvr));
                                 std::copy_n(V.begin() + std::ptrdiff_t(r * kvr), kvr, cv.begin() + std::ptrdiff_t(size_t(p) * kvr));
                             }
                             auto dck = up(ck), dcv = up(cv);
                             const std::vector<int> b1{begin[t]}, e1{pos[t] + 1};
                             auto dbeg = up(b1), dend = up(e1);
                             const std::vector<float> q1(q.begin() + std::ptrdiff_t(size_t(t) * H), q.begin() + std::ptrdiff_t(size_t(t + 1) * H));
                             auto dq1 = up(q1);
                             auto out_range = poisoned(H * 4);
                             const tinyloop::kern::AttentionArgs ar{.q = dq1.f32(), .n_tok = 1, .n_heads = heads,
                                                                    .n_kv_heads = hp.n_kv_heads, .head_dim = hp.head_dim,
                                                                    .k = dck.f32(), .v = dcv.f32(), .kv_stride = kvr,
                                                                    .kv_begin = dbeg.i32(), .kv_end = dend.i32(),
                                                                    .out = out_range.f32()};
                             kc::attention(ctx(), ar);
                             EXPECT_EQ(0, std::memcmp(down<float>(out_range, H).data(), got.data() + size_t(t) * H, H * 4))
                                 << "layer " << layer << " row " << t << ": the list's attention is not the range's bits";
                         }
                     }
                 }});

    // gemm (cuBLAS) for prefill: f32 accumulate, and TF32 with its looser bound.
    for (WType t : types) {
        for (bool tf32 : {false, true}) {
            v.push_back({std::string("gemm_") + type_name(t) + (tf32 ? "_tf32" : ""), [t, tf32](Rng& rng) {
                             const int rows = 131, cols = 256, n = 77;
                             DevWeights W(t, rows, cols, 64, rng);
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

// ---- the fast decode step's kernels against the reference ops --------------------------------

bool pdl_here() { return ctx().compute_capability() >= 90; }

// rmsnorm then matmul / matmul(accumulate) / matmul_swiglu (the reference ops, separate
// launches) against fast_matmul / fast_matmul_swiglu with the norm folded in or not: the same
// bits, and the folded norm's row written as rmsnorm writes it.
TEST(CudaFastOps, FoldedProductsEqualTheReferenceOps) {
    TL_REQUIRE_DEVICE();
    Rng rng(41);
    struct Shape { WType t; int gs, rows, cols; };
    for (const Shape sh : {Shape{WType::F32, 32, 512, 512}, Shape{WType::Q8, 32, 1408, 512}, Shape{WType::Q4, 32, 512, 1408},
                           Shape{WType::Q4, 64, 4096, 512}, Shape{WType::BF16, 32, 77, 100}, Shape{WType::Q2, 32, 45, 96},
                           Shape{WType::F32, 32, 33, 17}}) {
        for (bool pdl : {false, true}) {
            if (pdl && !pdl_here()) continue;
            SCOPED_TRACE(std::string(type_name(sh.t)) + " " + std::to_string(sh.rows) + "x" + std::to_string(sh.cols) +
                         (pdl ? " pdl" : ""));
            DevWeights W(sh.t, sh.rows, sh.cols, sh.gs, rng), U(sh.t, sh.rows, sh.cols, sh.gs, rng);
            const auto x = rng.normals(sh.cols, 3.0f), g = rng.normals(sh.cols), y0 = rng.normals(sh.rows);
            auto dx = up(x), dg = up(g);
            auto a = poisoned(sh.cols * 4ul), y = poisoned(sh.rows * 4ul), acc = up(y0), sw = poisoned(sh.rows * 4ul);
            kc::rmsnorm(ctx(), dx.f32(), dg.f32(), 1, sh.cols, 1e-5f, a.f32());
            kc::matmul(ctx(), W.dev, a.f32(), 1, y.f32());
            kc::matmul(ctx(), W.dev, a.f32(), 1, acc.f32(), true);
            kc::matmul_swiglu(ctx(), W.dev, U.dev, a.f32(), 1, sw.f32());
            const auto a_ref = down<float>(a, sh.cols), y_ref = down<float>(y, sh.rows);
            const auto acc_ref = down<float>(acc, sh.rows), sw_ref = down<float>(sw, sh.rows);
            for (bool folded : {false, true}) {
                kc::FoldedNorm f;
                auto a2 = poisoned(sh.cols * 4ul);
                if (folded) f = kc::FoldedNorm{dg.f32(), 1e-5f, a2.f32()};
                const float* in = folded ? dx.f32() : a.f32();
                auto y2 = poisoned(sh.rows * 4ul), acc2 = up(y0), sw2 = poisoned(sh.rows * 4ul);
                kc::fast_matmul(ctx(), f, W.dev, in, y2.f32(), false, pdl);
                kc::fast_matmul(ctx(), f, W.dev, in, acc2.f32(), true, pdl);
                kc::fast_matmul_swiglu(ctx(), f, W.dev, U.dev, in, sw2.f32(), pdl);
                const char* how = folded ? "norm folded" : "plain";
                EXPECT_EQ(down<float>(y2, sh.rows), y_ref) << how << ": fast_matmul";
                EXPECT_EQ(down<float>(acc2, sh.rows), acc_ref) << how << ": fast_matmul accumulate";
                EXPECT_EQ(down<float>(sw2, sh.rows), sw_ref) << how << ": fast_matmul_swiglu";
                if (folded) {
                    EXPECT_EQ(down<float>(a2, sh.cols), a_ref) << "the folded norm's row";
                }
            }
        }
    }
}

// rmsnorm + matmul3 + rope_store against fast_qkv_rope_store: the same q, k, v and cache rows,
// bit for bit, for MHA (the d512 shape: 8 heads of 64) and GQA, f32 and the packed types.
TEST(CudaFastOps, QkvRopeStoreEqualsTheReferenceOps) {
    TL_REQUIRE_DEVICE();
    Rng rng(42);
    struct Shape { WType t; int d, heads, kv_heads, hd; };
    for (const Shape sh : {Shape{WType::F32, 512, 8, 8, 64}, Shape{WType::Q8, 512, 8, 8, 64}, Shape{WType::Q4, 512, 8, 8, 64},
                           Shape{WType::Q4, 96, 6, 2, 16}, Shape{WType::F16, 256, 2, 1, 128}, Shape{WType::Q2, 96, 3, 3, 32}}) {
        for (bool pdl : {false, true}) {
            if (pdl && !pdl_here()) continue;
            SCOPED_TRACE(std::string(type_name(sh.t)) + " d " + std::to_string(sh.d) + " heads " + std::to_string(sh.heads) +
                         "/" + std::to_string(sh.kv_heads) + " hd " + std::to_string(sh.hd) + (pdl ? " pdl" : ""));
            const int cap = 50, kvr = sh.kv_heads * sh.hd, nq = sh.heads * sh.hd;
            DevWeights A(sh.t, nq, sh.d, 32, rng), B(sh.t, kvr, sh.d, 32, rng), C(sh.t, kvr, sh.d, 32, rng);
            ASSERT_TRUE(kc::fast_qkv_fits(A.dev, B.dev, C.dev, sh.heads, sh.kv_heads, sh.hd));
            const auto x = rng.normals(sh.d, 3.0f), g = rng.normals(sh.d);
            const std::vector<int> pos = {rng.integer(0, 2999)}, row = {rng.integer(0, cap - 1)};
            auto dx = up(x), dg = up(g), dp = up(pos), dr = up(row);
            auto table = up(kc::rope_table(3000, sh.hd, 10000.0f));
            const size_t cache = size_t(cap) * kvr;
            // the reference: four launches
            auto a = poisoned(sh.d * 4ul), q = poisoned(nq * 4ul), k = poisoned(kvr * 4ul), v = poisoned(kvr * 4ul);
            auto kc1 = poisoned(cache * 4), vc1 = poisoned(cache * 4);
            kc::rmsnorm(ctx(), dx.f32(), dg.f32(), 1, sh.d, 1e-5f, a.f32());
            kc::matmul3(ctx(), A.dev, B.dev, C.dev, a.f32(), 1, q.f32(), k.f32(), v.f32());
            kc::rope_store(ctx(), q.f32(), k.f32(), v.f32(), 1, sh.heads, sh.kv_heads, sh.hd, dp.i32(), table.f32(), kc1.f32(),
                           vc1.f32(), dr.i32());
            // the fused launch
            auto a2 = poisoned(sh.d * 4ul), q2 = poisoned(nq * 4ul), k2 = poisoned(kvr * 4ul), v2 = poisoned(kvr * 4ul);
            auto kc2 = poisoned(cache * 4), vc2 = poisoned(cache * 4);
            kc::fast_qkv_rope_store(ctx(), kc::FoldedNorm{dg.f32(), 1e-5f, a2.f32()}, A.dev, B.dev, C.dev, dx.f32(), sh.heads,
                                    sh.kv_heads, sh.hd, dp.i32(), table.f32(), q2.f32(), k2.f32(), v2.f32(), kc2.f32(),
                                    vc2.f32(), dr.i32(), pdl);
            EXPECT_EQ(down<float>(q2, nq), down<float>(q, nq)) << "q";
            EXPECT_EQ(down<float>(k2, kvr), down<float>(k, kvr)) << "k";
            EXPECT_EQ(down<float>(v2, kvr), down<float>(v, kvr)) << "v";
            EXPECT_EQ(down<float>(a2, sh.d), down<float>(a, sh.d)) << "the folded norm's row";
            // whole caches: the row written, every other row untouched (still the poison's NaN bits)
            const auto k1h = down<float>(kc1, cache), k2h = down<float>(kc2, cache);
            const auto v1h = down<float>(vc1, cache), v2h = down<float>(vc2, cache);
            EXPECT_EQ(0, std::memcmp(k1h.data(), k2h.data(), cache * 4)) << "k cache";
            EXPECT_EQ(0, std::memcmp(v1h.data(), v2h.data(), cache * 4)) << "v cache";
        }
    }
}

// Flash-decoding attention against the reference attention kernel: within float rounding for
// contexts far longer than a split (2,048 rows over 16 splits), shorter than the number of
// splits, windows, GQA, tree extras and a query with no rows (zeros); a query alone gives its
// bits in the batch (batch invariance), at the default and extreme split counts.
TEST(CudaFastOps, SplitAttentionWithinRoundingOfTheReference) {
    TL_REQUIRE_DEVICE();
    Rng rng(43);
    struct Shape { int n_tok, heads, kv_heads, hd, ctx_len, window; bool tree; };
    for (const Shape c : {Shape{1, 8, 8, 64, 2048, 0, false}, Shape{1, 8, 8, 64, 3, 0, false}, Shape{1, 6, 2, 128, 700, 0, false},
                          Shape{1, 4, 4, 256, 300, 64, false}, Shape{5, 8, 8, 64, 200, 0, false},
                          Shape{4, 4, 2, 32, 50, 0, true}, Shape{1, 3, 1, 18, 33, 0, false}}) {
        const int kv_row = c.kv_heads * c.hd, cap = c.ctx_len + c.n_tok + 4;
        const auto k = rng.normals(size_t(cap) * kv_row, 2.0f), vv = rng.normals(size_t(cap) * kv_row);
        const auto q = rng.normals(size_t(c.n_tok) * c.heads * c.hd, 2.0f);
        std::vector<int> b(c.n_tok), e(c.n_tok), extra, offs;
        for (int t = 0; t < c.n_tok; ++t) {
            e[t] = c.ctx_len + t + 1;
            b[t] = c.window ? std::max(0, e[t] - c.window) : 0;
        }
        if (c.tree) {
            offs.push_back(0);
            for (int t = 0; t < c.n_tok; ++t) {
                e[t] = c.ctx_len;
                for (int r = c.ctx_len; r < c.ctx_len + c.n_tok; ++r)
                    if (r == c.ctx_len + t || rng.integer(0, 1)) extra.push_back(r);
                offs.push_back(int(extra.size()));
            }
        }
        if (c.n_tok == 5) b[2] = e[2] = 7;  // a query with no rows
        auto dq = up(q), dk = up(k), dv = up(vv), db = up(b), de = up(e);
        kc::DeviceBuffer dextra, doffs;
        AttentionArgs a;
        a.q = dq.f32();
        a.n_tok = c.n_tok;
        a.n_heads = c.heads;
        a.n_kv_heads = c.kv_heads;
        a.head_dim = c.hd;
        a.k = dk.f32();
        a.v = dv.f32();
        a.kv_stride = kv_row;
        a.kv_begin = db.i32();
        a.kv_end = de.i32();
        if (c.tree) {
            dextra = up(extra);
            doffs = up(offs);
            a.extra_rows = dextra.i32();
            a.extra_offsets = doffs.i32();
        }
        const size_t out_n = size_t(c.n_tok) * c.heads * c.hd, row = size_t(c.heads) * c.hd;
        auto ref = poisoned(out_n * 4);
        a.out = ref.f32();
        kc::attention(ctx(), a);
        const auto want = down<float>(ref, out_n);
        for (int splits : {kc::attention_splits(c.heads), 1, kc::kAttentionMaxSplits}) {
            for (bool pdl : {false, true}) {
                if (pdl && !pdl_here()) continue;
                SCOPED_TRACE("ctx " + std::to_string(c.ctx_len) + " heads " + std::to_string(c.heads) + "/" +
                             std::to_string(c.kv_heads) + " hd " + std::to_string(c.hd) + " n " + std::to_string(c.n_tok) +
                             (c.tree ? " tree" : "") + " splits " + std::to_string(splits) + (pdl ? " pdl" : ""));
                const size_t pf = kc::attention_split_floats(c.n_tok, c.heads, c.hd, splits);
                kc::DeviceBuffer partial = poisoned(pf * 4);
                auto out = poisoned(out_n * 4);
                AttentionArgs s = a;
                s.out = out.f32();
                kc::attention_split(ctx(), s, splits, partial.f32(), pf, pdl);
                const auto got = down<float>(out, out_n);
                expect_close(got, want, 2e-5, "split attention");
                if (c.n_tok == 5) {
                    for (size_t i = 2 * row; i < 3 * row; ++i) ASSERT_EQ(got[i], 0.0f) << "the query with no rows";
                }
                for (int t = 0; t < c.n_tok; ++t) {  // each query alone: its bits in the batch
                    AttentionArgs one = s;
                    one.n_tok = 1;
                    one.q = s.q + t * row;
                    one.kv_begin = s.kv_begin + t;
                    one.kv_end = s.kv_end + t;
                    if (c.tree) one.extra_offsets = s.extra_offsets + t;
                    auto o1 = poisoned(row * 4);
                    one.out = o1.f32();
                    kc::attention_split(ctx(), one, splits, partial.f32(), pf, pdl);
                    ASSERT_EQ(0, std::memcmp(down<float>(o1, row).data(), got.data() + t * row, row * 4)) << "query " << t << " alone";
                }
            }
        }
        // a partial buffer too small is refused, naming the sizes
        EXPECT_THROW(kc::attention_split(ctx(), a, kc::attention_splits(c.heads), ref.f32(), 1, false), kc::CudaError);
    }
}

// The combine folded into the product reading the attention (the fast step's wo + residual):
// the bits of attention_split then fast_matmul (accumulate and store), and the attention row
// written as the combine launch writes it; at the d512 shape (8 heads of 64, 16 splits) and a
// GQA one, f32 and q4.
TEST(CudaFastOps, CombineFoldedIntoTheProductEqualsTheSeparateLaunches) {
    TL_REQUIRE_DEVICE();
    Rng rng(44);
    struct Shape { WType t; int heads, kv_heads, hd, ctx_len, d; };
    for (const Shape c : {Shape{WType::F32, 8, 8, 64, 900, 512}, Shape{WType::Q4, 8, 8, 64, 40, 512},
                          Shape{WType::Q8, 6, 2, 32, 300, 160}}) {
        for (bool pdl : {false, true}) {
            if (pdl && !pdl_here()) continue;
            SCOPED_TRACE(std::string(type_name(c.t)) + " heads " + std::to_string(c.heads) + " ctx " +
                         std::to_string(c.ctx_len) + (pdl ? " pdl" : ""));
            const int kv_row = c.kv_heads * c.hd, H = c.heads * c.hd, splits = kc::attention_splits(c.heads);
            const auto k = rng.normals(size_t(c.ctx_len) * kv_row, 2.0f), vv = rng.normals(size_t(c.ctx_len) * kv_row);
            const auto q = rng.normals(H, 2.0f), y0 = rng.normals(c.d);
            DevWeights Wo(c.t, c.d, H, 32, rng);
            const std::vector<int> b = {0}, e = {c.ctx_len};
            auto dq = up(q), dk = up(k), dv = up(vv), db = up(b), de = up(e);
            AttentionArgs a;
            a.q = dq.f32();
            a.n_tok = 1;
            a.n_heads = c.heads;
            a.n_kv_heads = c.kv_heads;
            a.head_dim = c.hd;
            a.k = dk.f32();
            a.v = dv.f32();
            a.kv_stride = kv_row;
            a.kv_begin = db.i32();
            a.kv_end = de.i32();
            const size_t pf = kc::attention_split_floats(1, c.heads, c.hd, splits);
            auto partial = poisoned(pf * 4), att = poisoned(H * 4ul), y = up(y0), ys = poisoned(c.d * 4ul);
            a.out = att.f32();
            kc::attention_split(ctx(), a, splits, partial.f32(), pf, pdl);
            kc::fast_matmul(ctx(), kc::FoldedNorm{}, Wo.dev, att.f32(), y.f32(), true, pdl);
            kc::fast_matmul(ctx(), kc::FoldedNorm{}, Wo.dev, att.f32(), ys.f32(), false, pdl);
            const auto att_ref = down<float>(att, H), y_ref = down<float>(y, c.d), ys_ref = down<float>(ys, c.d);
            auto att2 = poisoned(H * 4ul), y2 = up(y0), ys2 = poisoned(c.d * 4ul);
            const kc::SplitPartials p = kc::attention_split_partials(ctx(), a, splits, partial.f32(), pf, pdl);
            kc::fast_matmul_combined(ctx(), p, att2.f32(), Wo.dev, y2.f32(), true, pdl);
            kc::fast_matmul_combined(ctx(), p, nullptr, Wo.dev, ys2.f32(), false, pdl);
            EXPECT_EQ(down<float>(y2, c.d), y_ref) << "combine + wo + residual";
            EXPECT_EQ(down<float>(ys2, c.d), ys_ref) << "combine + wo";
            EXPECT_EQ(down<float>(att2, H), att_ref) << "the combined attention row";
        }
    }
}

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
