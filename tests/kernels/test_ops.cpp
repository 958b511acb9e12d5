// What only the CPU kernels have, at every SIMD level this CPU has: the dispatcher, dequant_row
// against the format, the SIMD levels' documented reduction order, batch and thread invariance
// of matmul (bit for bit), the int8-activation path, and the thread pool. Every op against its
// reference on every back end is the op table's job (test_backend_ops.cpp).
//
// The seed is random per run and printed on failure; TL_TEST_SEED=<n> replays one.
#include <gtest/gtest.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

#include "kernels/cpu/cpu_internal.h"  // amx_call_count: evidence that AMX ran
#include "kernels/kernels.h"
#include "kernels/op_test_util.h"

namespace tinyloop::kern {
namespace {

using namespace tinyloop::kern::testing;

std::vector<float> run_matmul(const WeightView& w, const float* x, int n_tok, ThreadPool* pool) {
    std::vector<float> y(static_cast<size_t>(n_tok) * w.rows, kNaN);
    matmul(w, x, n_tok, y.data(), pool);
    return y;
}

// The dispatcher itself (levels against cpuid, TINYLOOP_SIMD) is tested in test_dispatch.cpp.

// ---------------------------------------------------------------------------------------------
// matmul and dequant_row

TEST(Ops, DequantRowMatchesTheFormat) {
    TL_SEED_TRACE;
    Rng rng(1);
    for (WType t : {WType::F32, WType::F16, WType::BF16, WType::Q8, WType::Q4, WType::Q2}) {
        for (int gs : {32, 64, 128}) {
            if (wtype_is_float(t) && gs != 32) continue;
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
    for (WType t : {WType::F32, WType::F16, WType::BF16, WType::Q8, WType::Q4, WType::Q2}) {
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

// bf16 <-> f32 (kernels.h): every bf16 widens and narrows back to itself; narrowing rounds to
// nearest, ties to even, overflows to infinity and keeps a NaN a NaN.
TEST(Ops, Bf16ConversionRoundsToNearestEven) {
    auto bits_of = [](float f) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        return u;
    };
    auto from_bits = [](uint32_t u) {
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    };
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_f32(static_cast<uint16_t>(h));
        ASSERT_EQ(bits_of(f), h << 16);
        if (std::isnan(f)) ASSERT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f)))) << h;
        else ASSERT_EQ(f32_to_bf16(f), h) << h;
    }
    EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000u)), 0x3f80u);  // a tie, even below: down
    EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000u)), 0x3f82u);  // a tie, odd below: up
    EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001u)), 0x3f81u);  // past the tie: up
    EXPECT_EQ(f32_to_bf16(from_bits(0xbf807fffu)), 0xbf80u);  // below the tie: down (sign kept)
    EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80u);  // FLT_MAX rounds to +inf
    EXPECT_EQ(f32_to_bf16(from_bits(0xff800000u)), 0xff80u);  // -inf stays
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(from_bits(0x7f800001u)))));  // a NaN whose payload is all low bits
}

// bf16 weights are widened exactly and then take the f32 kernels' sequence (matmul.cpp): at every
// level, thread count and token count, y has the bits of the f32 matrix holding the widened
// values. Both the bf16 bit pattern and its f32 twin come from the same random draw, so a kernel
// that rounded the weights or the activations anywhere (vdpbf16ps rounds x to bf16) would differ.
TEST(Ops, Bf16MatmulHasTheBitsOfTheWidenedF32Matrix) {
    TL_SEED_TRACE;
    Levels lv;
    Rng rng(7);
    ThreadPool pool3(3);
    int checked = 0;
    for (int cols : {1, 15, 16, 17, 100, 352, 1411}) {
        for (int rows : {1, 6, 67, 300}) {
            const Weights b(WType::BF16, rows, cols, 32, rng);
            std::vector<float> widened(static_cast<size_t>(rows) * cols);
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < cols; ++c) widened[static_cast<size_t>(r) * cols + c] = b.at(r, c);
            WeightView f;
            f.type = WType::F32;
            f.rows = rows;
            f.cols = cols;
            f.data = reinterpret_cast<const uint8_t*>(widened.data());
            for (int n_tok : {1, 5, 13}) {
                const auto x = rng.normals(static_cast<size_t>(n_tok) * cols);
                for (const auto& level : lv.list) {
                    SCOPED_TRACE(level + " cols " + std::to_string(cols) + " rows " + std::to_string(rows) + " tokens " +
                                 std::to_string(n_tok));
                    ASSERT_TRUE(force_simd_level(level.c_str()));
                    for (ThreadPool* p : {&pool3, static_cast<ThreadPool*>(nullptr)}) {
                        const auto yb = run_matmul(b.view(), x.data(), n_tok, p);
                        const auto yf = run_matmul(f, x.data(), n_tok, p);
                        ASSERT_TRUE(bits_equal(yb.data(), yf.data(), yb.size()));
                        checked += static_cast<int>(yb.size());
                    }
                }
            }
        }
    }
    std::printf("[ info ] %d bf16 matmul outputs equal the f32 ones of the widened weights bit for bit\n", checked);
}

// Float panels (kernels.h: f32_pack_panels; matmul.cpp, "Float panels"): the packed layout is
// [panel][column][16 rows] with zero padding; every output of the panel kernel equals
// matmul_f32_panel_ref (fma chains over blocks of 128 columns) bit for bit at every level, for
// 1..70 tokens, 1..3 threads and partial panels; a bf16 matrix gives the bits of its widened f32
// matrix; and a prompt in one call gives the rows of one token per call.
TEST(Ops, FloatPanelsFollowTheirReferenceBitForBit) {
    TL_SEED_TRACE;
    Levels lv;
    Rng rng(36);
    ThreadPool pool2(2), pool3(3);
    struct Switch {  // on for the test whatever TINYLOOP_F32_PANELS says; restored after
        bool was = f32_panels();
        Switch() { set_f32_panels(true); }
        ~Switch() { set_f32_panels(was); }
    } on;
    const std::vector<int> counts = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 17, 23, 24, 25, 36, 70};
    const int n_max = 70;
    int checked = 0, differs_from_rows = 0;
    for (int cols : {1, 37, 300, 512}) {  // 300: two full blocks of 128 and a partial one
        for (int rows : {1, 17, 33, 70}) {
            const Weights b(WType::BF16, rows, cols, 32, rng);
            const Weights f(WType::F32, rows, cols, 32, rng);
            std::vector<float> widened(static_cast<size_t>(rows) * cols);
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < cols; ++c) widened[static_cast<size_t>(r) * cols + c] = b.at(r, c);
            WeightView wv;
            wv.type = WType::F32;
            wv.rows = rows;
            wv.cols = cols;
            wv.data = reinterpret_cast<const uint8_t*>(widened.data());
            auto x = rng.normals(static_cast<size_t>(n_max) * cols);
            for (int c = 0; c < cols; c += 5) x[static_cast<size_t>(3) * cols + c] *= 1e4f;  // token 3: large terms
            const WeightView fv = f.view(), bv = b.view();
            for (const WeightView* src : {&fv, &bv, static_cast<const WeightView*>(&wv)}) {
                const char* what = src == &wv ? "widened bf16 as f32" : type_name(src->type);
                SCOPED_TRACE(std::string(what) + " " + std::to_string(rows) + "x" + std::to_string(cols));
                // Exactly the panels' bytes: a read past them is an error under ASan.
                std::vector<uint8_t> pk(f32_panel_bytes(*src));
                ASSERT_EQ(pk.size(), static_cast<size_t>((rows + 15) / 16) * 16 * cols *
                                         (src->type == WType::BF16 ? 2 : 4));
                f32_pack_panels(*src, pk.data());
                const size_t es = src->type == WType::BF16 ? 2 : 4;
                for (int r = 0; r < (rows + 15) / 16 * 16; ++r) {  // the layout, padding zero
                    for (int c = 0; c < cols; c += 1 + cols / 7) {
                        const uint8_t* got = pk.data() + ((static_cast<size_t>(r / 16) * cols + c) * 16 + r % 16) * es;
                        const uint8_t zeros[4] = {0, 0, 0, 0};
                        const uint8_t* want = r < rows ? src->data + (static_cast<size_t>(r) * cols + c) * es : zeros;
                        ASSERT_EQ(std::memcmp(got, want, es), 0) << "row " << r << " col " << c;
                    }
                }
                WeightView pv = *src;
                pv.fpanels = pk.data();
                std::vector<float> ref(static_cast<size_t>(n_max) * rows, kNaN);
                matmul_f32_panel_ref(*src, x.data(), n_max, ref.data());
                if (src == &wv) {  // bf16 == f32 of the widened values, reference and kernel alike
                    std::vector<float> refb(ref.size(), kNaN);
                    matmul_f32_panel_ref(bv, x.data(), n_max, refb.data());
                    ASSERT_TRUE(bits_equal(ref.data(), refb.data(), ref.size()));
                }
                for (const auto& level : lv.list) {
                    ASSERT_TRUE(force_simd_level(level.c_str()));
                    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
                        SCOPED_TRACE(level + " threads " + std::to_string(p ? p->size() : 1));
                        for (int n : counts) {
                            const auto y = run_matmul(pv, x.data(), n, p);
                            ASSERT_TRUE(bits_equal(y.data(), ref.data(), y.size())) << n << " tokens";
                            checked += static_cast<int>(y.size());
                        }
                        // Decode: one token per call, the rows of the prompt's call.
                        for (int t = 0; t < n_max; t += 7) {
                            const auto y = run_matmul(pv, x.data() + static_cast<size_t>(t) * cols, 1, p);
                            ASSERT_TRUE(bits_equal(y.data(), ref.data() + static_cast<size_t>(t) * rows, rows))
                                << "token " << t << " alone";
                        }
                    }
                }
                // Evidence that the panels ran: the row-major kernels round differently somewhere.
                const auto yr = run_matmul(*src, x.data(), n_max, nullptr);
                if (!bits_equal(yr.data(), ref.data(), yr.size())) ++differs_from_rows;
            }
        }
    }
    EXPECT_GT(differs_from_rows, 0);
    set_f32_panels(false);  // the switch: no panels to pack
    EXPECT_EQ(f32_panel_bytes(Weights(WType::F32, 16, 32, 32, rng).view()), 0u);
    set_f32_panels(true);
    EXPECT_EQ(f32_panel_bytes(Weights(WType::F16, 16, 32, 32, rng).view()), 0u);  // F16 keeps the row kernels
    std::printf("[ info ] %d float panel outputs equal their reference bit for bit\n", checked);
}

// The float panels' documented order (matmul.cpp, "Float panels"), written out here from the
// documentation and not from the kernel: per output an fma chain from +0 over each block of 128
// columns, the blocks' sums added in order. matmul_f32_panel_ref (which the kernels equal bit for
// bit, above) must give exactly these bits; and the order matters: one chain over all columns
// (the order before issue 36's fix) differs somewhere on these inputs.
TEST(Ops, FloatPanelOrderIsChainsOverBlocksOf128Columns) {
    TL_SEED_TRACE;
    Rng rng(3605);
    const int rows = 21, n_tok = 5;
    int single_chain_differs = 0;
    for (int cols : {1, 127, 128, 129, 300, 1000}) {
        SCOPED_TRACE("cols " + std::to_string(cols));
        const Weights f(WType::F32, rows, cols, 32, rng);
        const auto x = rng.normals(static_cast<size_t>(n_tok) * cols);
        std::vector<float> ref(static_cast<size_t>(n_tok) * rows, kNaN);
        matmul_f32_panel_ref(f.view(), x.data(), n_tok, ref.data());
        for (int t = 0; t < n_tok; ++t) {
            const float* xt = x.data() + static_cast<size_t>(t) * cols;
            for (int r = 0; r < rows; ++r) {
                float tot = 0.0f, chain = 0.0f;
                for (int b = 0; b < cols; b += 128) {
                    float acc = 0.0f;
                    for (int k = b; k < std::min(cols, b + 128); ++k) acc = std::fma(f.at(r, k), xt[k], acc);
                    tot = b == 0 ? acc : tot + acc;
                }
                for (int k = 0; k < cols; ++k) chain = std::fma(f.at(r, k), xt[k], chain);
                const float got = ref[static_cast<size_t>(t) * rows + r];
                ASSERT_TRUE(bits_equal(&got, &tot, 1)) << "token " << t << " row " << r << ": " << got << " vs " << tot;
                if (!bits_equal(&chain, &tot, 1)) ++single_chain_differs;
            }
        }
    }
    EXPECT_GT(single_chain_differs, 0);
    std::printf("[ info ] %d of %d outputs differ from one chain over all columns\n", single_chain_differs, 6 * 21 * 5);
}

// Attention over many queries at once (a prompt: causal ranges, GQA, queries that share their
// first row and some that do not, an empty range) gives every query the bits of a call with that
// query alone, at every level and thread count: the several-query kernel (attend_multi) keeps
// attend_one's order.
TEST(Ops, AttentionOfManyQueriesHasTheBitsOfOneAtATime) {
    TL_SEED_TRACE;
    Levels lv;
    Rng rng(26);
    ThreadPool pool2(2);
    for (int head_dim : {24, 32, 64, 128}) {
        const int n_heads = 4, n_kv = 2, n_tok = 23, rows = 90, stride = n_kv * head_dim;
        const auto q = rng.normals(static_cast<size_t>(n_tok) * n_heads * head_dim);
        const auto k = rng.normals(static_cast<size_t>(rows) * stride);
        const auto v = rng.normals(static_cast<size_t>(rows) * stride);
        std::vector<int> b(n_tok), e(n_tok);
        for (int t = 0; t < n_tok; ++t) {
            b[t] = t < 15 ? 0 : 9;   // two groups of first rows
            e[t] = 60 + t + (t % 3); // causal-like, not monotone
        }
        e[7] = 0;  // an empty range: zeros
        b[20] = 3;
        for (const auto& level : lv.list) {
            SCOPED_TRACE(level + " head_dim " + std::to_string(head_dim));
            ASSERT_TRUE(force_simd_level(level.c_str()));
            AttentionArgs a;
            a.k = k.data();
            a.v = v.data();
            a.n_heads = n_heads;
            a.n_kv_heads = n_kv;
            a.head_dim = head_dim;
            a.kv_stride = stride;
            std::vector<float> all(q.size(), kNaN), one(static_cast<size_t>(n_heads) * head_dim, kNaN);
            a.q = q.data();
            a.out = all.data();
            a.n_tok = n_tok;
            a.kv_begin = b.data();
            a.kv_end = e.data();
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool2}) {
                // Fresh NaN per pass: the 2-thread pass must not pass on what the 1-thread one wrote.
                std::fill(all.begin(), all.end(), kNaN);
                attention(a, p);
                for (int t = 0; t < n_tok; ++t) {
                    std::fill(one.begin(), one.end(), kNaN);
                    AttentionArgs a1 = a;
                    a1.q = q.data() + static_cast<size_t>(t) * n_heads * head_dim;
                    a1.out = one.data();
                    a1.n_tok = 1;
                    a1.kv_begin = &b[t];
                    a1.kv_end = &e[t];
                    attention(a1, nullptr);
                    ASSERT_TRUE(bits_equal(one.data(), all.data() + static_cast<size_t>(t) * n_heads * head_dim, one.size()))
                        << "token " << t << ", threads " << (p ? p->size() : 1);
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

// Row panels (kernels.h: i8_pack_panels): where this CPU uses them (AVX512-VNNI), every output of
// the panel kernel equals matmul_i8_panel_ref bit for bit, for any token count, tile remainder,
// thread split and partial last panel; it stays within the int8 reference's bound; and levels
// without the panel kernel ignore the panels (same bits as the plain view).
struct Packed {
    std::vector<uint8_t> bytes;
    WeightView view;
    explicit Packed(const WeightView& v) : view(v) {
        const size_t n = i8_panel_bytes(v);
        bytes.assign(n + 64, 0xee);
        auto* p = bytes.data();
        p += (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
        i8_pack_panels(v, p);
        view.panels = p;
    }
};

TEST(Int8Act, PanelsFollowTheirReferenceBitForBit) {
    TL_SEED_TRACE;
    Levels lv;
    Int8Act on(true);
    {
        Rng probe(1);
        const Weights w(WType::Q8, 16, 32, 32, probe);
        if (i8_panel_bytes(w.view()) == 0) GTEST_SKIP() << "this CPU's kernels use no row panels (no AVX512-VNNI)";
    }
    std::printf("[ info ] panel calls of 16+ tokens use %s\n", int8_amx_active() ? "AMX tiles" : "vpdpbusd (no AMX)");
    Rng rng(24);
    ThreadPool pool2(2), pool3(3);
    const auto same = [](const float* p, const float* q, size_t k) {  // bits, any NaN equal to any NaN
        for (size_t i = 0; i < k; ++i) {
            if (std::memcmp(&p[i], &q[i], 4) != 0 && !(std::isnan(p[i]) && std::isnan(q[i]))) return false;
        }
        return true;
    };
    struct Case {
        WType type;
        int gs, rows, cols;
    };
    const std::vector<Case> cases = {
        {WType::Q8, 32, 1, 32},    {WType::Q4, 32, 7, 96},     {WType::Q8, 32, 16, 160},  {WType::Q4, 32, 33, 352},
        {WType::Q8, 64, 257, 192}, {WType::Q4, 64, 130, 1408}, {WType::Q8, 128, 70, 384}, {WType::Q4, 128, 48, 1408},
    };
    for (const Case& cs : cases) {
        SCOPED_TRACE(std::string(type_name(cs.type)) + " gs " + std::to_string(cs.gs) + " " +
                     std::to_string(cs.rows) + "x" + std::to_string(cs.cols));
        const Weights w(cs.type, cs.rows, cs.cols, cs.gs, rng);
        const Packed pk(w.view());
        const int n = 70;  // 16 tokens and more: the AMX kernel where the CPU has it
        auto x = rng.normals(static_cast<size_t>(n) * cs.cols);
        for (int t = 0; t < n; t += 4) {
            for (int c = 0; c < cs.cols; ++c) x[static_cast<size_t>(t) * cs.cols + c] *= 1e3f;
        }
        x[static_cast<size_t>(5) * cs.cols + 3] = kNaN;  // token 5's first block is NaN
        std::vector<float> want(static_cast<size_t>(n) * cs.rows, kNaN), ref(want.size(), kNaN);
        matmul_i8_panel_ref(w.view(), x.data(), n, want.data());
        matmul_int8_ref(w.view(), x.data(), n, ref.data());
        std::vector<int8_t> q(static_cast<size_t>(cs.cols));
        std::vector<float> dx(static_cast<size_t>(cs.cols / 32));
        for (int t = 0; t < n; ++t) {  // within 2e-5 of sum_c |W[r,c] xq_c dx_b| of the int8 reference
            quantize_row_int8(x.data() + static_cast<size_t>(t) * cs.cols, cs.cols, q.data(), dx.data());
            for (int r = 0; r < cs.rows; ++r) {
                const size_t i = static_cast<size_t>(t) * cs.rows + r;
                if (t == 5) {
                    ASSERT_TRUE(std::isnan(want[i]));
                    continue;
                }
                double norm = 0.0;
                for (int c = 0; c < cs.cols; ++c) norm += std::fabs(w.at(r, c) * q[c] * dx[c / 32]);
                ASSERT_LE(std::fabs(static_cast<double>(want[i]) - ref[i]), 2e-5 * norm + 1e-30)
                    << "token " << t << " row " << r << ": " << want[i] << " vs int8 reference " << ref[i];
            }
        }
        ASSERT_TRUE(force_simd_level("avx512"));
        for (int k = 1; k <= 13; ++k) {  // every token-tile remainder, from token 2 on
            const int t0 = k == 13 ? 0 : 2;
            const int cnt = std::min(k, n - t0);
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
                const auto y = run_matmul(pk.view, x.data() + static_cast<size_t>(t0) * cs.cols, cnt, p);
                ASSERT_TRUE(same(y.data(), want.data() + static_cast<size_t>(t0) * cs.rows,
                                       static_cast<size_t>(cnt) * cs.rows))
                    << cnt << " tokens from " << t0 << ", threads " << (p ? p->size() : 0);
            }
        }
        for (int cnt : {16, 17, 33, 64, 65, 70}) {  // whole and partial 16-token tiles, 4-tile groups
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool3}) {
                const auto y = run_matmul(pk.view, x.data(), cnt, p);
                ASSERT_TRUE(same(y.data(), want.data(), static_cast<size_t>(cnt) * cs.rows))
                    << cnt << " tokens, threads " << (p ? p->size() : 0);
            }
        }
        for (const auto& level : lv.list) {  // levels without the panel kernel: the plain view's bits
            if (level == "avx512") continue;
            ASSERT_TRUE(force_simd_level(level.c_str()));
            const auto a = run_matmul(pk.view, x.data(), n, &pool2), b = run_matmul(w.view(), x.data(), n, &pool2);
            ASSERT_TRUE(same(a.data(), b.data(), a.size())) << level;
        }
        ASSERT_TRUE(force_simd_level(lv.saved.c_str()));
    }
}

// The AMX kernel shares the thread's tiles with whoever else uses AMX in the process (llama.cpp's
// ggml configures a thread's tiles once and keeps using them; oneDNN under PyTorch does too): a
// configuration present before a call is the one present after it, and none stays none.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("amx-tile"))) void tile_load_config(const uint8_t* c) {
    __asm__ __volatile__("" : : "r"(c) : "memory");
    _tile_loadconfig(c);
}
__attribute__((target("amx-tile"))) void tile_store_config(uint8_t* c) {
    _tile_storeconfig(c);
    __asm__ __volatile__("" : : "r"(c) : "memory");
}
__attribute__((target("amx-tile"))) void tile_release_all() { _tile_release(); }

TEST(Int8Act, AmxKeepsAnotherUsersTileConfiguration) {
    if (!int8_amx_active()) GTEST_SKIP() << "this CPU (or kernel) gives no AMX tiles";
    Int8Act on(true);
    Rng rng(25);
    const Weights w(WType::Q4, 40, 96, 32, rng);
    const Packed pk(w.view());
    const auto x = rng.normals(static_cast<size_t>(20) * 96);
    alignas(64) uint8_t theirs[64] = {}, after[64];
    theirs[0] = 1;                      // palette 1
    theirs[16] = 8;                     // tmm0: 8 bytes a row
    theirs[48] = 2;                     // tmm0: 2 rows
    theirs[16 + 2 * 7] = 64;            // tmm7: 64 bytes a row
    theirs[48 + 7] = 16;                // tmm7: 16 rows
    tile_load_config(theirs);
    const uint64_t calls = tinyloop::kern::detail::amx_call_count();
    const auto y = run_matmul(pk.view, x.data(), 20, nullptr);
    tile_store_config(after);
    ASSERT_EQ(tinyloop::kern::detail::amx_call_count(), calls + 1) << "the 20-token call did not take the AMX kernel";
    EXPECT_EQ(std::memcmp(theirs, after, 64), 0) << "the caller's tile configuration was not given back";
    tile_release_all();
    const auto y2 = run_matmul(pk.view, x.data(), 20, nullptr);
    tile_store_config(after);
    EXPECT_EQ(tinyloop::kern::detail::amx_call_count(), calls + 2) << "the second call did not take the AMX kernel";
    EXPECT_EQ(after[0], 0) << "a thread without tiles before the call has tiles configured after it";
    EXPECT_TRUE(bits_equal(y.data(), y2.data(), y.size()));
}
#endif

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
// The opt-in vdpbf16ps path (kernels.h set_bf16_dot): each output is the f32 sum of the
// bf16-rounded activations times the bf16 weights, within the rounding of an f32 accumulation of
// those exact products; it really ran (its call count); switched off, the default path's bits are
// back (the widened-f32 equality above).
TEST(Ops, Bf16DotIsTheProductOfBf16RoundedActivations) {
    TL_SEED_TRACE;
    struct Restore {  // the level and the switch as they were, however the test ends
        std::string level = simd_level();
        ~Restore() {
            set_bf16_dot(false);
            force_simd_level(level.c_str());
        }
    } restore;
    if (!__builtin_cpu_supports("avx512bf16") || !force_simd_level("avx512"))
        GTEST_SKIP() << "this CPU (or TINYLOOP_SIMD) offers no AVX512-BF16: the vdpbf16ps kernel cannot run here";
    Rng rng(11);
    ThreadPool pool3(3);
    set_bf16_dot(true);
    ASSERT_TRUE(bf16_dot_active());
    const uint64_t calls0 = bf16_dot_call_count();
    int checked = 0;
    for (int cols : {1, 31, 32, 100, 352, 1411}) {
        for (int rows : {1, 6, 67, 300}) {
            const Weights b(WType::BF16, rows, cols, 32, rng);
            for (int n_tok : {1, 5, 8, 13}) {
                SCOPED_TRACE("cols " + std::to_string(cols) + " rows " + std::to_string(rows) + " tokens " +
                             std::to_string(n_tok));
                const auto x = rng.normals(static_cast<size_t>(n_tok) * cols);
                for (ThreadPool* p : {&pool3, static_cast<ThreadPool*>(nullptr)}) {
                    const auto y = run_matmul(b.view(), x.data(), n_tok, p);
                    for (int t = 0; t < n_tok; ++t)
                        for (int r = 0; r < rows; ++r) {
                            double ref = 0, mag = 0;
                            for (int c = 0; c < cols; ++c) {
                                const double pr = static_cast<double>(bf16_to_f32(f32_to_bf16(x[static_cast<size_t>(t) * cols + c]))) *
                                                  b.at(r, c);
                                ref += pr;
                                mag += std::fabs(pr);
                            }
                            const double got = y[static_cast<size_t>(t) * rows + r];
                            ASSERT_NEAR(got, ref, 1e-6 * mag + 1e-30) << "t " << t << " r " << r;
                            ++checked;
                        }
                }
            }
        }
    }
    EXPECT_GT(bf16_dot_call_count(), calls0);
    // Off again: the widened-f32 bits (the default, exact path).
    set_bf16_dot(false);
    const Weights b(WType::BF16, 67, 352, 32, rng);
    std::vector<float> widened(static_cast<size_t>(67) * 352);
    for (int r = 0; r < 67; ++r)
        for (int c = 0; c < 352; ++c) widened[static_cast<size_t>(r) * 352 + c] = b.at(r, c);
    WeightView f;
    f.type = WType::F32;
    f.rows = 67;
    f.cols = 352;
    f.data = reinterpret_cast<const uint8_t*>(widened.data());
    const auto x = rng.normals(5 * 352);
    const auto yb = run_matmul(b.view(), x.data(), 5, &pool3);
    const auto yf = run_matmul(f, x.data(), 5, &pool3);
    EXPECT_TRUE(bits_equal(yb.data(), yf.data(), yb.size()));
    EXPECT_GT(checked, 0);
}

}  // namespace tinyloop::kern
