// Every kernel at every SIMD level this CPU has, against the scalar references, on fresh random
// inputs; every output element checked. Plus the contracts the engine builds on: batch
// invariance and thread invariance (bit for bit), and the thread pool's behaviour.
//
// The seed is random per run and printed on failure; TL_TEST_SEED=<n> replays one.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/kernels.h"

namespace tinyloop::kern {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

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

#define TL_SEED_TRACE SCOPED_TRACE("TL_TEST_SEED=" + std::to_string(test_seed()))

// The SIMD levels this CPU supports; the dispatcher's own choice is restored afterwards.
struct Levels {
    std::string saved = simd_level();
    std::vector<std::string> list;
    Levels() {
        for (const char* l : {"scalar", "avx2", "avx512-novnni", "avx512"}) {
            if (force_simd_level(l)) list.emplace_back(l);
        }
        force_simd_level(saved.c_str());
    }
    ~Levels() { force_simd_level(saved.c_str()); }
};

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

// A random weight matrix stored as FORMAT.md §2 says, plus an independent decoder of it.
struct Weights {
    WType type;
    int rows, cols, gs;
    std::vector<uint8_t> data;
    std::vector<uint16_t> scales, zeros;

    Weights(WType t, int r, int c, int g, Rng& rng) : type(t), rows(r), cols(c), gs(g) {
        const size_t n = static_cast<size_t>(r) * c;
        if (t == WType::F32) {
            data.resize(n * 4);
            for (size_t i = 0; i < n; ++i) {
                const float f = rng.normal(0.1f);
                std::memcpy(&data[i * 4], &f, 4);
            }
            return;
        }
        if (t == WType::F16) {
            data.resize(n * 2);
            for (size_t i = 0; i < n; ++i) {
                const uint16_t h = f32_to_f16(rng.normal(0.1f));
                std::memcpy(&data[i * 2], &h, 2);
            }
            return;
        }
        const int bits = wtype_bits(t);
        data.assign(n * bits / 8, 0);
        for (size_t i = 0; i < n; ++i) {
            const uint32_t q = static_cast<uint32_t>(rng.integer(0, (1 << bits) - 1));
            const size_t row = i / c, col = i % c;
            const size_t bit = row * static_cast<size_t>(c) * bits + col * bits;
            data[bit / 8] |= static_cast<uint8_t>(q << (bit % 8));
        }
        const size_t ng = n / g;
        for (size_t i = 0; i < ng; ++i) {
            scales.push_back(f32_to_f16(rng.uniform(0.002f, 0.05f)));
            zeros.push_back(f32_to_f16(rng.uniform(0.0f, static_cast<float>((1 << bits) - 1))));
        }
    }

    WeightView view() const {
        WeightView w;
        w.type = type;
        w.rows = rows;
        w.cols = cols;
        w.group_size = gs;
        w.data = data.data();
        w.scales = scales.empty() ? nullptr : scales.data();
        w.zeros = zeros.empty() ? nullptr : zeros.data();
        return w;
    }

    // Decoded straight from the FORMAT.md description, not through the kernels.
    float at(int r, int c) const {
        const size_t i = static_cast<size_t>(r) * cols + c;
        if (type == WType::F32) {
            float f;
            std::memcpy(&f, &data[i * 4], 4);
            return f;
        }
        if (type == WType::F16) {
            uint16_t h;
            std::memcpy(&h, &data[i * 2], 2);
            return f16_to_f32(h);
        }
        const int bits = wtype_bits(type);
        uint32_t q;
        if (bits == 8) {
            q = data[i];
        } else if (bits == 4) {
            q = (data[i / 2] >> (4 * (i % 2))) & 15u;  // element 2k: bits 0-3, 2k+1: bits 4-7
        } else {
            q = (data[i / 4] >> (2 * (i % 4))) & 3u;  // element 4k+j: bits 2j..2j+1
        }
        const size_t gi = static_cast<size_t>(r) * (cols / gs) + c / gs;
        return f16_to_f32(scales[gi]) * (static_cast<float>(q) - f16_to_f32(zeros[gi]));
    }
};

std::vector<float> run_matmul(const WeightView& w, const float* x, int n_tok, ThreadPool* pool) {
    std::vector<float> y(static_cast<size_t>(n_tok) * w.rows, kNaN);
    matmul(w, x, n_tok, y.data(), pool);
    return y;
}

bool bits_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// ---------------------------------------------------------------------------------------------
// dispatch

TEST(Dispatch, LevelsAreNamedAndForceable) {
    Levels lv;
    const std::string now = simd_level();
    EXPECT_TRUE(now == "scalar" || now == "avx2" || now == "avx512-novnni" || now == "avx512") << now;
    EXPECT_FALSE(force_simd_level("sse9"));
    EXPECT_FALSE(force_simd_level(nullptr));
    EXPECT_EQ(simd_level(), now);  // a refused force changes nothing
    for (const auto& l : lv.list) {
        ASSERT_TRUE(force_simd_level(l.c_str()));
        EXPECT_EQ(simd_level(), l);
    }
    std::printf("[ info ] SIMD levels tested: ");
    for (const auto& l : lv.list) std::printf("%s ", l.c_str());
    std::printf("(default %s)\n", lv.saved.c_str());
}

// ---------------------------------------------------------------------------------------------
// matmul and dequant_row

TEST(Ops, DequantRowMatchesTheFormat) {
    TL_SEED_TRACE;
    Rng rng(1);
    for (WType t : {WType::F32, WType::F16, WType::Q8, WType::Q4, WType::Q2}) {
        for (int gs : {32, 64, 128}) {
            if ((t == WType::F32 || t == WType::F16) && gs != 32) continue;
            const Weights w(t, 5, 384, gs, rng);
            std::vector<float> out(384);
            for (int r = 0; r < 5; ++r) {
                std::fill(out.begin(), out.end(), kNaN);
                dequant_row(w.view(), r, out.data());
                for (int c = 0; c < 384; ++c) {
                    const float e = w.at(r, c);
                    ASSERT_EQ(std::memcmp(&out[c], &e, 4), 0)
                        << type_name(t) << " gs " << gs << " r " << r << " c " << c << ": " << out[c] << " vs " << e;
                }
            }
        }
    }
}

// Selects the int8- or float-activation path for a scope (the default is restored after).
struct Int8Act {
    bool saved = int8_activations();
    explicit Int8Act(bool on) { set_int8_activations(on); }
    ~Int8Act() { set_int8_activations(saved); }
};

// Float activations (the int8 path has its own tests below).
// Normalised bound: |y - ref| <= tol * sum_c |W[r,c] x[t,c]| (plus a denormal floor).
TEST(Ops, MatmulMatchesReferenceAtEveryLevel) {
    TL_SEED_TRACE;
    Levels lv;
    Int8Act float_act(false);
    Rng rng(2);
    ThreadPool pool(2);
    struct Case {
        WType type;
        int gs;
        std::vector<int> cols;
    };
    const std::vector<Case> cases = {
        {WType::F32, 0, {1, 17, 96, 100, 1411}}, {WType::F16, 0, {3, 16, 160, 1408}},
        {WType::Q8, 32, {96, 160, 352, 1408}},   {WType::Q4, 32, {96, 160, 352, 1408}},
        {WType::Q2, 32, {96, 160, 352, 1408}},   {WType::Q8, 64, {128, 320, 1408}},
        {WType::Q4, 64, {128, 320, 1408}},       {WType::Q2, 64, {128, 320, 1408}},
        {WType::Q8, 128, {128, 384, 1408}},      {WType::Q4, 128, {128, 384, 1408}},
        {WType::Q2, 128, {128, 384, 1408}},
        // Outside FORMAT.md (the loader refuses them): must still be right, on the scalar path.
        {WType::Q4, 16, {96, 160}},              {WType::Q8, 48, {96, 144}},
    };
    double worst = 0.0;
    for (const Case& cs : cases) {
        for (int cols : cs.cols) {
            for (int rows : {1, 7, 33, 257}) {
                const Weights w(cs.type, rows, cols, cs.gs ? cs.gs : 32, rng);
                const WeightView v = w.view();
                const int max_tok = 17;
                const auto x = rng.normals(static_cast<size_t>(max_tok) * cols);
                std::vector<float> ref(static_cast<size_t>(max_tok) * rows, kNaN);
                matmul_ref(v, x.data(), max_tok, ref.data());
                std::vector<float> dense(static_cast<size_t>(rows) * cols);
                for (int r = 0; r < rows; ++r) {
                    for (int c = 0; c < cols; ++c) dense[static_cast<size_t>(r) * cols + c] = w.at(r, c);
                }
                std::vector<double> norm(ref.size());
                for (int t = 0; t < max_tok; ++t) {
                    for (int r = 0; r < rows; ++r) {
                        const float* wr = dense.data() + static_cast<size_t>(r) * cols;
                        const float* xt = x.data() + static_cast<size_t>(t) * cols;
                        double s = 0.0;
                        for (int c = 0; c < cols; ++c) s += std::fabs(static_cast<double>(wr[c]) * xt[c]);
                        norm[static_cast<size_t>(t) * rows + r] = s;
                    }
                }
                for (const auto& level : lv.list) {
                    ASSERT_TRUE(force_simd_level(level.c_str()));
                    for (int n_tok : {1, 3, 5, 17}) {
                        const auto y = run_matmul(v, x.data(), n_tok, (cols & 32) ? &pool : nullptr);
                        for (size_t i = 0; i < static_cast<size_t>(n_tok) * rows; ++i) {
                            const double err = std::fabs(static_cast<double>(y[i]) - ref[i]);
                            const double bound = 2e-5 * norm[i] + 1e-30;
                            worst = std::max(worst, err / (norm[i] + 1e-30));
                            ASSERT_LE(err, bound) << level << " " << type_name(cs.type) << " gs " << cs.gs << " "
                                                  << rows << "x" << cols << " n_tok " << n_tok << " element " << i
                                                  << ": " << y[i] << " vs ref " << ref[i];
                        }
                    }
                }
            }
        }
    }
    std::printf("[ info ] matmul worst normalised error vs reference: %.3g\n", worst);
}

// The SIMD levels' documented order, bit for bit (matmul.cpp, simd.h): lane c % W accumulates
// fma(w_c, x_c, acc) over the columns in order, then one fixed pairwise tree (lanes i and i+W/2,
// then i and i+W/4, ...). Emulated here in scalar code with std::fma, so a change in how the
// kernels reduce (several outputs at once, any tile shape) must keep every output's bits.
float lanes_then_tree(const float* w, const float* x, int cols, int width) {
    std::vector<float> lane(static_cast<size_t>(width), 0.0f);
    for (int c = 0; c < cols; ++c) lane[static_cast<size_t>(c % width)] = std::fma(w[c], x[c], lane[static_cast<size_t>(c % width)]);
    for (int half = width / 2; half >= 1; half /= 2) {
        for (int i = 0; i < half; ++i) lane[static_cast<size_t>(i)] = lane[static_cast<size_t>(i)] + lane[static_cast<size_t>(i + half)];
    }
    return lane[0];
}

TEST(Ops, SimdMatmulAndScoresFollowTheDocumentedOrderBitForBit) {
    TL_SEED_TRACE;
    Levels lv;
    Int8Act float_act(false);
    Rng rng(4);
    int checked = 0;
    for (const auto& level : lv.list) {
        const int width = level == "avx2" ? 8 : level.rfind("avx512", 0) == 0 ? 16 : 0;
        if (width == 0) continue;
        SCOPED_TRACE(level);
        ASSERT_TRUE(force_simd_level(level.c_str()));
        for (int cols : {1, 17, 64, 100, 513}) {
            for (int rows : {1, 5, 19, 40}) {
                const Weights w(WType::F32, rows, cols, 32, rng);
                std::vector<float> dense(static_cast<size_t>(rows) * cols);
                for (int r = 0; r < rows; ++r) {
                    for (int c = 0; c < cols; ++c) dense[static_cast<size_t>(r) * cols + c] = w.at(r, c);
                }
                for (int n_tok : {1, 2, 3, 6, 7, 8, 11, 13}) {  // float tiles: 6 tokens (AVX-512), 8 (AVX2)
                    const auto x = rng.normals(static_cast<size_t>(n_tok) * cols);
                    const auto y = run_matmul(w.view(), x.data(), n_tok, nullptr);
                    for (int t = 0; t < n_tok; ++t) {
                        for (int r = 0; r < rows; ++r) {
                            const float want = lanes_then_tree(dense.data() + static_cast<size_t>(r) * cols,
                                                               x.data() + static_cast<size_t>(t) * cols, cols, width);
                            const float got = y[static_cast<size_t>(t) * rows + r];
                            ASSERT_TRUE(bits_equal(&got, &want, 1)) << cols << " cols, " << rows << " rows, " << n_tok
                                                                   << " tokens, token " << t << " row " << r << ": "
                                                                   << got << " vs " << want;
                            ++checked;
                        }
                    }
                }
            }
        }
        // Attention with a single cache row: the output is that row's value exactly, whatever the
        // score; with two rows the weights are exp(s_i - max) of the scores computed in the same
        // order, so compare against a scalar emulation of the two-pass softmax on those scores.
        for (int head_dim : {16, 24, 64}) {
            for (int n_rows : {2, 7, 16, 17, 40}) {
                const auto q = rng.normals(static_cast<size_t>(head_dim));
                const auto k = rng.normals(static_cast<size_t>(n_rows) * head_dim);
                const auto v = rng.normals(static_cast<size_t>(n_rows) * head_dim);
                std::vector<int> b(1, 0), e(1, n_rows);
                std::vector<float> out(static_cast<size_t>(head_dim), kNaN);
                AttentionArgs a;
                a.q = q.data();
                a.k = k.data();
                a.v = v.data();
                a.out = out.data();
                a.n_tok = 1;
                a.n_heads = 1;
                a.n_kv_heads = 1;
                a.head_dim = head_dim;
                a.kv_stride = head_dim;
                a.kv_begin = b.data();
                a.kv_end = e.data();
                attention(a, nullptr);
                // Scores in the documented order: lanes, tree, then times 1/sqrt(head_dim).
                const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
                std::vector<double> s(static_cast<size_t>(n_rows));
                double mx = -1e300;
                for (int i = 0; i < n_rows; ++i) {
                    s[static_cast<size_t>(i)] = lanes_then_tree(q.data(), k.data() + static_cast<size_t>(i) * head_dim, head_dim, width) * scale;
                    mx = std::max(mx, s[static_cast<size_t>(i)]);
                }
                // The softmax itself uses a vector exp; check it to float accuracy on exact scores.
                double den = 0.0;
                std::vector<double> ref(static_cast<size_t>(head_dim), 0.0);
                for (int i = 0; i < n_rows; ++i) {
                    const double p = std::exp(s[static_cast<size_t>(i)] - mx);
                    den += p;
                    for (int d = 0; d < head_dim; ++d) ref[static_cast<size_t>(d)] += p * v[static_cast<size_t>(i) * head_dim + d];
                }
                for (int d = 0; d < head_dim; ++d) {
                    ASSERT_NEAR(out[static_cast<size_t>(d)], ref[static_cast<size_t>(d)] / den, 2e-6 * (1.0 + std::fabs(ref[static_cast<size_t>(d)] / den)))
                        << "head_dim " << head_dim << " rows " << n_rows << " d " << d;
                }
            }
        }
    }
    std::printf("[ info ] %d matmul outputs equal the documented order bit for bit\n", checked);
}

// y[t, r] must not depend on how many tokens share the call, where a token falls in the tile,
// or how many threads split the rows.
TEST(Ops, MatmulIsBatchAndThreadInvariant) {
    TL_SEED_TRACE;
    Levels lv;
    Rng rng(3);
    ThreadPool pool2(2), pool3(3), pool1(1);
    for (bool int8 : {true, false}) {
    Int8Act act(int8);
    SCOPED_TRACE(int8 ? "int8 activations" : "float activations");
    for (WType t : {WType::F32, WType::F16, WType::Q8, WType::Q4, WType::Q2}) {
        const int rows = 257, cols = 352, n = 17;
        const Weights w(t, rows, cols, 32, rng);
        const WeightView v = w.view();
        const auto x = rng.normals(static_cast<size_t>(n) * cols);
        for (const auto& level : lv.list) {
            SCOPED_TRACE(level + " " + type_name(t));
            ASSERT_TRUE(force_simd_level(level.c_str()));
            const auto all = run_matmul(v, x.data(), n, &pool2);
            for (int tok = 0; tok < n; ++tok) {
                const auto one = run_matmul(v, x.data() + static_cast<size_t>(tok) * cols, 1, nullptr);
                ASSERT_TRUE(bits_equal(one.data(), all.data() + static_cast<size_t>(tok) * rows, rows)) << "token " << tok;
            }
            for (int b : {1, 3, 6}) {  // tokens [b, b+k) in one call: other tile boundaries
                for (int k : {2, 5, 9}) {
                    const auto part = run_matmul(v, x.data() + static_cast<size_t>(b) * cols, k, &pool3);
                    ASSERT_TRUE(bits_equal(part.data(), all.data() + static_cast<size_t>(b) * rows,
                                           static_cast<size_t>(k) * rows))
                        << "tokens " << b << ".." << b + k;
                }
            }
            for (ThreadPool* p : {&pool1, &pool3, static_cast<ThreadPool*>(nullptr)}) {
                const auto again = run_matmul(v, x.data(), n, p);
                ASSERT_TRUE(bits_equal(again.data(), all.data(), all.size())) << "threads " << (p ? p->size() : 0);
            }
        }
    }
    }
}

// ---------------------------------------------------------------------------------------------
// int8 activations (Q8/Q4 weights)

// The quantizer against its definition (kernels.h): per 32-block, dx = max|x| / 127 and
// q = round_half_even(x * (127 / max|x|)); an all-zero block gets dx 0 and zero codes, a block
// with a NaN or an infinity dx NaN and zero codes.
TEST(Int8Act, QuantizerMatchesItsDefinition) {
    TL_SEED_TRACE;
    Rng rng(20);
    const int cols = 32 * 9;
    for (int rep = 0; rep < 20; ++rep) {
        auto x = rng.normals(cols, rng.uniform(1e-3f, 50.0f));
        std::fill(x.begin() + 32, x.begin() + 64, 0.0f);              // block 1: zeros
        x[64 + rng.integer(0, 31)] = kNaN;                             // block 2: NaN
        x[96 + rng.integer(0, 31)] = std::numeric_limits<float>::infinity();  // block 3
        for (int i = 128; i < 160; ++i) x[i] = 0.5f * static_cast<float>(i - 144);  // ties
        x[160] = 1e-40f;                                               // block 5: one denormal
        std::vector<int8_t> q(cols, 99);
        std::vector<float> dx(cols / 32, -1.0f);
        quantize_row_int8(x.data(), cols, q.data(), dx.data());
        for (int b = 0; b < cols / 32; ++b) {
            float amax = 0.0f;
            bool finite = true;
            for (int i = 0; i < 32; ++i) {
                finite = finite && std::isfinite(x[b * 32 + i]);
                amax = std::max(amax, std::fabs(x[b * 32 + i]));
            }
            if (!finite) {
                ASSERT_TRUE(std::isnan(dx[b])) << "block " << b;
                for (int i = 0; i < 32; ++i) ASSERT_EQ(q[b * 32 + i], 0) << "block " << b;
                continue;
            }
            ASSERT_EQ(dx[b], amax / 127.0f) << "block " << b;
            const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            for (int i = 0; i < 32; ++i) {
                const float e = std::nearbyint(x[b * 32 + i] * inv);
                ASSERT_EQ(static_cast<float>(q[b * 32 + i]), e) << "block " << b << " i " << i << " x " << x[b * 32 + i];
                ASSERT_LE(std::fabs(e), 127.0f);
            }
        }
    }
}

// Every level's int8 kernel against matmul_int8_ref (normalised by sum |W xq dx|), and
// matmul_int8_ref against the float reference within the quantization error
// sum_c |W[r,c]| dx_b / 2. Awkward sizes: blocks that leave the SIMD chunk partly empty.
TEST(Int8Act, MatmulMatchesReferencesAtEveryLevel) {
    TL_SEED_TRACE;
    Levels lv;
    Int8Act on(true);
    Rng rng(21);
    ThreadPool pool(2);
    struct Case {
        WType type;
        int gs;
        std::vector<int> cols;
    };
    const std::vector<Case> cases = {
        {WType::Q8, 32, {32, 96, 160, 352, 1408, 2080}}, {WType::Q4, 32, {32, 96, 160, 352, 1408, 2080}},
        {WType::Q8, 64, {64, 192, 320, 1408}},           {WType::Q4, 64, {64, 192, 320, 1408}},
        {WType::Q8, 128, {128, 384, 1408}},              {WType::Q4, 128, {128, 384, 1408}},
    };
    double worst = 0.0, worst_q = 0.0;
    for (const Case& cs : cases) {
        for (int cols : cs.cols) {
            for (int rows : {1, 7, 33, 257}) {
                const Weights w(cs.type, rows, cols, cs.gs, rng);
                const WeightView v = w.view();
                ASSERT_TRUE(uses_int8_activations(v));
                const int max_tok = 17;
                auto x = rng.normals(static_cast<size_t>(max_tok) * cols);
                for (int t = 0; t < max_tok; t += 3) {  // rows of very different scales
                    for (int c = 0; c < cols; ++c) x[static_cast<size_t>(t) * cols + c] *= 1e3f;
                }
                std::vector<float> ref(static_cast<size_t>(max_tok) * rows, kNaN), fref(ref.size(), kNaN);
                matmul_int8_ref(v, x.data(), max_tok, ref.data());
                matmul_ref(v, x.data(), max_tok, fref.data());
                std::vector<double> norm(ref.size()), qerr(ref.size());
                std::vector<int8_t> q(static_cast<size_t>(cols));
                std::vector<float> dx(static_cast<size_t>(cols / 32));
                for (int t = 0; t < max_tok; ++t) {
                    quantize_row_int8(x.data() + static_cast<size_t>(t) * cols, cols, q.data(), dx.data());
                    for (int r = 0; r < rows; ++r) {
                        double s = 0.0, e = 0.0;
                        for (int c = 0; c < cols; ++c) {
                            const double wc = w.at(r, c);
                            s += std::fabs(wc * q[c] * dx[c / 32]);
                            e += std::fabs(wc) * dx[c / 32] * 0.5;
                        }
                        norm[static_cast<size_t>(t) * rows + r] = s;
                        qerr[static_cast<size_t>(t) * rows + r] = e;
                    }
                }
                for (size_t i = 0; i < ref.size(); ++i) {
                    const double d = std::fabs(static_cast<double>(ref[i]) - fref[i]);
                    worst_q = std::max(worst_q, d / (qerr[i] + 1e-30));
                    ASSERT_LE(d, qerr[i] * (1.0 + 1e-5) + 1e-6 * norm[i] + 1e-30)
                        << type_name(cs.type) << " gs " << cs.gs << " " << rows << "x" << cols << " element " << i
                        << ": int8 ref " << ref[i] << " vs float ref " << fref[i];
                }
                for (const auto& level : lv.list) {
                    ASSERT_TRUE(force_simd_level(level.c_str()));
                    for (int n_tok : {1, 3, 5, 17}) {
                        const auto y = run_matmul(v, x.data(), n_tok, (cols & 32) ? &pool : nullptr);
                        for (size_t i = 0; i < static_cast<size_t>(n_tok) * rows; ++i) {
                            const double err = std::fabs(static_cast<double>(y[i]) - ref[i]);
                            worst = std::max(worst, err / (norm[i] + 1e-30));
                            ASSERT_LE(err, 2e-5 * norm[i] + 1e-30)
                                << level << " " << type_name(cs.type) << " gs " << cs.gs << " " << rows << "x" << cols
                                << " n_tok " << n_tok << " element " << i << ": " << y[i] << " vs ref " << ref[i];
                        }
                    }
                }
            }
        }
    }
    std::printf("[ info ] int8 matmul worst normalised error vs int8 reference: %.3g; int8 reference vs float "
                "reference, worst fraction of the quantization bound: %.3g\n",
                worst, worst_q);
}

// A row's result depends on that row only: the same row next to rows of other scales, NaN or
// infinity, alone or at any place in the batch, gives the same bits at every level.
TEST(Int8Act, RowIgnoresItsNeighbours) {
    TL_SEED_TRACE;
    Levels lv;
    Int8Act on(true);
    Rng rng(22);
    ThreadPool pool2(2);
    for (WType t : {WType::Q8, WType::Q4}) {
        const int rows = 130, cols = 1408, n = 11;
        const Weights w(t, rows, cols, 64, rng);
        const auto probe = rng.normals(cols);
        auto x = rng.normals(static_cast<size_t>(n) * cols, 100.0f);
        x[3] = kNaN;
        x[static_cast<size_t>(2) * cols + 5] = std::numeric_limits<float>::infinity();
        for (const auto& level : lv.list) {
            SCOPED_TRACE(level + " " + type_name(t));
            ASSERT_TRUE(force_simd_level(level.c_str()));
            const auto alone = run_matmul(w.view(), probe.data(), 1, nullptr);
            for (float f : alone) ASSERT_TRUE(std::isfinite(f));
            for (int at : {0, 4, 10}) {
                auto batch = x;
                std::copy(probe.begin(), probe.end(), batch.begin() + static_cast<size_t>(at) * cols);
                const auto y = run_matmul(w.view(), batch.data(), n, &pool2);
                ASSERT_TRUE(bits_equal(alone.data(), y.data() + static_cast<size_t>(at) * rows, rows)) << "at " << at;
                if (at != 0) {
                    EXPECT_TRUE(std::isnan(y[0])) << "a NaN input row gives NaN";
                }
            }
        }
    }
}

// The switch: off gives the float kernels (bit-identical to a call with the float path), on
// gives the int8 path, and f32/f16/q2 weights never take it.
TEST(Int8Act, SwitchSelectsThePath) {
    Rng rng(23);
    const Weights q8(WType::Q8, 20, 96, 32, rng), f32(WType::F32, 20, 96, 32, rng), q2(WType::Q2, 20, 96, 32, rng);
    {
        Int8Act on(true);
        EXPECT_TRUE(uses_int8_activations(q8.view()));
        EXPECT_FALSE(uses_int8_activations(f32.view()));
        EXPECT_FALSE(uses_int8_activations(q2.view()));
    }
    Int8Act off(false);
    EXPECT_FALSE(uses_int8_activations(q8.view()));
    const auto x = rng.normals(96 * 2);
    const auto yf = run_matmul(q8.view(), x.data(), 2, nullptr);
    set_int8_activations(true);
    const auto yi = run_matmul(q8.view(), x.data(), 2, nullptr);
    EXPECT_FALSE(bits_equal(yf.data(), yi.data(), yf.size())) << "the two paths should differ in rounding";
    std::vector<float> ref(yi.size());
    matmul_int8_ref(q8.view(), x.data(), 2, ref.data());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(yi[i], ref[i], 1e-4 * (std::fabs(ref[i]) + 1.0));
}

// ---------------------------------------------------------------------------------------------
// rmsnorm, rope, silu_mul, add_inplace

TEST(Ops, RmsnormMatchesReference) {
    TL_SEED_TRACE;
    Levels lv;
    Rng rng(4);
    for (int d : {1, 7, 16, 64, 384, 1411}) {
        const int n_tok = 3;
        const auto x = rng.normals(static_cast<size_t>(n_tok) * d, 3.0f);
        const auto g = rng.normals(static_cast<size_t>(d));
        std::vector<float> ref(x.size(), kNaN);
        rmsnorm_ref(x.data(), g.data(), n_tok, d, 1e-5f, ref.data());
        for (const auto& level : lv.list) {
            ASSERT_TRUE(force_simd_level(level.c_str()));
            std::vector<float> y(x.size(), kNaN);
            rmsnorm(x.data(), g.data(), n_tok, d, 1e-5f, y.data());
            for (size_t i = 0; i < y.size(); ++i) {
                ASSERT_LE(std::fabs(y[i] - ref[i]), 1e-5f * std::fabs(ref[i]) + 1e-30f)
                    << level << " d " << d << " i " << i << ": " << y[i] << " vs " << ref[i];
            }
            std::vector<float> alias = x;  // y may alias x
            rmsnorm(alias.data(), g.data(), n_tok, d, 1e-5f, alias.data());
            ASSERT_TRUE(bits_equal(alias.data(), y.data(), y.size())) << level << " in place";
            for (int t = 0; t < n_tok; ++t) {  // batch invariance
                std::vector<float> one(static_cast<size_t>(d), kNaN);
                rmsnorm(x.data() + static_cast<size_t>(t) * d, g.data(), 1, d, 1e-5f, one.data());
                ASSERT_TRUE(bits_equal(one.data(), y.data() + static_cast<size_t>(t) * d, d)) << level;
            }
        }
    }
}

TEST(Ops, RopeEqualsReferenceBitForBit) {
    TL_SEED_TRACE;
    Levels lv;
    Rng rng(5);
    for (int hd : {2, 18, 64, 128}) {
        const int n_heads = 3;
        const std::vector<int> pos = {0, 1, 7, 511, 4095, 3, 100000};
        const int n_tok = static_cast<int>(pos.size());
        const auto x = rng.normals(static_cast<size_t>(n_tok) * n_heads * hd);
        auto ref = x;
        rope_ref(ref.data(), n_tok, n_heads, hd, pos.data(), 10000.0f);
        for (const auto& level : lv.list) {
            ASSERT_TRUE(force_simd_level(level.c_str()));
            auto y = x;
            rope(y.data(), n_tok, n_heads, hd, pos.data(), 10000.0f);
            ASSERT_TRUE(bits_equal(y.data(), ref.data(), y.size())) << level << " head_dim " << hd;
            auto y2 = x;  // other theta: the cached tables must follow
            rope(y2.data(), n_tok, n_heads, hd, pos.data(), 500000.0f);
            auto ref2 = x;
            rope_ref(ref2.data(), n_tok, n_heads, hd, pos.data(), 500000.0f);
            ASSERT_TRUE(bits_equal(y2.data(), ref2.data(), y2.size())) << level << " theta 5e5";
        }
    }
}

TEST(Ops, SiluMulAndAddMatchReference) {
    TL_SEED_TRACE;
    Levels lv;
    Rng rng(6);
    for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{1408}, size_t{4099}}) {
        std::vector<float> g(n), u(n);
        for (size_t i = 0; i < n; ++i) {
            g[i] = rng.uniform(-20.0f, 20.0f);
            u[i] = rng.normal();
        }
        g[0] = 0.0f;
        std::vector<float> ref(n, kNaN);
        silu_mul_ref(g.data(), u.data(), ref.data(), n);
        for (const auto& level : lv.list) {
            ASSERT_TRUE(force_simd_level(level.c_str()));
            std::vector<float> y(n, kNaN);
            silu_mul(g.data(), u.data(), y.data(), n);
            for (size_t i = 0; i < n; ++i) {
                ASSERT_LE(std::fabs(y[i] - ref[i]), 2e-6f * std::fabs(ref[i]) + 1e-30f)
                    << level << " n " << n << " gate " << g[i] << ": " << y[i] << " vs " << ref[i];
            }
            auto s = g;
            add_inplace(s.data(), u.data(), n);
            for (size_t i = 0; i < n; ++i) ASSERT_EQ(s[i], g[i] + u[i]) << level << " add " << i;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// attention

struct AttnCase {
    int n_heads, n_kv, hd, n_ctx, n_tok, window;  // window 0: causal from row 0
};

struct AttnData {
    AttnCase c;
    int stride;
    std::vector<float> q, k, v;
    std::vector<int> begin, end;
    AttnData(const AttnCase& cs, Rng& rng) : c(cs), stride(cs.n_kv * cs.hd + 3) {
        q = rng.normals(static_cast<size_t>(c.n_tok) * c.n_heads * c.hd, 2.0f);
        k = rng.normals(static_cast<size_t>(c.n_ctx) * stride, 2.0f);
        v = rng.normals(static_cast<size_t>(c.n_ctx) * stride);
        for (int t = 0; t < c.n_tok; ++t) {  // the last n_tok positions of the context
            const int p = c.n_ctx - c.n_tok + t;
            end.push_back(p + 1);
            begin.push_back(c.window ? std::max(0, p + 1 - c.window) : 0);
        }
    }
    AttentionArgs args(float* out, int t0 = 0, int n = -1) const {
        AttentionArgs a;
        a.q = q.data() + static_cast<size_t>(t0) * c.n_heads * c.hd;
        a.n_tok = n < 0 ? c.n_tok : n;
        a.n_heads = c.n_heads;
        a.n_kv_heads = c.n_kv;
        a.head_dim = c.hd;
        a.k = k.data();
        a.v = v.data();
        a.kv_stride = stride;
        a.kv_begin = begin.data() + t0;
        a.kv_end = end.data() + t0;
        a.out = out;
        return a;
    }
    size_t out_size() const { return static_cast<size_t>(c.n_tok) * c.n_heads * c.hd; }
};

TEST(Ops, AttentionMatchesReferenceAndIsInvariant) {
    TL_SEED_TRACE;
    Levels lv;
    Rng rng(7);
    ThreadPool pool1(1), pool2(2), pool3(3);
    const std::vector<AttnCase> cases = {
        {1, 1, 2, 1, 1, 0},      {4, 4, 64, 40, 17, 0},  {6, 2, 64, 300, 5, 0},
        {6, 3, 40, 70, 17, 16},  {2, 1, 18, 33, 3, 0},   {8, 2, 128, 129, 17, 0},
    };
    for (const auto& cs : cases) {
        const AttnData d(cs, rng);
        std::vector<float> ref(d.out_size(), kNaN);
        attention_ref(d.args(ref.data()));
        const float vmax = 4.5f;  // bound on |v| scale for the normalised error (v ~ N(0,1))
        for (const auto& level : lv.list) {
            SCOPED_TRACE(level + " heads " + std::to_string(cs.n_heads) + "/" + std::to_string(cs.n_kv) +
                         " hd " + std::to_string(cs.hd) + " ctx " + std::to_string(cs.n_ctx));
            ASSERT_TRUE(force_simd_level(level.c_str()));
            std::vector<float> out(d.out_size(), kNaN);
            attention(d.args(out.data()), &pool2);
            for (size_t i = 0; i < out.size(); ++i) {
                ASSERT_LE(std::fabs(out[i] - ref[i]), 1e-5f * vmax) << "element " << i << ": " << out[i] << " vs " << ref[i];
            }
            const size_t per_tok = static_cast<size_t>(cs.n_heads) * cs.hd;
            for (int t = 0; t < cs.n_tok; ++t) {
                std::vector<float> one(per_tok, kNaN);
                attention(d.args(one.data(), t, 1), nullptr);
                ASSERT_TRUE(bits_equal(one.data(), out.data() + t * per_tok, per_tok)) << "token " << t;
            }
            for (ThreadPool* p : {&pool1, &pool3, static_cast<ThreadPool*>(nullptr)}) {
                std::vector<float> again(d.out_size(), kNaN);
                attention(d.args(again.data()), p);
                ASSERT_TRUE(bits_equal(again.data(), out.data(), out.size())) << "threads " << (p ? p->size() : 0);
            }
        }
    }
}

// Tree attention: after its range a query also attends a list of extra rows. A range plus
// extras naming the same rows as a plain range must give the same bits.
TEST(Ops, AttentionTreeExtras) {
    TL_SEED_TRACE;
    Levels lv;
    Rng rng(8);
    ThreadPool pool3(3);
    const int n_heads = 6, n_kv = 2, hd = 40, ctx = 60, stride = n_kv * hd + 5;
    const auto k = rng.normals(static_cast<size_t>(ctx) * stride, 2.0f);
    const auto v = rng.normals(static_cast<size_t>(ctx) * stride);
    // Queries: 0 no extras; 1 one; 2 two; 3 out of order; 4 [0,47)+{47,48,49} == 5 [0,50);
    // 6 empty range + {1,2,3} == 7 [1,4).
    const std::vector<int> begin = {0, 0, 0, 0, 0, 0, 5, 1}, end = {50, 50, 50, 50, 47, 50, 5, 4};
    const std::vector<int> extra = {50, 50, 53, 55, 51, 57, 47, 48, 49, 1, 2, 3};
    const std::vector<int> offsets = {0, 0, 1, 3, 6, 9, 9, 12, 12};
    const int n_tok = static_cast<int>(begin.size());
    const auto q0 = rng.normals(static_cast<size_t>(n_heads) * hd, 2.0f);
    std::vector<float> q;
    for (int t = 0; t < n_tok; ++t) {  // 4/5 and 6/7 share their query
        const bool same = t == 5 || t == 7;
        const auto qt = same ? std::vector<float>(q.end() - n_heads * hd, q.end()) : rng.normals(q0.size(), 2.0f);
        q.insert(q.end(), qt.begin(), qt.end());
    }
    auto args = [&](float* out, int t0, int n) {
        AttentionArgs a;
        a.q = q.data() + static_cast<size_t>(t0) * n_heads * hd;
        a.n_tok = n;
        a.n_heads = n_heads;
        a.n_kv_heads = n_kv;
        a.head_dim = hd;
        a.k = k.data();
        a.v = v.data();
        a.kv_stride = stride;
        a.kv_begin = begin.data() + t0;
        a.kv_end = end.data() + t0;
        a.extra_rows = extra.data();
        a.extra_offsets = offsets.data() + t0;  // offsets index into extra_rows as a whole
        a.out = out;
        return a;
    };
    const size_t per_tok = static_cast<size_t>(n_heads) * hd;
    std::vector<float> ref(per_tok * n_tok, kNaN);
    attention_ref(args(ref.data(), 0, n_tok));
    for (const auto& level : lv.list) {
        SCOPED_TRACE(level);
        ASSERT_TRUE(force_simd_level(level.c_str()));
        std::vector<float> out(ref.size(), kNaN);
        attention(args(out.data(), 0, n_tok), &pool3);
        for (size_t i = 0; i < out.size(); ++i) {
            ASSERT_LE(std::fabs(out[i] - ref[i]), 1e-5f * 4.5f) << "element " << i << ": " << out[i] << " vs " << ref[i];
        }
        EXPECT_TRUE(bits_equal(out.data() + 4 * per_tok, out.data() + 5 * per_tok, per_tok)) << "range+extras vs range";
        EXPECT_TRUE(bits_equal(out.data() + 6 * per_tok, out.data() + 7 * per_tok, per_tok)) << "extras only vs range";
        for (int t = 0; t < n_tok; ++t) {
            std::vector<float> one(per_tok, kNaN);
            attention(args(one.data(), t, 1), nullptr);
            ASSERT_TRUE(bits_equal(one.data(), out.data() + t * per_tok, per_tok)) << "token " << t;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// thread pool

TEST(ThreadPool, RunsEveryTaskOnce) {
    for (int threads : {1, 2, 3, 4}) {
        ThreadPool pool(threads);
        EXPECT_EQ(pool.size(), threads);
        for (int n : {0, 1, 2, 3, 7, 100, 1000}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            pool.parallel_for(n, [&](int i) { hits[static_cast<size_t>(i)].fetch_add(1); });
            for (int i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << threads << " threads, task " << i;
        }
    }
}

TEST(ThreadPool, OneThreadRunsInline) {
    ThreadPool pool(1);
    const auto me = std::this_thread::get_id();
    bool all_here = true;
    pool.parallel_for(50, [&](int) { all_here = all_here && std::this_thread::get_id() == me; });
    EXPECT_TRUE(all_here);
}

TEST(ThreadPool, RethrowsAfterAllTasksAndStaysUsable) {
    for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        std::atomic<int> ran{0};
        EXPECT_THROW(pool.parallel_for(64,
                                       [&](int i) {
                                           if (i == 5 || i == 40) throw std::runtime_error("task failed");
                                           ran.fetch_add(1);
                                       }),
                     std::runtime_error);
        EXPECT_EQ(ran.load(), 62);  // the others all ran
        std::atomic<int> after{0};
        pool.parallel_for(10, [&](int) { after.fetch_add(1); });
        EXPECT_EQ(after.load(), 10);
    }
}

TEST(ThreadPool, ConcurrentCallersAndNestedCalls) {
    ThreadPool pool(3);
    std::vector<std::thread> callers;
    std::atomic<long> total{0};
    for (int c = 0; c < 4; ++c) {
        callers.emplace_back([&] {
            for (int rep = 0; rep < 200; ++rep) {
                pool.parallel_for(13, [&](int i) { total.fetch_add(i + 1); });
            }
        });
    }
    for (auto& t : callers) t.join();
    EXPECT_EQ(total.load(), 4L * 200 * (13 * 14 / 2));

    std::atomic<int> inner{0};  // a task calling back into its own pool runs inline, no deadlock
    pool.parallel_for(4, [&](int) { pool.parallel_for(5, [&](int) { inner.fetch_add(1); }); });
    EXPECT_EQ(inner.load(), 20);
}

}  // namespace
}  // namespace tinyloop::kern
