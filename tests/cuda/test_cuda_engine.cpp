// The public API on the CUDA back end (load_model with backend cuda): what is routed to the
// device gives the CPU's answers, what is not routed yet says so, and vram_usage_bytes tells
// the truth. The session-level parity (logits at every depth and dtype, verification rows ==
// decode steps) is test_cuda_forward.cpp's. Skipped, saying so, without a usable CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/device_probe.h"
#include "cuda/greedy_agreement.h"
#include "looped_shapes.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"
#include "test_util.h"
#include "tinyloop/batch.h"
#include "tinyloop/caches.h"
#include "tinyloop/scoring.h"
#include "tinyloop/tinyloop.h"

namespace {

namespace kc = tinyloop::kern::cuda;
using tinyloop::Backend;
using tinyloop::ErrorCode;

const kc::DeviceProbe& probe() { return tltest::device_probe(); }

const std::string kModel = std::string(TL_SOURCE_DIR) + "/resources/models/tinyloop-kjv/model-f32.tinyloop";

tinyloop::LoadOptions on(Backend b) {
    tinyloop::LoadOptions o;
    o.backend = b;
    return o;
}

std::vector<int32_t> prompt_of(tinyloop::Model* m) {
    return tinyloop::tokenize(m, "In the beginning God created the heaven and the earth. And");
}

tinyloop::GenerateConfig greedy(int n, int loops) {
    tinyloop::GenerateConfig g;
    g.max_tokens = n;
    g.loops = loops;
    g.temperature = 0.0f;
    g.ignore_eos = true;
    return g;
}

// The logits each token of `all[prompt_len..]` was chosen from, by one prefill on `m` (with the
// decoding's cache type).
tltest::GreedyTrace trace_of(tinyloop::Model* m, const std::vector<int32_t>& all, size_t prompt_len, int L,
                             tinyloop::KVCacheType kv = tinyloop::KVCacheType::F32) {
    const int V = tinyloop::model_hparams(m).vocab_size;
    tltest::GreedyTrace t;
    t.tokens.assign(all.begin() + long(prompt_len), all.end());
    const std::vector<float> z = tinyloop::forward_logits(m, all.data(), int(all.size()) - 1, L, kv);
    t.logits.assign(z.begin() + long(prompt_len - 1) * V, z.end());
    return t;
}

// f32 weights: the device's float products against the CPU's (f32 has no int8-activation path),
// by greedy_agreement.h's rule: the same tokens, log-probabilities within 5e-3 nats, parting
// only at a near tie.
TEST(CudaEngine, GreedySixtyFourTokensAgreeWithTheCpu) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle cpu = tinyloop::load_model_handle(kModel, on(Backend::Cpu));
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    ASSERT_EQ(tinyloop::model_info(gpu.get()).backend, "cuda");
    const auto prompt = prompt_of(cpu.get());
    const tinyloop::HParams& hp = tinyloop::model_hparams(cpu.get());
    for (int L : {1, hp.default_loops, hp.max_loops}) {
        const auto g = greedy(64, L);
        const auto want = tinyloop::generate(cpu.get(), prompt.data(), int(prompt.size()), g);
        const auto got = tinyloop::generate(gpu.get(), prompt.data(), int(prompt.size()), g);
        ASSERT_EQ(want.size(), prompt.size() + 64);
        ASSERT_EQ(got.size(), prompt.size() + 64);
        const tltest::GreedyAgreement a = tltest::compare_greedy(trace_of(cpu.get(), want, prompt.size(), L),
                                                                 trace_of(gpu.get(), got, prompt.size(), L), hp.vocab_size);
        EXPECT_TRUE(a.ok) << "loops " << L << ": " << a.why;
    }
}

// Sampling: the host's pipeline on the device's logits; one seed gives one continuation, and
// the stream callback sees every token as it comes.
TEST(CudaEngine, SamplingIsReproducibleAndStreams) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    const auto prompt = prompt_of(gpu.get());
    tinyloop::GenerateConfig g = greedy(32, 0);
    g.temperature = 0.8f;
    g.top_k = 40;
    g.sample_seed = 1234;
    const auto a = tinyloop::generate(gpu.get(), prompt.data(), int(prompt.size()), g);
    std::vector<int32_t> streamed;
    const auto b = tinyloop::generate_stream(gpu.get(), prompt.data(), int(prompt.size()), g, [&](int32_t t, int) {
        streamed.push_back(t);
        return true;
    });
    EXPECT_EQ(a, b);
    ASSERT_EQ(a.size(), prompt.size() + 32);
    EXPECT_EQ(std::vector<int32_t>(a.begin() + long(prompt.size()), a.end()), streamed);
}

// What is not routed to the device yet is refused with its name, never run on the CPU.
// score / forward_logits run on the device (the prefill with every row's logits): the same
// log-probabilities as the CPU within float rounding (f32 weights; prefill chunks of 64 rows
// through cuBLAS, so not bit-identical), at several depths.
TEST(CudaEngine, ScoreOnTheDeviceMatchesTheCpu) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle cpu = tinyloop::load_model_handle(kModel, on(Backend::Cpu));
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    std::string text;
    while (text.size() < 700) text += "And God said, Let there be light: and there was light. ";
    std::vector<int32_t> toks = tinyloop::tokenize(cpu.get(), text);
    toks.resize(std::min<size_t>(toks.size(), 150));  // two cuBLAS chunks and a kernel tail
    const int n = int(toks.size());
    const tinyloop::HParams& hp = tinyloop::model_hparams(cpu.get());
    for (int L : {1, hp.default_loops, 2 * hp.default_loops}) {
        const tinyloop::ScoreResult want = tinyloop::score(cpu.get(), toks.data(), n, L, tinyloop::KVCacheType::F32);
        const tinyloop::ScoreResult got = tinyloop::score(gpu.get(), toks.data(), n, L, tinyloop::KVCacheType::F32);
        ASSERT_EQ(got.token_logprobs.size(), want.token_logprobs.size());
        EXPECT_EQ(got.loops, L);
        for (size_t i = 0; i < want.token_logprobs.size(); ++i)
            EXPECT_NEAR(got.token_logprobs[i], want.token_logprobs[i], 2e-3 + 1e-3 * std::fabs(want.token_logprobs[i]))
                << "loops " << L << " token " << i;
        EXPECT_NEAR(got.total_nll, want.total_nll, 1e-4 * want.total_nll) << "loops " << L;
    }
}

// The lens on the device (depth l = a prefill of l passes): every cell's probabilities against
// the CPU's lens (one L-pass forward, every pass kept) within float rounding; the uncertainty
// scores' prediction depths likewise.
TEST(CudaEngine, LensOnTheDeviceMatchesTheCpu) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle cpu = tinyloop::load_model_handle(kModel, on(Backend::Cpu));
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    const auto toks = prompt_of(cpu.get());
    const int n = int(toks.size()), L = 6;
    const tinyloop::LensResult want = tinyloop::score_logit_lens(cpu.get(), toks.data(), n, L, 5);
    const tinyloop::LensResult got = tinyloop::score_logit_lens(gpu.get(), toks.data(), n, L, 5);
    ASSERT_EQ(got.cells.size(), want.cells.size());
    int same_argmax = 0;
    for (size_t c = 0; c < want.cells.size(); ++c) {
        EXPECT_NEAR(got.cells[c].p_final_argmax, want.cells[c].p_final_argmax, 2e-3) << "cell " << c;
        EXPECT_NEAR(got.cells[c].entropy, want.cells[c].entropy, 2e-3 + 1e-3 * want.cells[c].entropy) << "cell " << c;
        if (want.cells[c].p_next >= 0) {
            EXPECT_NEAR(got.cells[c].p_next, want.cells[c].p_next, 2e-3) << "cell " << c;
        }
        same_argmax += got.cells[c].argmax == want.cells[c].argmax;
    }
    // a near tie may flip under float rounding; nothing more
    EXPECT_GE(same_argmax, int(want.cells.size()) - 2);
    const std::vector<float> lens = tinyloop::forward_lens_logits(gpu.get(), toks.data(), n, L);
    const std::vector<float> last = tinyloop::forward_logits(gpu.get(), toks.data(), n, L);
    const size_t per = size_t(n) * tinyloop::model_hparams(gpu.get()).vocab_size;
    ASSERT_EQ(lens.size(), per * L);
    EXPECT_TRUE(std::equal(last.begin(), last.end(), lens.end() - long(per)));  // the same prefill on the device
    const tinyloop::UncertaintyResult uw = tinyloop::score_with_uncertainty(cpu.get(), toks.data(), n, L);
    const tinyloop::UncertaintyResult ug = tinyloop::score_with_uncertainty(gpu.get(), toks.data(), n, L);
    ASSERT_EQ(ug.prediction_depth.size(), uw.prediction_depth.size());
    int same_depth = 0;
    for (size_t i = 0; i < uw.prediction_depth.size(); ++i) same_depth += ug.prediction_depth[i] == uw.prediction_depth[i];
    EXPECT_GE(same_depth, int(uw.prediction_depth.size()) - 2);
}

// Consistency escalation on the device (each rung a prefill of its depth): the same positions
// escalate and the same log-probabilities within float rounding as on the CPU.
TEST(CudaEngine, EscalationOnTheDeviceMatchesTheCpu) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle cpu = tinyloop::load_model_handle(kModel, on(Backend::Cpu));
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    const auto toks = prompt_of(cpu.get());
    const int n = int(toks.size());
    for (auto signal : {tinyloop::EscalationSignal::Entropy, tinyloop::EscalationSignal::Disagreement}) {
        tinyloop::EscalationConfig c;
        c.signal = signal;
        c.depths = {1, 2, 4};
        const tinyloop::EscalationResult want = tinyloop::score_with_consistency_escalation(cpu.get(), toks.data(), n, c);
        const tinyloop::EscalationResult got = tinyloop::score_with_consistency_escalation(gpu.get(), toks.data(), n, c);
        ASSERT_EQ(got.token_logprobs.size(), want.token_logprobs.size());
        int same = 0;
        for (size_t i = 0; i < want.depth_used.size(); ++i) {
            same += got.depth_used[i] == want.depth_used[i];
            if (got.depth_used[i] == want.depth_used[i]) {
                EXPECT_NEAR(got.token_logprobs[i], want.token_logprobs[i], 2e-3 + 1e-3 * std::fabs(want.token_logprobs[i]));
            }
        }
        EXPECT_GE(same, int(want.depth_used.size()) - 1);  // a threshold met within rounding may flip one
    }
}

// Early exit on the device (the CUDA executor's row stepper, CudaSession::row_*): the per-pass
// signals of every criterion (early_exit_signals) within float rounding of the CPU's; scoring
// with early exit (teacher-forced, so one input for both) exits at the same pass at every
// position but where a signal is within rounding of its threshold, with the CPU's
// log-probabilities there; decoding with it (greedy) emits the CPU's tokens at the CPU's depths
// until a near tie. A criterion needing logits (logit_margin) and one that does not (hidden_l2).
TEST(CudaEngine, EarlyExitOnTheDeviceMatchesTheCpu) {
    TL_REQUIRE_DEVICE();
    using tinyloop::EarlyExitCriterion;
    tinyloop::ModelHandle cpu = tinyloop::load_model_handle(kModel, on(Backend::Cpu));
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    const tinyloop::HParams& hp = tinyloop::model_hparams(cpu.get());
    std::string text;
    while (text.size() < 300) text += "And God said, Let there be light: and there was light. ";
    std::vector<int32_t> toks = tinyloop::tokenize(cpu.get(), text);
    toks.resize(std::min<size_t>(toks.size(), 64));
    const int n = int(toks.size());
    const int L = hp.max_loops;

    const tinyloop::ExitSignals sw = tinyloop::early_exit_signals(cpu.get(), toks.data(), n, L);
    const tinyloop::ExitSignals sg = tinyloop::early_exit_signals(gpu.get(), toks.data(), n, L);
    ASSERT_EQ(sg.values.size(), sw.values.size());
    int argmax_flips = 0;
    for (int c = 0; c < 5; ++c)
        for (int p = 0; p < n; ++p)
            for (int pass = 1; pass <= L; ++pass) {
                const auto crit = static_cast<EarlyExitCriterion>(c);
                const float want = sw.at(crit, p, pass), got = sg.at(crit, p, pass);
                if (crit == EarlyExitCriterion::ArgmaxStable) {
                    argmax_flips += want != got;  // 0 or 1: flips only at a near tie of the top two
                    continue;
                }
                EXPECT_NEAR(got, want, 1e-4 + 2e-3 * std::fabs(want))
                    << "criterion " << c << " position " << p << " pass " << pass;
            }
    EXPECT_LE(argmax_flips, n * L / 50) << "argmax_stable differs at more than 2% of the probes";

    for (const auto& [crit, threshold] : {std::pair{EarlyExitCriterion::HiddenL2, 0.1f},
                                          std::pair{EarlyExitCriterion::LogitMargin, 2.0f}}) {
        SCOPED_TRACE("criterion " + std::to_string(int(crit)));
        tinyloop::GenerateConfig g = greedy(48, L);
        g.early_exit.patience = 1;
        g.early_exit.criterion = crit;
        g.early_exit.threshold = threshold;
        std::vector<int> dw, dg;
        const tinyloop::ScoreResult want = tinyloop::score_early_exit(cpu.get(), toks.data(), n, g, &dw);
        const tinyloop::ScoreResult got = tinyloop::score_early_exit(gpu.get(), toks.data(), n, g, &dg);
        ASSERT_EQ(dg.size(), dw.size());
        ASSERT_EQ(got.token_logprobs.size(), want.token_logprobs.size());
        int depth_differs = 0, exits = 0;
        for (size_t i = 0; i < dw.size(); ++i) {
            exits += dw[i] < L;
            if (dw[i] != dg[i]) {
                ++depth_differs;
                continue;
            }
            if (i + 1 < dw.size()) {
                EXPECT_NEAR(got.token_logprobs[i], want.token_logprobs[i], 5e-3 + 1e-3 * std::fabs(want.token_logprobs[i]))
                    << "position " << i;
            }
        }
        EXPECT_GT(exits, 0) << "the threshold never let a position exit: the test would not test the exit";
        EXPECT_LE(depth_differs, n / 16) << "score_early_exit's depths differ at " << depth_differs << " of " << n;

        const auto prompt = prompt_of(cpu.get());
        const tinyloop::GenerateResult rw = tinyloop::generate_ex(cpu.get(), prompt.data(), int(prompt.size()), g);
        const tinyloop::GenerateResult rg = tinyloop::generate_ex(gpu.get(), prompt.data(), int(prompt.size()), g);
        size_t same = 0;
        while (same < rw.tokens.size() && same < rg.tokens.size() && rw.tokens[same] == rg.tokens[same]) ++same;
        EXPECT_GE(same, prompt.size() + 16) << "decoding with early exit parted from the CPU's within 16 tokens";
        const auto& pw = rw.stats.depth_per_token;
        const auto& pg = rg.stats.depth_per_token;
        const size_t k = std::min({pw.size(), pg.size(), same - prompt.size()});
        int dd = 0;
        for (size_t i = 0; i < k; ++i) dd += pw[i] != pg[i];
        EXPECT_LE(dd, 1) << "per-token depths differ at " << dd << " of the " << k << " tokens both emitted alike";
    }
}

// Chain self-speculation on the device (draft passes 1..D of one row, verification of the
// drafted rows from their states, CudaSession::run_passes): greedy, it emits exactly the
// device's own plain greedy decoding at the verify depth (the verification rows are the decode
// step's bits, VerificationRowsEqualDecodeSteps), and its acceptance is the CPU's within the
// near ties where the two back ends may part (both accept drafts at all).
TEST(CudaEngine, ChainSpeculationOnTheDeviceEqualsItsGreedyDecoding) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle cpu = tinyloop::load_model_handle(kModel, on(Backend::Cpu));
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    const auto prompt = prompt_of(gpu.get());
    const tinyloop::HParams& hp = tinyloop::model_hparams(gpu.get());
    for (const auto& [D, L, K] : {std::tuple{1, hp.default_loops, 4}, std::tuple{2, hp.max_loops, 3}}) {
        SCOPED_TRACE("draft " + std::to_string(D) + " verify " + std::to_string(L) + " ahead " + std::to_string(K));
        tinyloop::SpeculativeConfig sc;
        sc.max_tokens = 48;
        sc.draft_loops = D;
        sc.verify_loops = L;
        sc.draft_ahead = K;
        sc.temperature = 0.0f;
        sc.ignore_eos = true;
        const tinyloop::GenerateResult got = tinyloop::generate_speculative_ex(gpu.get(), prompt.data(), int(prompt.size()), sc);
        const std::vector<int32_t> plain = tinyloop::generate(gpu.get(), prompt.data(), int(prompt.size()), greedy(48, L));
        EXPECT_EQ(got.tokens, plain) << "greedy chain speculation on the device differs from its plain greedy decoding";
        const tinyloop::GenerateResult ref = tinyloop::generate_speculative_ex(cpu.get(), prompt.data(), int(prompt.size()), sc);
        EXPECT_GT(got.stats.spec_drafted, 0);
        EXPECT_GT(got.stats.spec_accepted, 0) << "no draft accepted: the verification compared nothing";
        EXPECT_GT(ref.stats.spec_accepted, 0);
    }
}

// Pipelined self-speculation on the device (CudaSession::run_wave: rows at different passes in one
// sweep, each row's keys and values into its own pass's layer, new rows through the prelude):
// greedy, it emits the device's own plain greedy decoding at the verify depth, drafts accepted;
// sampled, one seed gives one continuation.
TEST(CudaEngine, PipelinedSpeculationOnTheDeviceEqualsItsGreedyDecoding) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    const auto prompt = prompt_of(gpu.get());
    const int n = int(prompt.size());
    const tinyloop::HParams& hp = tinyloop::model_hparams(gpu.get());
    for (const auto& [D, L] : {std::pair{1, hp.default_loops}, std::pair{2, hp.max_loops}}) {
        SCOPED_TRACE("draft " + std::to_string(D) + " verify " + std::to_string(L));
        tinyloop::SpeculativeConfig sc;
        sc.max_tokens = 48;
        sc.draft_loops = D;
        sc.verify_loops = L;
        sc.temperature = 0.0f;
        sc.ignore_eos = true;
        const tinyloop::GenerateResult got = tinyloop::generate_pipelined_ex(gpu.get(), prompt.data(), n, sc);
        EXPECT_EQ(got.tokens, tinyloop::generate(gpu.get(), prompt.data(), n, greedy(48, L)));
        EXPECT_GT(got.stats.spec_sweeps, 0);
        EXPECT_GT(got.stats.spec_accepted, 0) << "no draft accepted: the wave never carried a second row";
    }
    tinyloop::SpeculativeConfig sc;
    sc.max_tokens = 32;
    sc.draft_loops = 1;
    sc.verify_loops = hp.default_loops;
    sc.temperature = 0.8f;
    sc.seed = 7;
    sc.ignore_eos = true;
    const auto a = tinyloop::generate_pipelined_ex(gpu.get(), prompt.data(), n, sc);
    const auto b = tinyloop::generate_pipelined_ex(gpu.get(), prompt.data(), n, sc);
    EXPECT_EQ(a.tokens, b.tokens) << "sampled pipelined speculation: one seed, two continuations";
    EXPECT_EQ(a.tokens.size(), size_t(n) + 32);
}

// Tree self-speculation on the device (laid-out rows: each candidate at its position in a scratch
// row past the sequence's, attending the committed rows and its ancestors; accepted nodes
// copied to their positions): greedy, it emits exactly the device's own plain greedy decoding,
// near the end of the context too (the candidates' rows past max_seq_len: the scratch rows).
TEST(CudaEngine, TreeSpeculationOnTheDeviceEqualsItsGreedyDecoding) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    const tinyloop::HParams& hp = tinyloop::model_hparams(gpu.get());
    const int ctx = hp.max_seq_len;
    std::vector<int32_t> prompt = prompt_of(gpu.get());
    for (const bool at_the_end : {false, true}) {
        SCOPED_TRACE(at_the_end ? "ending at max_seq_len" : "a short prompt");
        std::vector<int32_t> p = prompt;
        int n_tok = 40;
        if (at_the_end) {  // a prompt that leaves exactly n_tok positions
            while (int(p.size()) < ctx - n_tok) p.insert(p.end(), prompt.begin(), prompt.end());
            p.resize(size_t(ctx - n_tok));
        }
        tinyloop::TreeSpeculativeConfig sc;
        sc.max_tokens = n_tok;
        sc.draft_loops = 1;
        sc.verify_loops = hp.default_loops;
        sc.draft_ahead = 4;
        sc.K_branches = 2;
        sc.ignore_eos = true;
        const tinyloop::GenerateResult got = tinyloop::generate_tree_speculative_ex(gpu.get(), p.data(), int(p.size()), sc);
        const std::vector<int32_t> plain =
            tinyloop::generate(gpu.get(), p.data(), int(p.size()), greedy(n_tok, hp.default_loops));
        EXPECT_EQ(got.tokens, plain) << "greedy tree speculation on the device differs from its plain greedy decoding";
        EXPECT_GT(got.stats.spec_accepted, 0) << "no candidate accepted: nothing was copied to its position";
    }
}

// The lens streamed during generate on the device (the rows' states downloaded after every
// pass, the readouts' heads on the host): the tokens of the device's plain greedy decoding, and
// per token and depth the CPU's lens within rounding (the top id where its probability leads
// the next by more than 1e-3, the emitted token's probability within 2e-3).
TEST(CudaEngine, LensDuringGenerateOnTheDeviceMatchesTheCpu) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle cpu = tinyloop::load_model_handle(kModel, on(Backend::Cpu));
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    const auto prompt = prompt_of(gpu.get());
    const tinyloop::HParams& hp = tinyloop::model_hparams(gpu.get());
    const int n = int(prompt.size()), L = hp.default_loops;
    std::vector<tinyloop::TokenEvent> ew, eg;
    tinyloop::GenerateOptions o;
    o.lens = true;
    o.lens_top_k = 3;
    o.observer = [&](const tinyloop::TokenEvent& e) { return ew.push_back(e), true; };
    const tinyloop::GenerateResult rw = tinyloop::generate_ex(cpu.get(), prompt.data(), n, greedy(24, L), o);
    o.observer = [&](const tinyloop::TokenEvent& e) { return eg.push_back(e), true; };
    const tinyloop::GenerateResult rg = tinyloop::generate_ex(gpu.get(), prompt.data(), n, greedy(24, L), o);
    EXPECT_EQ(rg.tokens, tinyloop::generate(gpu.get(), prompt.data(), n, greedy(24, L)));
    ASSERT_EQ(eg.size(), 24u);
    size_t same = 0;
    while (same < ew.size() && same < eg.size() && ew[same].token == eg[same].token) ++same;
    EXPECT_GE(same, 8u) << "the device's greedy tokens parted from the CPU's within 8 tokens";
    for (size_t i = 0; i < same; ++i) {
        ASSERT_EQ(eg[i].lens.size(), size_t(L)) << "token " << i;
        ASSERT_EQ(ew[i].lens.size(), size_t(L));
        for (int l = 0; l < L; ++l) {
            const tinyloop::LensDepth& a = ew[i].lens[size_t(l)];
            const tinyloop::LensDepth& b = eg[i].lens[size_t(l)];
            EXPECT_EQ(b.depth, a.depth);
            EXPECT_NEAR(b.p_emitted, a.p_emitted, 2e-3) << "token " << i << " depth " << l + 1;
            if (a.top_probs.size() >= 2 && a.top_probs[0] - a.top_probs[1] > 1e-3) {
                EXPECT_EQ(b.top_ids[0], a.top_ids[0]) << "token " << i << " depth " << l + 1;
            }
        }
    }
}

// Prefix caches, resume handles and prefix pools on the device (positions copied from the kept
// sequence, the last row's state set when the prompt is wholly cached): greedy, each gives the
// device's own plain greedy decoding of the whole prompt (prompts under one cuBLAS chunk: the
// batch-invariant kernels on both sides), a resume at a deeper depth included.
TEST(CudaEngine, CachesOnTheDeviceGiveItsGreedyDecoding) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    tinyloop::Model* m = gpu.get();
    const tinyloop::HParams& hp = tinyloop::model_hparams(m);
    const std::vector<int32_t> prefix = tinyloop::tokenize(m, "In the beginning God created the heaven");
    std::vector<int32_t> prompt = prefix;
    for (int32_t t : tinyloop::tokenize(m, " and the earth. And the earth was")) prompt.push_back(t);
    ASSERT_LT(prompt.size(), 60u);
    const int L = hp.default_loops;
    auto plain = [&](const std::vector<int32_t>& p, int loops) {
        return tinyloop::generate(m, p.data(), int(p.size()), greedy(24, loops));
    };
    {
        tinyloop::PrefixCache* c = tinyloop::create_prefix_cache(m, prefix.data(), int(prefix.size()), L);
        const auto longer = tinyloop::generate_with_prefix(m, c, prompt.data(), int(prompt.size()), greedy(24, L));
        const auto exact = tinyloop::generate_with_prefix(m, c, prefix.data(), int(prefix.size()), greedy(24, L));
        tinyloop::free_prefix_cache(c);
        EXPECT_EQ(longer.tokens, plain(prompt, L)) << "a prompt longer than the prefix";
        EXPECT_EQ(exact.tokens, plain(prefix, L)) << "the prefix itself (its last state set, nothing run)";
    }
    {
        tinyloop::ResumeHandle* r = tinyloop::create_resume_handle(m, prompt.data(), int(prompt.size()), L);
        const auto at = tinyloop::resume_generate(r, greedy(24, L));
        const auto deeper = tinyloop::resume_generate(r, greedy(24, hp.max_loops));
        tinyloop::free_resume_handle(r);
        EXPECT_EQ(at.tokens, plain(prompt, L)) << "resume at the handle's depth";
        EXPECT_EQ(deeper.tokens, plain(prompt, hp.max_loops)) << "resume deepened to max_loops";
    }
    {
        tinyloop::PrefixPool* pool = tinyloop::create_prefix_pool(m, L);
        tinyloop::prefix_pool_add(pool, prefix.data(), int(prefix.size()));
        const auto got = tinyloop::generate_with_pool(pool, prompt.data(), int(prompt.size()), greedy(24, L));
        tinyloop::free_prefix_pool(pool);
        EXPECT_EQ(got.tokens, plain(prompt, L)) << "a prefix pool";
    }
}

// The published looped architectures' block kinds and pass features (FORMAT.md §1b) on the
// device, small random f32 files of their shapes (tests/looped_shapes.h):
// Ouro's (sandwich_branch blocks, the final norm after every pass, the exit gate, no prelude) and
// Huginn's without its coda (sandwich_sum blocks, qk_bias, embed_scale sqrt(d), two prelude blocks,
// the adapter from a seeded and from a zero initial state). Against the CPU: every row's logits at
// depths 1, T and max within float rounding; greedy decoding by greedy_agreement.h's rule; decoding
// with early exit (the gate's two criteria on Ouro, hidden_l2 on Huginn: the state propagation
// through the adapter and the k bias) the CPU's tokens and depths; the gate's trace during generate
// and exit_gate_per_pass.
// Chain, tree and pipelined self-speculation give the device's own greedy decoding (resumed states,
// laid-out rows gathering their initial states by position, a wave's rows at several passes).
namespace {

struct KindCase {
    std::string name;
    tinyloop::HParams hp;
};

// tests/looped_shapes.h's shapes, with room for an 80-token sequence.
std::vector<KindCase> block_kind_cases() {
    std::vector<KindCase> c{{"ouro", tltest::ouro_hparams()},
                            {"huginn-seeded", tltest::huginn_hparams(false, true)},
                            {"huginn-zeros", tltest::huginn_hparams(false, false)}};
    for (KindCase& k : c) k.hp.max_seq_len = 96;
    return c;
}

std::vector<int32_t> byte_ids(int n, uint64_t seed) {
    std::vector<int32_t> t(size_t(n), 0);
    uint64_t x = seed;
    for (auto& v : t) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v = int32_t((x >> 33) % 256);
    }
    return t;
}

// The threshold whose decoding with early exit on `cpu` exits at the most distinct depths (the
// one that exercises the exit best on this random model: the values that do depend on its
// weights), g's own when none exits.
float spread_threshold(tinyloop::Model* cpu, const std::vector<int32_t>& prompt, tinyloop::GenerateConfig g,
                       const std::vector<float>& candidates) {
    float best = g.early_exit.threshold;
    size_t kinds = 1;
    for (float th : candidates) {
        g.early_exit.threshold = th;
        const tinyloop::GenerateResult r = tinyloop::generate_ex(cpu, prompt.data(), int(prompt.size()), g);
        std::vector<int> d = r.stats.depth_per_token;
        std::sort(d.begin(), d.end());
        const size_t k = size_t(std::unique(d.begin(), d.end()) - d.begin());
        if (k > kinds) {
            kinds = k;
            best = th;
        }
    }
    return best;
}

// Decoding with early exit on both back ends: the same tokens for at least `agree` of them, and
// the same per-token depths where both emitted alike (one difference allowed: a criterion at its
// threshold), with at least one token exiting early on the CPU.
void expect_early_exit_agrees(tinyloop::Model* cpu, tinyloop::Model* gpu, const std::vector<int32_t>& prompt,
                              tinyloop::GenerateConfig g, const std::vector<float>& thresholds, size_t agree) {
    g.early_exit.threshold = spread_threshold(cpu, prompt, g, thresholds);
    SCOPED_TRACE("threshold " + std::to_string(g.early_exit.threshold));
    const tinyloop::GenerateResult rw = tinyloop::generate_ex(cpu, prompt.data(), int(prompt.size()), g);
    const tinyloop::GenerateResult rg = tinyloop::generate_ex(gpu, prompt.data(), int(prompt.size()), g);
    size_t same = 0;
    while (same < rw.tokens.size() && same < rg.tokens.size() && rw.tokens[same] == rg.tokens[same]) ++same;
    EXPECT_GE(same, prompt.size() + agree) << "decoding with early exit parted from the CPU's";
    const auto& pw = rw.stats.depth_per_token;
    const auto& pg = rg.stats.depth_per_token;
    const size_t k = std::min({pw.size(), pg.size(), same - prompt.size()});
    int dd = 0, exits = 0;
    for (size_t i = 0; i < k; ++i) {
        dd += pw[i] != pg[i];
        exits += pw[i] < g.loops;
    }
    EXPECT_GT(exits, 0) << "no token exited early: the test would not test the exit";
    EXPECT_LE(dd, 1) << "per-token depths differ at " << dd << " of the " << k << " tokens both emitted alike";
}

}  // namespace

TEST(CudaEngine, PublishedBlockKindsOnTheDeviceMatchTheCpu) {
    TL_REQUIRE_DEVICE();
    using tinyloop::EarlyExitCriterion;
    for (const KindCase& kc_ : block_kind_cases()) {
        SCOPED_TRACE(kc_.name);
        const tinyloop::HParams& hp = kc_.hp;
        const std::string path = tltest::write_random_model("kinds_" + kc_.name + ".tinyloop", hp, 11);
        tinyloop::ModelHandle cpu = tinyloop::load_model_handle(path, on(Backend::Cpu));
        tinyloop::ModelHandle gpu = tinyloop::load_model_handle(path, on(Backend::Cuda));
        ASSERT_EQ(tinyloop::model_info(gpu.get()).backend, "cuda");
        const int V = hp.vocab_size, T = hp.default_loops;

        // every row's logits (80 rows: a cuBLAS chunk of 64 and a kernel tail)
        const std::vector<int32_t> toks = byte_ids(80, 3);
        for (int L : {1, T, hp.max_loops}) {
            const std::vector<float> want = tinyloop::forward_logits(cpu.get(), toks.data(), int(toks.size()), L);
            const std::vector<float> got = tinyloop::forward_logits(gpu.get(), toks.data(), int(toks.size()), L);
            ASSERT_EQ(got.size(), want.size());
            size_t bad = 0, first_bad = 0;
            for (size_t i = 0; i < want.size(); ++i)
                if (!(std::fabs(got[i] - want[i]) <= 1e-3f + 1e-3f * std::fabs(want[i])) && bad++ == 0) first_bad = i;
            EXPECT_EQ(bad, 0u) << "loops " << L << ": " << bad << " logits differ, the first at row " << first_bad / V
                               << " id " << first_bad % V << ": " << got[first_bad] << " against " << want[first_bad];
        }

        // greedy decoding at T
        const std::vector<int32_t> prompt = byte_ids(12, 5);
        const auto want = tinyloop::generate(cpu.get(), prompt.data(), int(prompt.size()), greedy(32, T));
        const auto got = tinyloop::generate(gpu.get(), prompt.data(), int(prompt.size()), greedy(32, T));
        ASSERT_EQ(got.size(), prompt.size() + 32);
        const tltest::GreedyAgreement a = tltest::compare_greedy(trace_of(cpu.get(), want, prompt.size(), T),
                                                                 trace_of(gpu.get(), got, prompt.size(), T), V);
        EXPECT_TRUE(a.ok) << a.why;

        // chain and tree self-speculation: the device's own greedy decoding at the verify depth
        {
            tinyloop::SpeculativeConfig sc;
            sc.max_tokens = 24;
            sc.draft_loops = 1;
            sc.verify_loops = T;
            sc.draft_ahead = 3;
            sc.temperature = 0.0f;
            sc.ignore_eos = true;
            const tinyloop::GenerateResult r = tinyloop::generate_speculative_ex(gpu.get(), prompt.data(), int(prompt.size()), sc);
            EXPECT_EQ(r.tokens, tinyloop::generate(gpu.get(), prompt.data(), int(prompt.size()), greedy(24, T)))
                << "chain speculation";
            EXPECT_GT(r.stats.spec_drafted, 0);
            tinyloop::TreeSpeculativeConfig tc;
            tc.max_tokens = 24;
            tc.draft_loops = 1;
            tc.verify_loops = T;
            tc.draft_ahead = 3;
            tc.K_branches = 2;
            tc.ignore_eos = true;
            const tinyloop::GenerateResult t = tinyloop::generate_tree_speculative_ex(gpu.get(), prompt.data(), int(prompt.size()), tc);
            EXPECT_EQ(t.tokens, r.tokens) << "tree speculation";
            // the wave: rows at different passes, new rows through the prelude and initial state
            const tinyloop::GenerateResult w = tinyloop::generate_pipelined_ex(gpu.get(), prompt.data(), int(prompt.size()), sc);
            EXPECT_EQ(w.tokens, r.tokens) << "pipelined speculation";
            EXPECT_GT(w.stats.spec_sweeps, 0);
        }

        // the batch engine (cuda_batch.cpp): each request the device's own decoding of it alone, the
        // model's input path (injection, the adapter and its initial state) through the batched
        // passes at three depths, a windowed request among them
        {
            tinyloop::BatchEngineOptions bo;
            bo.page_size = 4;
            bo.prefill_chunk = 8;
            std::vector<tinyloop::GenerateConfig> cs = {greedy(16, T), greedy(16, hp.max_loops), greedy(16, 1)};
            cs[1].cache_window = 8;
            std::unique_ptr<tinyloop::BatchEngine, void (*)(tinyloop::BatchEngine*)> e(
                tinyloop::create_batch_engine(gpu.get(), bo), tinyloop::free_batch_engine);
            std::vector<uint64_t> ids;
            for (const tinyloop::GenerateConfig& c : cs) {
                tinyloop::BatchRequest r;
                r.prompt = prompt;
                r.config = c;
                ids.push_back(tinyloop::batch_submit(e.get(), r));
            }
            tinyloop::batch_run_until_idle(e.get());
            for (size_t i = 0; i < cs.size(); ++i)
                EXPECT_EQ(tinyloop::batch_result(e.get(), ids[i]).tokens,
                          tinyloop::generate_ex(gpu.get(), prompt.data(), int(prompt.size()), cs[i]).tokens)
                    << "batch request " << i;
        }

        if (hp.exit_gate) {
            // the gate at every pass of every position (exit_gate_per_pass: the states through the
            // per-pass hook, the gate on the host): the CPU's within rounding
            const std::vector<float> lw = tinyloop::exit_gate_per_pass(cpu.get(), toks.data(), int(toks.size()), T);
            const std::vector<float> lg = tinyloop::exit_gate_per_pass(gpu.get(), toks.data(), int(toks.size()), T);
            ASSERT_EQ(lg.size(), lw.size());
            for (size_t i = 0; i < lw.size(); ++i) EXPECT_NEAR(lg[i], lw[i], 1e-4) << "pass-major index " << i;
            // the gate's trace of every token during generate (observer set): the CPU's within rounding
            std::vector<tinyloop::TokenEvent> ew, eg;
            tinyloop::GenerateOptions o;
            o.observer = [&](const tinyloop::TokenEvent& e) { return ew.push_back(e), true; };
            tinyloop::generate_ex(cpu.get(), prompt.data(), int(prompt.size()), greedy(16, T), o);
            o.observer = [&](const tinyloop::TokenEvent& e) { return eg.push_back(e), true; };
            tinyloop::generate_ex(gpu.get(), prompt.data(), int(prompt.size()), greedy(16, T), o);
            ASSERT_EQ(eg.size(), ew.size());
            for (size_t i = 0; i < ew.size() && ew[i].token == eg[i].token; ++i) {
                ASSERT_EQ(eg[i].exit_gate.size(), size_t(T)) << "token " << i;
                ASSERT_EQ(ew[i].exit_gate.size(), size_t(T));
                for (int l = 0; l < T; ++l)
                    EXPECT_NEAR(eg[i].exit_gate[size_t(l)], ew[i].exit_gate[size_t(l)], 1e-4) << "token " << i << " pass " << l + 1;
            }
            // the gate's criteria (threshold q on the cumulative exit probability)
            for (const auto crit : {EarlyExitCriterion::GateStop, EarlyExitCriterion::GateSelect}) {
                SCOPED_TRACE(crit == EarlyExitCriterion::GateStop ? "gate_stop" : "gate_select");
                tinyloop::GenerateConfig g = greedy(24, hp.max_loops);
                g.early_exit.patience = 1;  // turns the policy on (the gate has no patience of its own)
                g.early_exit.criterion = crit;
                g.early_exit.threshold = 0.5f;
                expect_early_exit_agrees(cpu.get(), gpu.get(), prompt, g,
                                         {0.05f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 0.95f, 0.99f}, 8);
            }
        } else {
            tinyloop::GenerateConfig g = greedy(24, hp.max_loops);
            g.early_exit.criterion = EarlyExitCriterion::HiddenL2;
            g.early_exit.patience = 1;
            g.early_exit.threshold = 0.3f;
            std::vector<float> ths;
            for (float th = 4.0f; th > 1e-3f; th *= 0.7f) ths.push_back(th);
            expect_early_exit_agrees(cpu.get(), gpu.get(), prompt, g, ths, 8);
        }
    }
}

// A coda model (FORMAT.md §1b, Huginn's whole shape) on the device: its whole-sequence calls,
// the coda over the last pass's states (every row's logits at a depth, score with either cache,
// decoding at a fixed depth) against the CPU; the calls that stop or read out between passes (a position's coda keys
// and values are then those of the depth it was read at) refused under backend cuda naming the
// call and the coda, and under auto run on the CPU: the CPU's own result.
TEST(CudaEngine, ACodaModelRunsItsWholeSequenceCallsOnTheDevice) {
    TL_REQUIRE_DEVICE();
    tinyloop::HParams hp = block_kind_cases()[1].hp;  // huginn-seeded
    hp.n_coda_blocks = 2;
    const std::string path = tltest::write_random_model("kinds_coda.tinyloop", hp, 11);
    tinyloop::ModelHandle cpu = tinyloop::load_model_handle(path, on(Backend::Cpu));
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(path, on(Backend::Cuda));
    tinyloop::ModelHandle any = tinyloop::load_model_handle(path, on(Backend::Auto));
    ASSERT_EQ(tinyloop::model_info(gpu.get()).backend, "cuda");
    const tinyloop::ModelInfo info = tinyloop::model_info(any.get());
    EXPECT_EQ(info.backend, "cuda");
    EXPECT_NE(info.backend_note.find("coda"), std::string::npos) << info.backend_note;
    const int V = hp.vocab_size, T = hp.default_loops;

    const std::vector<int32_t> toks = byte_ids(80, 3);
    const int n = int(toks.size());
    for (int L : {1, T, hp.max_loops}) {
        const std::vector<float> want = tinyloop::forward_logits(cpu.get(), toks.data(), n, L);
        const std::vector<float> got = tinyloop::forward_logits(gpu.get(), toks.data(), n, L);
        ASSERT_EQ(got.size(), want.size());
        size_t bad = 0;
        for (size_t i = 0; i < want.size(); ++i) bad += !(std::fabs(got[i] - want[i]) <= 1e-3f + 1e-3f * std::fabs(want[i]));
        EXPECT_EQ(bad, 0u) << "loops " << L;
        for (const auto kv : {tinyloop::KVCacheType::F32, tinyloop::KVCacheType::Int8}) {
            const tinyloop::ScoreResult sw = tinyloop::score(cpu.get(), toks.data(), n, L, kv);
            const tinyloop::ScoreResult sg = tinyloop::score(gpu.get(), toks.data(), n, L, kv);
            ASSERT_EQ(sg.token_logprobs.size(), sw.token_logprobs.size());
            for (size_t i = 0; i < sw.token_logprobs.size(); ++i)
                EXPECT_NEAR(sg.token_logprobs[i], sw.token_logprobs[i], 2e-3 + 1e-3 * std::fabs(sw.token_logprobs[i]))
                    << "loops " << L << " token " << i << (kv == tinyloop::KVCacheType::Int8 ? " (INT8 cache)" : "");
        }
    }
    const std::vector<int32_t> prompt = byte_ids(12, 5);
    const auto want = tinyloop::generate(cpu.get(), prompt.data(), int(prompt.size()), greedy(32, T));
    const auto got = tinyloop::generate(gpu.get(), prompt.data(), int(prompt.size()), greedy(32, T));
    const tltest::GreedyAgreement a = tltest::compare_greedy(trace_of(cpu.get(), want, prompt.size(), T),
                                                             trace_of(gpu.get(), got, prompt.size(), T), V);
    EXPECT_TRUE(a.ok) << a.why;

    tinyloop::GenerateConfig g = greedy(16, hp.max_loops);
    g.early_exit.criterion = tinyloop::EarlyExitCriterion::HiddenL2;
    g.early_exit.patience = 1;
    g.early_exit.threshold = 0.3f;
    try {
        tinyloop::generate_ex(gpu.get(), prompt.data(), int(prompt.size()), g);
        ADD_FAILURE() << "early exit ran on the device on a coda model";
    } catch (const tinyloop::Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::NotSupported) << e.what();
        EXPECT_NE(std::string(e.what()).find("early exit"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("coda"), std::string::npos) << e.what();
    }
    EXPECT_EQ(tinyloop::generate_ex(any.get(), prompt.data(), int(prompt.size()), g).tokens,
              tinyloop::generate_ex(cpu.get(), prompt.data(), int(prompt.size()), g).tokens)
        << "auto: early exit on a coda model is the CPU's";
    // the batch engine (its rows' coda keys and values would be those of each sequence's depth) is
    // the CPU's too: refused under backend cuda, on the CPU under auto
    try {
        tinyloop::free_batch_engine(tinyloop::create_batch_engine(gpu.get()));
        ADD_FAILURE() << "the batch engine ran on the device on a coda model";
    } catch (const tinyloop::Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::NotSupported) << e.what();
        EXPECT_NE(std::string(e.what()).find("the batch engine"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("coda"), std::string::npos) << e.what();
    }
    tinyloop::free_batch_engine(tinyloop::create_batch_engine(any.get()));
}

TEST(CudaEngine, UnroutedCallsNameTheFeature) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    auto expect_refused = [](const char* feature, const auto& call) {
        try {
            call();
            ADD_FAILURE() << feature << ": ran on a model loaded with backend cuda";
        } catch (const tinyloop::Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::NotSupported) << e.what();
            EXPECT_NE(std::string(e.what()).find(feature), std::string::npos) << e.what();
        }
    };
    // kv_sharing other than per-pass (FORMAT.md §1c) is the CPU's
    const auto prompt = prompt_of(gpu.get());
    tinyloop::GenerateConfig g = greedy(8, 0);
    g.kv_sharing = tinyloop::parse_kv_sharing("last-pass");
    expect_refused("kv_sharing", [&] { tinyloop::generate_ex(gpu.get(), prompt.data(), int(prompt.size()), g); });
}

// The batch engine on the device (cuda_batch.cpp: every sequence's rows of a step through the same
// passes, each sequence's keys and values in pages of a device pool, early exit's rows through
// the paged one-row stepper): requests at three depths, two with the INT8 cache, two with early
// exit (one of them INT8), submitted together with small pages and a small prefill chunk, so prompts are prefilled in
// chunks beside the others' decode steps and a step holds rows of both pools. Each request's
// tokens (and per-token depths) are the device's own greedy decoding of it alone (generate_ex with
// the same config: the reference step's kernels; prompts under 64 tokens, so no prefill chunk
// reaches cuBLAS), every page is back when the engine is idle, and the stats count the rows.
TEST(CudaEngine, BatchEngineOnTheDeviceEqualsItsGreedyDecoding) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    const tinyloop::HParams& hp = tinyloop::model_hparams(gpu.get());
    const std::vector<std::string> texts = {
        "In the beginning God created the heaven and the earth. And",
        "And God said, Let there be light: and",
        "Blessed are the meek: for they shall",
        "The LORD is my shepherd; I shall not want. He maketh me to lie down",
        "And the evening and the morning were the",
    };
    std::vector<tinyloop::GenerateConfig> configs = {greedy(24, 1), greedy(24, hp.default_loops),
                                                      greedy(24, hp.max_loops), greedy(24, hp.max_loops),
                                                      greedy(24, hp.max_loops)};
    configs[1].kv_cache = configs[3].kv_cache = tinyloop::KVCacheType::Int8;
    for (int i : {3, 4}) {  // early exit: one with the INT8 cache
        configs[size_t(i)].early_exit.criterion = tinyloop::EarlyExitCriterion::HiddenL2;
        configs[size_t(i)].early_exit.patience = 1;
        configs[size_t(i)].early_exit.threshold = 0.1f;
    }
    tinyloop::BatchEngineOptions o;
    o.page_size = 4;
    o.kv_pages = 8192;
    o.max_batch = 8;
    o.prefill_chunk = 8;
    std::unique_ptr<tinyloop::BatchEngine, void (*)(tinyloop::BatchEngine*)> engine(
        tinyloop::create_batch_engine(gpu.get(), o), tinyloop::free_batch_engine);
    tinyloop::BatchEngine* e = engine.get();
    std::vector<uint64_t> ids;
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < texts.size(); ++i) {
        prompts.push_back(tinyloop::tokenize(gpu.get(), texts[i]));
        ASSERT_LT(prompts.back().size(), 64u);
        tinyloop::BatchRequest r;
        r.prompt = prompts.back();
        r.config = configs[i];
        ids.push_back(tinyloop::batch_submit(e, r));
    }
    tinyloop::batch_run_until_idle(e);
    const tinyloop::BatchEngineStats st = tinyloop::batch_stats(e);
    EXPECT_EQ(st.pages_free, st.pages_total) << "pages still held after every request finished";
    EXPECT_EQ(st.pages_total, 2 * o.kv_pages) << "one pool per cache type (f32 and INT8)";
    EXPECT_GT(st.rows, 0);
    for (size_t i = 0; i < ids.size(); ++i) {
        SCOPED_TRACE("request " + std::to_string(i));
        const tinyloop::GenerateResult got = tinyloop::batch_result(e, ids[i]);
        const tinyloop::GenerateResult want =
            tinyloop::generate_ex(gpu.get(), prompts[i].data(), int(prompts[i].size()), configs[i]);
        EXPECT_EQ(got.tokens, want.tokens) << "the batch engine's tokens differ from the device's lone decoding";
        EXPECT_EQ(got.stats.depth_per_token, want.stats.depth_per_token);
        if (configs[i].early_exit.patience == 0) continue;
        int exited = 0;  // each early-exit request (f32 and INT8) exits somewhere: its propagation ran
        for (int dpt : got.stats.depth_per_token) exited += dpt < configs[i].loops;
        EXPECT_GT(exited, 0) << "no token exited early: the paged stepper's exit was not tested";
    }
}

// Draft-model speculation on the device (the q4 file drafting for the f32 one, both loaded with
// backend cuda: the draft's and the target's sequences through run, run_passes and logits):
// greedy, it emits the device's own plain greedy decoding of the target (verification rows are the
// decode step's bits), with drafts accepted; a draft left on the CPU is refused naming both back
// ends.
TEST(CudaEngine, DraftModelSpeculationOnTheDeviceEqualsItsGreedyDecoding) {
    TL_REQUIRE_DEVICE();
    const std::string q4 = std::string(TL_SOURCE_DIR) + "/resources/models/tinyloop-kjv/model-q4.tinyloop";
    tinyloop::ModelHandle target = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    tinyloop::ModelHandle draft = tinyloop::load_model_handle(q4, on(Backend::Cuda));
    const auto prompt = prompt_of(target.get());
    const int n = int(prompt.size());
    const tinyloop::GenerateConfig c = greedy(40, 0);
    const std::vector<int32_t> plain = tinyloop::generate(target.get(), prompt.data(), n, c);
    for (int gamma : {1, 4}) {
        tinyloop::DraftSpeculativeConfig sc;
        sc.gamma = gamma;
        const tinyloop::GenerateResult r =
            tinyloop::draft_speculative_generate_ex(target.get(), draft.get(), prompt.data(), n, c, sc);
        EXPECT_EQ(r.tokens, plain) << "gamma " << gamma;
        EXPECT_GT(r.stats.spec_accepted, 0) << "gamma " << gamma << ": no draft accepted";
    }
    tinyloop::ModelHandle on_cpu = tinyloop::load_model_handle(q4, on(Backend::Cpu));
    try {
        tinyloop::draft_speculative_generate_ex(target.get(), on_cpu.get(), prompt.data(), n, c, {});
        ADD_FAILURE() << "a draft on the CPU ran with a target on the device";
    } catch (const tinyloop::Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::NotSupported) << e.what();
        EXPECT_NE(std::string(e.what()).find("same backend"), std::string::npos) << e.what();
    }
}

// The INT8 KV cache on the device (rope_store_int8: the CPU cache's codes and scales; attention
// over the dequantized rows): score's log-probabilities at three depths within float rounding of
// the CPU's INT8 cache, greedy decoding with it by greedy_agreement.h's rule (against traces with
// the INT8 cache), and decoding with early exit (the exited row's keys and values quantized into
// the deeper passes' layers) the CPU's tokens and depths.
TEST(CudaEngine, Int8CacheOnTheDeviceMatchesTheCpu) {
    TL_REQUIRE_DEVICE();
    using tinyloop::KVCacheType;
    tinyloop::ModelHandle cpu = tinyloop::load_model_handle(kModel, on(Backend::Cpu));
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    const tinyloop::HParams& hp = tinyloop::model_hparams(cpu.get());
    std::string text;
    while (text.size() < 700) text += "And God said, Let there be light: and there was light. ";
    std::vector<int32_t> toks = tinyloop::tokenize(cpu.get(), text);
    toks.resize(std::min<size_t>(toks.size(), 150));
    const int n = int(toks.size());
    for (int L : {1, hp.default_loops, hp.max_loops}) {
        const tinyloop::ScoreResult want = tinyloop::score(cpu.get(), toks.data(), n, L, KVCacheType::Int8);
        const tinyloop::ScoreResult got = tinyloop::score(gpu.get(), toks.data(), n, L, KVCacheType::Int8);
        ASSERT_EQ(got.token_logprobs.size(), want.token_logprobs.size());
        for (size_t i = 0; i < want.token_logprobs.size(); ++i)
            EXPECT_NEAR(got.token_logprobs[i], want.token_logprobs[i], 2e-3 + 1e-3 * std::fabs(want.token_logprobs[i]))
                << "loops " << L << " token " << i;
    }
    const auto prompt = prompt_of(cpu.get());
    const int L = hp.default_loops;
    tinyloop::GenerateConfig g = greedy(48, L);
    g.kv_cache = KVCacheType::Int8;
    const auto want = tinyloop::generate(cpu.get(), prompt.data(), int(prompt.size()), g);
    const auto got = tinyloop::generate(gpu.get(), prompt.data(), int(prompt.size()), g);
    ASSERT_EQ(got.size(), prompt.size() + 48);
    const tltest::GreedyAgreement a =
        tltest::compare_greedy(trace_of(cpu.get(), want, prompt.size(), L, KVCacheType::Int8),
                               trace_of(gpu.get(), got, prompt.size(), L, KVCacheType::Int8), hp.vocab_size);
    EXPECT_TRUE(a.ok) << a.why;

    g = greedy(32, hp.max_loops);
    g.kv_cache = KVCacheType::Int8;
    g.early_exit.criterion = tinyloop::EarlyExitCriterion::HiddenL2;
    g.early_exit.patience = 1;
    g.early_exit.threshold = 0.1f;
    const tinyloop::GenerateResult rw = tinyloop::generate_ex(cpu.get(), prompt.data(), int(prompt.size()), g);
    const tinyloop::GenerateResult rg = tinyloop::generate_ex(gpu.get(), prompt.data(), int(prompt.size()), g);
    size_t same = 0;
    while (same < rw.tokens.size() && same < rg.tokens.size() && rw.tokens[same] == rg.tokens[same]) ++same;
    EXPECT_GE(same, prompt.size() + 12) << "decoding with early exit and the INT8 cache parted from the CPU's";
    const size_t k = std::min({rw.stats.depth_per_token.size(), rg.stats.depth_per_token.size(), same - prompt.size()});
    int dd = 0, exits = 0;
    for (size_t i = 0; i < k; ++i) {
        dd += rw.stats.depth_per_token[i] != rg.stats.depth_per_token[i];
        exits += rw.stats.depth_per_token[i] < hp.max_loops;
    }
    EXPECT_GT(exits, 0) << "no token exited early: the propagation into the INT8 cache went untested";
    EXPECT_LE(dd, 1);
}

// KV provenance on the device (the decode loop's own record of what it ran): the CPU's for the
// rows of the tokens and depths both back ends chose alike, in plain decoding (every row computed)
// and with early exit (a row's layers past its exit depth propagated).
TEST(CudaEngine, KVProvenanceOnTheDeviceIsTheCpus) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle cpu = tinyloop::load_model_handle(kModel, on(Backend::Cpu));
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    const auto prompt = prompt_of(gpu.get());
    const int n = int(prompt.size());
    const int L = tinyloop::model_hparams(gpu.get()).max_loops;
    for (const bool exits : {false, true}) {
        SCOPED_TRACE(exits ? "early exit" : "plain");
        tinyloop::GenerateConfig g = greedy(24, L);
        if (exits) {
            g.early_exit.criterion = tinyloop::EarlyExitCriterion::HiddenL2;
            g.early_exit.patience = 1;
            g.early_exit.threshold = 0.1f;
        }
        tinyloop::KVProvenance pw, pg;
        tinyloop::GenerateOptions o;
        o.kv_provenance = &pw;
        const tinyloop::GenerateResult rw = tinyloop::generate_ex(cpu.get(), prompt.data(), n, g, o);
        o.kv_provenance = &pg;
        const tinyloop::GenerateResult rg = tinyloop::generate_ex(gpu.get(), prompt.data(), n, g, o);
        ASSERT_EQ(pg.n_layers, pw.n_layers);
        ASSERT_GT(pg.n_positions, n);
        size_t same = 0;  // emitted tokens alike, with their depths
        const auto& dw = rw.stats.depth_per_token;
        const auto& dg = rg.stats.depth_per_token;
        while (same + 1 < dw.size() && same + 1 < dg.size() && rw.tokens[size_t(n) + same] == rg.tokens[size_t(n) + same] &&
               dw[same] == dg[same])
            ++same;
        EXPECT_GE(same, 8u) << "the device parted from the CPU within 8 tokens";
        int propagated = 0;
        for (int layer = 0; layer < pw.n_layers; ++layer)
            for (int p = 0; p < n + int(same) && p < pw.n_positions && p < pg.n_positions; ++p) {
                EXPECT_EQ(pg.at(layer, p), pw.at(layer, p)) << "layer " << layer << " position " << p;
                propagated += pg.at(layer, p) == tinyloop::KVOrigin::Propagated;
            }
        if (exits) {
            EXPECT_GT(propagated, 0) << "no row propagated: the test would not test early exit's record";
        }
        EXPECT_GT(pg.kv_bytes_written, 0u);
        EXPECT_LE(pg.kv_bytes_written, pg.kv_bytes_allocated);
    }
}

// Beam search on the device (each beam that parts from its parent a session of its own: the
// parent's positions copied in and its last logits, CudaSequence::fork): its hypotheses against
// the CPU's, beam_size 4, all four returned. A hypothesis both back ends found has the same score
// within float rounding; the best is the CPU's best unless the CPU's two best are within 1e-3
// (a near tie that rounding may order either way); at least two of the four are found by both.
TEST(CudaEngine, BeamSearchOnTheDeviceMatchesTheCpu) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle cpu = tinyloop::load_model_handle(kModel, on(Backend::Cpu));
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(kModel, on(Backend::Cuda));
    const auto prompt = prompt_of(gpu.get());
    const int n = int(prompt.size());
    for (const auto kv : {tinyloop::KVCacheType::F32, tinyloop::KVCacheType::Int8}) {  // INT8: forks copy codes and scales
        SCOPED_TRACE(kv == tinyloop::KVCacheType::F32 ? "f32 cache" : "INT8 cache");
        tinyloop::GenerateConfig g = greedy(24, 0);
        g.beam_size = 4;
        g.num_return_sequences = 4;
        g.kv_cache = kv;
        const tinyloop::GenerateResult want = tinyloop::generate_ex(cpu.get(), prompt.data(), n, g);
        const tinyloop::GenerateResult got = tinyloop::generate_ex(gpu.get(), prompt.data(), n, g);
        ASSERT_EQ(want.sequences.size(), 4u);
        ASSERT_EQ(got.sequences.size(), 4u);
        const bool near_tie = want.sequences[0].score - want.sequences[1].score < 1e-3;
        if (!near_tie) {
            EXPECT_EQ(got.sequences[0].output, want.sequences[0].output) << "the best hypothesis";
        }
        int found = 0;
        for (const auto& h : got.sequences)
            for (const auto& w : want.sequences)
                if (h.output == w.output) {
                    ++found;
                    EXPECT_NEAR(h.score, w.score, 1e-3 + 1e-4 * std::fabs(w.score));
                }
        EXPECT_GE(found, 2) << "fewer than two of the device's hypotheses are the CPU's";
    }
}

// vram_usage_bytes against what the device lost (cudaMemGetInfo), within 5%: after the load
// (the weights), during a generation (the weights plus the session, its cuBLAS handle and
// workspace once a 200-token prefill used them) and after it (the session is kept for the
// next call: a second generate allocates nothing); after free_model the device has it back.
TEST(CudaEngine, VramUsageMatchesTheDevicesFreeMemory) {
    TL_REQUIRE_DEVICE();
    const int dev = probe().device;
    tinyloop::HParams hp = tltest::small_hparams();
    hp.d_model = 512;
    hp.n_heads = 8;
    hp.n_kv_heads = 8;
    hp.head_dim = 64;
    hp.d_ff = 1408;
    hp.vocab_size = 4096;
    hp.n_pre_blocks = 2;
    hp.n_loop_layers = 2;
    hp.max_seq_len = 1024;
    const std::string path = tltest::write_random_model("vram_d512", hp);
    { tinyloop::ModelHandle warm = tinyloop::load_model_handle(path, on(Backend::Cuda)); }  // the driver's context and cuBLAS set up once
    const size_t free0 = kc::device_free_bytes(dev);
    tinyloop::ModelHandle gpu = tinyloop::load_model_handle(path, on(Backend::Cuda));
    const size_t free1 = kc::device_free_bytes(dev);
    const double lost = double(free0) - double(free1), reported = double(tinyloop::vram_usage_bytes(gpu.get()));
    ASSERT_GT(reported, 0.0);
    EXPECT_NEAR(reported, lost, 0.05 * lost) << "after load: reported " << reported << " bytes, the device lost " << lost;
    tinyloop::GenerateConfig g = greedy(4, 0);
    std::vector<int32_t> prompt(200, 5);
    bool checked = false;
    tinyloop::generate_stream(gpu.get(), prompt.data(), int(prompt.size()), g, [&](int32_t, int) {
        if (!checked) {
            const double lost_now = double(free0) - double(kc::device_free_bytes(dev));
            const double rep = double(tinyloop::vram_usage_bytes(gpu.get()));
            EXPECT_GT(rep, reported) << "a live session's buffers are counted";
            EXPECT_NEAR(rep, lost_now, 0.05 * lost_now) << "during generate: reported " << rep << ", lost " << lost_now;
            checked = true;
        }
        return true;
    });
    EXPECT_TRUE(checked);
    const double kept = double(tinyloop::vram_usage_bytes(gpu.get()));
    const double lost_kept = double(free0) - double(kc::device_free_bytes(dev));
    EXPECT_GT(kept, reported) << "the kept session is counted";
    EXPECT_NEAR(kept, lost_kept, 0.05 * lost_kept) << "after generate: reported " << kept << ", lost " << lost_kept;
    tinyloop::generate(gpu.get(), prompt.data(), int(prompt.size()), g);
    EXPECT_EQ(double(tinyloop::vram_usage_bytes(gpu.get())), kept) << "the second call reused the session";
    EXPECT_EQ(double(free0) - double(kc::device_free_bytes(dev)), lost_kept) << "the second call allocated device memory";
    gpu.reset();
    const double lost_after = double(free0) - double(kc::device_free_bytes(dev));
    EXPECT_LE(std::fabs(lost_after), 0.05 * lost_kept) << "after free_model the device lost " << lost_after;
}

}  // namespace
