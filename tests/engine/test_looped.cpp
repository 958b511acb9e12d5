// The looped runtime: logit lens, the scoring family, early exit with exact KV (against a naive
// reference that recomputes everything), prefix caches and depth upgrade; each test without and
// with input injection (FORMAT.md §1a).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "test_util.h"

using namespace tinyloop;

namespace {

tinyloop::HParams looped_hparams() {
    HParams hp = tltest::small_hparams();
    hp.max_loops = 8;
    hp.default_loops = 4;
    return hp;
}

// The same random weights without and with input injection (FORMAT.md §1a, file version 2).
const std::string& model_path(LoopInput input) {
    static const std::string plain = tltest::write_random_model("looped.tinyloop", looped_hparams(), 21);
    static const std::string injecting = [] {
        HParams hp = looped_hparams();
        hp.loop_input = LoopInput::Add;
        return tltest::write_random_model("looped-v2.tinyloop", hp, 21);
    }();
    return input == LoopInput::Add ? injecting : plain;
}

std::vector<int32_t> ids() { return {3, 140, 77, 200, 9, 45, 250, 18, 66, 101}; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- A naive reference with per-position exit depths (double precision, from FORMAT.md §1) ----
struct Ref {
    HParams hp;
    std::vector<double> embed, head, final_norm;
    struct Layer {
        std::vector<double> an, mn, wq, wk, wv, wo, wg, wu, wd;
    };
    std::vector<Layer> pre, loop;

    static std::vector<double> get(Model* m, const std::string& n) {
        auto f = tensor_as_f32(m, n);
        return std::vector<double>(f.begin(), f.end());
    }
    explicit Ref(Model* m) : hp(model_hparams(m)) {
        embed = get(m, "embed");
        head = hp.tie_embeddings ? embed : get(m, "head");
        final_norm = get(m, "final_norm");
        auto layer = [&](const std::string& p) {
            Layer l;
            l.an = get(m, p + ".attn_norm");
            l.mn = get(m, p + ".mlp_norm");
            l.wq = get(m, p + ".wq");
            l.wk = get(m, p + ".wk");
            l.wv = get(m, p + ".wv");
            l.wo = get(m, p + ".wo");
            l.wg = get(m, p + ".w_gate");
            l.wu = get(m, p + ".w_up");
            l.wd = get(m, p + ".w_down");
            return l;
        };
        for (int i = 0; i < hp.n_pre_blocks; ++i) pre.push_back(layer("pre." + std::to_string(i)));
        for (int i = 0; i < hp.n_loop_layers; ++i) loop.push_back(layer("loop." + std::to_string(i)));
    }
    std::vector<double> norm(const std::vector<double>& x, const std::vector<double>& g) const {
        double s = 0;
        for (double v : x) s += v * v;
        const double r = 1.0 / std::sqrt(s / x.size() + hp.norm_eps);
        std::vector<double> y(x.size());
        for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * g[i];
        return y;
    }
    static std::vector<double> mv(const std::vector<double>& W, const std::vector<double>& x, size_t rows) {
        std::vector<double> y(rows, 0.0);
        const size_t cols = x.size();
        for (size_t r = 0; r < rows; ++r)
            for (size_t c = 0; c < cols; ++c) y[r] += W[r * cols + c] * x[c];
        return y;
    }
    void rope(std::vector<double>& v, int heads, int p) const {
        const int hd = hp.head_dim, half = hd / 2;
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < half; ++i) {
                const double a = p * std::pow(static_cast<double>(hp.rope_theta), -2.0 * i / hd);
                double& x0 = v[h * hd + i];
                double& x1 = v[h * hd + i + half];
                const double y0 = x0 * std::cos(a) - x1 * std::sin(a), y1 = x0 * std::sin(a) + x1 * std::cos(a);
                x0 = y0;
                x1 = y1;
            }
    }
    // Logits of the last position; position p runs `exit[p]` passes; deeper passes see keys and
    // values computed from its frozen state.
    std::vector<double> last_logits(const std::vector<int32_t>& toks, const std::vector<int>& exit, int L) const {
        const int n = static_cast<int>(toks.size()), d = hp.d_model;
        const int H = hp.n_heads * hp.head_dim, Hkv = hp.n_kv_heads * hp.head_dim;
        std::vector<std::vector<double>> h(n);
        for (int p = 0; p < n; ++p) h[p].assign(embed.begin() + static_cast<size_t>(toks[p]) * d, embed.begin() + static_cast<size_t>(toks[p] + 1) * d);
        auto run = [&](const Layer& w, const std::vector<char>& active) {
            std::vector<std::vector<double>> q(n), k(n), v(n);
            for (int p = 0; p < n; ++p) {
                auto a = norm(h[p], w.an);
                q[p] = mv(w.wq, a, H);
                k[p] = mv(w.wk, a, Hkv);
                v[p] = mv(w.wv, a, Hkv);
                rope(q[p], hp.n_heads, p);
                rope(k[p], hp.n_kv_heads, p);
            }
            for (int p = 0; p < n; ++p) {
                if (!active[p]) continue;
                std::vector<double> att(H, 0.0);
                for (int hh = 0; hh < hp.n_heads; ++hh) {
                    const int kvh = hh / (hp.n_heads / hp.n_kv_heads);
                    std::vector<double> s(p + 1);
                    double mx = -1e300;
                    for (int j = 0; j <= p; ++j) {
                        double dot = 0;
                        for (int i = 0; i < hp.head_dim; ++i) dot += q[p][hh * hp.head_dim + i] * k[j][kvh * hp.head_dim + i];
                        s[j] = dot / std::sqrt(static_cast<double>(hp.head_dim));
                        mx = std::max(mx, s[j]);
                    }
                    double z = 0;
                    for (double& x : s) z += x = std::exp(x - mx);
                    for (int j = 0; j <= p; ++j)
                        for (int i = 0; i < hp.head_dim; ++i) att[hh * hp.head_dim + i] += s[j] / z * v[j][kvh * hp.head_dim + i];
                }
                auto o = mv(w.wo, att, d);
                for (int i = 0; i < d; ++i) h[p][i] += o[i];
                auto m = norm(h[p], w.mn);
                auto g = mv(w.wg, m, hp.d_ff), u = mv(w.wu, m, hp.d_ff);
                for (int i = 0; i < hp.d_ff; ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
                auto dn = mv(w.wd, g, d);
                for (int i = 0; i < d; ++i) h[p][i] += dn[i];
            }
        };
        std::vector<char> all(n, 1);
        for (const auto& w : pre) run(w, all);
        const std::vector<std::vector<double>> input = h;  // the prelude output e (§1a)
        const bool inject = hp.loop_input == LoopInput::Add;
        // A frozen position's keys/values at deeper passes come from its frozen state h_e (plus
        // e_p with input injection, §1a): the loop layers read h[p] held at that pass input.
        std::vector<std::vector<double>> frozen(n), held(n);
        for (int l = 1; l <= L; ++l) {
            std::vector<char> active(n);
            for (int p = 0; p < n; ++p) {
                active[p] = l <= exit[p];
                if (!active[p]) {
                    if (frozen[p].empty()) frozen[p] = h[p];
                    h[p] = frozen[p];
                }
                if (inject && l > 1)
                    for (int i = 0; i < d; ++i) h[p][i] += input[p][i];
                held[p] = h[p];
            }
            // Loop layer j of a frozen position must see its pass input at every layer (not an
            // intermediate state): keep h[p] held across the layers of the pass.
            for (const auto& w : loop) {
                run(w, active);
                for (int p = 0; p < n; ++p)
                    if (!active[p]) h[p] = held[p];
            }
        }
        auto a = norm(frozen[n - 1].empty() ? h[n - 1] : frozen[n - 1], final_norm);
        return mv(head, a, hp.vocab_size);
    }
};

// Every test below runs on the version-1 model and on its input-injecting twin.
class Looped : public ::testing::TestWithParam<LoopInput> {
protected:
    const std::string& model_path() const { return ::model_path(GetParam()); }
};
class Lens : public Looped {};
class Escalation : public Looped {};
class EarlyExit : public Looped {};
class Caches : public Looped {};

std::string input_name(const ::testing::TestParamInfo<LoopInput>& info) { return loop_input_name(info.param); }

}  // namespace

INSTANTIATE_TEST_SUITE_P(LoopInput, Lens, ::testing::Values(LoopInput::None, LoopInput::Add), input_name);
INSTANTIATE_TEST_SUITE_P(LoopInput, Escalation, ::testing::Values(LoopInput::None, LoopInput::Add), input_name);
INSTANTIATE_TEST_SUITE_P(LoopInput, EarlyExit, ::testing::Values(LoopInput::None, LoopInput::Add), input_name);
INSTANTIATE_TEST_SUITE_P(LoopInput, Caches, ::testing::Values(LoopInput::None, LoopInput::Add), input_name);

TEST_P(Lens, FinalDepthIsBitIdenticalToTheModelsLogits) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto t = ids();
    const int n = static_cast<int>(t.size()), V = model_hparams(mp.get()).vocab_size;
    for (int L : {1, 4, 8}) {
        auto lens = forward_lens_logits(mp.get(), t.data(), n, L);
        auto logits = forward_logits(mp.get(), t.data(), n, L);
        std::vector<float> last(lens.end() - static_cast<std::ptrdiff_t>(n) * V, lens.end());
        EXPECT_TRUE(same_bits(last, logits)) << L;
        // Depth l of the lens equals the final logits of a model run at depth l.
        if (L == 8) {
            auto at3 = forward_logits(mp.get(), t.data(), n, 3);
            std::vector<float> d3(lens.begin() + 2 * static_cast<std::ptrdiff_t>(n) * V, lens.begin() + 3 * static_cast<std::ptrdiff_t>(n) * V);
            EXPECT_TRUE(same_bits(d3, at3));
        }
    }
}

TEST_P(Lens, CellsAreConsistent) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto t = ids();
    const int n = static_cast<int>(t.size());
    LensResult r = score_logit_lens(mp.get(), t.data(), n, 4, 3);
    ASSERT_EQ(r.cells.size(), static_cast<size_t>(n) * 4);
    for (int i = 0; i < n; ++i) {
        const LensCell& fin = r.at(i, 4);
        EXPECT_NEAR(fin.kl_to_final, 0.0, 1e-6);
        EXPECT_EQ(fin.argmax, fin.top_ids[0]);
        EXPECT_FLOAT_EQ(fin.p_final_argmax, fin.top_probs[0]);
        for (int l = 1; l <= 4; ++l) {
            const LensCell& c = r.at(i, l);
            EXPECT_GE(c.kl_to_final, 0.0f);
            EXPECT_GE(c.entropy, 0.0f);
            EXPECT_EQ(c.top_ids.size(), 3u);
            EXPECT_GE(c.top_probs[0], c.top_probs[1]);
            if (i + 1 < n) EXPECT_GT(c.p_next, 0.0f);
            else EXPECT_EQ(c.p_next, -1.0f);
        }
    }
    ScoreResult s = score(mp.get(), t.data(), n, 4);
    for (int i = 0; i + 1 < n; ++i) EXPECT_NEAR(std::log(r.at(i, 4).p_next), s.token_logprobs[i], 1e-4);
}

TEST_P(Lens, UncertaintyPredictionDepthFollowsItsDefinition) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto t = ids();
    const int n = static_cast<int>(t.size());
    UncertaintyResult u = score_with_uncertainty(mp.get(), t.data(), n, 6);
    LensResult r = score_logit_lens(mp.get(), t.data(), n, 6, 2);
    for (int i = 0; i < n; ++i) {
        int depth = 6;
        while (depth > 1 && r.at(i, depth - 1).argmax == r.at(i, 6).argmax) --depth;
        EXPECT_EQ(u.prediction_depth[i], depth);
        EXPECT_NEAR(u.entropy[i], r.at(i, 6).entropy, 1e-5);
        EXPECT_NEAR(u.margin[i], r.at(i, 6).top_probs[0] - r.at(i, 6).top_probs[1], 1e-5);
    }
    EXPECT_EQ(u.token_logprobs.size(), static_cast<size_t>(n - 1));
}

TEST_P(Escalation, EscalatesExactlyThePositionsOverTheThresholdWithFreshScores) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto t = ids();
    const int n = static_cast<int>(t.size());
    // Hand-built threshold: the median entropy at the first rung splits the positions.
    LensResult low = score_logit_lens(mp.get(), t.data(), n, 2, 1);
    std::vector<float> ent;
    for (int i = 0; i + 1 < n; ++i) ent.push_back(low.at(i, 2).entropy);
    std::vector<float> sorted = ent;
    std::sort(sorted.begin(), sorted.end());
    const float thr = (sorted[sorted.size() / 2] + sorted[sorted.size() / 2 - 1]) / 2;
    EscalationConfig c;
    c.depths = {2, 6};
    c.signal = EscalationSignal::Entropy;
    c.threshold = thr;
    EscalationResult r = score_with_consistency_escalation(mp.get(), t.data(), n, c);
    const ScoreResult s2 = score(mp.get(), t.data(), n, 2), s6 = score(mp.get(), t.data(), n, 6);
    int escalated = 0;
    for (int i = 0; i + 1 < n; ++i) {
        const bool over = ent[i] > thr;
        EXPECT_EQ(r.escalated[i] != 0, over) << i;
        EXPECT_EQ(r.depth_used[i], over ? 6 : 2);
        EXPECT_EQ(r.token_logprobs[i], over ? s6.token_logprobs[i] : s2.token_logprobs[i]) << i;  // bit-exact
        escalated += over;
    }
    EXPECT_GT(escalated, 0);
    EXPECT_LT(escalated, n - 1);
    EXPECT_EQ(r.passes_run, 6LL * n);  // 2 passes, then 4 more: the prompt is never recomputed
    // Disagreement and margin signals run too.
    c.signal = EscalationSignal::Disagreement;
    c.depths = {1, 3, 8};
    EXPECT_NO_THROW(score_with_consistency_escalation(mp.get(), t.data(), n, c));
    c.depths = {3, 2};
    EXPECT_THROW(score_with_consistency_escalation(mp.get(), t.data(), n, c), Error);
}

TEST_P(EarlyExit, NeverFiringEqualsPlainDecodingBitForBit) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto t = ids();
    GenerateConfig plain;
    plain.max_tokens = 12;
    plain.ignore_eos = true;
    for (auto crit : {EarlyExitCriterion::HiddenL2, EarlyExitCriterion::KL, EarlyExitCriterion::EntropyDelta,
                      EarlyExitCriterion::LogitMargin}) {
        GenerateConfig ee = plain;
        ee.early_exit.patience = 1;
        ee.early_exit.criterion = crit;
        ee.early_exit.threshold = crit == EarlyExitCriterion::LogitMargin ? 1e30f : 1e-30f;
        GenerateResult a = generate_ex(mp.get(), t.data(), 10, plain), b = generate_ex(mp.get(), t.data(), 10, ee);
        EXPECT_EQ(a.tokens, b.tokens);
        for (int dpt : b.stats.depth_per_token) EXPECT_EQ(dpt, 4);
    }
}

TEST_P(EarlyExit, ForcedExitMatchesANaiveStatePropagationReference) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    Ref ref(mp.get());
    const auto t = ids();
    const int L = 6;
    for (int e : {1, 3, 5}) {
        GenerateConfig c;
        c.max_tokens = 6;
        c.ignore_eos = true;
        c.loops = L;
        c.early_exit.patience = 1;
        c.early_exit.min_L = e;
        c.early_exit.threshold = 1e30f;  // always stable: exit at the first probe, depth e
        GenerateOptions opt;
        opt.lens = true;
        opt.lens_top_k = 8;
        std::vector<TokenEvent> evs;
        opt.observer = [&](const TokenEvent& ev) {
            evs.push_back(ev);
            return true;
        };
        GenerateResult r = generate_ex(mp.get(), t.data(), 10, c, opt);
        ASSERT_EQ(r.stats.tokens_emitted, 6);
        ASSERT_EQ(evs.size(), 6u);
        EXPECT_EQ(r.stats.depth_per_token[0], L);  // the first token comes from the full-depth prefill
        for (size_t i = 1; i < r.stats.depth_per_token.size(); ++i) EXPECT_EQ(r.stats.depth_per_token[i], e);
        // Replay with the reference: prompt positions at depth L, generated ones exit at e.
        const int n_ids = model_info(mp.get()).tokenizer_vocab;
        std::vector<int32_t> seq(t.begin(), t.end());
        std::vector<int> exit(seq.size(), L);
        for (int k = 0; k < 6; ++k) {
            auto lg = ref.last_logits(seq, exit, L);
            const int best = static_cast<int>(std::max_element(lg.begin(), lg.begin() + n_ids) - lg.begin());
            EXPECT_EQ(r.tokens[10 + k], best) << "e=" << e << " token " << k;
            // The distribution the token was taken from (the lens at its exit depth) matches.
            const LensDepth& row = evs[k].lens.back();
            EXPECT_EQ(row.depth, k == 0 ? L : e);
            double mx = *std::max_element(lg.begin(), lg.end()), z = 0;
            for (double x : lg) z += std::exp(x - mx);
            for (size_t j = 0; j < row.top_ids.size(); ++j)
                EXPECT_NEAR(row.top_probs[j], std::exp(lg[row.top_ids[j]] - mx) / z, 2e-6) << "e=" << e << " token " << k;
            seq.push_back(r.tokens[10 + k]);
            exit.push_back(e);
        }
    }
}

TEST_P(EarlyExit, MixedExitDepthsReadPropagatedKeysExactlyLikeTheReference) {
    // Positions exiting at different depths: a deeper later token reads the propagated keys and
    // values of an earlier, shallower one. Replay each step with the naive reference.
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    Ref ref(mp.get());
    const auto t = ids();
    const int L = 8;
    GenerateConfig c;
    c.max_tokens = 16;
    c.ignore_eos = true;
    c.loops = L;
    c.early_exit.patience = 1;
    c.early_exit.min_L = 2;
    GenerateResult r;
    std::vector<TokenEvent> evs;
    GenerateOptions opt;
    opt.lens = true;
    opt.lens_top_k = 8;
    opt.observer = [&](const TokenEvent& ev) {
        evs.push_back(ev);
        return true;
    };
    bool mixed = false;
    // The coarse thresholds first, then a fine sweep (the injecting model's exits flip together).
    std::vector<float> thresholds = {0.6f, 0.5f, 0.4f, 0.3f, 0.25f, 0.2f, 0.15f, 0.1f, 0.07f, 0.05f};
    for (int i = 59; i >= 11; --i) thresholds.push_back(static_cast<float>(i) / 100.0f);
    for (float thr : thresholds) {
        c.early_exit.threshold = thr;
        evs.clear();
        r = generate_ex(mp.get(), t.data(), 10, c, opt);
        std::vector<int> dd(r.stats.depth_per_token.begin() + 1, r.stats.depth_per_token.end());
        const int lo = *std::min_element(dd.begin(), dd.end()), hi = *std::max_element(dd.begin(), dd.end());
        // Need an earlier shallow exit followed by a deeper token.
        bool later_deeper = false;
        for (size_t i = 0; i < dd.size(); ++i)
            for (size_t j = i + 1; j < dd.size(); ++j) later_deeper |= dd[j] > dd[i];
        if (lo < hi && later_deeper) {
            mixed = true;
            break;
        }
    }
    ASSERT_TRUE(mixed) << "no threshold gave mixed exit depths";
    std::vector<int32_t> seq(t.begin(), t.end());
    std::vector<int> exit(seq.size(), L);
    const int n_ids = model_info(mp.get()).tokenizer_vocab;
    for (int k = 0; k < 16; ++k) {
        exit.back() = r.stats.depth_per_token[k];  // the row that produced token k exited here
        auto lg = ref.last_logits(seq, exit, L);
        const int best = static_cast<int>(std::max_element(lg.begin(), lg.begin() + n_ids) - lg.begin());
        EXPECT_EQ(r.tokens[10 + k], best) << "token " << k;
        const LensDepth& row = evs[k].lens.back();
        double mx = *std::max_element(lg.begin(), lg.end()), z = 0;
        for (double x : lg) z += std::exp(x - mx);
        for (size_t j = 0; j < row.top_ids.size(); ++j)
            EXPECT_NEAR(row.top_probs[j], std::exp(lg[row.top_ids[j]] - mx) / z, 2e-6) << "token " << k;
        seq.push_back(r.tokens[10 + k]);
        exit.push_back(L);
    }
}

TEST_P(EarlyExit, CriteriaExitAtDifferentDepthsAndStatsReportIt) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto t = ids();
    GenerateConfig c;
    c.max_tokens = 10;
    c.ignore_eos = true;
    c.loops = 8;
    c.early_exit.patience = 2;
    c.early_exit.criterion = EarlyExitCriterion::ArgmaxStable;
    GenerateResult r = generate_ex(mp.get(), t.data(), 10, c);
    ASSERT_EQ(r.stats.depth_per_token.size(), 10u);
    for (int dpt : r.stats.depth_per_token) {
        EXPECT_GE(dpt, 3);  // min_L 2 + patience 2 probes => first possible exit at pass 3
        EXPECT_LE(dpt, 8);
    }
}

TEST_P(Caches, PrefixCacheIsBitIdenticalToFromScratch) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto t = ids();
    GenerateConfig c;
    c.max_tokens = 8;
    c.ignore_eos = true;
    PrefixCache* pc = create_prefix_cache(mp.get(), t.data(), 6, 4);
    EXPECT_GT(prefix_cache_bytes(pc), 0u);
    GenerateResult fresh = generate_ex(mp.get(), t.data(), 10, c);
    GenerateResult cached = generate_with_prefix(mp.get(), pc, t.data(), 10, c);
    EXPECT_EQ(fresh.tokens, cached.tokens);
    // Whole prompt cached.
    GenerateResult f6 = generate_ex(mp.get(), t.data(), 6, c), c6 = generate_with_prefix(mp.get(), pc, t.data(), 6, c);
    EXPECT_EQ(f6.tokens, c6.tokens);
    std::vector<int32_t> other = {1, 2, 3};
    EXPECT_THROW(generate_with_prefix(mp.get(), pc, other.data(), 3, c), Error);
    GenerateConfig deeper = c;
    deeper.loops = 5;
    EXPECT_THROW(generate_with_prefix(mp.get(), pc, t.data(), 10, deeper), Error);
    free_prefix_cache(pc);
}

TEST_P(Caches, ResumeHandleDeepens4To8LikeAFreshRun) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto t = ids();
    ResumeHandle* h = create_resume_handle(mp.get(), t.data(), 10, 4);
    GenerateConfig c;
    c.max_tokens = 8;
    c.ignore_eos = true;
    GenerateOptions lens;
    lens.lens = true;
    std::vector<TokenEvent> ev_h, ev_f;
    for (int L : {4, 8, 2, 6}) {  // deeper, then shallower (free), then within the computed depth
        c.loops = L;
        ev_h.clear();
        ev_f.clear();
        lens.observer = [&](const TokenEvent& e) { ev_h.push_back(e); return true; };
        GenerateResult a = resume_generate(h, c, lens);
        lens.observer = [&](const TokenEvent& e) { ev_f.push_back(e); return true; };
        GenerateResult b = generate_ex(mp.get(), t.data(), 10, c, lens);
        EXPECT_EQ(a.tokens, b.tokens) << L;
        ASSERT_EQ(ev_h.size(), ev_f.size());
        for (size_t i = 0; i < ev_h.size(); ++i) {
            ASSERT_EQ(ev_h[i].lens.size(), ev_f[i].lens.size());
            for (size_t l = 0; l < ev_h[i].lens.size(); ++l)
                EXPECT_EQ(ev_h[i].lens[l].top_probs, ev_f[i].lens[l].top_probs);
        }
    }
    EXPECT_EQ(resume_handle_loops(h), 8);
    EXPECT_GT(resume_handle_bytes(h), 0u);
    free_resume_handle(h);
}

TEST_P(Caches, PrefixPoolReusesTheLongestRegisteredPrefix) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto t = ids();
    PrefixPool* pool = create_prefix_pool(mp.get(), 4);
    prefix_pool_add(pool, t.data(), 3);
    prefix_pool_add(pool, t.data(), 7);
    std::vector<int32_t> other = {5, 6, 7, 8};
    prefix_pool_add(pool, other.data(), 4);
    EXPECT_GT(prefix_pool_bytes(pool), 0u);
    GenerateConfig c;
    c.max_tokens = 6;
    c.ignore_eos = true;
    int reused = -1;
    GenerateResult a = generate_with_pool(pool, t.data(), 10, c, {}, &reused);
    EXPECT_EQ(reused, 7);
    EXPECT_EQ(a.tokens, generate_ex(mp.get(), t.data(), 10, c).tokens);
    std::vector<int32_t> none = {99, 98, 97};
    GenerateResult b = generate_with_pool(pool, none.data(), 3, c, {}, &reused);
    EXPECT_EQ(reused, 0);
    EXPECT_EQ(b.tokens, generate_ex(mp.get(), none.data(), 3, c).tokens);
    free_prefix_pool(pool);
}

TEST_P(EarlyExit, ScoringWithEarlyExitMatchesScoreWhenOffAndGenerateDepthsWhenOn) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto t = ids();
    const int n = static_cast<int>(t.size());
    GenerateConfig c;
    c.loops = 6;
    std::vector<int> depth;
    ScoreResult off = score_early_exit(mp.get(), t.data(), n, c, &depth);
    ScoreResult ref = score(mp.get(), t.data(), n, 6);
    EXPECT_EQ(off.token_logprobs, ref.token_logprobs);  // bit-exact: batch-invariant kernels
    for (int d : depth) EXPECT_EQ(d, 6);
    c.early_exit.patience = 1;
    c.early_exit.min_L = 3;
    c.early_exit.threshold = 1e30f;  // exit at the first probe
    ScoreResult on = score_early_exit(mp.get(), t.data(), n, c, &depth);
    for (int d : depth) EXPECT_EQ(d, 3);
    EXPECT_NE(on.total_nll, ref.total_nll);
    EXPECT_EQ(on.token_logprobs.size(), static_cast<size_t>(n - 1));
}
