// kv_sharing (FORMAT.md §1c): each layout against its own definition, on a small random looped
// model (one prelude block, two loop layers, depth 4).
//
// The reference is written here from §1c's rules, in double, with plain loops and one token at a
// time: every key/value a layout keeps is an explicit entry written in the order the tokens and
// passes run (a last-pass slot or a compress ring slot is a variable that the next write
// replaces, a prompt read exactly as the pass-synchronous prefill reads it), so the engine's row
// arithmetic (KVShareLayout, fold_prompt) is checked against the literal rule, not against
// itself. The reference reads the model through the public header only (tensor_as_f32); the
// tests also ask the executor's table (executor.h) and the tokenizer's id count (model.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "forward/executor.h"
#include "model/model.h"
#include "engine/reference_f64.h"
#include "test_util.h"
#include "tinyloop/json.h"
#include "tinyloop/run_spec.h"
#include "tinyloop/scoring.h"

using namespace tinyloop;

namespace {

using namespace tlref;  // Vec, RMat, fetch, mv, rms, rope (reference_f64.h)

struct RBlock {
    Vec attn_norm, mlp_norm;
    RMat wq, wk, wv, wo, wg, wu, wd;
};

RMat mat(Model* m, const std::string& name, int rows, int cols) {
    RMat r{rows, cols, fetch(m, name)};
    EXPECT_EQ(r.w.size(), static_cast<size_t>(rows) * cols) << name;
    return r;
}

struct KV {
    Vec k, v;
};

// The model of FORMAT.md §1 (pre-norm blocks), run one token at a time with the layout's rule.
class Reference {
public:
    Reference(Model* m, const std::string& mode, int loops, int prompt) : hp_(model_hparams(m)), L_(loops), P_(prompt) {
        const int d = hp_.d_model, H = hp_.n_heads * hp_.head_dim, Hkv = hp_.n_kv_heads * hp_.head_dim;
        embed_ = mat(m, "embed", hp_.vocab_size, d);
        head_ = hp_.tie_embeddings ? embed_ : mat(m, "head", hp_.vocab_size, d);
        final_norm_ = fetch(m, "final_norm");
        auto block = [&](const std::string& p) {
            return RBlock{fetch(m, p + ".attn_norm"), fetch(m, p + ".mlp_norm"), mat(m, p + ".wq", H, d),
                          mat(m, p + ".wk", Hkv, d),  mat(m, p + ".wv", Hkv, d),     mat(m, p + ".wo", d, H),
                          mat(m, p + ".w_gate", hp_.d_ff, d), mat(m, p + ".w_up", hp_.d_ff, d),
                          mat(m, p + ".w_down", d, hp_.d_ff)};
        };
        for (int i = 0; i < hp_.n_pre_blocks; ++i) pre_.push_back(block("pre." + std::to_string(i)));
        for (int j = 0; j < hp_.n_loop_layers; ++j) loop_.push_back(block("loop." + std::to_string(j)));
        if (mode.rfind("compress-s", 0) == 0) ring_k_ = std::stoi(mode.substr(10));
        mode_ = mode.rfind("compress-s", 0) == 0 ? "compress" : mode;
    }

    // Runs the token at the next position, stopping after pass `exit` (loops = no early exit),
    // and returns its logits.
    Vec step(int32_t token, int exit) {
        const int t = static_cast<int>(depth_.size());
        const int d = hp_.d_model;
        depth_.push_back(exit);
        Vec h(embed_.w.begin() + static_cast<std::ptrdiff_t>(token) * d,
              embed_.w.begin() + static_cast<std::ptrdiff_t>(token + 1) * d);
        for (size_t i = 0; i < pre_.size(); ++i) block(pre_[i], h, t, -1, static_cast<int>(i));
        for (int l = 1; l <= exit; ++l)
            for (int j = 0; j < hp_.n_loop_layers; ++j) block(loop_[j], h, t, l, j);
        // State propagation (FORMAT.md §1) where the layout takes it: per-pass and last-pass.
        if ((mode_ == "per-pass" || mode_ == "last-pass") && exit < L_)
            for (int j = 0; j < hp_.n_loop_layers; ++j) {
                const KV e = key_value(loop_[j], h, t);
                for (int l = exit + 1; l <= L_; ++l) write(t, l, j, e);
            }
        return mv(head_, rms(h, final_norm_, hp_.norm_eps));
    }

private:
    KV key_value(const RBlock& b, const Vec& h, int t) const {
        const Vec a = rms(h, b.attn_norm, hp_.norm_eps);
        KV e{mv(b.wk, a), mv(b.wv, a)};
        rope(e.k, hp_.n_kv_heads, hp_.head_dim, t, hp_.rope_theta);
        return e;
    }
    int loop_entry(int l, int j) const { return (l - 1) * hp_.n_loop_layers + j; }

    // Every write of an entry, in run order: the per-pass map always (the exact entries), the
    // layouts' shared variables as their rule says.
    void write(int p, int l, int j, const KV& e) {
        exact_[{p, l, j}] = e;
        if (l > 0 && p >= P_) last_[{p, j}] = e;                    // last-pass: one per loop layer
        if (l > 0 && ring_k_ > 0) ring_[{p, loop_entry(l, j) % ring_k_}] = e;  // compress: the ring slot
    }
    // The entry reader t (at pass l, loop layer j; l = -1 the prelude) reads at position p.
    const KV& read(int t, int p, int l, int j) const {
        if (l < 0 || mode_ == "per-pass" || (p == t && mode_ != "last-pass")) return exact_.at({p, l, j});
        if (mode_ == "last-pass") return p < P_ ? exact_.at({p, l, j}) : last_.at({p, j});
        if (mode_ == "latest-m4") return exact_.at({p, std::min(l, depth_[p]), j});  // its latest pass with layer j
        // compress: a prompt reader reads the prompt exactly (the prefill runs pass by pass over
        // the whole prompt); everything else reads the ring slot as its last write left it
        if (t < P_) return exact_.at({p, l, j});
        return ring_.at({p, loop_entry(l, j) % ring_k_});
    }

    void block(const RBlock& b, Vec& h, int t, int l, int j) {
        const int hd = hp_.head_dim, Hq = hp_.n_heads, Hk = hp_.n_kv_heads;
        const Vec a = rms(h, b.attn_norm, hp_.norm_eps);
        Vec q = mv(b.wq, a);
        rope(q, Hq, hd, t, hp_.rope_theta);
        write(t, l, j, key_value(b, h, t));
        Vec att(static_cast<size_t>(Hq * hd), 0.0);
        for (int hh = 0; hh < Hq; ++hh) {
            const int kh = hh / (Hq / Hk);
            std::vector<double> s(static_cast<size_t>(t + 1));
            double mx = -1e300;
            for (int p = 0; p <= t; ++p) {
                const KV& e = read(t, p, l, j);
                double dot = 0;
                for (int i = 0; i < hd; ++i) dot += q[hh * hd + i] * e.k[kh * hd + i];
                s[p] = dot / std::sqrt(static_cast<double>(hd));
                mx = std::max(mx, s[p]);
            }
            double z = 0;
            for (double& x : s) z += (x = std::exp(x - mx));
            for (int p = 0; p <= t; ++p) {
                const KV& e = read(t, p, l, j);
                for (int i = 0; i < hd; ++i) att[hh * hd + i] += s[p] / z * e.v[kh * hd + i];
            }
        }
        const Vec o = mv(b.wo, att);
        for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
        const Vec m = rms(h, b.mlp_norm, hp_.norm_eps);
        const Vec g = mv(b.wg, m), u = mv(b.wu, m);
        Vec gu(g.size());
        for (size_t i = 0; i < g.size(); ++i) gu[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
        const Vec dn = mv(b.wd, gu);
        for (size_t i = 0; i < h.size(); ++i) h[i] += dn[i];
    }

    HParams hp_;
    int L_, P_, ring_k_ = 0;
    std::string mode_;
    RMat embed_, head_;
    Vec final_norm_;
    std::vector<RBlock> pre_, loop_;
    std::vector<int> depth_;
    std::map<std::tuple<int, int, int>, KV> exact_;
    std::map<std::pair<int, int>, KV> last_, ring_;
};

double logprob(const Vec& z, int32_t id) {
    double mx = -1e300, s = 0;
    for (double x : z) mx = std::max(mx, x);
    for (double x : z) s += std::exp(x - mx);
    return z[id] - mx - std::log(s);
}

struct Fixture {
    std::string path;
    Model* m = nullptr;
    Fixture() {
        HParams hp = tltest::small_hparams();
        hp.default_loops = 4;
        path = tltest::write_random_model("kv_sharing.tinyloop", hp, 11);
        m = load_model(path);
    }
    ~Fixture() { free_model(m); }
};

std::vector<int32_t> text(int n) {
    std::vector<int32_t> t;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; ++i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        t.push_back(static_cast<int32_t>((x >> 33) % 256));
    }
    return t;
}

constexpr int kLoops = 4, kPrompt = 6, kN = 20;

// An early-exit policy under which some fed tokens stop after pass 2 or 3 of 4 and others run
// every pass (hidden_l2 at the median of its pass-2 values on the text): later tokens then read,
// at deeper passes, the entries of tokens that skipped them — where the layouts differ.
GenerateConfig mixed_exits(Model* m, const std::vector<int32_t>& ids) {
    const ExitSignals sig = early_exit_signals(m, ids.data(), static_cast<int>(ids.size()), kLoops);
    std::vector<float> v;
    for (int p = 0; p < sig.n_positions; ++p) v.push_back(sig.at(EarlyExitCriterion::HiddenL2, p, 2));
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    GenerateConfig c;
    c.loops = kLoops;
    c.early_exit.criterion = EarlyExitCriterion::HiddenL2;
    c.early_exit.threshold = v[v.size() / 2];
    c.early_exit.patience = 1;
    c.early_exit.min_L = 2;
    return c;
}

// The engine's teacher-forced log-probabilities against the reference's, position by position.
void expect_matches_reference(Model* m, const std::string& mode, const GenerateConfig& base) {
    GenerateConfig c = base;
    c.loops = kLoops;
    c.kv_sharing = parse_kv_sharing(mode);
    const std::vector<int32_t> ids = text(kN);
    const KVSharingScore s = score_kv_sharing(m, ids.data(), kN, c, kPrompt);
    ASSERT_EQ(s.score.token_logprobs.size(), static_cast<size_t>(kN - 1));
    Reference ref(m, mode, kLoops, kPrompt);
    double worst = 0;
    for (int p = 0; p + 1 < kN; ++p) {
        const Vec z = ref.step(ids[p], s.depth_used[p]);
        worst = std::max(worst, std::fabs(logprob(z, ids[p + 1]) - s.score.token_logprobs[p]));
    }
    std::printf("[ %s%s ] worst |engine - reference| log-prob: %.2e, delta NLL %.4f nats/token, %.0f bytes/token\n",
                mode.c_str(), base.early_exit.patience > 0 ? " + early exit" : "", worst, s.delta_nll, s.bytes_per_token);
    EXPECT_LT(worst, 2e-4) << mode;
}

}  // namespace

TEST(KVSharing, NamesParseAndRefuseBadValues) {
    for (const char* name : {"per-pass", "last-pass", "latest-m4", "compress-s1", "compress-s8", "compress-s1024"})
        EXPECT_EQ(kv_sharing_name(parse_kv_sharing(name)), name);
    for (const char* bad : {"", "perpass", "compress-s0", "compress-s1025", "compress-s", "compress-sx", "last"}) {
        try {
            parse_kv_sharing(bad);
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("kv_sharing: "), std::string::npos) << e.what();
        }
    }
    try {
        parse_kv_sharing("compress-s0");
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("outside [1, 1024]"), std::string::npos) << e.what();
    }
    // The codec: one JSON form, the field named with the caller's path.
    GenerateConfig c;
    set_config_field(c, "kv_sharing", "compress-s8");
    EXPECT_EQ(c.kv_sharing, (KVSharing{KVSharing::Mode::Compress, 8}));
    EXPECT_EQ(config_to_json(c)["kv_sharing"], "compress-s8");
    EXPECT_EQ(config_from_json(config_to_json(c)).kv_sharing, c.kv_sharing);
    for (const nlohmann::json& v : {nlohmann::json("compress-s2000"), nlohmann::json(3), nlohmann::json("every")}) {
        try {
            config_from_json({{"kv_sharing", v}}, {}, "config.");
            ADD_FAILURE() << "accepted " << v.dump();
        } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()).rfind("config.kv_sharing: ", 0), 0u) << e.what();
        }
    }
    EXPECT_EQ(config_to_json(GenerateConfig{})["kv_sharing"], "per-pass");
}

TEST(KVSharing, PerPassIsTodaysScoreBitForBit) {
    Fixture f;
    const std::vector<int32_t> ids = text(kN);
    GenerateConfig c;
    c.loops = kLoops;
    const KVSharingScore s = score_kv_sharing(f.m, ids.data(), kN, c, kPrompt);
    const ScoreResult whole = score(f.m, ids.data(), kN, kLoops);
    ASSERT_EQ(s.score.token_logprobs, whole.token_logprobs);  // bits, not a tolerance
    EXPECT_EQ(s.delta_nll, 0.0);
    EXPECT_EQ(s.cache_bytes, s.exact_cache_bytes);
}

TEST(KVSharing, EveryModeMatchesItsDefinition) {
    Fixture f;
    for (const char* mode : {"per-pass", "last-pass", "latest-m4", "compress-s3", "compress-s8", "compress-s1"})
        expect_matches_reference(f.m, mode, GenerateConfig{});
}

TEST(KVSharing, EveryModeMatchesItsDefinitionWithEarlyExit) {
    Fixture f;
    const std::vector<int32_t> ids = text(kN);
    const GenerateConfig exits = mixed_exits(f.m, ids);
    for (const char* mode : {"per-pass", "last-pass", "latest-m4", "compress-s3"})
        expect_matches_reference(f.m, mode, exits);
    // The exits happened and were mixed (the prompt runs every pass).
    GenerateConfig c = exits;
    c.kv_sharing = parse_kv_sharing("latest-m4");
    const KVSharingScore s = score_kv_sharing(f.m, ids.data(), kN, c, kPrompt);
    std::vector<int> depths(s.depth_used.begin() + kPrompt, s.depth_used.end());
    std::sort(depths.begin(), depths.end());
    EXPECT_LT(depths.front(), depths.back());  // tokens of different depths
    EXPECT_LT(depths.front(), kLoops);
    // latest-m4 reads an exited token's exit-pass entry where per-pass reads the propagated one.
    EXPECT_NE(s.delta_nll, 0.0);
}

// The cache really shrinks: bytes from the layout's rows (FORMAT.md §1c), f32 keys and values
// of n_kv_heads * head_dim floats each, for n positions of which kPrompt are the prompt.
TEST(KVSharing, BytesPerTokenAreTheLayoutsRows) {
    Fixture f;
    const HParams hp = model_hparams(f.m);
    const size_t row = 2 * static_cast<size_t>(hp.n_kv_heads) * hp.head_dim * sizeof(float);
    const size_t fixed = hp.n_pre_blocks, loop = hp.n_loop_layers, layers = fixed + kLoops * loop;
    const size_t P = kPrompt, N = kN;
    const std::vector<std::pair<const char*, size_t>> want = {
        {"per-pass", layers * N},
        {"last-pass", layers * P + (fixed + loop) * (N - P)},
        {"latest-m4", layers * N},  // a preallocated cache: the rule changes reads, not rows
        {"compress-s3", (fixed + 3) * N},
        {"compress-s1", (fixed + 1) * N},
        {"compress-s64", layers * N},  // more slots than loop entries: one per entry
    };
    const std::vector<int32_t> ids = text(kN);
    for (const auto& [mode, rows] : want) {
        GenerateConfig c;
        c.loops = kLoops;
        c.kv_sharing = parse_kv_sharing(mode);
        const KVSharingScore s = score_kv_sharing(f.m, ids.data(), kN, c, kPrompt);
        EXPECT_EQ(s.cache_bytes, rows * row) << mode;
        EXPECT_DOUBLE_EQ(s.bytes_per_token, static_cast<double>(rows * row) / kN) << mode;
        EXPECT_EQ(s.exact_cache_bytes, layers * N * row) << mode;
        // generate holds the same cache for a prompt of kPrompt and kN - kPrompt new tokens
        GenerateConfig g = c;
        g.max_tokens = kN - kPrompt;
        g.ignore_eos = true;
        const GenerateResult r = generate_ex(f.m, ids.data(), kPrompt, g);
        EXPECT_EQ(r.stats.kv_cache_bytes, rows * row) << mode;
    }
}

// generate with a layout emits the reference's greedy tokens under the same layout.
TEST(KVSharing, GreedyGenerateFollowsTheLayout) {
    Fixture f;
    const std::vector<int32_t> prompt = text(kPrompt);
    for (const char* mode : {"last-pass", "compress-s3", "compress-s5"}) {
        GenerateConfig c;
        c.loops = kLoops;
        c.max_tokens = 10;
        c.ignore_eos = true;
        c.kv_sharing = parse_kv_sharing(mode);
        const GenerateResult r = generate_ex(f.m, prompt.data(), kPrompt, c);
        ASSERT_EQ(r.tokens.size(), static_cast<size_t>(kPrompt + c.max_tokens));
        Reference ref(f.m, mode, kLoops, kPrompt);
        Vec z;
        for (int32_t t : prompt) z = ref.step(t, kLoops);
        // Each emitted token is the reference's argmax over the ids the tokenizer can decode
        // (generate masks the others), up to float-vs-double near-ties.
        const int ids = f.m->tokenizer.n_ids();
        for (int i = 0; i < c.max_tokens; ++i) {
            const int32_t tok = r.tokens[static_cast<size_t>(kPrompt + i)];
            EXPECT_GE(z[tok], *std::max_element(z.begin(), z.begin() + ids) - 1e-4) << mode << " token " << i;
            z = ref.step(tok, kLoops);
        }
    }
}

TEST(KVSharing, OtherModesAndTheDeviceRefuseIt) {
    Fixture f;
    const std::vector<int32_t> prompt = text(kPrompt);
    GenerateConfig c;
    c.kv_sharing = parse_kv_sharing("last-pass");
    c.beam_size = 2;
    EXPECT_NE(tltest::refusal(f.m, c).find("kv_sharing: last-pass runs with plain decoding"), std::string::npos)
        << tltest::refusal(f.m, c);
    c.beam_size = 0;
    c.kv_sharing.mode = KVSharing::Mode::Compress;
    c.kv_sharing.k = 0;
    EXPECT_NE(tltest::refusal(f.m, c).find("kv_sharing: compress-s0: k is outside [1, 1024]"), std::string::npos);
    EXPECT_FALSE(exec_supports(ExecKind::Cuda, ExecOp::KVSharing));
    EXPECT_TRUE(exec_supports(ExecKind::Cpu, ExecOp::KVSharing));
    GenerateConfig s;
    s.loops = kLoops;
    s.kv_sharing = parse_kv_sharing("last-pass");
    const std::vector<int32_t> ids = text(kN);
    EXPECT_THROW(score_kv_sharing(f.m, ids.data(), kN, s, 0), Error);
    EXPECT_THROW(score_kv_sharing(f.m, ids.data(), kN, s, kN), Error);
    // A run spec that speculates refuses it (speculation keeps per-pass), as does the batch engine.
    for (DecodeMode mode : {DecodeMode::Speculative, DecodeMode::Tree}) {
        RunSpec spec;
        spec.mode = mode;
        spec.config = s;
        spec.config.max_tokens = 4;
        try {
            run_decode(f.m, prompt.data(), kPrompt, spec);
            ADD_FAILURE() << "speculation accepted kv_sharing";
        } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()).rfind("kv_sharing: last-pass", 0), 0u) << e.what();
        }
    }
    // generate_batch_ex runs kv_sharing prompts one at a time (not in the batch engine, which keeps
    // per-pass): each result is generate_ex's.
    GenerateConfig b = s;
    b.max_tokens = 4;
    b.ignore_eos = true;
    const std::vector<GenerateResult> batch = generate_batch_ex(f.m, {prompt, prompt}, b);
    const GenerateResult one = generate_ex(f.m, prompt.data(), kPrompt, b);
    ASSERT_EQ(batch.size(), 2u);
    for (const GenerateResult& r : batch) {
        EXPECT_EQ(r.tokens, one.tokens);
        EXPECT_EQ(r.stats.kv_cache_bytes, one.stats.kv_cache_bytes);
    }
}
