// Golden whole-model test: the engine's logits against an independent double-precision
// reference forward written straight from FORMAT.md §1 (and §1a's input injection).
//
// The reference shares nothing with the engine's kernels: it includes only the public header
// and the standard library, and runs plain loops in double. Its weights come from
// tensor_as_f32 (the engine's dequantization of what is stored: "reference on the dequantized
// weights"), so a quantized model is compared at float-arithmetic accuracy, not at
// quantization accuracy. So that a wrong dequantization cannot hide behind that choice, the
// dequantized weights are themselves checked against the values handed to save_model: exactly
// for f32, exactly the round-to-nearest-even binary16 value for f16, and within the
// quantization error of the original values (plus a grid check) for q8/q4/q2.
//
// Every model is random (random_model_spec), written with the engine's own writer into
// ::testing::TempDir() and loaded back. Each case is compared at every loop depth
// 1..max_loops, every position, every vocabulary entry.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>
#include <map>
#include <ostream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/kernels.h"  // only for set_int8_activations: which path the engine runs
#include "tinyloop/tinyloop.h"

namespace {

using tinyloop::DType;
using tinyloop::HParams;

// Per position row: max_j |engine_j - reference_j| / max_j |reference_j| must not exceed this.
// A float engine on these small shapes lands near 1e-7..1e-6; 1e-5 leaves room for a different
// summation order and still catches any real mistake (a wrong angle, a wrong head mapping, a
// missing residual, an off-by-one in the causal mask all give errors of order 1).
constexpr double kRowRelTol = 1e-5;
// With int8 activations (the CPU default for q8/q4 weights, kernels.h) the reference quantizes
// each matrix input exactly as the engine defines it. The engine's float activations can still
// land on the other side of a rounding boundary from the reference's double ones: one code off
// by one moves an output by |w| * max|x| / 127, and the random models amplify it over the passes
// (worst row measured ~7e-3 at depth 4). So every row must be within kRowRelTolInt8 (a wiring
// mistake is of order 1), and the median row within kMedianRelTolInt8: most rows see no flipped
// code and then agree to float accuracy (median ~2e-7 measured), which a different quantization
// (block size, rounding, scale) or a missing one cannot: a reference without the activation
// quantization puts the median row at 1e-2..3e-2 on these cases.
constexpr double kRowRelTolInt8 = 3e-2;
constexpr double kMedianRelTolInt8 = 1e-5;

struct Case {
    std::string name;
    HParams hp;
    DType dtype = DType::F32;
    int group_size = 32;
    int threads = 2;
    int prefill_chunk = 64;
    int n_tokens = 10;
    uint64_t seed = 1;
    tinyloop::Backend backend = tinyloop::Backend::Cpu;
};

// gtest prints a failing parameter with this instead of a byte dump.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

HParams make_hp(int vocab, int d, int n_heads, int n_kv, int head_dim, int d_ff, int n_pre,
                int n_loop, int max_loops, bool tied, float theta = 10000.0f,
                float eps = 1e-5f) {
    HParams hp;
    hp.vocab_size = vocab;
    hp.d_model = d;
    hp.n_heads = n_heads;
    hp.n_kv_heads = n_kv;
    hp.head_dim = head_dim;
    hp.d_ff = d_ff;
    hp.n_pre_blocks = n_pre;
    hp.n_loop_layers = n_loop;
    hp.default_loops = std::min(2, max_loops);
    hp.max_loops = max_loops;
    hp.max_seq_len = 32;
    hp.rope_theta = theta;
    hp.norm_eps = eps;
    hp.tie_embeddings = tied;
    return hp;
}

std::vector<Case> all_cases() {
    std::vector<Case> cs;
    auto add = [&](std::string name, HParams hp, DType dt, int gs, int threads, int chunk,
                   int n, uint64_t seed) {
        Case c;
        c.name = std::move(name);
        c.hp = hp;
        c.dtype = dt;
        c.group_size = gs;
        c.threads = threads;
        c.prefill_chunk = chunk;
        c.n_tokens = n;
        c.seed = seed;
        cs.push_back(c);
    };
    // name                                 vocab  d  nh nkv hd  dff pre loop maxL tied
    add("f32_mha_tied_pre1_loop2", make_hp(300, 32, 4, 4, 8, 96, 1, 2, 4, true), DType::F32, 32,
        2, 64, 10, 11);
    add("f32_gqa_untied_pre0_loop1_chunk3_t1",
        make_hp(300, 64, 4, 2, 16, 96, 0, 1, 6, false, 100.0f), DType::F32, 32, 1, 3, 11, 12);
    add("f16_gqa_tied_pre2_loop1_d48",
        make_hp(300, 48, 4, 2, 8, 80, 2, 1, 5, true, 10000.0f, 1e-6f), DType::F16, 32, 2, 64, 9,
        13);
    add("q8_g32_mha_untied_pre1_loop2_chunk3", make_hp(320, 64, 4, 4, 8, 96, 1, 2, 4, false),
        DType::Q8, 32, 2, 3, 12, 14);
    add("q4_g32_gqa_tied_pre0_loop2", make_hp(300, 32, 4, 2, 8, 96, 0, 2, 6, true), DType::Q4,
        32, 2, 64, 10, 15);
    add("q2_g32_gqa4to1_untied_pre2_loop1", make_hp(300, 64, 4, 1, 16, 128, 2, 1, 4, false),
        DType::Q2, 32, 2, 64, 9, 16);
    add("q4_g64_gqa_tied_pre1_loop1", make_hp(300, 64, 4, 2, 16, 128, 1, 1, 5, true), DType::Q4,
        64, 2, 64, 10, 17);
    // Input injection (FORMAT.md §1a, file version 2): prelude output, and the embedding alone.
    auto injecting = [](HParams hp) {
        hp.loop_input = tinyloop::LoopInput::Add;
        return hp;
    };
    add("f32_inject_gqa_tied_pre1_loop2_chunk3", injecting(make_hp(300, 32, 4, 2, 8, 96, 1, 2, 5, true)),
        DType::F32, 32, 2, 3, 10, 18);
    add("q8_g32_inject_mha_untied_pre0_loop1", injecting(make_hp(300, 64, 4, 4, 16, 96, 0, 1, 6, false)),
        DType::Q8, 32, 2, 64, 9, 19);
    // bf16 matrices (file version 3), alone and with input injection (a version-2 feature, so
    // the version is the larger of the two reasons).
    add("bf16_gqa_untied_pre1_loop2_chunk3", make_hp(300, 64, 4, 2, 16, 96, 1, 2, 5, false), DType::BF16, 32, 2, 3,
        11, 20);
    add("bf16_inject_mha_tied_pre2_loop1", injecting(make_hp(300, 48, 4, 4, 12, 80, 2, 1, 4, true)), DType::BF16, 32,
        2, 64, 9, 21);
    return cs;
}

// A written-and-loaded model plus the spec it came from; removes its file when done.
struct Built {
    tinyloop::ModelSpec spec;
    std::string path;
    tinyloop::ModelHandle model;
    ~Built() {
        model.reset();
        std::error_code ec;
        if (!path.empty()) std::filesystem::remove(path, ec);
    }
};

std::unique_ptr<Built> build(const Case& c) {
    auto b = std::make_unique<Built>();
    b->spec = tinyloop::random_model_spec(c.hp, c.seed, c.dtype, c.group_size);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string test = info ? std::string(info->name()) : std::string("x");
    for (char& ch : test)
        if (ch == '/') ch = '_';
    b->path = (std::filesystem::path(::testing::TempDir()) /
               ("tl_golden_" + std::to_string(::getpid()) + "_" + test + "_" + c.name + ".tinyloop"))
                  .string();
    tinyloop::save_model(b->path, b->spec);
    tinyloop::LoadOptions opts;
    opts.backend = c.backend;
    opts.threads = c.threads;
    opts.prefill_chunk = c.prefill_chunk;
    b->model = tinyloop::load_model_handle(b->path, opts);
    return b;
}

std::vector<int32_t> random_tokens(const tinyloop::Model* m, int n, uint64_t seed) {
    int limit = tinyloop::model_info(m).tokenizer_vocab;
    if (limit <= 0) limit = 256;
    limit = std::min(limit, tinyloop::model_hparams(m).vocab_size);
    std::mt19937_64 rng(seed * 7919 + 3);
    std::uniform_int_distribution<int32_t> dist(0, limit - 1);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = dist(rng);
    return t;
}

// ---------------------------------------------------------------------------------------------
// The reference (FORMAT.md §1), double precision, plain loops.
// ---------------------------------------------------------------------------------------------

using Vec = std::vector<double>;

struct RefMatrix {
    int rows = 0, cols = 0;
    Vec w;  // [rows, cols] row-major: y = W x
    bool int8_act = false;  // the input is quantized to int8 per 32-block first (kernels.h)
};

// Whether fetch_matrix marks q8/q4 matrices for int8 activations (set per test).
bool g_ref_int8 = false;

struct RefLayer {
    Vec attn_norm, mlp_norm;
    RefMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct RefModel {
    HParams hp;
    RefMatrix embed, head;
    Vec final_norm;
    std::vector<RefLayer> pre, loop;
};

Vec fetch(const tinyloop::Model* m, const std::string& name, size_t expect) {
    std::vector<float> f = tinyloop::tensor_as_f32(m, name);
    EXPECT_EQ(f.size(), expect) << "tensor_as_f32(" << name << ") size";
    f.resize(expect, 0.0f);
    return Vec(f.begin(), f.end());
}

RefMatrix fetch_matrix(const tinyloop::Model* m, const std::string& name, int rows, int cols) {
    RefMatrix r;
    r.rows = rows;
    r.cols = cols;
    r.w = fetch(m, name, static_cast<size_t>(rows) * cols);
    for (const auto& t : tinyloop::model_info(m).tensors) {
        if (t.name == name)
            r.int8_act = g_ref_int8 && (t.dtype == DType::Q8 || t.dtype == DType::Q4) &&
                         t.group_size % 32 == 0;
    }
    return r;
}

RefLayer fetch_layer(const tinyloop::Model* m, const HParams& hp, const std::string& p) {
    const int d = hp.d_model, H = hp.n_heads * hp.head_dim, Hkv = hp.n_kv_heads * hp.head_dim;
    RefLayer l;
    l.attn_norm = fetch(m, p + ".attn_norm", d);
    l.mlp_norm = fetch(m, p + ".mlp_norm", d);
    l.wq = fetch_matrix(m, p + ".wq", H, d);
    l.wk = fetch_matrix(m, p + ".wk", Hkv, d);
    l.wv = fetch_matrix(m, p + ".wv", Hkv, d);
    l.wo = fetch_matrix(m, p + ".wo", d, H);
    l.w_gate = fetch_matrix(m, p + ".w_gate", hp.d_ff, d);
    l.w_up = fetch_matrix(m, p + ".w_up", hp.d_ff, d);
    l.w_down = fetch_matrix(m, p + ".w_down", d, hp.d_ff);
    return l;
}

RefModel fetch_model(const tinyloop::Model* m) {
    RefModel r;
    r.hp = tinyloop::model_hparams(m);
    const HParams& hp = r.hp;
    r.embed = fetch_matrix(m, "embed", hp.vocab_size, hp.d_model);
    r.head = hp.tie_embeddings ? r.embed : fetch_matrix(m, "head", hp.vocab_size, hp.d_model);
    r.final_norm = fetch(m, "final_norm", hp.d_model);
    for (int i = 0; i < hp.n_pre_blocks; ++i)
        r.pre.push_back(fetch_layer(m, hp, "pre." + std::to_string(i)));
    for (int j = 0; j < hp.n_loop_layers; ++j)
        r.loop.push_back(fetch_layer(m, hp, "loop." + std::to_string(j)));
    return r;
}

// The int8 activation quantization as kernels.h defines it, on the float value of x: per
// 32-block dx = max|x| / 127, x' = dx * round_half_even(x * (127 / max|x|)).
Vec int8_activations(const Vec& x) {
    Vec out(x.size());
    for (size_t b = 0; b < x.size(); b += 32) {
        float amax = 0.0f;
        for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(static_cast<float>(x[i])));
        const float dx = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (size_t i = b; i < b + 32; ++i)
            out[i] = static_cast<double>(dx) * std::nearbyint(static_cast<float>(x[i]) * inv);
    }
    return out;
}

Vec matvec(const RefMatrix& W, const Vec& xin) {
    const Vec x = W.int8_act ? int8_activations(xin) : xin;
    Vec y(W.rows, 0.0);
    for (int o = 0; o < W.rows; ++o) {
        double s = 0.0;
        for (int i = 0; i < W.cols; ++i) s += W.w[static_cast<size_t>(o) * W.cols + i] * x[i];
        y[o] = s;
    }
    return y;
}

// RMSNorm(x, g) = x / sqrt(mean(x^2) + eps) * g
Vec rmsnorm(const Vec& x, const Vec& g, double eps) {
    double ss = 0.0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * g[i];
    return y;
}

// Rotates the pair (i, i + head_dim/2) of every head by p * theta^(-2i/head_dim).
void rope(Vec& v, int n_heads, int head_dim, int pos, double theta) {
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; ++h) {
        for (int i = 0; i < half; ++i) {
            const double angle = pos * std::pow(theta, -2.0 * i / head_dim);
            const double c = std::cos(angle), s = std::sin(angle);
            double& x0 = v[static_cast<size_t>(h) * head_dim + i];
            double& x1 = v[static_cast<size_t>(h) * head_dim + i + half];
            const double a = x0, b = x1;
            x0 = a * c - b * s;
            x1 = a * s + b * c;
        }
    }
}

// One pre-norm block over the whole (causal) sequence.
void block(const RefLayer& L, const HParams& hp, std::vector<Vec>& h) {
    const int n = static_cast<int>(h.size());
    const int hd = hp.head_dim, group = hp.n_heads / hp.n_kv_heads;
    const double eps = hp.norm_eps, theta = hp.rope_theta;
    std::vector<Vec> q(n), k(n), v(n);
    for (int p = 0; p < n; ++p) {
        const Vec a = rmsnorm(h[p], L.attn_norm, eps);
        q[p] = matvec(L.wq, a);
        k[p] = matvec(L.wk, a);
        v[p] = matvec(L.wv, a);
        rope(q[p], hp.n_heads, hd, p, theta);
        rope(k[p], hp.n_kv_heads, hd, p, theta);
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    for (int p = 0; p < n; ++p) {
        Vec cat(static_cast<size_t>(hp.n_heads) * hd, 0.0);
        for (int qh = 0; qh < hp.n_heads; ++qh) {
            const int kvh = qh / group;
            Vec sc(p + 1);
            double mx = -INFINITY;
            for (int t = 0; t <= p; ++t) {
                double s = 0.0;
                for (int i = 0; i < hd; ++i)
                    s += q[p][static_cast<size_t>(qh) * hd + i] *
                         k[t][static_cast<size_t>(kvh) * hd + i];
                sc[t] = s * scale;
                mx = std::max(mx, sc[t]);
            }
            double z = 0.0;
            for (int t = 0; t <= p; ++t) {
                sc[t] = std::exp(sc[t] - mx);
                z += sc[t];
            }
            for (int t = 0; t <= p; ++t)
                for (int i = 0; i < hd; ++i)
                    cat[static_cast<size_t>(qh) * hd + i] +=
                        sc[t] / z * v[t][static_cast<size_t>(kvh) * hd + i];
        }
        const Vec o = matvec(L.wo, cat);
        for (int i = 0; i < hp.d_model; ++i) h[p][i] += o[i];
        const Vec mm = rmsnorm(h[p], L.mlp_norm, eps);
        const Vec g = matvec(L.w_gate, mm), u = matvec(L.w_up, mm);
        Vec act(g.size());
        for (size_t i = 0; i < g.size(); ++i) act[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
        const Vec dn = matvec(L.w_down, act);
        for (int i = 0; i < hp.d_model; ++i) h[p][i] += dn[i];
    }
}

// Reference logits at every depth 1..max_loops: out[L-1] is n x vocab, row-major. The forward
// at depth L is the first L passes followed by the head, so one run yields every depth.
std::vector<Vec> reference_logits(const RefModel& r, const std::vector<int32_t>& tokens) {
    const HParams& hp = r.hp;
    const int n = static_cast<int>(tokens.size()), d = hp.d_model, V = hp.vocab_size;
    std::vector<Vec> h(n, Vec(d));
    for (int p = 0; p < n; ++p)
        for (int i = 0; i < d; ++i) h[p][i] = r.embed.w[static_cast<size_t>(tokens[p]) * d + i];
    for (const RefLayer& L : r.pre) block(L, hp, h);
    const std::vector<Vec> e = h;  // the prelude output, re-injected with loop_input "add" (§1a)
    std::vector<Vec> out;
    for (int pass = 1; pass <= hp.max_loops; ++pass) {
        if (pass > 1 && hp.loop_input == tinyloop::LoopInput::Add)
            for (int p = 0; p < n; ++p)
                for (int i = 0; i < d; ++i) h[p][i] += e[p][i];
        for (const RefLayer& L : r.loop) block(L, hp, h);
        Vec logits(static_cast<size_t>(n) * V);
        for (int p = 0; p < n; ++p) {
            const Vec x = rmsnorm(h[p], r.final_norm, hp.norm_eps);
            const Vec y = matvec(r.head, x);
            std::copy(y.begin(), y.end(), logits.begin() + static_cast<ptrdiff_t>(p) * V);
        }
        out.push_back(std::move(logits));
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Independent checks of the stored weights.
// ---------------------------------------------------------------------------------------------

// Round-to-nearest-even to IEEE binary16 (subnormals included), returned as a double. The
// scaling by a power of two is exact, and nearbyint rounds ties to even in the default mode.
double round_to_f16(double x) {
    if (x == 0.0 || !std::isfinite(x)) return x;
    int e = 0;
    std::frexp(std::fabs(x), &e);  // |x| = m * 2^e, m in [0.5, 1): leading bit weight 2^(e-1)
    int lead = e - 1;
    if (lead < -14) lead = -14;  // subnormal range: quantum 2^-24
    const double quantum = std::ldexp(1.0, lead - 10);
    return std::nearbyint(x / quantum) * quantum;
}

// Round-to-nearest-even to bfloat16 (8 significant bits, binary32's exponent range), as a double.
double round_to_bf16(double x) {
    if (x == 0.0 || !std::isfinite(x)) return x;
    int e = 0;
    std::frexp(std::fabs(x), &e);
    const double quantum = std::ldexp(1.0, std::max(e - 1, -126) - 7);
    return std::nearbyint(x / quantum) * quantum;
}

int bits_of(DType t) {
    switch (t) {
        case DType::Q8: return 8;
        case DType::Q4: return 4;
        case DType::Q2: return 2;
        default: return 0;
    }
}

// Checks one quantized tensor's dequantized values against the originals. Per group:
//  * at most 2^bits distinct values (they are scale * (q - zero));
//  * root-sum-square error <= sqrt(group) * (step/2 + f16 allowance), step = range/(2^bits-1):
//    what the full-range (min/max) quantizer guarantees element by element; the engine's
//    range search minimises squared error, so it can only do better;
//  * no element off by more than the group's range.
// Per tensor: the total rss error is at most 1.25 x that of a plain min/max quantizer computed
// here (grid aligned on each group's min), plus the f16 allowance: a working range search
// lands at or below 1.0 x; a decoder that mixes up codes, scales or zeros lands far above.
void check_quantized(const tinyloop::TensorData& td, const std::vector<float>& deq,
                     double* rss_vs_minmax) {
    ASSERT_EQ(td.shape.size(), 2u) << td.name;
    const int64_t rows = td.shape[0], cols = td.shape[1];
    const int gs = td.group_size, bits = bits_of(td.dtype);
    ASSERT_GT(gs, 0) << td.name;
    ASSERT_EQ(cols % gs, 0) << td.name;
    const double levels = std::ldexp(1.0, bits) - 1.0;
    int reported = 0;
    double worst_ratio = 0.0, sse_ref_total = 0.0, sse_total = 0.0, slack_sq_total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g0 = 0; g0 < cols; g0 += gs) {
            const size_t base = static_cast<size_t>(r * cols + g0);
            double mn = INFINITY, mx = -INFINITY;
            for (int i = 0; i < gs; ++i) {
                mn = std::min(mn, static_cast<double>(td.values[base + i]));
                mx = std::max(mx, static_cast<double>(td.values[base + i]));
            }
            const double range = mx - mn, step = range / levels;
            double sse_ref = 0.0, sse = 0.0, max_err = 0.0;
            std::set<float> distinct;
            bool finite = true;
            for (int i = 0; i < gs; ++i) {
                const double w = td.values[base + i];
                const double e = deq[base + i];
                finite = finite && std::isfinite(e);
                distinct.insert(deq[base + i]);
                const double qref = step > 0 ? mn + step * std::nearbyint((w - mn) / step) : mn;
                sse_ref += (w - qref) * (w - qref);
                sse += (w - e) * (w - e);
                max_err = std::max(max_err, std::fabs(w - e));
            }
            // f16 scale: relative error <= 2^-11, times |q - zero| <= levels; f16 zero: error
            // <= levels * 2^-11 codes. Together <= levels * 2^-10 steps; 0.05 step on top.
            const double slack = step * (0.05 + levels * std::ldexp(1.0, -10)) +
                                 1e-7 * std::max(std::fabs(mn), std::fabs(mx));
            const double bound = std::sqrt(static_cast<double>(gs)) * (0.5 * step + slack);
            sse_ref_total += sse_ref;
            sse_total += sse;
            slack_sq_total += gs * slack * slack;
            const bool ok = finite && distinct.size() <= static_cast<size_t>(levels + 1) &&
                            std::sqrt(sse) <= bound && max_err <= range + 1e-7;
            if (bound > 0) worst_ratio = std::max(worst_ratio, std::sqrt(sse) / bound);
            if (!ok && reported < 5) {
                ++reported;
                ADD_FAILURE() << td.name << " (" << tinyloop::dtype_name(td.dtype) << ", group "
                              << gs << ") row " << r << " group at col " << g0
                              << ": distinct values " << distinct.size() << " (max "
                              << levels + 1 << "), rss error " << std::sqrt(sse)
                              << " vs bound " << bound << " (min/max quantizer rss "
                              << std::sqrt(sse_ref) << "), max |err| " << max_err
                              << ", range " << range << (finite ? "" : ", NON-FINITE value");
            }
        }
    }
    const double total_bound = 1.25 * std::sqrt(sse_ref_total) + std::sqrt(slack_sq_total);
    EXPECT_LE(std::sqrt(sse_total), total_bound)
        << td.name << " (" << tinyloop::dtype_name(td.dtype) << ", group " << gs
        << "): total rss error " << std::sqrt(sse_total) << ", min/max quantizer "
        << std::sqrt(sse_ref_total);
    *rss_vs_minmax = sse_ref_total > 0 ? std::sqrt(sse_total / sse_ref_total) : 0.0;
    ::testing::Test::RecordProperty(td.name + "_rss_over_group_bound",
                                    std::to_string(worst_ratio));
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

class GoldenForward : public ::testing::TestWithParam<Case> {};

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }

// The dequantized weights (what the reference runs on) are the values handed to save_model:
// exactly for f32, the nearest binary16 for f16, within quantization error for q8/q4/q2.
TEST_P(GoldenForward, StoredWeightsMatchSpec) {
    const Case& c = GetParam();
    auto b = build(c);
    const tinyloop::HParams& hp = tinyloop::model_hparams(b->model.get());
    EXPECT_EQ(hp.vocab_size, c.hp.vocab_size);
    EXPECT_EQ(hp.d_model, c.hp.d_model);
    EXPECT_EQ(hp.n_heads, c.hp.n_heads);
    EXPECT_EQ(hp.n_kv_heads, c.hp.n_kv_heads);
    EXPECT_EQ(hp.head_dim, c.hp.head_dim);
    EXPECT_EQ(hp.d_ff, c.hp.d_ff);
    EXPECT_EQ(hp.n_pre_blocks, c.hp.n_pre_blocks);
    EXPECT_EQ(hp.n_loop_layers, c.hp.n_loop_layers);
    EXPECT_EQ(hp.max_loops, c.hp.max_loops);
    EXPECT_EQ(hp.rope_theta, c.hp.rope_theta);
    EXPECT_EQ(hp.norm_eps, c.hp.norm_eps);
    EXPECT_EQ(hp.tie_embeddings, c.hp.tie_embeddings);

    // The spec holds exactly the tensors of FORMAT.md §2.
    std::set<std::string> expected = {"embed", "final_norm"};
    if (!c.hp.tie_embeddings) expected.insert("head");
    const char* parts[] = {"attn_norm", "mlp_norm", "wq",     "wk",  "wv",
                           "wo",        "w_gate",   "w_up",   "w_down"};
    for (int i = 0; i < c.hp.n_pre_blocks; ++i)
        for (const char* s : parts) expected.insert("pre." + std::to_string(i) + "." + s);
    for (int j = 0; j < c.hp.n_loop_layers; ++j)
        for (const char* s : parts) expected.insert("loop." + std::to_string(j) + "." + s);
    std::set<std::string> got;
    for (const auto& td : b->spec.tensors) got.insert(td.name);
    EXPECT_EQ(got, expected);

    int n_quantized = 0;
    double worst_q = 0.0;  // largest (rss error / min-max quantizer's rss error) over tensors
    for (const auto& td : b->spec.tensors) {
        SCOPED_TRACE(td.name);
        const std::vector<float> deq = tinyloop::tensor_as_f32(b->model.get(), td.name);
        ASSERT_EQ(deq.size(), td.values.size());
        if (td.shape.size() == 1) {
            EXPECT_EQ(td.dtype, DType::F32) << "norms are f32";
        }
        if (td.shape.size() == 2 && td.dtype != c.dtype)
            ADD_FAILURE() << "matrix stored as " << tinyloop::dtype_name(td.dtype)
                          << ", asked for " << tinyloop::dtype_name(c.dtype);
        switch (td.dtype) {
            case DType::F32: {
                size_t bad = 0;
                for (size_t i = 0; i < deq.size(); ++i) bad += (deq[i] != td.values[i]);
                EXPECT_EQ(bad, 0u) << "f32 values not stored exactly";
                break;
            }
            case DType::F16: {
                size_t bad = 0, first = 0;
                for (size_t i = 0; i < deq.size(); ++i) {
                    if (static_cast<double>(deq[i]) != round_to_f16(td.values[i])) {
                        if (bad++ == 0) first = i;
                    }
                }
                EXPECT_EQ(bad, 0u) << "f16 values not the nearest binary16; first at " << first
                                   << ": original " << td.values[first] << ", got "
                                   << deq[first] << ", expected " << round_to_f16(td.values[first]);
                break;
            }
            case DType::BF16: {
                size_t bad = 0, first = 0;
                for (size_t i = 0; i < deq.size(); ++i) {
                    if (static_cast<double>(deq[i]) != round_to_bf16(td.values[i])) {
                        if (bad++ == 0) first = i;
                    }
                }
                EXPECT_EQ(bad, 0u) << "bf16 values not the nearest bfloat16; first at " << first
                                   << ": original " << td.values[first] << ", got " << deq[first]
                                   << ", expected " << round_to_bf16(td.values[first]);
                break;
            }
            default:
                ++n_quantized;
                double ratio = 0.0;
                check_quantized(td, deq, &ratio);
                worst_q = std::max(worst_q, ratio);
                break;
        }
    }
    if (bits_of(c.dtype) > 0) {
        EXPECT_GT(n_quantized, 0);
        std::printf("[ case %s ] quantized rss error / min-max quantizer's, worst tensor: %.3f\n",
                    c.name.c_str(), worst_q);
    }
}

// The engine's logits equal the double reference at every depth, position and vocab entry:
// with float activations at kRowRelTol, and for q8/q4 also with int8 activations (the CPU
// default) against the reference that quantizes its matrix inputs the same way.
TEST_P(GoldenForward, MatchesDoubleReference) {
    const Case& c = GetParam();
    auto b = build(c);
    tinyloop::Model* m = b->model.get();
    const HParams hp = tinyloop::model_hparams(m);
    ASSERT_EQ(hp.loop_input, c.hp.loop_input) << "loop_input did not survive the file";
    const std::vector<int32_t> tokens = random_tokens(m, c.n_tokens, c.seed);
    const bool saved_int8 = tinyloop::kern::int8_activations();
    const bool quant8 = c.dtype == DType::Q8 || c.dtype == DType::Q4;
    for (bool int8 : {false, true}) {
    if (int8 && (!quant8 || c.backend != tinyloop::Backend::Cpu)) continue;
    SCOPED_TRACE(int8 ? "int8 activations" : "float activations");
    tinyloop::kern::set_int8_activations(int8);
    g_ref_int8 = int8;
    const RefModel ref = fetch_model(m);
    g_ref_int8 = false;
    const std::vector<Vec> want = reference_logits(ref, tokens);
    const int n = c.n_tokens, V = hp.vocab_size;
    const double tol = int8 ? kRowRelTolInt8 : kRowRelTol;
    double worst_all = 0.0;
    std::vector<double> rels;
    for (int L = 1; L <= hp.max_loops; ++L) {
        const std::vector<float> got = tinyloop::forward_logits(m, tokens.data(), n, L);
        ASSERT_EQ(got.size(), static_cast<size_t>(n) * V) << "depth " << L;
        for (int p = 0; p < n; ++p) {
            const size_t row = static_cast<size_t>(p) * V;
            double max_ref = 0.0, max_diff = 0.0;
            int arg = 0, nonfinite = 0;
            for (int j = 0; j < V; ++j) {
                const double a = got[row + j], r = want[L - 1][row + j];
                if (!std::isfinite(a)) ++nonfinite;
                max_ref = std::max(max_ref, std::fabs(r));
                const double diff = std::isfinite(a) ? std::fabs(a - r) : INFINITY;
                if (j == 0 || diff > max_diff) {
                    max_diff = diff;
                    arg = j;
                }
            }
            const double rel = max_ref > 0 ? max_diff / max_ref : max_diff;
            worst_all = std::max(worst_all, rel);
            rels.push_back(rel);
            EXPECT_EQ(nonfinite, 0) << "depth " << L << " position " << p;
            EXPECT_LE(rel, tol)
                << "depth " << L << " position " << p << ": max|engine-ref| " << max_diff
                << " at vocab " << arg << " (engine " << got[row + arg] << ", ref "
                << want[L - 1][row + arg] << "), max|ref| " << max_ref;
        }
    }
    std::sort(rels.begin(), rels.end());
    const double median = rels.empty() ? 0.0 : rels[rels.size() / 2];
    if (int8) {
        EXPECT_LE(median, kMedianRelTolInt8) << "median row relative error with int8 activations";
    }
    RecordProperty(int8 ? "worst_row_rel_error_int8" : "worst_row_rel_error", std::to_string(worst_all));
    std::printf("[ case %s ] %s activations: worst row relative error %.3g, median %.3g over depths 1..%d\n",
                c.name.c_str(), int8 ? "int8" : "float", worst_all, median, hp.max_loops);
    }
    tinyloop::kern::set_int8_activations(saved_int8);
}

// The logits of a prefix computed alone equal the same rows of the full call, bit for bit: a
// position's result must not depend on how many tokens follow it or on the chunking.
TEST_P(GoldenForward, PrefixRowsBitIdentical) {
    const Case& c = GetParam();
    auto b = build(c);
    tinyloop::Model* m = b->model.get();
    const HParams hp = tinyloop::model_hparams(m);
    const std::vector<int32_t> tokens = random_tokens(m, c.n_tokens, c.seed);
    const int n = c.n_tokens, V = hp.vocab_size;
    const std::set<int> ks = {1, 2, n / 2 + 1, n - 1, n};  // n: the same call twice
    for (int L = 1; L <= hp.max_loops; ++L) {
        const std::vector<float> full = tinyloop::forward_logits(m, tokens.data(), n, L);
        ASSERT_EQ(full.size(), static_cast<size_t>(n) * V);
        for (int k : ks) {
            const std::vector<float> pre = tinyloop::forward_logits(m, tokens.data(), k, L);
            ASSERT_EQ(pre.size(), static_cast<size_t>(k) * V);
            for (int p = 0; p < k; ++p) {
                const size_t row = static_cast<size_t>(p) * V;
                if (std::memcmp(pre.data() + row, full.data() + row, sizeof(float) * V) == 0)
                    continue;
                double maxd = 0.0;
                int first = -1;
                for (int j = 0; j < V; ++j) {
                    if (std::memcmp(&pre[row + j], &full[row + j], sizeof(float)) != 0 &&
                        first < 0)
                        first = j;
                    maxd = std::max(maxd, std::fabs(static_cast<double>(pre[row + j]) -
                                                    full[row + j]));
                }
                ADD_FAILURE() << "depth " << L << ", prefix of " << k << " tokens, position "
                              << p << ": row differs from the full " << n
                              << "-token call; first at vocab " << first << " (" << pre[row + first]
                              << " vs " << full[row + first] << "), max|diff| " << maxd;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenForward, ::testing::ValuesIn(all_cases()), case_name);

// A bf16 model is its f32 twin holding the widened values, bit for bit: the matmul widens each
// weight exactly and then runs the f32 kernel's own sequence (kernels/cpu/matmul.cpp), the
// embedding row is widened the same way. So every depth's logits, prefill and one-token decode
// alike, equal the twin's. The bf16 file is version 3 (FORMAT.md §2), its matrices take half the
// twin's bytes, and the twin stays version 1.
TEST(GoldenForwardBf16, LogitsEqualTheWidenedF32TwinBitForBit) {
    const HParams hp = make_hp(300, 64, 4, 2, 16, 128, 1, 2, 4, false);
    const tinyloop::ModelSpec bf = tinyloop::random_model_spec(hp, 31, DType::BF16);
    tinyloop::ModelSpec twin = bf;
    for (auto& t : twin.tensors) {
        if (t.dtype != DType::BF16) continue;
        t.dtype = DType::F32;
        for (float& v : t.values) v = static_cast<float>(round_to_bf16(v));
    }
    const std::string dir = ::testing::TempDir() + "/tl_bf16_twin_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    const std::string pb = dir + "/bf16.tinyloop", pf = dir + "/f32.tinyloop";
    tinyloop::save_model(pb, bf);
    tinyloop::save_model(pf, twin);
    auto version_of = [](const std::string& path) {
        std::ifstream f(path, std::ios::binary);
        unsigned char pre[12] = {};
        f.read(reinterpret_cast<char*>(pre), 12);
        return pre[8] | pre[9] << 8 | pre[10] << 16 | pre[11] << 24;
    };
    EXPECT_EQ(version_of(pb), 3);
    EXPECT_EQ(version_of(pf), 1);
    tinyloop::LoadOptions opts;
    opts.backend = tinyloop::Backend::Cpu;
    opts.threads = 2;
    auto mb = tinyloop::load_model_handle(pb, opts);
    auto mf = tinyloop::load_model_handle(pf, opts);
    const tinyloop::ModelInfo ib = tinyloop::model_info(mb.get()), iff = tinyloop::model_info(mf.get());
    uint64_t mat_b = 0, mat_f = 0;
    for (const auto& t : ib.tensors) mat_b += t.shape.size() == 2 ? t.bytes : 0;
    for (const auto& t : iff.tensors) mat_f += t.shape.size() == 2 ? t.bytes : 0;
    EXPECT_EQ(2 * mat_b, mat_f) << "bf16 matrices take half of f32's bytes";
    std::printf("[ info ] resident weights: bf16 %llu bytes, f32 %llu bytes\n",
                static_cast<unsigned long long>(ib.weight_bytes), static_cast<unsigned long long>(iff.weight_bytes));
    const std::vector<int32_t> tokens = random_tokens(mb.get(), 12, 5);
    for (int L = 1; L <= hp.max_loops; ++L) {
        const auto a = tinyloop::forward_logits(mb.get(), tokens.data(), 12, L);
        const auto b = tinyloop::forward_logits(mf.get(), tokens.data(), 12, L);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "depth " << L;
    }
    // Greedy decoding (prefill, then one token at a time) gives the same tokens.
    tinyloop::GenerateConfig g;
    g.max_tokens = 12;
    g.temperature = 0.0f;
    const auto ta = tinyloop::generate(mb.get(), tokens.data(), 12, g);
    const auto tb = tinyloop::generate(mf.get(), tokens.data(), 12, g);
    EXPECT_EQ(ta, tb);
    EXPECT_GT(ta.size(), tokens.size());
    mb.reset();
    mf.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
}

// The same comparison on the CUDA back end, where one is built and a device is present.
TEST(GoldenForwardCuda, MatchesDoubleReference) {
    for (Case c : all_cases()) {
        if (c.name != "q4_g32_gqa_tied_pre0_loop2" && c.name != "f32_mha_tied_pre1_loop2" &&
            c.name != "f32_inject_gqa_tied_pre1_loop2_chunk3")
            continue;
        SCOPED_TRACE(c.name);
        c.backend = tinyloop::Backend::Cuda;
        std::unique_ptr<Built> b;
        try {
            b = build(c);
        } catch (const tinyloop::Error& e) {
            if (e.code() == tinyloop::ErrorCode::NotSupported ||
                e.code() == tinyloop::ErrorCode::Backend)
                GTEST_SKIP() << "skipped: no CUDA device (" << e.what() << ")";
            throw;
        }
        tinyloop::Model* m = b->model.get();
        const HParams hp = tinyloop::model_hparams(m);
        const std::vector<int32_t> tokens = random_tokens(m, c.n_tokens, c.seed);
        const std::vector<Vec> want = reference_logits(fetch_model(m), tokens);
        const int n = c.n_tokens, V = hp.vocab_size;
        for (int L = 1; L <= hp.max_loops; ++L) {
            const std::vector<float> got = tinyloop::forward_logits(m, tokens.data(), n, L);
            ASSERT_EQ(got.size(), static_cast<size_t>(n) * V);
            for (int p = 0; p < n; ++p) {
                double max_ref = 0.0, max_diff = 0.0;
                for (int j = 0; j < V; ++j) {
                    const double a = got[static_cast<size_t>(p) * V + j];
                    const double r = want[L - 1][static_cast<size_t>(p) * V + j];
                    max_ref = std::max(max_ref, std::fabs(r));
                    max_diff = std::max(max_diff, std::isfinite(a) ? std::fabs(a - r) : INFINITY);
                }
                EXPECT_LE(max_diff / max_ref, kRowRelTol)
                    << "cuda depth " << L << " position " << p << ": max|diff| " << max_diff
                    << ", max|ref| " << max_ref;
            }
        }
    }
}

}  // namespace
