// Self-speculation pipelined over depth (generate_pipelined_ex): the wavefront's rows at different
// passes share each sweep of the loop block, and the output is plain greedy decoding's, on every
// block kind the executor runs (pre-norm, input injection, Ouro's sandwich + pass norm + gate,
// Huginn's sandwich + adapter + coda, f32 and q4), at every draft depth, at any acceptance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "decode/sampling.h"
#include "forward/executor.h"
#include "chi_square.h"
#include "test_util.h"
#include "tinyloop/json.h"

using namespace tinyloop;

namespace {

HParams base(int loops, int max_loops) {
    HParams hp = tltest::small_hparams();
    hp.default_loops = loops;
    hp.max_loops = max_loops;
    return hp;
}

struct Shape {
    std::string name;
    HParams hp;
    DType dtype = DType::F32;
};

std::vector<Shape> shapes() {
    std::vector<Shape> s;
    s.push_back({"prenorm", base(6, 8)});
    s.push_back({"prenorm_q4", base(6, 8), DType::Q4});
    HParams add = base(5, 8);
    add.loop_input = LoopInput::Add;
    add.n_pre_blocks = 1;
    s.push_back({"inject_add", add});
    HParams ouro = base(4, 6);
    ouro.architecture = "ouro";
    ouro.block = BlockKind::SandwichBranch;
    ouro.pass_norm = true;
    ouro.exit_gate = true;
    ouro.tie_embeddings = false;
    ouro.n_pre_blocks = 0;
    s.push_back({"ouro", ouro});
    HParams huginn = base(6, 8);
    huginn.architecture = "huginn";
    huginn.block = BlockKind::SandwichSum;
    huginn.qk_bias = true;
    huginn.embed_scale = std::sqrt(static_cast<float>(huginn.d_model));
    huginn.n_pre_blocks = 2;
    huginn.n_coda_blocks = 2;
    huginn.loop_input = LoopInput::Adapter;
    huginn.n_kv_heads = huginn.n_heads;
    s.push_back({"huginn", huginn});
    return s;
}

Model* load_shape(const Shape& s) {
    return load_model(tltest::write_random_model("pipelined-" + s.name + ".tinyloop", s.hp, 61, s.dtype));
}

GenerateResult plain(Model* m, const std::vector<int32_t>& p, int n, int loops, bool ignore_eos = true) {
    GenerateConfig gc;
    gc.max_tokens = n;
    gc.loops = loops;
    gc.ignore_eos = ignore_eos;
    return generate_ex(m, p.data(), static_cast<int>(p.size()), gc);
}

GenerateResult pipelined(Model* m, const std::vector<int32_t>& p, int n, int D, int V, const ForcedDraft* fd = nullptr,
                         bool ignore_eos = true) {
    SpeculativeConfig sc;
    sc.max_tokens = n;
    sc.draft_loops = D;
    sc.verify_loops = V;
    sc.ignore_eos = ignore_eos;
    GenerateOptions o;
    o.forced_draft = fd;
    return generate_pipelined_ex(m, p.data(), static_cast<int>(p.size()), sc, o);
}

}  // namespace

// Unforced (random weights: drafts mostly rejected, so rows are dropped and restarted) and forced
// to agree at rate 1 (every draft accepted: the wave is as deep as it gets): the tokens are plain
// greedy's at the verify depth, for every draft depth.
TEST(Pipelined, EqualsPlainGreedyOnEveryBlockKindAndDraftDepth) {
    for (const Shape& s : shapes()) {
        Model* m = load_shape(s);
        const int V = s.hp.default_loops;
        const auto ps = tltest::random_prompts(4, 71);
        for (size_t i = 0; i < ps.size(); ++i) {
            const GenerateResult ref = plain(m, ps[i], 20, V);
            ForcedDraft all;
            all.reference.assign(ref.tokens.begin() + ref.prompt_len, ref.tokens.end());
            all.rate = 1.0;
            for (int D = 1; D < V; ++D) {
                const GenerateResult own = pipelined(m, ps[i], 20, D, V);
                EXPECT_EQ(own.tokens, ref.tokens) << s.name << " prompt " << i << " D " << D;
                const GenerateResult forced = pipelined(m, ps[i], 20, D, V, &all);
                EXPECT_EQ(forced.tokens, ref.tokens) << s.name << " forced, prompt " << i << " D " << D;
                // Every draft accepted: the first row takes V sweeps, each later token D more.
                EXPECT_EQ(forced.stats.spec_accepted, 18) << s.name;
                EXPECT_EQ(forced.stats.spec_sweeps, V + 18 * D) << s.name << " D " << D;
            }
        }
        free_model(m);
    }
}

// The forced rates: the measured acceptance follows the rate, the output stays plain greedy's, and
// the sweeps are what the wave's rule gives: V for the first row after a rejection (or at the
// start), D for a token whose draft was accepted. Rate 0 costs plain decoding's V per token.
TEST(Pipelined, ForcedRatesKeepTheVerifiersTokensAndCountTheirSweeps) {
    const Shape s = shapes()[1];  // q4: the int8 kernel's multi-row tiles against its one-row tile
    Model* m = load_shape(s);
    const int V = s.hp.default_loops, D = 1, N = 24;
    const auto ps = tltest::random_prompts(30, 72);
    double last = -1.0;
    for (double rate : {0.0, 0.5, 0.7, 0.9}) {
        int tested = 0, accepted = 0;
        for (size_t i = 0; i < ps.size(); ++i) {
            const GenerateResult ref = plain(m, ps[i], N, V);
            ForcedDraft fd;
            fd.reference.assign(ref.tokens.begin() + ref.prompt_len, ref.tokens.end());
            fd.rate = rate;
            fd.seed = 300 + i;
            const GenerateResult r = pipelined(m, ps[i], N, D, V, &fd);
            ASSERT_EQ(r.tokens, ref.tokens) << "rate " << rate << " prompt " << i;
            const GenerateStats& st = r.stats;
            // Rows at prompt_len .. prompt_len + N - 2 give the N - 1 tokens after the first; each
            // but the last had its successor's draft compared.
            EXPECT_EQ(st.spec_tested, N - 2);
            // Sweeps: the first row's V, then D per accepted draft (its row already ran D passes
            // behind) and V per rejected one (the verifier's token starts over at pass 1).
            const int rejected = st.spec_tested - st.spec_accepted;
            EXPECT_EQ(st.spec_sweeps, V + D * st.spec_accepted + V * rejected) << "rate " << rate;
            tested += st.spec_tested;
            accepted += st.spec_accepted;
        }
        const double acc = static_cast<double>(accepted) / tested;
        std::printf("pipelined rate %.1f: acceptance %.3f over %d compared\n", rate, acc, tested);
        if (rate == 0.0) EXPECT_EQ(accepted, 0);
        else EXPECT_NEAR(acc, rate, 0.06);
        EXPECT_GT(acc, last);
        last = acc;
    }
    free_model(m);
}

// The bundled prose model's own drafts (real acceptance), stopping at EOS and at max_tokens 1..3:
// the output is plain greedy's, and some drafts are accepted.
TEST(Pipelined, BundledModelEqualsGreedyWithItsOwnDrafts) {
    Model* m = load_model(TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-f32.tinyloop");
    ASSERT_NE(m, nullptr);
    const HParams& hp = model_hparams(m);
    const int V = hp.default_loops;
    int accepted = 0;
    for (const char* text : {"In the beginning", "And God said", "The LORD is my shepherd", "Blessed are the"}) {
        const std::vector<int32_t> p = tokenize(m, text);
        for (int n : {1, 2, 3, 40}) {
            const GenerateResult ref = plain(m, p, n, V, false);
            for (int D = 1; D < V; ++D) {
                const GenerateResult r = pipelined(m, p, n, D, V, nullptr, false);
                EXPECT_EQ(r.tokens, ref.tokens) << text << " n " << n << " D " << D;
                EXPECT_EQ(r.stats.stop_reason, ref.stats.stop_reason) << text;
                accepted += r.stats.spec_accepted;
            }
        }
    }
    EXPECT_GT(accepted, 0);
    free_model(m);
}

TEST(Pipelined, RefusesWhatItDoesNotRun) {
    Model* m = load_shape(shapes()[0]);
    const std::vector<int32_t> p = {1, 2, 3};
    auto error_of = [&](SpeculativeConfig sc, GenerateOptions o) {
        try {
            generate_pipelined_ex(m, p.data(), 3, sc, o);
        } catch (const Error& e) {
            return std::pair<ErrorCode, std::string>(e.code(), e.what());
        }
        return std::pair<ErrorCode, std::string>(ErrorCode::Internal, "accepted");
    };
    SpeculativeConfig sc;
    sc.max_tokens = 4;
    sc.verify_loops = 6;
    sc.draft_loops = 6;
    auto r = error_of(sc, {});
    EXPECT_EQ(r.first, ErrorCode::InvalidArgument);
    EXPECT_NE(r.second.find("draft_loops"), std::string::npos) << r.second;
    sc.draft_loops = 2;
    sc.temperature = 0.7f;  // sampling's knobs, checked as the chain checks them
    sc.top_p = 0.0f;
    r = error_of(sc, {});
    EXPECT_EQ(r.first, ErrorCode::InvalidArgument);
    EXPECT_NE(r.second.find("top_p"), std::string::npos) << r.second;
    sc.top_p = 1.0f;
    sc.top_k = -1;
    r = error_of(sc, {});
    EXPECT_EQ(r.first, ErrorCode::InvalidArgument);
    EXPECT_NE(r.second.find("top_k"), std::string::npos) << r.second;
    sc.top_k = 0;
    ForcedDraft forced;  // the forced-acceptance hook measures greedy speculation only
    forced.rate = 0.5;
    forced.reference = {4, 5, 6, 7};
    GenerateOptions hooked;
    hooked.forced_draft = &forced;
    r = error_of(sc, hooked);
    EXPECT_EQ(r.first, ErrorCode::NotSupported);
    EXPECT_NE(r.second.find("forced_draft"), std::string::npos) << r.second;
    sc.temperature = 0.0f;
    GenerateOptions lens;
    lens.lens = true;
    r = error_of(sc, lens);
    EXPECT_EQ(r.first, ErrorCode::NotSupported);
    EXPECT_NE(r.second.find("lens"), std::string::npos) << r.second;
    sc.max_tokens = 0;
    EXPECT_EQ(generate_pipelined_ex(m, p.data(), 3, sc).stats.tokens_emitted, 0);
    // Both back ends run the wave (the device's CudaSession::run_wave, test_cuda_engine).
    EXPECT_TRUE(exec_supports(ExecKind::Cuda, ExecOp::PipelinedSpeculation));
    EXPECT_TRUE(exec_supports(ExecKind::Cpu, ExecOp::PipelinedSpeculation));
    free_model(m);
}

// The mode through the one entry: run_decode with DecodeMode::Pipelined resolves the chain's knobs
// (the verify depth is config.loops, the draft depth the built-in min(2, V - 1) on a model that
// recommends none) and runs the wave; the codec names it "pipelined".
TEST(Pipelined, RunDecodeResolvesTheChainsKnobs) {
    Model* m = load_shape(shapes()[0]);
    const std::vector<int32_t> p = {5, 6, 7, 8};
    RunSpec spec;
    spec.mode = DecodeMode::Pipelined;
    spec.config.max_tokens = 12;
    spec.config.loops = 5;
    spec.config.ignore_eos = true;
    const ResolvedRun r = resolve_run(m, spec, {});
    EXPECT_EQ(r.spec.speculation.kind, SpeculationKind::Chain);
    EXPECT_EQ(r.spec.speculation.verify_loops, 5);
    EXPECT_EQ(r.spec.speculation.draft_loops, 2);
    const GenerateResult got = run_decode(m, p.data(), 4, r.spec);
    EXPECT_EQ(got.tokens, plain(m, p, 12, 5).tokens);
    EXPECT_GT(got.stats.spec_sweeps, 0);
    DecodeMode parsed = DecodeMode::Greedy;
    ASSERT_TRUE(parse_decode_mode("pipelined", &parsed));
    EXPECT_EQ(parsed, DecodeMode::Pipelined);
    EXPECT_TRUE(self_speculative(DecodeMode::Pipelined));
    // Sampling through the one entry: the config's temperature, seed, top_k and top_p reach the wave.
    spec.config.temperature = 0.9f;
    spec.config.sample_seed = 3;
    spec.config.top_k = 5;
    const ResolvedRun s = resolve_run(m, spec, {"temperature", "sample_seed", "top_k"});
    EXPECT_FLOAT_EQ(s.spec.config.temperature, 0.9f);
    const GenerateResult a = run_decode(m, p.data(), 4, s.spec);
    const GenerateResult b = run_decode(m, p.data(), 4, s.spec);
    EXPECT_EQ(a.tokens, b.tokens);  // the seed decides
    SpeculativeConfig sc;
    sc.max_tokens = 12;
    sc.verify_loops = 5;
    sc.draft_loops = 2;
    sc.temperature = 0.9f;
    sc.seed = 3;
    sc.top_k = 5;
    sc.ignore_eos = true;
    EXPECT_EQ(a.tokens, generate_pipelined_ex(m, p.data(), 4, sc).tokens);
    EXPECT_GT(a.stats.spec_sweeps, 0);
    free_model(m);
}

// Sampled, the wave is lossless: the joint distribution of the first four emitted tokens (the
// first from the prefill, the others from the wave, whose drafts are drawn while earlier drafts
// are still untested: three rows in flight at D = 2) against the exact distribution of plain
// sampling at the verify depth, at two draft depths (at D = 1 this random model's pass-1 top-2
// never holds a verifier's top-2 token at these positions, so nothing would be accepted) (chi-square at p = 0.01 over 20,000 seeded runs each; the
// seeds are fixed, so the test is deterministic). Drafts are rejected as well as accepted.
TEST(Pipelined, SampledWaveIsLossless) {
    HParams hp = base(6, 8);
    hp.d_model = 32;
    hp.n_heads = 2;
    hp.n_kv_heads = 2;
    hp.d_ff = 64;
    hp.n_loop_layers = 1;
    ModelHandle mp = load_model_handle(tltest::write_random_model("pipelined-sampled.tinyloop", hp, 77));
    const std::vector<int32_t> prompt = {65, 66, 67};
    const float T = 1.0f;
    const int top_k = 2, V = hp.vocab_size, L = 6;
    const int n_ids = model_info(mp.get()).tokenizer_vocab;
    auto dist = [&](const std::vector<int32_t>& seq) {
        auto l = forward_logits(mp.get(), seq.data(), static_cast<int>(seq.size()), L);
        std::vector<float> row(l.end() - V, l.end());
        mask_undecodable(row.data(), V, n_ids);
        return sampling_probs(row.data(), V, T, top_k, 1.0f, 0.0f);
    };
    std::map<std::vector<int32_t>, double> expected;  // the 4-token continuations and their probabilities
    std::vector<std::pair<std::vector<int32_t>, double>> level = {{{}, 1.0}};
    for (int step = 0; step < 4; ++step) {
        std::vector<std::pair<std::vector<int32_t>, double>> next;
        for (const auto& [tail, pr] : level) {
            std::vector<int32_t> seq = prompt;
            seq.insert(seq.end(), tail.begin(), tail.end());
            const auto p = dist(seq);
            for (int a = 0; a < V; ++a) {
                if (p[static_cast<size_t>(a)] <= 0) continue;
                auto t = tail;
                t.push_back(a);
                next.push_back({t, pr * p[static_cast<size_t>(a)]});
            }
        }
        level = std::move(next);
    }
    for (const auto& [t, pr] : level) expected[t] = pr;
    for (int D : {2, 3}) {
        SCOPED_TRACE("draft_loops " + std::to_string(D));
        SpeculativeConfig c;
        c.max_tokens = 4;
        c.draft_loops = D;
        c.verify_loops = L;
        c.temperature = T;
        c.top_k = top_k;
        c.ignore_eos = true;
        const int N = 20000;
        std::map<std::vector<int32_t>, int> seen;
        long long accepted = 0, tested = 0;
        for (int i = 0; i < N; ++i) {
            c.seed = static_cast<uint64_t>(i) * 7919 + 1;
            const GenerateResult r = generate_pipelined_ex(mp.get(), prompt.data(), 3, c);
            ASSERT_EQ(r.tokens.size(), 7u);
            ++seen[{r.tokens[3], r.tokens[4], r.tokens[5], r.tokens[6]}];
            accepted += r.stats.spec_accepted;
            tested += r.stats.spec_tested;
        }
        const tltest::ChiSquare cs = tltest::pooled_chi_square(expected, seen, N);
        const double chi2 = cs.chi2;
        const int cells = cs.cells;
        for (const auto& [k, o] : seen) EXPECT_TRUE(expected.count(k)) << "a sequence plain sampling never makes";
        // Critical values of chi-square at p = 0.01 for 1 .. 16 degrees of freedom.
        static const double crit[] = {0, 6.63, 9.21, 11.34, 13.28, 15.09, 16.81, 18.48, 20.09, 21.67, 23.21, 24.72,
                                      26.22, 27.69, 29.14, 30.58, 32.0};
        ASSERT_GE(cells, 2);
        ASSERT_LE(cells - 1, 16);
        EXPECT_LT(chi2, crit[cells - 1]) << "cells " << cells;
        std::printf("[ info ] D=%d: chi-square %.2f over %d cells; %lld of %lld drafts accepted\n", D, chi2, cells,
                    accepted, tested);
        EXPECT_GT(accepted, 0);
        EXPECT_LT(accepted, tested);
    }
}
