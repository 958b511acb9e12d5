// The published looped architectures (FORMAT.md §1b, file version 3) on small random models of
// their shapes, written with the engine's writer: an Ouro-shaped model (sandwich_branch blocks,
// the final norm after every pass, an exit gate, an untied head, no prelude) and Huginn-shaped
// ones (sandwich_sum blocks, qk_bias, embed_scale sqrt(d), the concatenating adapter from a zero
// or seeded initial state, prelude and coda blocks, the final norm twice).
//
// The reference is written from FORMAT.md §1b, in double, with plain loops; it includes only the
// public header (weights through tensor_as_f32, exact for f32 files) and shares nothing with the
// engine's forward or kernels: its own RMSNorm, RoPE, attention, block kinds, initial-state
// generator and early-exit state propagation. The engine paths are checked against it (logits at
// every depth 1..T+2, the lens, early exit) and against each other (prefill == decode, depth
// upgrade == fresh prefill, speculation == greedy, batch == single), coda models included: the
// readout at pass l runs the coda over the rows' pass-l states, and the coda keys/values a
// position keeps are those of its exit depth (FORMAT.md §1b).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "forward/forward.h"
#include "forward/kv_cache.h"
#include "engine/reference_f64.h"
#include "looped_shapes.h"
#include "scoring/scoring.h"
#include "test_util.h"
#include "tinyloop/batch.h"
#include "tinyloop/caches.h"
#include "tinyloop/json.h"
#include "tinyloop/scoring.h"
#include "tinyloop/speculation.h"

using namespace tinyloop;

namespace {

// Float engine against a double reference on these shapes: ~1e-7..1e-6 measured; an error in
// the wiring (a missing post norm, a bias after RoPE, the adapter's halves swapped, the coda's
// first norm left out) is of order 1.
constexpr double kRelTol = 1e-5;

using tltest::huginn_hparams;
using tltest::ouro_hparams;
HParams base_hparams() { return tltest::looped_base_hparams(); }

struct Loaded {
    std::string path;
    Model* m = nullptr;
    explicit Loaded(const std::string& name, const HParams& hp, uint64_t seed) {
        path = tltest::write_random_model(name, hp, seed);
        m = load_model(path);
    }
    ~Loaded() { free_model(m); }
};

std::vector<int32_t> tokens_of(int n, uint64_t seed) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    uint64_t x = seed;
    for (auto& v : t) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v = static_cast<int32_t>((x >> 33) % 257);  // bytes and <|endoftext|>
    }
    return t;
}

// ---------------------------------------------------------------------------------------------
// The reference (FORMAT.md §1, §1a, §1b), double precision.
// ---------------------------------------------------------------------------------------------

using namespace tlref;  // Vec, RMat, fetch, mv, rms, rope, add (reference_f64.h)

struct RBlock {
    Vec attn_norm, mlp_norm, attn_post, mlp_post, bq, bk;
    RMat wq, wk, wv, wo, wg, wu, wd;
};
struct RModel {
    HParams hp;
    RMat embed, head, adapter;
    Vec final_norm, gate_w, gate_b;
    std::vector<RBlock> pre, loop, coda;
};

RMat fetch_mat(Model* m, const std::string& name, int rows, int cols) {
    RMat r;
    r.rows = rows;
    r.cols = cols;
    r.w = fetch(m, name);
    EXPECT_EQ(r.w.size(), static_cast<size_t>(rows) * cols) << name;
    return r;
}
RBlock fetch_block(Model* m, const HParams& hp, const std::string& p) {
    const int d = hp.d_model, H = hp.n_heads * hp.head_dim, Hkv = hp.n_kv_heads * hp.head_dim;
    RBlock b;
    b.attn_norm = fetch(m, p + ".attn_norm");
    b.mlp_norm = fetch(m, p + ".mlp_norm");
    if (hp.block != BlockKind::PreNorm) {
        b.attn_post = fetch(m, p + ".attn_post_norm");
        b.mlp_post = fetch(m, p + ".mlp_post_norm");
    }
    if (hp.qk_bias) {
        b.bq = fetch(m, p + ".bq");
        b.bk = fetch(m, p + ".bk");
    }
    b.wq = fetch_mat(m, p + ".wq", H, d);
    b.wk = fetch_mat(m, p + ".wk", Hkv, d);
    b.wv = fetch_mat(m, p + ".wv", Hkv, d);
    b.wo = fetch_mat(m, p + ".wo", d, H);
    b.wg = fetch_mat(m, p + ".w_gate", hp.d_ff, d);
    b.wu = fetch_mat(m, p + ".w_up", hp.d_ff, d);
    b.wd = fetch_mat(m, p + ".w_down", d, hp.d_ff);
    return b;
}
RModel fetch_model(Model* m) {
    RModel r;
    r.hp = model_hparams(m);
    const HParams& hp = r.hp;
    r.embed = fetch_mat(m, "embed", hp.vocab_size, hp.d_model);
    r.head = hp.tie_embeddings ? r.embed : fetch_mat(m, "head", hp.vocab_size, hp.d_model);
    r.final_norm = fetch(m, "final_norm");
    if (hp.loop_input == LoopInput::Adapter) r.adapter = fetch_mat(m, "adapter", hp.d_model, 2 * hp.d_model);
    if (hp.exit_gate) {
        r.gate_w = fetch(m, "exit_gate.w");
        r.gate_b = fetch(m, "exit_gate.b");
    }
    for (int i = 0; i < hp.n_pre_blocks; ++i) r.pre.push_back(fetch_block(m, hp, "pre." + std::to_string(i)));
    for (int j = 0; j < hp.n_loop_layers; ++j) r.loop.push_back(fetch_block(m, hp, "loop." + std::to_string(j)));
    for (int j = 0; j < hp.n_coda_blocks; ++j) r.coda.push_back(fetch_block(m, hp, "coda." + std::to_string(j)));
    return r;
}

// One block over the sequence. Rows with active[t] false are frozen (early exit): they keep h
// and supply keys/values computed from their pass input u[t] (FORMAT.md §1b).
void ref_block(const RBlock& b, const HParams& hp, std::vector<Vec>& h, const std::vector<bool>* active = nullptr,
               const std::vector<Vec>* u = nullptr) {
    const int n = static_cast<int>(h.size()), hd = hp.head_dim, Hq = hp.n_heads, Hk = hp.n_kv_heads;
    auto on = [&](int t) { return !active || (*active)[static_cast<size_t>(t)]; };
    std::vector<Vec> q(static_cast<size_t>(n)), k(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) {
        const Vec a = rms(on(t) ? h[static_cast<size_t>(t)] : (*u)[static_cast<size_t>(t)], b.attn_norm, hp.norm_eps);
        q[t] = mv(b.wq, a);
        k[t] = mv(b.wk, a);
        v[t] = mv(b.wv, a);
        if (hp.qk_bias) {
            add(q[t], b.bq);
            add(k[t], b.bk);
        }
        rope(q[t], Hq, hd, t, hp.rope_theta);
        rope(k[t], Hk, hd, t, hp.rope_theta);
    }
    for (int t = 0; t < n; ++t) {
        if (!on(t)) continue;
        Vec att(static_cast<size_t>(Hq * hd), 0.0);
        for (int hh = 0; hh < Hq; ++hh) {
            const int kh = hh / (Hq / Hk);
            std::vector<double> s(static_cast<size_t>(t + 1));
            double mx = -1e300;
            for (int p = 0; p <= t; ++p) {
                double dot = 0;
                for (int i = 0; i < hd; ++i) dot += q[t][hh * hd + i] * k[p][kh * hd + i];
                s[p] = dot / std::sqrt(static_cast<double>(hd));
                mx = std::max(mx, s[p]);
            }
            double z = 0;
            for (double& x : s) z += (x = std::exp(x - mx));
            for (int p = 0; p <= t; ++p)
                for (int i = 0; i < hd; ++i) att[hh * hd + i] += s[p] / z * v[p][kh * hd + i];
        }
        Vec& x = h[static_cast<size_t>(t)];
        const Vec o = mv(b.wo, att);
        auto residual = [&](const Vec& br, const Vec& post) {
            switch (hp.block) {
                case BlockKind::PreNorm: add(x, br); break;
                case BlockKind::SandwichBranch: add(x, rms(br, post, hp.norm_eps)); break;
                case BlockKind::SandwichSum: add(x, br); x = rms(x, post, hp.norm_eps); break;
            }
        };
        residual(o, b.attn_post);
        const Vec mm = rms(x, b.mlp_norm, hp.norm_eps);
        const Vec g = mv(b.wg, mm), uu = mv(b.wu, mm);
        Vec gu(g.size());
        for (size_t i = 0; i < g.size(); ++i) gu[i] = g[i] / (1.0 + std::exp(-g[i])) * uu[i];
        residual(mv(b.wd, gu), b.mlp_post);
    }
}

// FORMAT.md §1b's generator, written from the page.
uint64_t sm64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
double ref_s0(const HParams& hp, int p, int i) {
    const StateInit& si = hp.state_init;
    if (si.kind == StateInit::Kind::Zeros) return 0.0;
    for (uint64_t k = 0; k < 64; ++k) {
        const uint64_t c = (static_cast<uint64_t>(p) * hp.d_model + i) * 64 + k;
        const uint64_t b1 = sm64(si.seed ^ sm64(c)), b2 = sm64(b1);
        const double u1 = static_cast<double>((b1 >> 11) + 1) / 9007199254740992.0;
        const double u2 = static_cast<double>(b2 >> 11) / 9007199254740992.0;
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
        if (std::fabs(z) <= 3.0) return static_cast<double>(static_cast<float>(si.scale * static_cast<double>(si.std) * z));
    }
    return 0.0;
}

struct RefRun {
    std::vector<std::vector<Vec>> logits;  // [depth-1][position] = vocab
    std::vector<std::vector<double>> gate;  // [depth-1][position] = λ
    std::vector<std::vector<Vec>> states;   // [depth-1][position] = h after the pass (frozen: h_e)
};

std::vector<Vec> readout(const RModel& r, const std::vector<Vec>& hL) {
    const HParams& hp = r.hp;
    std::vector<Vec> x = hL, out;
    if (!r.coda.empty()) {
        for (auto& v : x) v = rms(v, r.final_norm, hp.norm_eps);
        for (const RBlock& b : r.coda) ref_block(b, hp, x);
    }
    for (auto& v : x) out.push_back(mv(r.head, (hp.pass_norm && r.coda.empty()) ? v : rms(v, r.final_norm, hp.norm_eps)));
    return out;
}

// Every depth 1..L. With exit (one depth per position), a position frozen after pass exit[p]
// keeps h and supplies keys/values from its pass input; logits[L-1][p] is then read from its
// frozen state (the readout at exit[p]: with a coda, the coda over the frozen states, so every
// earlier position's coda keys/values are those of its own exit depth, the naive run of each
// token at its chosen depth).
RefRun reference(const RModel& r, const std::vector<int32_t>& ids, int L, const std::vector<int>* exit = nullptr) {
    const HParams& hp = r.hp;
    const int n = static_cast<int>(ids.size()), d = hp.d_model;
    std::vector<Vec> h(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) {
        h[t].assign(r.embed.w.begin() + static_cast<std::ptrdiff_t>(ids[t]) * d,
                    r.embed.w.begin() + static_cast<std::ptrdiff_t>(ids[t] + 1) * d);
        for (double& v : h[t]) v *= static_cast<double>(hp.embed_scale);
    }
    for (const RBlock& b : r.pre) ref_block(b, hp, h);
    const std::vector<Vec> e = h;
    if (hp.loop_input == LoopInput::Adapter)
        for (int t = 0; t < n; ++t)
            for (int i = 0; i < d; ++i) h[t][i] = ref_s0(hp, t, i);
    RefRun out;
    for (int l = 1; l <= L; ++l) {
        std::vector<bool> active(static_cast<size_t>(n), true);
        if (exit)
            for (int t = 0; t < n; ++t) active[t] = (*exit)[t] >= l;
        std::vector<Vec> u = h;  // the pass input of every row
        for (int t = 0; t < n; ++t) {
            if (hp.loop_input == LoopInput::Add && l > 1) add(u[t], e[t]);
            if (hp.loop_input == LoopInput::Adapter) {
                Vec cat = h[t];
                cat.insert(cat.end(), e[t].begin(), e[t].end());
                u[t] = mv(r.adapter, cat);
            }
        }
        std::vector<Vec> x = h;
        for (int t = 0; t < n; ++t)
            if (active[t]) x[t] = u[t];
        for (const RBlock& b : r.loop) ref_block(b, hp, x, &active, &u);
        for (int t = 0; t < n; ++t)
            if (active[t]) h[t] = hp.pass_norm ? rms(x[t], r.final_norm, hp.norm_eps) : x[t];
        out.logits.push_back(readout(r, h));
        out.states.push_back(h);
        std::vector<double> lam;
        if (hp.exit_gate)
            for (int t = 0; t < n; ++t) {
                double s = r.gate_b[0];
                for (int i = 0; i < d; ++i) s += r.gate_w[i] * h[t][i];
                lam.push_back(1.0 / (1.0 + std::exp(-s)));
            }
        out.gate.push_back(lam);
    }
    return out;
}

// max|got - want| / max|want| over a row.
double rel_err(const float* got, const Vec& want) {
    double mx = 0, err = 0;
    for (size_t j = 0; j < want.size(); ++j) {
        mx = std::max(mx, std::fabs(want[j]));
        err = std::max(err, std::fabs(static_cast<double>(got[j]) - want[j]));
    }
    return err / mx;
}

struct Shape {
    const char* name;
    HParams hp;
};
std::vector<Shape> shapes() {
    return {{"ouro", ouro_hparams()},
            {"huginn", huginn_hparams()},
            {"huginn_seeded_state", huginn_hparams(true, true)},
            {"huginn_no_coda", huginn_hparams(false)}};
}

// ---------------------------------------------------------------------------------------------

TEST(LoopedArchitectures, FileIsVersion3AndRoundTrips) {
    for (const Shape& s : shapes()) {
        Loaded L(std::string(s.name) + "_rt.tinyloop", s.hp, 11);
        std::ifstream f(L.path, std::ios::binary);
        char pre[12];
        f.read(pre, 12);
        uint32_t version = 0;
        std::memcpy(&version, pre + 8, 4);
        EXPECT_EQ(version, 3u) << s.name;
        const HParams& got = model_hparams(L.m);
        EXPECT_EQ(got.architecture, s.hp.architecture);
        EXPECT_EQ(got.block, s.hp.block);
        EXPECT_EQ(got.qk_bias, s.hp.qk_bias);
        EXPECT_EQ(got.embed_scale, s.hp.embed_scale);
        EXPECT_EQ(got.pass_norm, s.hp.pass_norm);
        EXPECT_EQ(got.n_coda_blocks, s.hp.n_coda_blocks);
        EXPECT_EQ(got.loop_input, s.hp.loop_input);
        EXPECT_EQ(got.state_init.kind, s.hp.state_init.kind);
        EXPECT_EQ(got.state_init.seed, s.hp.state_init.seed);
        EXPECT_EQ(got.state_init.std, s.hp.state_init.std);
        EXPECT_EQ(got.exit_gate, s.hp.exit_gate);
    }
    // Defaults everywhere: still version 1.
    const std::string p = tltest::write_random_model("plain_v1.tinyloop", base_hparams(), 11);
    std::ifstream f(p, std::ios::binary);
    char pre[12];
    f.read(pre, 12);
    EXPECT_EQ(pre[8], 1);
}

std::string read_all(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
void expect_refused(std::string bytes, const std::string& from, const std::string& to, const std::string& field,
                    int version = 0) {
    const size_t at = bytes.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    ASSERT_EQ(from.size(), to.size()) << "keep the header's length";
    bytes.replace(at, from.size(), to);
    if (version) {
        const uint32_t v = static_cast<uint32_t>(version);
        std::memcpy(bytes.data() + 8, &v, 4);
    }
    const std::string path = tltest::temp_path("v3_refused.tinyloop");
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    try {
        free_model(load_model(path));
        ADD_FAILURE() << "loaded a file that must be refused: " << field;
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::BadFile) << e.what();
        EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
}

TEST(LoopedArchitectures, LoaderRefusesBadVersion3Keys) {
    const std::string bytes = read_all(tltest::write_random_model("refuse_src.tinyloop", huginn_hparams(true, true), 3));
    expect_refused(bytes, "\"sandwich_sum\"", "\"sandwich_xyz\"", "hparams.block: \"sandwich_xyz\", allowed \"pre_norm\"");
    expect_refused(bytes, "\"adapter\"", "\"adaptor\"", "hparams.loop_input");
    expect_refused(bytes, "\"huginn\"", "\"raven1\"", "hparams.architecture");
    expect_refused(bytes, "\"truncnormal\"", "\"uniform0000\"", "hparams.state_init");
    expect_refused(bytes, "\"qk_bias\":true", "\"qk_bias\":   1", "hparams.qk_bias");
    // A version-3 key in a version-1 or -2 file.
    const std::string ouro = read_all(tltest::write_random_model("refuse_ouro.tinyloop", ouro_hparams(), 3));
    expect_refused(ouro, "\"block\"", "\"block\"", "hparams.architecture: present in a version-1 file", 1);
    expect_refused(ouro, "\"block\"", "\"block\"", "hparams.architecture: present in a version-2 file", 2);
}

TEST(LoopedArchitectures, LogitsAtEveryDepthMatchTheReference) {
    for (const Shape& s : shapes()) {
        Loaded L(std::string(s.name) + "_ref.tinyloop", s.hp, 21);
        const RModel r = fetch_model(L.m);
        const auto ids = tokens_of(9, 5);
        const int n = static_cast<int>(ids.size()), V = s.hp.vocab_size;
        const RefRun ref = reference(r, ids, s.hp.max_loops);
        double worst = 0;
        for (int depth = 1; depth <= s.hp.max_loops; ++depth) {  // 1 .. T + 2
            const auto got = forward_logits(L.m, ids.data(), n, depth);
            for (int t = 0; t < n; ++t)
                worst = std::max(worst, rel_err(got.data() + static_cast<size_t>(t) * V, ref.logits[depth - 1][t]));
        }
        EXPECT_LE(worst, kRelTol) << s.name;
        std::printf("[ %s ] worst row max|engine - reference| / max|reference| over depths 1..%d: %.2e\n", s.name,
                    s.hp.max_loops, worst);
    }
}

// The exit gate's λ per pass (what issue 36's gate criterion reads) against the reference.
TEST(LoopedArchitectures, ExitGatePerPassMatchesTheReference) {
    Loaded L("ouro_gate.tinyloop", ouro_hparams(), 23);
    const RModel r = fetch_model(L.m);
    const auto ids = tokens_of(6, 9);
    const RefRun ref = reference(r, ids, 4);
    const auto lam = exit_gate_per_pass(L.m, ids.data(), static_cast<int>(ids.size()), 4);
    ASSERT_EQ(lam.size(), ids.size() * 4);
    for (size_t t = 0; t < ids.size(); ++t)
        for (int l = 1; l <= 4; ++l) EXPECT_NEAR(lam[(l - 1) * ids.size() + t], ref.gate[l - 1][t], 1e-5) << t << " " << l;
    // A model without the gate says so by name.
    Loaded P("plain_gate.tinyloop", huginn_hparams(false), 23);
    try {
        exit_gate_per_pass(P.m, ids.data(), static_cast<int>(ids.size()), 2);
        ADD_FAILURE() << "no exit gate in this model";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("exit_gate"), std::string::npos) << e.what();
    }
}

TEST(LoopedArchitectures, LensRowsMatchTheReference) {
    for (const Shape& s : shapes()) {
        Loaded L(std::string(s.name) + "_lens.tinyloop", s.hp, 31);
        const auto ids = tokens_of(7, 13);
        const int n = static_cast<int>(ids.size()), V = s.hp.vocab_size, T = s.hp.default_loops;
        const RefRun ref = reference(fetch_model(L.m), ids, T);
        const auto lens = forward_lens_logits(L.m, ids.data(), n, T);
        for (int l = 1; l <= T; ++l)
            for (int t = 0; t < n; ++t)
                EXPECT_LE(rel_err(lens.data() + (static_cast<size_t>(l - 1) * n + t) * V, ref.logits[l - 1][t]), kRelTol)
                    << s.name << " depth " << l << " position " << t;
    }
}

// The lens at pass p is a whole run at depth p (Huginn's num_steps = p), for p = 1 .. T+2: with a
// coda each pass's readout runs the coda over every row's pass-p state. Bit for bit, also when
// the prefill runs in chunks (the readout at pass p of a later chunk reads the earlier chunks'
// pass-p coda keys/values), and the cache is left with the coda of the run's depth.
TEST(LoopedArchitectures, LensAtPassEqualsAWholeRunAtThatDepth) {
    for (const Shape& s : shapes()) {
        Loaded L(std::string(s.name) + "_lensrun.tinyloop", s.hp, 33);
        const auto ids = tokens_of(9, 15);
        const int n = static_cast<int>(ids.size()), V = s.hp.vocab_size, T = s.hp.max_loops;
        for (int chunk : {64, 4}) {
            L.m->prefill_chunk = chunk;
            const auto lens = forward_lens_logits(L.m, ids.data(), n, T);
            for (int p = 1; p <= T; ++p) {
                const auto run = forward_logits(L.m, ids.data(), n, p);
                EXPECT_EQ(std::memcmp(lens.data() + static_cast<size_t>(p - 1) * n * V, run.data(), run.size() * sizeof(float)), 0)
                    << s.name << " pass " << p << " chunk " << chunk;
            }
        }
        // The cache after a forward with per-pass readouts holds the depth-T coda: a token decoded
        // after it reads what it reads after a plain prefill.
        const Model& m = *L.m;
        KVCache a, b;
        a.allocate(exec_layers(m.hp, T), n, m.hp.n_kv_heads * m.hp.head_dim);
        b.allocate(exec_layers(m.hp, T), n, m.hp.n_kv_heads * m.hp.head_dim);
        Workspace ws;
        std::vector<float> ha, hb;
        int calls = 0;
        PassHook count = [&](int, int, const float*, int) { ++calls; };
        ForwardArgs fa;
        fa.tokens = ids.data();
        fa.n = n;
        fa.loops = T;
        forward(m, a, ws, fa, ha);
        fa.on_readout = &count;
        forward(m, b, ws, fa, hb);
        EXPECT_EQ(calls, T * ((n + 3) / 4)) << s.name;
        EXPECT_EQ(ha, hb) << s.name;
        for (int l = 0; l < exec_layers(m.hp, T); ++l)
            EXPECT_EQ(std::memcmp(a.v_at(l, 0), b.v_at(l, 0), static_cast<size_t>(n) * a.row * sizeof(float)), 0)
                << s.name << " layer " << l;
    }
}

// Prefill of n tokens and token-by-token decode write the same keys/values and give the same
// states, bit for bit (the seeded initial state depends on the position, not on the chunk).
TEST(LoopedArchitectures, PrefillEqualsDecodeBitExact) {
    for (const Shape& s : shapes()) {
        Loaded L(std::string(s.name) + "_pd.tinyloop", s.hp, 41);
        const Model& m = *L.m;
        const auto ids = tokens_of(8, 17);
        const int n = static_cast<int>(ids.size()), d = s.hp.d_model, depth = 5;
        KVCache a, b;
        a.allocate(exec_layers(m.hp, depth), n, m.hp.n_kv_heads * m.hp.head_dim);
        b.allocate(exec_layers(m.hp, depth), n, m.hp.n_kv_heads * m.hp.head_dim);
        Workspace ws;
        std::vector<float> hp_all, h1;
        ForwardArgs fa;
        fa.tokens = ids.data();
        fa.n = n;
        fa.loops = depth;
        forward(m, a, ws, fa, hp_all);
        for (int t = 0; t < n; ++t) {
            ForwardArgs f1;
            f1.tokens = ids.data() + t;
            f1.n = 1;
            f1.pos0 = t;
            f1.loops = depth;
            forward(m, b, ws, f1, h1);
            EXPECT_EQ(std::memcmp(h1.data(), hp_all.data() + static_cast<size_t>(t) * d, d * sizeof(float)), 0)
                << s.name << " position " << t;
        }
    }
}

// Continuing a prefill at depth L1 to L2 from the kept h and e equals a fresh prefill at L2 (bit
// for bit); with a coda h is kept through out_state and the coda's keys/values are rewritten
// from h_L2 (the caches then agree too).
TEST(LoopedArchitectures, DepthUpgradeEqualsFreshPrefill) {
    for (const Shape& s : shapes()) {
        Loaded L(std::string(s.name) + "_up.tinyloop", s.hp, 43);
        const Model& m = *L.m;
        const auto ids = tokens_of(6, 19);
        const int n = static_cast<int>(ids.size()), d = s.hp.d_model, L1 = 2, L2 = 5;
        KVCache kv, fresh;
        kv.allocate(exec_layers(m.hp, L2), n, m.hp.n_kv_heads * m.hp.head_dim);
        fresh.allocate(exec_layers(m.hp, L2), n, m.hp.n_kv_heads * m.hp.head_dim);
        Workspace ws;
        std::vector<float> h1, e(static_cast<size_t>(n) * d), state(static_cast<size_t>(n) * d), h2, hf;
        ForwardArgs fa;
        fa.tokens = ids.data();
        fa.n = n;
        fa.loops = L1;
        fa.out_e = e.data();
        fa.out_state = state.data();
        forward(m, kv, ws, fa, h1);
        if (s.hp.n_coda_blocks == 0) {
            EXPECT_EQ(state, h1) << s.name;
        }
        ForwardArgs up = fa;
        up.loops = L2;
        up.start_pass = L1 + 1;
        up.h_in = state.data();
        up.e_in = e.data();
        up.out_e = nullptr;
        up.out_state = nullptr;
        forward(m, kv, ws, up, h2);
        ForwardArgs ff;
        ff.tokens = ids.data();
        ff.n = n;
        ff.loops = L2;
        forward(m, fresh, ws, ff, hf);
        EXPECT_EQ(std::memcmp(h2.data(), hf.data(), hf.size() * sizeof(float)), 0) << s.name;
        for (int l = 0; l < exec_layers(m.hp, L2); ++l)
            EXPECT_EQ(std::memcmp(kv.k_at(l, 0), fresh.k_at(l, 0), static_cast<size_t>(n) * kv.row * sizeof(float)), 0)
                << s.name << " layer " << l;
    }
}

TEST(LoopedArchitectures, SpeculationEqualsGreedy) {
    for (const Shape& s : shapes()) {
        Loaded L(std::string(s.name) + "_spec.tinyloop", s.hp, 47);
        const auto prompt = tokens_of(5, 23);
        GenerateConfig g;
        g.max_tokens = 12;
        g.loops = 4;
        g.ignore_eos = true;
        const auto greedy = generate_ex(L.m, prompt.data(), static_cast<int>(prompt.size()), g).tokens;
        SpeculativeConfig c;
        c.max_tokens = 12;
        c.draft_loops = 2;
        c.verify_loops = 4;
        c.draft_ahead = 3;
        c.ignore_eos = true;
        TreeSpeculativeConfig tc;
        tc.max_tokens = 12;
        tc.draft_loops = 1;
        tc.verify_loops = 4;
        tc.draft_ahead = 3;
        tc.K_branches = 2;
        tc.ignore_eos = true;
        EXPECT_EQ(generate_speculative_ex(L.m, prompt.data(), static_cast<int>(prompt.size()), c).tokens, greedy)
            << s.name;
        EXPECT_EQ(generate_tree_speculative_ex(L.m, prompt.data(), static_cast<int>(prompt.size()), tc).tokens, greedy)
            << s.name;
        // With the lens on (per-pass readouts in the draft and verify calls) and other draft depths.
        GenerateOptions lens;
        lens.lens = true;
        lens.lens_top_k = 3;
        for (int D : {1, 3}) {
            c.draft_loops = tc.draft_loops = D;
            EXPECT_EQ(generate_speculative_ex(L.m, prompt.data(), static_cast<int>(prompt.size()), c, lens).tokens, greedy)
                << s.name << " draft " << D;
            EXPECT_EQ(generate_tree_speculative_ex(L.m, prompt.data(), static_cast<int>(prompt.size()), tc, lens).tokens,
                      greedy)
                << s.name << " draft " << D;
        }
    }
}

// Early exit with state propagation against the reference run with the same exit depths: every
// next-token log-probability of score_early_exit equals the reference's at that position's depth.
TEST(LoopedArchitectures, EarlyExitStatePropagationMatchesTheReference) {
    for (const Shape& s : shapes())
    for (EarlyExitCriterion crit : {EarlyExitCriterion::HiddenL2, EarlyExitCriterion::KL, EarlyExitCriterion::ReverseKL,
                                    EarlyExitCriterion::MinPKL}) {
        // KL reads the readout at every probed pass (with a coda: the coda over that pass's
        // state, whose keys/values the position rewrites until the last run, at its exit depth).
        Loaded L(std::string(s.name) + "_ee.tinyloop", s.hp, 53);
        const auto ids = tokens_of(10, 29);
        const int n = static_cast<int>(ids.size()), V = s.hp.vocab_size, T = s.hp.default_loops;
        GenerateConfig g;
        g.max_tokens = 8;
        g.loops = T;
        g.early_exit.patience = 1;
        g.early_exit.min_L = 1;
        g.early_exit.criterion = crit;
        g.early_exit.threshold = 10.0f;  // exits early at some positions, not all (checked)
        std::vector<int> used;
        // The threshold that makes the exits differ per position depends on the random model:
        // try a few until some positions exit before T and some do not.
        // Scan thresholds from high to low and keep the run with the most distinct exit depths
        // (several depths in one sequence exercise both kinds of keys a deeper pass reads).
        ScoreResult sr;
        std::vector<int> best_used;
        size_t best_kinds = 0;
        for (float th = 4.0f; th > (crit == EarlyExitCriterion::HiddenL2 ? 1e-3f : 1e-7f); th *= 0.8f) {
            g.early_exit.threshold = th;
            ScoreResult r = score_early_exit(L.m, ids.data(), n, g, &used);
            std::vector<int> kinds(used);
            std::sort(kinds.begin(), kinds.end());
            const size_t k = static_cast<size_t>(std::unique(kinds.begin(), kinds.end()) - kinds.begin());
            if (k > best_kinds) {
                best_kinds = k;
                best_used = used;
                sr = r;
            }
        }
        used = best_used;
        std::printf("[ %s criterion %d ] exit depths:", s.name, static_cast<int>(crit));
        for (int e : used) std::printf(" %d", e);
        std::printf("\n");
        int early = 0;
        for (int e : used) early += e < T;
        ASSERT_GT(early, 0) << s.name;
        const RefRun ref = reference(fetch_model(L.m), ids, T, &used);
        for (int t = 0; t + 1 < n; ++t) {
            const Vec& row = ref.logits[T - 1][t];
            double mx = -1e300, z = 0;
            for (double v : row) mx = std::max(mx, v);
            for (double v : row) z += std::exp(v - mx);
            const double lp = row[ids[t + 1]] - mx - std::log(z);
            EXPECT_NEAR(sr.token_logprobs[t], lp, 1e-4 * std::max(1.0, std::fabs(lp)))
                << s.name << " position " << t << " exit " << used[t];
        }
        (void)V;
    }
}

// Ouro's threshold exit, written here from modeling_ouro.py (exit_threshold): p_t = λ_t·Π_{j<t}(1−λ_j)
// for t < L and p_L the rest; the exit is the first t whose cumulative Σ_{j<=t} p_j reaches q, else L.
// `margin` receives the smallest |cumulative − q| over the passes read (how near a tie it was).
int ouro_threshold_exit(const std::vector<double>& lam, double q, double* margin) {
    const int L = static_cast<int>(lam.size());
    double remaining = 1.0, cum = 0.0;
    for (int t = 1; t <= L; ++t) {
        const double p = t < L ? lam[t - 1] * remaining : remaining;
        remaining *= 1.0 - lam[t - 1];
        cum += p;
        *margin = std::min(*margin, std::fabs(cum - q));
        if (cum >= q) return t;
    }
    return L;
}

double ref_logprob(const Vec& row, int32_t next) {
    double mx = -1e300, z = 0;
    for (double v : row) mx = std::max(mx, v);
    for (double v : row) z += std::exp(v - mx);
    return row[next] - mx - std::log(z);
}

std::vector<Shape> gated_shapes() {
    HParams coda_gate = huginn_hparams();
    coda_gate.exit_gate = true;  // a gate on a coda model: λ reads the state, the token the coda
    return {{"ouro", ouro_hparams()}, {"huginn_with_gate", coda_gate}};
}

GenerateConfig gate_config(EarlyExitCriterion c, float q, int T) {
    GenerateConfig g;
    g.max_tokens = 8;  // validated against max_seq_len 64 with the prompt
    g.loops = T;
    g.early_exit.patience = 1;  // turns the policy on; the gate has no patience, min_L or peek_every
    g.early_exit.criterion = c;
    g.early_exit.threshold = q;
    return g;
}

// Of a few thresholds q, the one whose gate exits (exits_at(q, &margin)) take the most distinct
// passes, among those where no cumulative exit probability comes within 1e-4 of q (margin).
struct GatePick {
    float q = 0;
    std::vector<int> exits;
    size_t kinds = 0;
};
template <class ExitsAt>
GatePick most_varied_gate_exits(ExitsAt exits_at) {
    GatePick best;
    for (float q : {0.2f, 0.35f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 0.95f, 0.99f}) {
        double margin = 1.0;
        std::vector<int> exits = exits_at(q, &margin);
        std::vector<int> kinds(exits);
        std::sort(kinds.begin(), kinds.end());
        const size_t k = static_cast<size_t>(std::unique(kinds.begin(), kinds.end()) - kinds.begin());
        if (margin > 1e-4 && k > best.kinds) best = {q, exits, k};
    }
    return best;
}

// gate_stop: the pass loop stops at the gate's exit pass and deeper passes read the frozen state
// (state propagation). The exit depths are found in the reference itself, one position at a time
// (a position's λ depends on the earlier positions' exits through attention), and the engine must
// choose the same depths and give the reference's log-probabilities.
TEST(LoopedArchitectures, GateStopMatchesTheReference) {
    for (const Shape& s : gated_shapes()) {
        Loaded L(std::string(s.name) + "_gate_stop.tinyloop", s.hp, 61);
        const RModel r = fetch_model(L.m);
        const auto ids = tokens_of(10, 31);
        const int n = static_cast<int>(ids.size()), T = s.hp.default_loops;
        // Exits found position by position: a position's λ depends on the earlier exits.
        const GatePick pick = most_varied_gate_exits([&](float q, double* margin) {
            std::vector<int> exits(static_cast<size_t>(n), T);
            for (int t = 0; t < n; ++t) {
                const RefRun ref = reference(r, ids, T, &exits);
                std::vector<double> lam;
                for (int l = 1; l <= T; ++l) lam.push_back(ref.gate[l - 1][t]);
                exits[t] = ouro_threshold_exit(lam, q, margin);
            }
            return exits;
        });
        const std::vector<int>& best = pick.exits;
        const float best_q = pick.q;
        const size_t best_kinds = pick.kinds;
        ASSERT_GE(best_kinds, 2u) << s.name;
        std::vector<int> used;
        const ScoreResult sr =
            score_early_exit(L.m, ids.data(), n, gate_config(EarlyExitCriterion::GateStop, best_q, T), &used);
        std::printf("[ %s gate_stop q=%g ] exit depths:", s.name, best_q);
        for (int e : used) std::printf(" %d", e);
        std::printf("\n");
        EXPECT_EQ(used, best) << s.name;
        const RefRun ref = reference(r, ids, T, &best);
        for (int t = 0; t + 1 < n; ++t) {
            const double lp = ref_logprob(ref.logits[T - 1][t], ids[t + 1]);
            EXPECT_NEAR(sr.token_logprobs[t], lp, 1e-4 * std::max(1.0, std::fabs(lp))) << s.name << " position " << t;
        }
    }
}

// gate_select (Hugging Face's Ouro code): every pass runs and writes its own keys/values, the token
// is read at the gate's exit pass. The reference is one full-depth run; the exit pass of each
// position comes from its λ there, and its logits from the readout of its pass-e state (with a
// coda, over the earlier positions' states at their own exit passes, the coda keys/values they keep).
TEST(LoopedArchitectures, GateSelectEqualsTheFullRunReadAtTheExitPass) {
    for (const Shape& s : gated_shapes()) {
        Loaded L(std::string(s.name) + "_gate_select.tinyloop", s.hp, 67);
        const RModel r = fetch_model(L.m);
        const auto ids = tokens_of(10, 37);
        const int n = static_cast<int>(ids.size()), T = s.hp.default_loops;
        const RefRun ref = reference(r, ids, T);
        const GatePick pick = most_varied_gate_exits([&](float q, double* margin) {
            std::vector<int> exits;
            for (int t = 0; t < n; ++t) {
                std::vector<double> lam;
                for (int l = 1; l <= T; ++l) lam.push_back(ref.gate[l - 1][t]);
                exits.push_back(ouro_threshold_exit(lam, q, margin));
            }
            return exits;
        });
        const std::vector<int>& best = pick.exits;
        const float best_q = pick.q;
        const size_t best_kinds = pick.kinds;
        ASSERT_GE(best_kinds, 2u) << s.name;
        std::vector<Vec> at_exit;
        for (int t = 0; t < n; ++t) at_exit.push_back(ref.states[best[t] - 1][t]);
        const std::vector<Vec> rows = readout(r, at_exit);
        std::vector<int> used;
        const ScoreResult sr =
            score_early_exit(L.m, ids.data(), n, gate_config(EarlyExitCriterion::GateSelect, best_q, T), &used);
        std::printf("[ %s gate_select q=%g ] exit passes:", s.name, best_q);
        for (int e : used) std::printf(" %d", e);
        std::printf("\n");
        EXPECT_EQ(used, best) << s.name;
        bool differs_from_stop = false;
        for (int t = 0; t + 1 < n; ++t) {
            const double lp = ref_logprob(rows[t], ids[t + 1]);
            EXPECT_NEAR(sr.token_logprobs[t], lp, 1e-4 * std::max(1.0, std::fabs(lp))) << s.name << " position " << t;
            differs_from_stop |= std::fabs(lp - ref_logprob(ref.logits[T - 1][t], ids[t + 1])) > 1e-3;
        }
        EXPECT_TRUE(differs_from_stop) << s.name << ": no position read a pass other than the last";
        // With q = 1 the gate never fires before the last pass: the plain full-depth scores.
        std::vector<int> full;
        const ScoreResult all =
            score_early_exit(L.m, ids.data(), n, gate_config(EarlyExitCriterion::GateSelect, 1.0f, T), &full);
        EXPECT_EQ(full, std::vector<int>(static_cast<size_t>(n), T));
        GenerateConfig plain;
        plain.max_tokens = 8;
        plain.loops = T;
        EXPECT_EQ(all.token_logprobs, score_early_exit(L.m, ids.data(), n, plain).token_logprobs) << s.name;
    }
}

// TokenEvent::exit_gate / exit_gate_cdf: the gate of the row behind each emitted token (the
// prompt's last row for the first, then each emitted token's), at every pass that ran, against
// the reference over prompt + output: plain decoding and gate_select run every pass (the
// full-depth run; bit for bit what exit_gate_per_pass reads), gate_stop runs passes 1..e (the
// reference run with the decode's own exit depths, deeper passes from the frozen state). The
// cumulative row is 1 − Π(1 − λ_j), and a gate run exits at the first pass where it reaches q.
TEST(LoopedArchitectures, TokenEventsRecordTheGateOfThePassesRun) {
    for (const Shape& s : gated_shapes()) {
        Loaded L(std::string(s.name) + "_gate_events.tinyloop", s.hp, 71);
        const RModel r = fetch_model(L.m);
        const int P = 6, N = 10, T = s.hp.default_loops;
        const auto prompt = tokens_of(P, 43);
        auto run = [&](const GenerateConfig& base) {
            GenerateConfig g = base;
            g.max_tokens = N;
            g.loops = T;
            g.ignore_eos = true;
            std::vector<TokenEvent> evs;
            GenerateOptions o;
            o.observer = [&evs](const TokenEvent& ev) {
                evs.push_back(ev);
                return true;
            };
            const GenerateResult res = generate_ex(L.m, prompt.data(), P, g, o);
            EXPECT_EQ(evs.size(), static_cast<size_t>(N)) << s.name;
            return std::make_pair(res.tokens, evs);
        };
        // The threshold whose gate_stop run exits at the most distinct passes, no cumulative
        // probability within 1e-4 of it (float state against the double reference).
        float q = 0;
        size_t kinds = 0;
        for (float c : {0.2f, 0.35f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 0.95f}) {
            const auto [ids, evs] = run(gate_config(EarlyExitCriterion::GateStop, c, T));
            double margin = 1.0;
            std::vector<int> depths;
            for (const TokenEvent& ev : evs) {
                depths.push_back(ev.depth);
                for (float x : ev.exit_gate_cdf) margin = std::min(margin, std::fabs(double(x) - c));
            }
            std::sort(depths.begin(), depths.end());
            const size_t k = static_cast<size_t>(std::unique(depths.begin(), depths.end()) - depths.begin());
            if (margin > 1e-4 && k > kinds) {
                q = c;
                kinds = k;
            }
        }
        ASSERT_GE(kinds, 2u) << s.name << ": no threshold spreads the exits";
        GenerateConfig plain;
        const std::pair<const char*, GenerateConfig> cases[] = {
            {"plain", plain},
            {"gate_select", gate_config(EarlyExitCriterion::GateSelect, q, T)},
            {"gate_stop", gate_config(EarlyExitCriterion::GateStop, q, T)}};
        for (const auto& [name, config] : cases) {
            const auto [ids, evs] = run(config);
            const bool stop = config.early_exit.criterion == EarlyExitCriterion::GateStop && config.early_exit.enabled();
            const bool gated = config.early_exit.enabled();
            const int n = static_cast<int>(ids.size());
            // the exit depth of every position run (the prompt's rows: a full-depth prefill)
            std::vector<int> exits(static_cast<size_t>(n), T);
            for (size_t i = 1; i < evs.size(); ++i) exits[static_cast<size_t>(P) - 1 + i] = evs[i].depth;
            const RefRun ref = reference(r, ids, T, stop ? &exits : nullptr);
            const std::vector<float> engine_gate = exit_gate_per_pass(L.m, ids.data(), n, T);
            std::string passes;
            for (size_t i = 0; i < evs.size(); ++i) {
                const TokenEvent& ev = evs[i];
                const size_t p = static_cast<size_t>(P) - 1 + i;
                const int ran = stop ? ev.depth : T;
                ASSERT_EQ(ev.exit_gate.size(), static_cast<size_t>(ran)) << s.name << " " << name << " token " << i;
                ASSERT_EQ(ev.exit_gate_cdf.size(), ev.exit_gate.size()) << s.name << " " << name;
                double remaining = 1.0;
                std::vector<double> lam;
                for (int l = 1; l <= ran; ++l) {
                    const double ref_l = ref.gate[static_cast<size_t>(l - 1)][p];
                    lam.push_back(ref_l);
                    remaining *= 1.0 - ref_l;
                    EXPECT_NEAR(ev.exit_gate[l - 1], ref_l, 1e-5) << s.name << " " << name << " token " << i << " pass " << l;
                    EXPECT_NEAR(ev.exit_gate_cdf[l - 1], 1.0 - remaining, 1e-5) << s.name << " " << name << " pass " << l;
                    if (!stop) {  // every pass ran with its own keys/values: the full run's states, bit for bit
                        EXPECT_EQ(ev.exit_gate[l - 1], engine_gate[static_cast<size_t>(l - 1) * n + p])
                            << s.name << " " << name << " token " << i << " pass " << l;
                    }
                }
                if (gated && i > 0) {  // the first token's row is the prefill's, at full depth
                    double margin = 1.0;
                    EXPECT_EQ(ev.depth, ouro_threshold_exit(lam, q, &margin)) << s.name << " " << name << " token " << i;
                    if (ev.depth < T) {
                        EXPECT_GE(ev.exit_gate_cdf[ev.depth - 1], q);
                    }
                    if (ev.depth > 1) {
                        EXPECT_LT(ev.exit_gate_cdf[ev.depth - 2], q);
                    }
                }
                const TokenEvent back = event_from_json(nlohmann::json::parse(event_to_json(ev).dump()));
                EXPECT_EQ(back.exit_gate, ev.exit_gate);
                EXPECT_EQ(back.exit_gate_cdf, ev.exit_gate_cdf);
                passes += " " + std::to_string(ev.exit_gate.size());
            }
            std::printf("[ %s %s q=%g ] passes recorded per token:%s\n", s.name, name, q, passes.c_str());
        }
    }
    // A model without the gate records nothing.
    Loaded P("plain_gate_events.tinyloop", huginn_hparams(false), 71);
    const auto ids = tokens_of(4, 9);
    GenerateConfig g;
    g.max_tokens = 3;
    g.ignore_eos = true;
    GenerateOptions o;
    size_t seen = 0;
    o.observer = [&seen](const TokenEvent& ev) {
        EXPECT_TRUE(ev.exit_gate.empty() && ev.exit_gate_cdf.empty());
        ++seen;
        return true;
    };
    generate_ex(P.m, ids.data(), 4, g, o);
    EXPECT_EQ(seen, 3u);
}

// The gate criteria on a model without a gate, and a q outside (0, 1], are refused by name.
TEST(LoopedArchitectures, GateCriteriaRefuseAGatelessModelAndABadThreshold) {
    Loaded P("plain_no_gate.tinyloop", huginn_hparams(false), 23);
    Loaded O("ouro_gate_bad_q.tinyloop", ouro_hparams(), 23);
    const auto ids = tokens_of(4, 9);
    auto refused = [&](Model* m, EarlyExitCriterion c, float q, const std::string& field, const std::string& words) {
        try {
            score_early_exit(m, ids.data(), 4, gate_config(c, q, 4));
            ADD_FAILURE() << field << ": accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
            const std::string w = e.what();
            EXPECT_NE(w.find(field), std::string::npos) << w;
            EXPECT_NE(w.find(words), std::string::npos) << w;
        }
    };
    for (EarlyExitCriterion c : {EarlyExitCriterion::GateStop, EarlyExitCriterion::GateSelect}) {
        refused(P.m, c, 0.9f, "early_exit_criterion", "hparams.exit_gate");
        refused(O.m, c, 1.5f, "early_exit_threshold", "(0, 1]");
        refused(O.m, c, 0.0f, "early_exit_threshold", "> 0");
    }
    EXPECT_NO_THROW(score_early_exit(O.m, ids.data(), 4, gate_config(EarlyExitCriterion::GateStop, 1.0f, 4)));
}

// Several sequences through forward_batch give each one's forward bits.
TEST(LoopedArchitectures, BatchEqualsSingle) {
    for (const Shape& s : shapes()) {
        Loaded L(std::string(s.name) + "_batch.tinyloop", s.hp, 59);
        const Model& m = *L.m;
        const int d = s.hp.d_model, depth = 3;
        const auto a = tokens_of(5, 31), b = tokens_of(3, 37);
        KVCache ka, kb, k1;
        for (KVCache* k : {&ka, &kb, &k1}) k->allocate(exec_layers(m.hp, depth), 8, m.hp.n_kv_heads * m.hp.head_dim);
        BatchSeq seqs[2];
        seqs[0] = {&ka, a.data(), 5, 0, depth, 0};
        seqs[1] = {&kb, b.data(), 3, 0, depth, 0};
        Workspace ws;
        std::vector<float> hb, h1;
        forward_batch(m, seqs, 2, ws, hb);
        int row = 0;
        for (const auto* seq : {&a, &b}) {
            KVCache one;
            one.allocate(exec_layers(m.hp, depth), 8, m.hp.n_kv_heads * m.hp.head_dim);
            ForwardArgs fa;
            fa.tokens = seq->data();
            fa.n = static_cast<int>(seq->size());
            fa.loops = depth;
            Workspace w1;
            forward(m, one, w1, fa, h1);
            EXPECT_EQ(std::memcmp(h1.data(), hb.data() + static_cast<size_t>(row) * d, h1.size() * sizeof(float)), 0)
                << s.name;
            row += fa.n;
        }
    }
}

// Sequences at different depths in one forward_batch (deepest first) give each one's forward
// bits: with a coda, each sequence's coda runs over its own last pass's state.
TEST(LoopedArchitectures, MixedDepthBatchEqualsSingle) {
    for (const Shape& s : shapes()) {
        Loaded L(std::string(s.name) + "_mixed.tinyloop", s.hp, 61);
        const Model& m = *L.m;
        const int d = s.hp.d_model;
        const std::vector<std::vector<int32_t>> toks = {tokens_of(4, 31), tokens_of(3, 37), tokens_of(5, 39)};
        const int depths[3] = {5, 3, 1};
        std::vector<KVCache> kvs(3);
        BatchSeq seqs[3];
        for (int i = 0; i < 3; ++i) {
            kvs[i].allocate(exec_layers(m.hp, depths[i]), 8, m.hp.n_kv_heads * m.hp.head_dim);
            seqs[i] = {&kvs[i], toks[i].data(), static_cast<int>(toks[i].size()), 0, depths[i], 0};
        }
        Workspace ws;
        std::vector<float> hb, h1;
        forward_batch(m, seqs, 3, ws, hb);
        int row = 0;
        for (int i = 0; i < 3; ++i) {
            KVCache one;
            one.allocate(exec_layers(m.hp, depths[i]), 8, m.hp.n_kv_heads * m.hp.head_dim);
            ForwardArgs fa;
            fa.tokens = toks[i].data();
            fa.n = static_cast<int>(toks[i].size());
            fa.loops = depths[i];
            Workspace w1;
            forward(m, one, w1, fa, h1);
            EXPECT_EQ(std::memcmp(h1.data(), hb.data() + static_cast<size_t>(row) * d, h1.size() * sizeof(float)), 0)
                << s.name << " sequence " << i;
            for (int l = 0; l < exec_layers(m.hp, depths[i]); ++l)
                EXPECT_EQ(std::memcmp(one.k_at(l, 0), kvs[i].k_at(l, 0), static_cast<size_t>(fa.n) * one.row * sizeof(float)), 0)
                    << s.name << " sequence " << i << " layer " << l;
            row += fa.n;
        }
    }
}

// Escalation by disagreement deepens the state rung by rung (a depth upgrade over every position)
// and compares each rung's argmax with the pass before it (from the forward's per-pass readout,
// or the previous rung's output when that pass is the previous rung): against whole runs at each
// depth, bit for bit (coda models: the coda recomputed from each rung's states).
TEST(LoopedArchitectures, EscalationEqualsWholeRunsAtEachRung) {
    for (const Shape& s : shapes()) {
        Loaded L(std::string(s.name) + "_esc.tinyloop", s.hp, 71);
        const auto ids = tokens_of(10, 43);
        const int n = static_cast<int>(ids.size()), V = s.hp.vocab_size;
        EscalationConfig c;
        c.depths = {2, 3, 5};  // rungs 2 and 5 read passes 1 and 4 from the hook; rung 3 reads rung 2's
        c.signal = EscalationSignal::Disagreement;
        const EscalationResult got = score_with_consistency_escalation(L.m, ids.data(), n, c);
        auto argmax = [&](const float* row) { return static_cast<int>(std::max_element(row, row + V) - row); };
        std::vector<int> active(static_cast<size_t>(n - 1));
        for (int i = 0; i < n - 1; ++i) active[i] = i;
        std::vector<int> reaching;  // positions that reach each rung after the first
        for (size_t k = 0; k < c.depths.size(); ++k) {
            const int depth = c.depths[k];
            const auto lg = forward_logits(L.m, ids.data(), n, depth);
            const auto prev = depth > 1 ? forward_logits(L.m, ids.data(), n, depth - 1) : std::vector<float>{};
            std::vector<int> next;
            for (int i : active) {
                const float* row = lg.data() + static_cast<size_t>(i) * V;
                if (k + 1 < c.depths.size() && argmax(row) != argmax(prev.data() + static_cast<size_t>(i) * V)) {
                    next.push_back(i);
                    continue;
                }
                EXPECT_EQ(got.token_logprobs[i], static_cast<float>(row_logprob(row, V, ids[i + 1])))
                    << s.name << " position " << i << " depth " << depth;
                EXPECT_EQ(got.depth_used[i], depth) << s.name << " position " << i;
            }
            if (k > 0) reaching.push_back(static_cast<int>(active.size()));
            active = next;
        }
        std::printf("[ %s ] of %d positions, %d reach rung 3 and %d rung 5\n", s.name, n - 1, reaching[0], reaching[1]);
        EXPECT_GT(reaching[1], 0) << s.name;  // both kinds of previous readout were read
    }
}

// q8/q4 of a version-3 file: still version 3 with the same hyperparameters and tensors, every
// matrix quantized (norms, biases and the gate stay f32), finite logits; q8 near the f32 model
// (measured <= 0.12 of max|logit| on these random sandwich models, whose post norms amplify
// weight noise; q4's noise is of order 1 here, so only its structure is checked).
TEST(LoopedArchitectures, QuantizeKeepsTheArchitecture) {
    for (const Shape& s : shapes()) {
        Loaded L(std::string(s.name) + "_q.tinyloop", s.hp, 61);
        for (DType dt : {DType::Q8, DType::Q4}) {
            const std::string out = tltest::temp_path(std::string(s.name) + "_q_out.tinyloop");
            quantize_model_file(L.path, out, dt, 32);
            Model* q = load_model(out);
            EXPECT_EQ(model_hparams(q).block, s.hp.block);
            EXPECT_EQ(model_hparams(q).n_coda_blocks, s.hp.n_coda_blocks);
            EXPECT_EQ(model_hparams(q).loop_input, s.hp.loop_input);
            const ModelInfo qi = model_info(q), fi = model_info(L.m);
            ASSERT_EQ(qi.tensors.size(), fi.tensors.size());
            for (size_t i = 0; i < qi.tensors.size(); ++i) {
                EXPECT_EQ(qi.tensors[i].name, fi.tensors[i].name);
                EXPECT_EQ(qi.tensors[i].dtype, qi.tensors[i].shape.size() == 2 ? dt : DType::F32) << qi.tensors[i].name;
            }
            const auto ids = tokens_of(5, 3);
            const auto lf = forward_logits(L.m, ids.data(), 5, 3), lq = forward_logits(q, ids.data(), 5, 3);
            double mx = 0, err = 0;
            for (size_t i = 0; i < lf.size(); ++i) {
                ASSERT_TRUE(std::isfinite(lq[i]));
                mx = std::max(mx, std::fabs(static_cast<double>(lf[i])));
                err = std::max(err, std::fabs(static_cast<double>(lf[i]) - lq[i]));
            }
            if (dt == DType::Q8) {
                EXPECT_LT(err / mx, 0.25) << s.name;
            }
            free_model(q);
        }
    }
}

}  // namespace

namespace {

// The decoding paths above the forward on version-3 files, coda models included: prefix caches
// (also when the whole prompt is cached: the first token from the kept readout), ResumeHandle
// deepened (the prompt's coda recomputed from its kept states) and made shallower (recomputed),
// PrefixPool, the batch engine (plain and early exit), early exit whose criterion never fires,
// and beam search give greedy's tokens (beam: runs).
TEST(LoopedArchitectures, CachesResumeBatchAndBeamEqualGreedy) {
    for (const Shape& s : shapes()) {
        Loaded L(std::string(s.name) + "_paths.tinyloop", s.hp, 67);
        const auto prompt = tokens_of(6, 41);
        const int n = static_cast<int>(prompt.size());
        GenerateConfig g;
        g.max_tokens = 8;
        g.loops = 4;
        g.ignore_eos = true;
        const auto greedy = generate_ex(L.m, prompt.data(), n, g).tokens;
        ASSERT_EQ(greedy.size(), prompt.size() + 8);
        GenerateOptions lens;
        lens.lens = true;
        lens.lens_top_k = 3;
        for (int cached : {3, n}) {
            Owned<PrefixCache> c(create_prefix_cache(L.m, prompt.data(), cached, 4));
            EXPECT_EQ(generate_with_prefix(L.m, c.get(), prompt.data(), n, g).tokens, greedy) << s.name << " " << cached;
            EXPECT_EQ(generate_with_prefix(L.m, c.get(), prompt.data(), n, g, lens).tokens, greedy) << s.name << " " << cached;
        }
        {
            Owned<ResumeHandle> h(create_resume_handle(L.m, prompt.data(), n, 2));
            EXPECT_EQ(resume_generate(h.get(), g).tokens, greedy) << s.name << " (prefilled at 2, decoded at 4)";
            Owned<ResumeHandle> d(create_resume_handle(L.m, prompt.data(), n, 5));
            EXPECT_EQ(resume_generate(d.get(), g, lens).tokens, greedy) << s.name << " (prefilled at 5, decoded at 4)";
            EXPECT_EQ(resume_generate(h.get(), g, lens).tokens, greedy) << s.name << " (again at 4)";
        }
        {
            Owned<PrefixPool> pool(create_prefix_pool(L.m, 4));
            prefix_pool_add(pool.get(), prompt.data(), 4);
            int reused = 0;
            EXPECT_EQ(generate_with_pool(pool.get(), prompt.data(), n, g, {}, &reused).tokens, greedy) << s.name;
            EXPECT_EQ(reused, 4) << s.name;
        }
        // Early exit whose criterion never fires (a logit margin no model reaches; the readout of
        // every pass still runs): plain greedy's tokens, alone and in the batch engine.
        GenerateConfig never = g;
        never.early_exit.patience = 1;
        never.early_exit.min_L = 1;
        never.early_exit.criterion = EarlyExitCriterion::LogitMargin;
        never.early_exit.threshold = 1e30f;
        EXPECT_EQ(generate_ex(L.m, prompt.data(), n, never).tokens, greedy) << s.name;
        EXPECT_EQ(generate_ex(L.m, prompt.data(), n, never, lens).tokens, greedy) << s.name;
        // Early exit that fires: the batch engine gives the single run's tokens.
        GenerateConfig fires = g;
        fires.early_exit.patience = 1;
        fires.early_exit.min_L = 1;
        fires.early_exit.criterion = EarlyExitCriterion::HiddenL2;
        fires.early_exit.threshold = 0.5f;
        const GenerateResult single_ee = generate_ex(L.m, prompt.data(), n, fires);
        {
            Owned<BatchEngine> e(create_batch_engine(L.m));
            BatchRequest r;
            r.prompt = prompt;
            r.config = g;
            BatchRequest r_ee = r;
            r_ee.config = fires;
            GenerateConfig shallow = g;
            shallow.loops = 2;  // a sequence at another depth in the same steps
            BatchRequest r_sh = r;
            r_sh.config = shallow;
            const uint64_t a = batch_submit(e.get(), r), b = batch_submit(e.get(), r_ee), c = batch_submit(e.get(), r_sh);
            batch_run_until_idle(e.get());
            EXPECT_EQ(batch_result(e.get(), a).tokens, greedy) << s.name;
            EXPECT_EQ(batch_result(e.get(), b).tokens, single_ee.tokens) << s.name;
            EXPECT_EQ(batch_result(e.get(), c).tokens, generate_ex(L.m, prompt.data(), n, shallow).tokens) << s.name;
        }
        GenerateConfig beam = g;
        beam.beam_size = 2;
        EXPECT_EQ(generate_ex(L.m, prompt.data(), n, beam).tokens.size(), prompt.size() + 8) << s.name;
    }
}

}  // namespace
