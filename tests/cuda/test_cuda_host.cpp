// What of the CUDA back end can be checked without a GPU, checked on the host in every build:
//   * the pure device helpers (kernels/cuda/device_helpers.h, __host__ __device__) against the
//     CPU kernels: weight_at / weight_pack8 against kern::dequant_row for every weight type, the
//     argmax order `better` against the engine's argmax, rope_cos_sin against kern::rope_ref;
//   * the capture rules (kernels/cuda/capture_rules.h, enforced by the real Context) on a strict
//     fake context that records "kernels" as host closures and replays the recording;
//   * the VRAM accounting arithmetic (kernels/cuda/byte_share.h): a share that grows after it
//     was counted gives back exactly what it holds, and the counter never wraps;
//   * the greedy agreement rule the device parity test uses (tests/cuda/greedy_agreement.h), on
//     the CPU's own logits of the bundled model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/bench_shape.h"
#include "cuda/greedy_agreement.h"
#include "decode/sampling.h"
#include "forward/cuda_fast_path.h"
#include "forward/kv_cache.h"
#include "kernels/cuda/byte_share.h"
#include "kernels/cuda/capture_rules.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_helpers.h"
#include "kernels/kernels.h"
#include "test_util.h"
#include "tinyloop/tinyloop.h"

namespace {

namespace kc = tinyloop::kern::cuda;
using tinyloop::kern::WeightView;
using tinyloop::kern::WType;

// ---- weight_at / weight_pack8 against dequant_row -------------------------------------------

struct StoredMatrix {
    std::vector<uint8_t> data;
    std::vector<uint16_t> scales, zeros;
    WeightView view;
};

// Random bytes in the layout of `t` (FORMAT.md §2), scales and zeros as finite f16 values.
StoredMatrix random_matrix(WType t, int rows, int cols, int group, uint32_t seed) {
    std::mt19937 rng(seed);
    StoredMatrix m;
    size_t bytes = 0;
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> f(size_t(rows) * cols);
    for (float& x : f) x = u(rng);
    switch (t) {
        case WType::F32: bytes = f.size() * 4; break;
        case WType::F16:
        case WType::BF16: bytes = f.size() * 2; break;
        case WType::Q8: bytes = f.size(); break;
        case WType::Q4: bytes = f.size() / 2; break;
        default: bytes = f.size() / 4; break;
    }
    m.data.resize(bytes);
    if (t == WType::F32) {
        std::memcpy(m.data.data(), f.data(), bytes);
    } else if (t == WType::F16 || t == WType::BF16) {
        for (size_t i = 0; i < f.size(); ++i) {
            const uint16_t h = t == WType::F16 ? tinyloop::kern::f32_to_f16(f[i]) : tinyloop::kern::f32_to_bf16(f[i]);
            std::memcpy(m.data.data() + 2 * i, &h, 2);
        }
    } else {
        for (uint8_t& b : m.data) b = uint8_t(rng());
        const size_t ng = size_t(rows) * (cols / group);
        for (size_t g = 0; g < ng; ++g) {
            m.scales.push_back(tinyloop::kern::f32_to_f16(0.01f + 0.1f * float(rng() % 100) / 100));
            m.zeros.push_back(tinyloop::kern::f32_to_f16(float(rng() % 9)));
        }
    }
    m.view.type = t;
    m.view.rows = rows;
    m.view.cols = cols;
    m.view.group_size = wtype_is_float(t) ? 0 : group;
    m.view.data = m.data.data();
    m.view.scales = m.scales.empty() ? nullptr : m.scales.data();
    m.view.zeros = m.zeros.empty() ? nullptr : m.zeros.data();
    return m;
}

TEST(CudaHostHelpers, WeightReadsEqualTheCpuDequantisation) {
    for (WType t : {WType::F32, WType::F16, WType::BF16, WType::Q8, WType::Q4, WType::Q2}) {
        SCOPED_TRACE("weight type " + std::to_string(int(t)));
        const int rows = 5, cols = 96, group = 32;
        const StoredMatrix m = random_matrix(t, rows, cols, group, 17 + int(t));
        ASSERT_TRUE(kc::pack8_ok(m.view));
        std::vector<float> want(cols);
        for (int r = 0; r < rows; ++r) {
            tinyloop::kern::dequant_row(m.view, r, want.data());
            for (int c = 0; c < cols; ++c)
                ASSERT_EQ(kc::weight_at(m.view, r, c), want[c]) << "weight_at row " << r << " col " << c;
            for (int c0 = 0; c0 < cols; c0 += 8) {
                float w[8];
                kc::weight_pack8(m.view, r, c0, w);
                for (int j = 0; j < 8; ++j) ASSERT_EQ(w[j], want[c0 + j]) << "weight_pack8 row " << r << " col " << c0 + j;
            }
        }
    }
    // pack8 is refused where eight columns would straddle a group or the rows misalign
    StoredMatrix odd = random_matrix(WType::Q4, 2, 96, 32, 3);
    odd.view.group_size = 12;
    EXPECT_FALSE(kc::pack8_ok(odd.view));
    odd.view.group_size = 32;
    odd.view.cols = 44;
    EXPECT_FALSE(kc::pack8_ok(odd.view));
}

// The device's argmax folds `better` over each thread's strided slice, then across the block
// in a butterfly: any order of folding must give the engine's argmax (lowest index of the
// maximum, NaN skipped, all NaN: 0), ids >= n_valid read as -inf.
int fold_better(const std::vector<float>& z, int n_valid, const std::vector<int>& order) {
    kc::Best b{-INFINITY, INT_MAX};
    for (int i : order) {
        const float v = i < n_valid ? z[i] : -INFINITY;
        if (kc::better(v, i, b)) b = {v, i};
    }
    return b.i == INT_MAX ? 0 : b.i;
}

TEST(CudaHostHelpers, ArgmaxOrderEqualsTheEngineArgmaxInAnyFoldOrder) {
    std::mt19937 rng(5);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int trial = 0; trial < 200; ++trial) {
        const int V = 1 + int(rng() % 300);
        std::vector<float> z(V);
        for (float& x : z) x = float(int(rng() % 7)) - 3.0f;  // many ties
        if (trial % 5 == 1) z[rng() % V] = nan;
        if (trial % 7 == 2) std::fill(z.begin(), z.end(), nan);
        if (trial % 11 == 3) z[rng() % V] = INFINITY;
        const int n_valid = trial % 3 == 0 ? V : 1 + int(rng() % V);
        std::vector<float> masked(z);
        for (int i = n_valid; i < V; ++i) masked[i] = -INFINITY;
        const int want = tinyloop::argmax(masked.data(), V);
        std::vector<int> order(V);
        for (int i = 0; i < V; ++i) order[i] = i;
        EXPECT_EQ(fold_better(z, n_valid, order), want) << "trial " << trial << " forward";
        std::reverse(order.begin(), order.end());
        EXPECT_EQ(fold_better(z, n_valid, order), want) << "trial " << trial << " reverse";
        std::shuffle(order.begin(), order.end(), rng);
        EXPECT_EQ(fold_better(z, n_valid, order), want) << "trial " << trial << " shuffled";
    }
}

TEST(CudaHostHelpers, RopeCosSinEqualTheCpuRope) {
    for (int hd : {32, 64, 128}) {
        for (float theta : {10000.0f, 500000.0f}) {
            const int half = hd / 2;
            for (int p : {0, 1, 7, 100, 1023, 4095, 65535}) {
                // rope_ref on unit pairs (1, 0) leaves (c, s) in (x_i, x_{i+half})
                std::vector<float> x(hd, 0.0f);
                for (int i = 0; i < half; ++i) x[i] = 1.0f;
                tinyloop::kern::rope_ref(x.data(), 1, 1, hd, &p, theta);
                for (int i = 0; i < half; ++i) {
                    float c, s;
                    kc::rope_cos_sin(p, i, hd, theta, &c, &s);
                    ASSERT_EQ(c, x[i]) << "cos p " << p << " i " << i << " hd " << hd << " theta " << theta;
                    ASSERT_EQ(s, x[i + half]) << "sin p " << p << " i " << i << " hd " << hd << " theta " << theta;
                }
            }
        }
    }
}

// ---- the INT8 KV cache: the device's codes and scales against the CPU cache's ----------------

// rope_store_int8's per (row, kv head) quantization, written with the helpers as the kernel uses
// them (the head's amax, then scale, inverse and codes), against kern::quantize_kv_row: the same
// codes and scales bit for bit, ties at half a step (round half to even) and zero heads included.
TEST(CudaHostHelpers, KvInt8CodesAndScalesEqualTheCpuCache) {
    std::mt19937 g(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int hd : {16, 64, 128}) {
        for (int heads : {1, 4}) {
            for (int kind = 0; kind < 5; ++kind) {
                std::vector<float> x(size_t(heads) * hd);
                for (size_t i = 0; i < x.size(); ++i) {
                    switch (kind) {
                        case 0: x[i] = normal(g); break;                              // typical
                        case 1: x[i] = normal(g) * 1e-30f; break;                     // tiny
                        case 2: x[i] = float(int(g() % 255) - 127) * 0.5f + 0.25f; break;  // many half steps
                        case 3: x[i] = (i % hd == 0) ? 127.0f : float(int(g() % 254) - 127) + 0.5f; break;  // ties at s = 1
                        default: x[i] = (i / hd) % 2 ? 0.0f : normal(g) * 40.0f; break;  // zero heads
                    }
                }
                std::vector<int8_t> want(x.size());
                std::vector<float> want_s(static_cast<size_t>(heads));
                tinyloop::kern::quantize_kv_row(x.data(), heads, hd, want.data(), want_s.data());
                for (int h = 0; h < heads; ++h) {
                    const float* xh = x.data() + size_t(h) * hd;
                    float amax = 0.0f;
                    for (int j = 0; j < hd; ++j) amax = std::fmax(amax, std::fabs(xh[j]));
                    const float sc = kc::kv_int8_scale(amax), inv = kc::kv_int8_inverse(sc);
                    ASSERT_EQ(sc, want_s[size_t(h)]) << "hd " << hd << " kind " << kind << " head " << h;
                    for (int j = 0; j < hd; ++j)
                        ASSERT_EQ(kc::kv_int8_code(xh[j], inv), want[size_t(h) * hd + j])
                            << "hd " << hd << " kind " << kind << " head " << h << " x " << xh[j];
                }
            }
        }
    }
}

// ---- the batch engine's paged caches -----------------------------------------------------------

// paged_row (what kern::cuda::paged_rows computes per row and list entry) is KVCache::phys for
// every layer and position of caches whose pages a pool handed out interleaved, a released
// cache's pages taken again by a third included; and a pool without host rows (a device batch's
// bookkeeping) describes the storage allocate would have made, holding none of it.
TEST(CudaHostHelpers, PagedRowsAreTheCachesPhysicalRows) {
    tinyloop::HParams hp;
    hp.n_kv_heads = 2;
    hp.head_dim = 8;
    for (const auto type : {tinyloop::KVCacheType::F32, tinyloop::KVCacheType::Int8}) {
        tinyloop::KVPagePool host, book;
        host.allocate(hp, type, 300, 3);
        book.allocate(hp, type, 300, 3, /*host=*/false);
        EXPECT_TRUE(host.host_storage);
        EXPECT_FALSE(book.host_storage);
        EXPECT_EQ(book.storage.bytes(), host.storage.bytes());
        EXPECT_EQ(book.storage.rows, host.storage.rows);
        EXPECT_TRUE(book.storage.k.empty() && book.storage.kq.empty() && book.storage.ks.empty());
        EXPECT_EQ(book.page_bytes(), host.page_bytes());
    }
    tinyloop::KVPagePool pool;
    pool.allocate(hp, tinyloop::KVCacheType::F32, 300, 3, /*host=*/false);
    tinyloop::KVCache a, b, c;
    pool.attach(a, 5, 40);
    pool.attach(b, 5, 17);
    for (int end = 1; end <= 40; end += 2) {
        pool.ensure(a, end);
        pool.ensure(b, std::min(end, 17));
    }
    pool.release(b);
    pool.attach(c, 3, 25);
    pool.ensure(c, 25);
    int checked = 0;
    for (const tinyloop::KVCache* kv : {&a, &c}) {
        for (int layer = 0; layer < kv->n_layers; ++layer)
            for (int p = 0; p < kv->capacity; ++p, ++checked)
                ASSERT_EQ(kc::paged_row(kv->pages.data(), kv->blocks, kv->page_size, layer, p), int(kv->phys(layer, p)))
                    << "layer " << layer << " position " << p;
    }
    EXPECT_EQ(checked, 5 * 40 + 3 * 25);
}

// ---- flash-decoding: split ranges and the combine against the CPU's attention --------------

TEST(CudaHostHelpers, SplitRangesCoverTheRowListOnceInOrder) {
    for (int S : {1, 3, 16, 64})
        for (int n : {0, 1, 2, 5, 15, 16, 17, 127, 128, 129, 2048, 100003}) {
            int next = 0;
            for (int s = 0; s < S; ++s) {
                int b, e;
                kc::split_range(n, S, s, &b, &e);
                ASSERT_EQ(b, next) << "n " << n << " S " << S << " split " << s;
                ASSERT_LE(b, e);
                ASSERT_LE(e - b, (n + S - 1) / S) << "a split longer than ceil(n / S)";
                next = e;
            }
            ASSERT_EQ(next, n) << "n " << n << " S " << S << ": the splits do not end at the list's end";
        }
}

// The device's split attention, step by step on the host: each split's partial softmax state
// (max, sum of exponentials, weighted values) over its piece of each query's row list, then
// attn_combine per output dimension; against kern::attention_ref on the same rows (GQA, ranges
// shorter than the number of splits, empty queries, tree extras, a 2,000-row context).
std::vector<float> split_attention_on_host(const tinyloop::kern::AttentionArgs& a, int S) {
    const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> out(size_t(a.n_tok) * a.n_heads * hd);
    for (int t = 0; t < a.n_tok; ++t) {
        std::vector<int> list;
        for (int p = a.kv_begin[t]; p < a.kv_end[t]; ++p) list.push_back(p);
        if (a.extra_offsets)
            for (int i = a.extra_offsets[t]; i < a.extra_offsets[t + 1]; ++i) list.push_back(a.extra_rows[i]);
        const int n = static_cast<int>(list.size());
        for (int h = 0; h < a.n_heads; ++h) {
            const float* q = a.q + (size_t(t) * a.n_heads + h) * hd;
            const size_t koff = size_t(h / group) * hd;
            std::vector<float> m(S, -INFINITY), l(S, 0.0f), acc(size_t(S) * hd, 0.0f);
            for (int s = 0; s < S; ++s) {
                int b, e;
                kc::split_range(n, S, s, &b, &e);
                for (int i = b; i < e; ++i) {
                    const float* k = a.k + size_t(list[i]) * a.kv_stride + koff;
                    float dot = 0.0f;
                    for (int d = 0; d < hd; ++d) dot += q[d] * k[d];
                    m[s] = std::max(m[s], dot * scale);
                }
                for (int i = b; i < e; ++i) {
                    const float* k = a.k + size_t(list[i]) * a.kv_stride + koff;
                    const float* v = a.v + size_t(list[i]) * a.kv_stride + koff;
                    float dot = 0.0f;
                    for (int d = 0; d < hd; ++d) dot += q[d] * k[d];
                    const float w = std::exp(dot * scale - m[s]);
                    l[s] += w;
                    for (int d = 0; d < hd; ++d) acc[size_t(s) * hd + d] += w * v[d];
                }
            }
            for (int d = 0; d < hd; ++d)
                out[(size_t(t) * a.n_heads + h) * hd + d] = kc::attn_combine(m.data(), l.data(), acc.data() + d, S, hd);
        }
    }
    return out;
}

TEST(CudaHostHelpers, SplitAttentionCombineEqualsTheCpuAttention) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    struct Shape { int n_heads, n_kv_heads, hd, rows; };
    for (const Shape sh : {Shape{8, 8, 64, 40}, Shape{4, 2, 32, 2000}, Shape{6, 3, 128, 9}}) {
        const int kv_row = sh.n_kv_heads * sh.hd;
        std::vector<float> k(size_t(sh.rows) * kv_row), v(k.size());
        for (float& x : k) x = 2.0f * u(rng);  // scores of a few units: the max shift matters
        for (float& x : v) x = u(rng);
        // queries: the whole cache, one row, a range shorter than the splits, none, a window
        const std::vector<int> kb = {0, 0, 3, 5, sh.rows > 20 ? sh.rows - 20 : 0};
        const std::vector<int> ke = {sh.rows, 1, 8, 5, sh.rows};
        const int n_tok = static_cast<int>(kb.size());
        std::vector<float> q(size_t(n_tok) * sh.n_heads * sh.hd);
        for (float& x : q) x = u(rng);
        // tree extras on the third query: two rows after its range
        std::vector<int> extra_rows = {sh.rows - 1, 0}, extra_offsets = {0, 0, 0, 2, 2, 2};
        for (bool tree : {false, true}) {
            tinyloop::kern::AttentionArgs a;
            a.q = q.data();
            a.n_tok = n_tok;
            a.n_heads = sh.n_heads;
            a.n_kv_heads = sh.n_kv_heads;
            a.head_dim = sh.hd;
            a.k = k.data();
            a.v = v.data();
            a.kv_stride = kv_row;
            a.kv_begin = kb.data();
            a.kv_end = ke.data();
            if (tree) {
                a.extra_rows = extra_rows.data();
                a.extra_offsets = extra_offsets.data();
            }
            std::vector<float> ref(q.size(), -1.0f);
            a.out = ref.data();
            tinyloop::kern::attention_ref(a);
            for (int S : {1, 16, 64}) {
                const std::vector<float> got = split_attention_on_host(a, S);
                for (size_t i = 0; i < ref.size(); ++i)
                    ASSERT_NEAR(got[i], ref[i], 2e-5f + 2e-5f * std::fabs(ref[i]))
                        << "heads " << sh.n_heads << "/" << sh.n_kv_heads << " hd " << sh.hd << " rows " << sh.rows
                        << " splits " << S << (tree ? " tree" : "") << " at " << i << " (query "
                        << i / (size_t(sh.n_heads) * sh.hd) << ")";
            }
        }
    }
}

// ---- the fast step's switch (TINYLOOP_CUDA_FAST) -----------------------------------------------

TEST(CudaFastSwitch, PartsParseAndABadPartIsNamed) {
    using tinyloop::CudaFastPath;
    using tinyloop::parse_cuda_fast;
    EXPECT_FALSE(parse_cuda_fast("").any());
    EXPECT_FALSE(parse_cuda_fast("0").any());
    EXPECT_EQ(parse_cuda_fast("1"), CudaFastPath::all());
    EXPECT_EQ(parse_cuda_fast("all"), CudaFastPath::all());
    const CudaFastPath f = parse_cuda_fast("fuse,pdl");
    EXPECT_TRUE(f.fuse && f.pdl && !f.split_attention && !f.pinned_logits && !f.persist);
    EXPECT_EQ(tinyloop::describe(parse_cuda_fast("split,pinned")), "split+pinned");
    // persist is named, never implied by all; "all" inside a list sets the four and keeps it
    EXPECT_FALSE(CudaFastPath::all().persist);
    EXPECT_EQ(parse_cuda_fast("all,persist"), CudaFastPath::persistent());
    EXPECT_EQ(parse_cuda_fast("persist,all"), CudaFastPath::persistent());
    EXPECT_EQ(tinyloop::describe(parse_cuda_fast("fuse,persist")), "fuse+persist");
    EXPECT_EQ(tinyloop::describe(CudaFastPath{}), "reference");
    for (const char* bad : {"fuse,", "2", "fuse,splat", "FUSE"}) {
        try {
            parse_cuda_fast(bad);
            ADD_FAILURE() << "'" << bad << "' was accepted";
        } catch (const tinyloop::Error& e) {
            EXPECT_EQ(e.code(), tinyloop::ErrorCode::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find("TINYLOOP_CUDA_FAST"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("fuse, split, pdl, pinned, persist"), std::string::npos) << e.what();
        }
    }
}

// ---- the capture rules on a strict fake context ---------------------------------------------

// Context's interface on host memory: "kernels" are host closures, run at once or recorded
// while capturing and replayed by launch(graph). The same CaptureRules as the real Context.
class StrictFakeContext {
public:
    using Graph = std::vector<std::function<void()>>;
    float* alloc(size_t n) {
        rules_.check(kc::StreamOp::Alloc);
        buffers_.emplace_back(n, 0.0f);
        return buffers_.back().data();
    }
    void upload(float* dst, const float* src, size_t n) {
        rules_.check(kc::StreamOp::Upload);
        std::copy(src, src + n, dst);
    }
    void download(float* dst, const float* src, size_t n) {
        rules_.check(kc::StreamOp::Download);
        std::copy(src, src + n, dst);
    }
    void synchronize() { rules_.check(kc::StreamOp::Sync); }
    void create_cublas() { rules_.check(kc::StreamOp::CublasCreate); }
    void kernel(std::function<void()> f) { issue(kc::StreamOp::Launch, std::move(f)); }
    void copy(float* dst, const float* src, size_t n) {
        issue(kc::StreamOp::Copy, [=] { std::copy(src, src + n, dst); });
    }
    void stage(const float* src) {
        issue(kc::StreamOp::Stage, [this, src] { staged_ = *src; });
    }
    float staged() const { return staged_; }
    void begin_capture() {
        rules_.begin();
        recording_.clear();
    }
    Graph end_capture() {
        rules_.end();
        return std::move(recording_);
    }
    void launch(const Graph& g) {
        rules_.check(kc::StreamOp::GraphLaunch);
        for (const auto& f : g) f();
    }
    bool capturing() const { return rules_.capturing(); }

private:
    void issue(kc::StreamOp op, std::function<void()> f) {
        rules_.check(op);
        if (rules_.capturing()) recording_.push_back(std::move(f));
        else f();
    }
    kc::CaptureRules<kc::CudaError> rules_;
    std::vector<std::vector<float>> buffers_;
    Graph recording_;
    float staged_ = 0;
};

// A decode step as the session captures it: inputs uploaded before the capture, then only
// launches, device copies and the staging of the chosen token; replayed without the host.
TEST(CudaCaptureRules, AStepOfLaunchesCopiesAndStagingIsRecordedAndReplayed) {
    StrictFakeContext ctx;
    float* pos = ctx.alloc(1);
    float* acc = ctx.alloc(1);
    const float one = 1.0f;
    ctx.upload(pos, &one, 1);
    ctx.begin_capture();
    ctx.kernel([=] { *acc += *pos; });   // the step reads its position from device memory
    ctx.kernel([=] { *pos += 1.0f; });   // and advances it on the device (kc::advance)
    ctx.copy(acc + 0, acc, 1);
    ctx.stage(acc);
    const StrictFakeContext::Graph g = ctx.end_capture();
    EXPECT_EQ(ctx.staged(), 0.0f) << "captured ops run only when replayed";
    ctx.synchronize();
    for (int i = 0; i < 3; ++i) ctx.launch(g);
    ctx.synchronize();
    EXPECT_EQ(ctx.staged(), 1.0f + 2.0f + 3.0f);
    EXPECT_EQ(g.size(), 4u);
}

TEST(CudaCaptureRules, EveryAllocationUploadDownloadAndSyncDuringCaptureThrowsNamingIt) {
    const std::vector<std::pair<std::string, std::function<void(StrictFakeContext&, float*)>>> breaches = {
        {"device allocation", [](StrictFakeContext& c, float*) { c.alloc(4); }},
        {"upload", [](StrictFakeContext& c, float* b) { const float x = 1; c.upload(b, &x, 1); }},
        {"download", [](StrictFakeContext& c, float* b) { float x; c.download(&x, b, 1); }},
        {"synchronisation", [](StrictFakeContext& c, float*) { c.synchronize(); }},
        {"cuBLAS", [](StrictFakeContext& c, float*) { c.create_cublas(); }},
        {"graph launch", [](StrictFakeContext& c, float*) { c.launch({}); }},
    };
    for (const auto& [name, call] : breaches) {
        StrictFakeContext ctx;
        float* b = ctx.alloc(1);
        call(ctx, b);  // outside a capture: allowed
        ctx.begin_capture();
        try {
            call(ctx, b);
            ADD_FAILURE() << name << " during capture did not throw";
        } catch (const kc::CudaError& e) {
            EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("captured"), std::string::npos) << e.what();
            EXPECT_FALSE(e.out_of_memory());
        }
        EXPECT_TRUE(ctx.capturing()) << name << ": the capture is still open and can be ended";
        ctx.end_capture();
    }
    // the table itself: exactly the stream-ordered asynchronous ops are capturable
    for (kc::StreamOp op : {kc::StreamOp::Launch, kc::StreamOp::Copy, kc::StreamOp::Memset, kc::StreamOp::Stage})
        EXPECT_TRUE(kc::capturable(op)) << kc::stream_op_name(op);
    for (kc::StreamOp op : {kc::StreamOp::Alloc, kc::StreamOp::Upload, kc::StreamOp::Download, kc::StreamOp::Sync,
                            kc::StreamOp::CublasCreate, kc::StreamOp::GraphLaunch})
        EXPECT_FALSE(kc::capturable(op)) << kc::stream_op_name(op);
}

TEST(CudaCaptureRules, NestedOrUnopenedCapturesThrow) {
    StrictFakeContext ctx;
    EXPECT_THROW(ctx.end_capture(), kc::CudaError);
    ctx.begin_capture();
    EXPECT_THROW(ctx.begin_capture(), kc::CudaError);
    EXPECT_TRUE(ctx.capturing());
    ctx.end_capture();
    EXPECT_FALSE(ctx.capturing());
}

// ---- the VRAM accounting arithmetic ---------------------------------------------------------

TEST(CudaVramAccounting, AShareThatGrowsAfterItWasCountedGivesBackExactlyWhatItHolds) {
    std::atomic<size_t> total{1000};  // the weights' own bytes are elsewhere; another holder's here
    {
        kc::ByteShare session(total);
        session.hold(500);              // counted at construction
        EXPECT_EQ(total.load(), 1500u);
        session.hold(500 + 64);         // forward_rows grew its buffers afterwards
        EXPECT_EQ(total.load(), 1564u);
        session.hold(500 + 64 + 4096);  // cuBLAS created on the first large prefill
        EXPECT_EQ(total.load(), 5660u);
        session.hold(100);              // shrinking is exact too
        EXPECT_EQ(total.load(), 1100u);
        session.hold(700);
        {
            kc::ByteShare other(total);
            other.hold(300);
            EXPECT_EQ(total.load(), 2000u);
        }
        EXPECT_EQ(total.load(), 1700u);
    }
    EXPECT_EQ(total.load(), 1000u) << "every share gave back exactly its bytes: no wrap, no leak";
}

TEST(CudaVramAccounting, ACounterShortOfAShareIsABugNotAWrap) {
    std::atomic<size_t> total{0};
    kc::ByteShare s(total);
    s.hold(100);
    total -= 60;  // someone took back bytes that were this share's
    EXPECT_THROW(s.hold(0), std::logic_error);
    EXPECT_EQ(total.load(), 40u) << "left as it was, not wrapped to 2^64 - 60";
    s.release();  // the destructor's path: clamps at 0, never wraps
    EXPECT_EQ(total.load(), 0u);
}

// ---- the greedy agreement rule on the CPU's own logits --------------------------------------

const std::string kModel = std::string(TL_SOURCE_DIR) + "/resources/models/tinyloop-kjv/model-f32.tinyloop";

// The CPU's greedy run at depth L and, per token, the logits it was chosen from (one prefill of
// the prompt and the continuation: row prompt_len - 1 + i chose token i).
tltest::GreedyTrace cpu_trace(tinyloop::Model* m, const std::vector<int32_t>& prompt, int n_new, int L) {
    tinyloop::GenerateConfig g;
    g.max_tokens = n_new;
    g.loops = L;
    g.temperature = 0.0f;
    g.ignore_eos = true;
    const std::vector<int32_t> all = tinyloop::generate(m, prompt.data(), int(prompt.size()), g);
    tltest::GreedyTrace t;
    t.tokens.assign(all.begin() + long(prompt.size()), all.end());
    const int V = tinyloop::model_hparams(m).vocab_size;
    const std::vector<float> z = tinyloop::forward_logits(m, all.data(), int(all.size()) - 1, L);
    t.logits.assign(z.begin() + long(prompt.size() - 1) * V, z.end());
    return t;
}

TEST(CudaGreedyAgreement, TheRuleOnTheCpusLogits) {
    tinyloop::ModelHandle m = tinyloop::load_model_handle(kModel);
    const std::vector<int32_t> prompt = tinyloop::tokenize(m.get(), "In the beginning God created the heaven and the earth. And");
    const int V = tinyloop::model_hparams(m.get()).vocab_size, n = 24;
    const tltest::GreedyTrace ref = cpu_trace(m.get(), prompt, n, 2);
    ASSERT_EQ(ref.tokens.size(), size_t(n));
    // the prefill's rows chose the decode's tokens (the trace is consistent)
    for (int i = 0; i < n; ++i) ASSERT_EQ(tinyloop::argmax(ref.logits.data() + size_t(i) * V, V), ref.tokens[i]) << i;

    tltest::GreedyAgreement a = tltest::compare_greedy(ref, ref, V);
    EXPECT_TRUE(a.ok) << a.why;
    EXPECT_EQ(a.compared, n);
    EXPECT_EQ(a.diverged_at, -1);
    EXPECT_EQ(a.max_logprob_diff, 0.0);

    // another reduction order: every logit moved by a few ulps
    tltest::GreedyTrace noisy = ref;
    std::mt19937 rng(9);
    for (float& z : noisy.logits) z *= 1.0f + 4e-7f * (float(int(rng() % 9)) - 4.0f);
    a = tltest::compare_greedy(ref, noisy, V);
    EXPECT_TRUE(a.ok) << a.why;
    EXPECT_LT(a.max_logprob_diff, 1e-4);

    // the clearest step: the other run picks the runner-up there -> not a near tie, refused
    int clear = 0;
    double best_gap = -1, r1, r2;
    for (int i = 0; i < n; ++i) {
        tltest::top2(ref.logits.data() + size_t(i) * V, V, &r1, &r2);
        if (r1 - r2 > best_gap) best_gap = r1 - r2, clear = i;
    }
    ASSERT_GT(best_gap, 0.1);
    tltest::GreedyTrace wrong = ref;
    const float* zc = ref.logits.data() + size_t(clear) * V;
    int runner_up = -1;
    for (int j = 0; j < V; ++j)
        if (j != ref.tokens[clear] && (runner_up < 0 || zc[j] > zc[runner_up])) runner_up = j;
    wrong.tokens[clear] = runner_up;
    a = tltest::compare_greedy(ref, wrong, V);
    EXPECT_FALSE(a.ok);
    EXPECT_NE(a.why.find("step " + std::to_string(clear)), std::string::npos) << a.why;

    // a near tie made at step k (runner-up lifted to 2e-3 below the best in both rows): the
    // other run may take it there, and what follows is not compared
    const int k = n / 2;
    tltest::GreedyTrace tie_ref = ref, tie_got = ref;
    float* zr = tie_ref.logits.data() + size_t(k) * V;
    float* zg = tie_got.logits.data() + size_t(k) * V;
    int second = -1;
    for (int j = 0; j < V; ++j)
        if (j != ref.tokens[k] && (second < 0 || zr[j] > zr[second])) second = j;
    zr[second] = zr[ref.tokens[k]] - 2e-3f;
    zg[second] = zg[ref.tokens[k]] + 2e-3f;
    tie_got.tokens[k] = second;
    for (int i = k + 1; i < n; ++i) tie_got.tokens[i] = (ref.tokens[i] + 1) % V;  // another context
    a = tltest::compare_greedy(tie_ref, tie_got, V);
    EXPECT_TRUE(a.ok) << a.why;
    EXPECT_EQ(a.diverged_at, k);
    EXPECT_EQ(a.compared, k);
    // the same divergence with the bound a tenth of the gap: refused
    a = tltest::compare_greedy(tie_ref, tie_got, V, {.near_tie_gap = 2e-4, .logprob_tol = 5e-3});
    EXPECT_FALSE(a.ok);

    // equal tokens, a log-probability off by ~0.05 nats: refused at that step
    tltest::GreedyTrace off = ref;
    off.logits[size_t(3) * V + size_t(ref.tokens[3])] += 0.05f;
    a = tltest::compare_greedy(ref, off, V);
    EXPECT_FALSE(a.ok);
    EXPECT_NE(a.why.find("step 3"), std::string::npos) << a.why;
    EXPECT_NE(a.why.find("log-probability"), std::string::npos) << a.why;
}

}  // namespace

// ---- bench_cuda's shape on a short-context model ---------------------------------------------

TEST(CudaBenchShape, AShortContextShrinksThePromptAndKeepsTheTokens) {
    // the first H200 run: kjv's context is 512, bench asked prompt 512 + 256 tokens
    const tltest::BenchShape a = tltest::bench_shape(512, 256, 512);
    EXPECT_EQ(a.prompt, 256);
    EXPECT_EQ(a.tokens, 256);
    EXPECT_TRUE(a.prompt_shrunk);
    EXPECT_FALSE(a.tokens_cut);
    const tltest::BenchShape b = tltest::bench_shape(512, 256, 4096);  // fits: unchanged
    EXPECT_EQ(b.prompt, 512);
    EXPECT_EQ(b.tokens, 256);
    EXPECT_FALSE(b.prompt_shrunk);
    const tltest::BenchShape c = tltest::bench_shape(100, 1000, 512);  // more tokens than context
    EXPECT_EQ(c.prompt, 1);
    EXPECT_EQ(c.tokens, 511);
    EXPECT_TRUE(c.tokens_cut);
    EXPECT_TRUE(c.prompt_shrunk);
    for (int ctx : {2, 3, 64, 512})
        for (int p : {1, 7, 512, 5000})
            for (int t : {1, 3, 256, 5000}) {
                const tltest::BenchShape s = tltest::bench_shape(p, t, ctx);
                EXPECT_GE(s.prompt, 1);
                EXPECT_GE(s.tokens, 1);
                EXPECT_LE(s.prompt + s.tokens, ctx) << p << " " << t << " " << ctx;
            }
    EXPECT_THROW(tltest::bench_shape(0, 256, 512), std::invalid_argument);
    EXPECT_THROW(tltest::bench_shape(512, 0, 512), std::invalid_argument);
}

TEST(CudaBenchShape, ARateWithNothingTimedIsZeroNeverNegativeOrInfinite) {
    EXPECT_DOUBLE_EQ(tltest::bench_rate(254, 0.5), 508.0);
    EXPECT_EQ(tltest::bench_rate(-1, 0.001), 0.0);  // 1 token - 2 untimed: the run's negative rates
    EXPECT_EQ(tltest::bench_rate(0, 0.001), 0.0);
    EXPECT_EQ(tltest::bench_rate(10, 0.0), 0.0);
    EXPECT_EQ(tltest::bench_rate(10, -1.0), 0.0);
    EXPECT_EQ(tltest::bench_rate(10, std::nan("")), 0.0);
}
