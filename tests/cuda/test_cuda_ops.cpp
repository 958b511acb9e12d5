// What only the CUDA back end has, against the CPU reference: the fused RoPE + cache-write op the
// device session uses, cuBLAS gemm for large prefills, the lens on the device, out-of-memory as
// an error and graph replay. Every op of the back-end interface (backend.h) is in the op table,
// tests/kernels/test_backend_ops.cpp, which runs it on every back end, CUDA included.
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
