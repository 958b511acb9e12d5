// Whole-model parity of the CUDA forward (engine/src/forward/cuda_forward.cpp) with the CPU back end
// (its float-activation kernels, see FloatActivations below):
//   * the bundled trained model (f32, q8, q4 files): greedy continuations agreeing with CPU
//     generate() by tests/cuda/greedy_agreement.h's rule (the same tokens with log-probabilities
//     within 5e-3 nats, parting only at a near tie of the CPU's logits), through the CUDA session
//     (prefill, then graph-replayed decode steps) and again without the graph;
//   * prefill logits within a stated tolerance of forward_logits, through both product paths
//     (the batch-invariant kernel for short chunks, cuBLAS for 64-row chunks);
//   * random models (f32, q4, q2, GQA) at every depth: logits of a prefill and of a decode step;
//   * the fast decode step (CudaSessionOptions::fast, suite CudaFastStep) against the reference
//     step: fuse + pdl + pinned logits give the reference's bits token for token; with split
//     attention, greedy agreement by the near-tie rule and log-probabilities within tolerance,
//     on the bundled model (f32/q8/q4) and the d512 bench shape (f32/q8/q4); verification rows
//     still equal decode steps bit for bit.
// Skipped, saying so, without a usable CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "forward/cuda_backend.h"
#include "forward/cuda_forward.h"
#include "cuda/device_probe.h"
#include "cuda/greedy_agreement.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"
#include "test_util.h"
#include "tinyloop/tinyloop.h"

namespace {

namespace kc = tinyloop::kern::cuda;
using tinyloop::Backend;

const kc::DeviceProbe& probe() { return tltest::device_probe(); }

// Logits rows agree when max|diff| / max|ref| per row stays under this (f32 accumulation in a
// different order through up to ~40 layers; the CPU is the reference).
constexpr double kRowRelTol = 2e-3;

const std::string kDir = std::string(TL_SOURCE_DIR) + "/resources/models/tinyloop-kjv/";

// The CUDA back end computes with float activations, the CPU's reference numerics; the CPU's
// default int8-activation path for q8/q4 weights (kernels.h) adds its own quantization error.
// Parity is therefore checked against the CPU's float-activation kernels.
struct FloatActivations : ::testing::Environment {
    void SetUp() override { tinyloop::kern::set_int8_activations(false); }
};
const auto* const kFloatActivations = ::testing::AddGlobalTestEnvironment(new FloatActivations);

tinyloop::LoadOptions cpu() {
    tinyloop::LoadOptions o;
    o.backend = Backend::Cpu;
    return o;
}

void expect_rows_close(const std::vector<float>& got, const std::vector<float>& want, int n, int V, const std::string& what) {
    ASSERT_EQ(got.size(), size_t(n) * V);
    ASSERT_EQ(want.size(), size_t(n) * V);
    for (int r = 0; r < n; ++r) {
        double mr = 0, md = 0;
        for (int j = 0; j < V; ++j) {
            const double a = got[size_t(r) * V + j], b = want[size_t(r) * V + j];
            mr = std::max(mr, std::fabs(b));
            md = std::max(md, std::isfinite(a) ? std::fabs(a - b) : INFINITY);
        }
        EXPECT_LE(md / std::max(mr, 1e-30), kRowRelTol) << what << " row " << r << ": max|diff| " << md << " max|ref| " << mr;
    }
}

class BundledModel : public ::testing::TestWithParam<std::string> {};

TEST_P(BundledModel, GreedyAgreesWithCpuUpToANearTie) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle m = tinyloop::load_model_handle(kDir + GetParam(), cpu());
    const tinyloop::HParams& hp = tinyloop::model_hparams(m.get());
    const std::vector<int32_t> prompt = tinyloop::tokenize(m.get(), "In the beginning God created the heaven and the earth. And");
    const int n_new = 64;
    for (int L : {1, hp.default_loops, hp.max_loops}) {
        SCOPED_TRACE("loops " + std::to_string(L));
        tinyloop::GenerateConfig g;
        g.max_tokens = n_new;
        g.loops = L;
        g.temperature = 0.0f;
        g.ignore_eos = true;
        const std::vector<int32_t> all = tinyloop::generate(m.get(), prompt.data(), int(prompt.size()), g);
        ASSERT_EQ(all.size(), prompt.size() + n_new);  // the prompt, then the continuation
        // the CPU's trace: each token and the logits it was chosen from (one prefill of it all)
        const int V = hp.vocab_size;
        tltest::GreedyTrace want;
        want.tokens.assign(all.begin() + long(prompt.size()), all.end());
        const std::vector<float> z = tinyloop::forward_logits(m.get(), all.data(), int(all.size()) - 1, L);
        want.logits.assign(z.begin() + long(prompt.size() - 1) * V, z.end());

        tinyloop::CudaWeights w(*m.get(), probe().device);
        for (bool graph : {true, false}) {
            tinyloop::CudaSessionOptions o;
            o.loops = L;
            o.use_graph = graph;
            o.capacity = int(prompt.size()) + n_new;
            tinyloop::CudaSession s(w, o);
            tltest::GreedyTrace got;
            got.tokens = {s.prefill(prompt.data(), int(prompt.size()))};
            for (;;) {
                const std::vector<float> row = s.last_logits();
                got.logits.insert(got.logits.end(), row.begin(), row.end());
                if (int(got.tokens.size()) == n_new) break;
                got.tokens.push_back(s.decode(got.tokens.back()));
            }
            const tltest::GreedyAgreement a = tltest::compare_greedy(want, got, V);
            EXPECT_TRUE(a.ok) << (graph ? "graph-replayed" : "direct") << " decode: " << a.why;
            // a divergence is allowed only at a near tie; say where, so a run's log shows it
            if (a.diverged_at >= 0)
                std::printf("[ NOTE     ] loops %d %s: parted from the CPU at a near tie, step %d of %d\n", L,
                            graph ? "graph" : "direct", a.diverged_at, n_new);
            EXPECT_LE(a.max_logprob_diff, 5e-3);
        }
    }
}

TEST_P(BundledModel, PrefillLogitsWithinTolerance) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle m = tinyloop::load_model_handle(kDir + GetParam(), cpu());
    const tinyloop::HParams& hp = tinyloop::model_hparams(m.get());
    std::string text;
    while (text.size() < 600) text += "And God said, Let there be light: and there was light. ";
    std::vector<int32_t> toks = tinyloop::tokenize(m.get(), text);
    toks.resize(std::min<size_t>(toks.size(), 150));  // 64 + 64 rows through cuBLAS, 22 through the kernel
    const int n = int(toks.size()), V = hp.vocab_size;
    const std::vector<float> want = tinyloop::forward_logits(m.get(), toks.data(), n, hp.default_loops);
    tinyloop::CudaWeights w(*m.get(), probe().device);
    for (int gemm_min : {64, 1 << 30}) {
        tinyloop::CudaSessionOptions o;
        o.loops = hp.default_loops;
        o.gemm_min_tokens = gemm_min;
        tinyloop::CudaSession s(w, o);
        std::vector<float> got;
        s.prefill(toks.data(), n, &got);
        expect_rows_close(got, want, n, V, gemm_min == 64 ? "cuBLAS prefill" : "kernel prefill");
    }
}

// Verification rows equal decode steps bit for bit on the device (the property that makes
// speculative == greedy a test with ==): a chain of k drafted tokens run as one forward_rows
// gives each row the logits the graph-replayed decode step gave it, and a tree of two branches
// gives each branch the logits of that branch run as a chain.
TEST_P(BundledModel, VerificationRowsEqualDecodeSteps) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle m = tinyloop::load_model_handle(kDir + GetParam(), cpu());
    const tinyloop::HParams& hp = tinyloop::model_hparams(m.get());
    const int V = hp.vocab_size, k = 5;
    const std::vector<int32_t> prompt = tinyloop::tokenize(m.get(), "And the evening and the morning were");
    const int p = int(prompt.size());
    tinyloop::CudaWeights w(*m.get(), probe().device);
    // the reference step, and the fast one (split attention in decode and verification alike)
    for (const tinyloop::CudaFastPath fast : {tinyloop::CudaFastPath{}, tinyloop::CudaFastPath::all()}) {
    SCOPED_TRACE("fast path: " + tinyloop::describe(fast));
    tinyloop::CudaSessionOptions o;
    o.capacity = p + 2 * k + 4;
    o.fast = fast;

    // decode steps: inputs x[0..k), logits after each
    std::vector<int32_t> x;
    std::vector<float> step_logits;
    {
        tinyloop::CudaSession s(w, o);
        int32_t t = s.prefill(prompt.data(), p);
        for (int i = 0; i < k; ++i) {
            x.push_back(t);
            t = s.decode(t);
            const std::vector<float> l = s.last_logits();
            step_logits.insert(step_logits.end(), l.begin(), l.end());
        }
    }
    auto chain = [&](const std::vector<int32_t>& toks) {
        tinyloop::CudaSession s(w, o);
        s.prefill(prompt.data(), p);
        const int n = int(toks.size());
        std::vector<int> pos(n), b(n, 0), e(n);
        for (int i = 0; i < n; ++i) {
            pos[i] = p + i;
            e[i] = p + i + 1;
        }
        tinyloop::CudaRows r;
        r.tokens = toks.data();
        r.n = n;
        r.positions = pos.data();
        r.kv_begin = b.data();
        r.kv_end = e.data();
        std::vector<float> logits;
        s.forward_rows(r, logits);
        return logits;
    };
    const std::vector<float> verified = chain(x);
    ASSERT_EQ(verified.size(), step_logits.size());
    for (int i = 0; i < k; ++i)
        EXPECT_EQ(0, std::memcmp(verified.data() + size_t(i) * V, step_logits.data() + size_t(i) * V, size_t(V) * 4))
            << "verification row " << i << " differs from its decode step";

    // a tree: branch A = x[0], x[1]; branch B = y0, x[1] (both at positions p, p+1)
    const int32_t y0 = (x[0] + 1) % 256;
    const std::vector<int32_t> toks = {x[0], x[1], y0, x[1]};
    const std::vector<int> pos = {p, p + 1, p, p + 1}, rows = {p, p + 1, p + 2, p + 3}, b(4, 0), e(4, p);
    const std::vector<int> extra = {p, p, p + 1, p + 2, p + 2, p + 3}, offs = {0, 1, 3, 4, 6};
    tinyloop::CudaSession s(w, o);
    s.prefill(prompt.data(), p);
    tinyloop::CudaRows r;
    r.tokens = toks.data();
    r.n = 4;
    r.positions = pos.data();
    r.cache_rows = rows.data();
    r.kv_begin = b.data();
    r.kv_end = e.data();
    r.extra_rows = extra.data();
    r.extra_offsets = offs.data();
    std::vector<float> tree;
    s.forward_rows(r, tree);
    const std::vector<float> branch_b = chain({y0, x[1]});
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(0, std::memcmp(tree.data() + size_t(i) * V, step_logits.data() + size_t(i) * V, size_t(V) * 4))
            << "tree branch A row " << i;
        EXPECT_EQ(0, std::memcmp(tree.data() + size_t(2 + i) * V, branch_b.data() + size_t(i) * V, size_t(V) * 4))
            << "tree branch B row " << i;
    }
    }  // fast
}

INSTANTIATE_TEST_SUITE_P(Files, BundledModel,
                         ::testing::Values("model-f32.tinyloop", "model-q8.tinyloop", "model-q4.tinyloop"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                             return i.param.substr(6, i.param.find('.') - 6);
                         });

struct RandomCase {
    const char* name;
    tinyloop::DType dt;
    int group_size;
    tinyloop::LoopInput input = tinyloop::LoopInput::None;  // Add: input injection (FORMAT.md §1a)
};

class RandomModel : public ::testing::TestWithParam<RandomCase> {};

TEST_P(RandomModel, LogitsAtEveryDepth) {
    TL_REQUIRE_DEVICE();
    tinyloop::HParams hp = tltest::small_hparams();
    hp.loop_input = GetParam().input;
    const std::string path = tltest::write_random_model(std::string("cuda_") + GetParam().name + ".tinyloop", hp, 11,
                                                        GetParam().dt);
    tinyloop::ModelHandle m = tinyloop::load_model_handle(path, cpu());
    std::vector<int32_t> toks;
    for (int i = 0; i < 37; ++i) toks.push_back((i * 37 + 11) % 256);
    const int n = int(toks.size()), V = hp.vocab_size;
    tinyloop::CudaWeights w(*m.get(), probe().device);
    for (int L = 1; L <= hp.max_loops; ++L) {
        SCOPED_TRACE("loops " + std::to_string(L));
        const std::vector<float> want = tinyloop::forward_logits(m.get(), toks.data(), n, L);
        tinyloop::CudaSessionOptions o;
        o.loops = L;
        tinyloop::CudaSession s(w, o);
        std::vector<float> got;
        s.prefill(toks.data(), n - 1, &got);
        expect_rows_close(got, std::vector<float>(want.begin(), want.end() - V), n - 1, V, "prefill");
        // last_logits after a prefill that kept every row: the last row (not the chunk's first)
        const std::vector<float> last = s.last_logits();
        EXPECT_TRUE(std::equal(last.begin(), last.end(), got.end() - V)) << "last_logits is not the prefill's last row";
        s.decode(toks[n - 1]);
        expect_rows_close(s.last_logits(), std::vector<float>(want.end() - V, want.end()), 1, V, "decode step");
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RandomModel,
                         ::testing::Values(RandomCase{"f32", tinyloop::DType::F32, 32}, RandomCase{"q4", tinyloop::DType::Q4, 32},
                                           RandomCase{"q2", tinyloop::DType::Q2, 32}, RandomCase{"f16", tinyloop::DType::F16, 32},
                                           RandomCase{"f32_inject", tinyloop::DType::F32, 32, tinyloop::LoopInput::Add}),
                         [](const ::testing::TestParamInfo<RandomCase>& i) { return std::string(i.param.name); });

// ---- the fast decode step against the reference step ---------------------------------------

// A greedy run on one session: the prefill's pick, then n - 1 decode steps, each token with the
// logits it was chosen from (last_logits: the pinned copy when the fast step makes one).
tltest::GreedyTrace session_trace(const tinyloop::CudaWeights& w, tinyloop::CudaSessionOptions o,
                                  const std::vector<int32_t>& prompt, int n) {
    o.capacity = int(prompt.size()) + n;
    tinyloop::CudaSession s(w, o);
    tltest::GreedyTrace t;
    t.tokens = {s.prefill(prompt.data(), int(prompt.size()))};
    for (;;) {
        const std::vector<float> row = s.last_logits();
        t.logits.insert(t.logits.end(), row.begin(), row.end());
        if (int(t.tokens.size()) == n) break;
        t.tokens.push_back(s.decode(t.tokens.back()));
    }
    return t;
}

struct FastCase {
    const char* name;
    std::string path;  // empty: the d512 bench shape written at dtype
    tinyloop::DType dt = tinyloop::DType::F32;
};

std::string fast_case_model(const FastCase& c) {
    if (!c.path.empty()) return c.path;
    // the bench's random shape (check_on_gpu.sh: d_model=512, n_heads=8, d_ff=1408, vocab=4096,
    // n_pre=2, n_loop=2, loops=7)
    tinyloop::HParams hp = tltest::small_hparams();
    hp.d_model = 512;
    hp.n_heads = 8;
    hp.n_kv_heads = 8;
    hp.head_dim = 64;
    hp.d_ff = 1408;
    hp.vocab_size = 4096;
    hp.n_pre_blocks = 2;
    hp.n_loop_layers = 2;
    hp.default_loops = 7;
    hp.max_loops = 7;
    hp.max_seq_len = 1024;
    return tltest::write_random_model(std::string("fast_") + c.name + ".tinyloop", hp, 5, c.dt);
}

class CudaFastStep : public ::testing::TestWithParam<FastCase> {};

// The same tokens and, step for step, the same logits to the bit.
void expect_same_bits(const tltest::GreedyTrace& want, const tltest::GreedyTrace& got, int vocab,
                      const std::string& what) {
    EXPECT_EQ(got.tokens, want.tokens) << what;
    ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
    for (size_t i = 0; i < want.tokens.size(); ++i)
        ASSERT_EQ(0, std::memcmp(got.logits.data() + i * vocab, want.logits.data() + i * vocab, size_t(vocab) * 4))
            << what << ": step " << i << "'s logits differ";
}

// fuse (norms folded, q/k/v + RoPE + KV store in one launch, SwiGLU and residual epilogues),
// pdl and pinned logits change no bit: the same tokens and logits as the reference step, step
// for step, graph-replayed and direct, after a prompt longer than a prefill chunk.
TEST_P(CudaFastStep, FusedStepGivesTheReferenceBits) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle m = tinyloop::load_model_handle(fast_case_model(GetParam()), cpu());
    const tinyloop::HParams& hp = tinyloop::model_hparams(m.get());
    std::vector<int32_t> prompt;
    for (int i = 0; i < 70; ++i) prompt.push_back((i * 53 + 5) % 256);
    tinyloop::CudaWeights w(*m.get(), probe().device);
    tinyloop::CudaSessionOptions ref;
    ref.loops = hp.default_loops;
    ref.gemm_min_tokens = 1 << 30;  // the batch-invariant kernels for the prompt too: one cache, bit for bit
    const tltest::GreedyTrace want = session_trace(w, ref, prompt, 32);
    for (bool graph : {true, false}) {
        tinyloop::CudaSessionOptions o = ref;
        o.use_graph = graph;
        o.fast.fuse = o.fast.pdl = o.fast.pinned_logits = true;
        expect_same_bits(want, session_trace(w, o, prompt, 32), hp.vocab_size,
                         std::string(graph ? "graph" : "direct") + " against the reference step");
    }
}

// The whole fast step (split attention too): greedy tokens by the near-tie rule and
// log-probabilities within tolerance of the reference step, at the shallowest and deepest depth,
// over 96 tokens after a 300-token prompt (each of the 16 splits then holds ~25 rows).
TEST_P(CudaFastStep, WholeFastStepAgreesWithTheReferenceUpToANearTie) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle m = tinyloop::load_model_handle(fast_case_model(GetParam()), cpu());
    const tinyloop::HParams& hp = tinyloop::model_hparams(m.get());
    std::vector<int32_t> prompt;
    for (int i = 0; i < 300; ++i) prompt.push_back((i * 131 + 7) % 256);
    tinyloop::CudaWeights w(*m.get(), probe().device);
    for (int L : {1, hp.max_loops}) {
        SCOPED_TRACE("loops " + std::to_string(L));
        tinyloop::CudaSessionOptions ref;
        ref.loops = L;
        const tltest::GreedyTrace want = session_trace(w, ref, prompt, 96);
        tinyloop::CudaSessionOptions o = ref;
        o.fast = tinyloop::CudaFastPath::all();
        const tltest::GreedyTrace got = session_trace(w, o, prompt, 96);
        const tltest::GreedyAgreement a = tltest::compare_greedy(want, got, hp.vocab_size);
        EXPECT_TRUE(a.ok) << a.why;
        EXPECT_GT(a.compared, 0);
        if (a.diverged_at >= 0)
            std::printf("[ NOTE     ] %s loops %d: the fast step parted from the reference at a near tie, step %d\n",
                        GetParam().name, L, a.diverged_at);
        EXPECT_LE(a.max_logprob_diff, 1e-3);
    }
}

// persist (the fused launches as phases of one cooperative kernel, grid barriers between them)
// changes no bit: with fuse alone (the reference attention launched between the phases: a
// flush per layer) it gives the reference step's bits, and with every part the fast step's,
// step for step, graph-replayed and direct; the captured step holds a handful of nodes (the
// embedding, the cooperative kernel, the argmax and its copies) instead of ~86.
TEST_P(CudaFastStep, PersistentStepGivesTheFastStepsBits) {
    TL_REQUIRE_DEVICE();
    tinyloop::ModelHandle m = tinyloop::load_model_handle(fast_case_model(GetParam()), cpu());
    const tinyloop::HParams& hp = tinyloop::model_hparams(m.get());
    std::vector<int32_t> prompt;
    for (int i = 0; i < 300; ++i) prompt.push_back((i * 131 + 7) % 256);
    tinyloop::CudaWeights w(*m.get(), probe().device);
    auto same_bits = [&](const tltest::GreedyTrace& want, const tltest::GreedyTrace& got, const std::string& what) {
        expect_same_bits(want, got, hp.vocab_size, what);
    };
    for (int L : {1, hp.max_loops}) {
        tinyloop::CudaSessionOptions ref;
        ref.loops = L;
        ref.gemm_min_tokens = 1 << 30;
        tinyloop::CudaSessionOptions fused = ref;
        fused.fast.fuse = true;
        tinyloop::CudaSessionOptions fast = ref;
        fast.fast = tinyloop::CudaFastPath::all();
        const tltest::GreedyTrace want_ref = session_trace(w, ref, prompt, 48);
        const tltest::GreedyTrace want_fast = session_trace(w, fast, prompt, 48);
        for (bool graph : {true, false}) {
            const std::string at = "loops " + std::to_string(L) + (graph ? ", graph" : ", direct");
            tinyloop::CudaSessionOptions o = fused;
            o.use_graph = graph;
            o.fast.persist = true;
            same_bits(want_ref, session_trace(w, o, prompt, 48), "fuse+persist vs the reference, " + at);
            o = fast;
            o.use_graph = graph;
            o.fast.persist = true;
            same_bits(want_fast, session_trace(w, o, prompt, 48), "all+persist vs all, " + at);
        }
    }
    tinyloop::CudaSessionOptions o;
    o.loops = hp.max_loops;
    o.capacity = 64;
    o.fast = tinyloop::CudaFastPath::persistent();
    tinyloop::CudaSession s(w, o);
    int32_t t = s.prefill(prompt.data(), 8);
    t = s.decode(t);
    s.decode(t);
    EXPECT_LE(s.step_nodes(), 8u) << "the persistent step's graph";
    std::printf("[ NOTE     ] %s: the persistent step's graph holds %zu nodes\n", GetParam().name, s.step_nodes());
}

INSTANTIATE_TEST_SUITE_P(Models, CudaFastStep,
                         ::testing::Values(FastCase{"kjv_f32", kDir + "model-f32.tinyloop"},
                                           FastCase{"kjv_q8", kDir + "model-q8.tinyloop"},
                                           FastCase{"kjv_q4", kDir + "model-q4.tinyloop"},
                                           FastCase{"d512_f32", "", tinyloop::DType::F32},
                                           FastCase{"d512_q8", "", tinyloop::DType::Q8},
                                           FastCase{"d512_q4", "", tinyloop::DType::Q4}),
                         [](const ::testing::TestParamInfo<FastCase>& i) { return std::string(i.param.name); });

// The engine's calls take the fast step from TINYLOOP_CUDA_FAST; a value that names no part is
// refused with the variable named, never ignored.
TEST(CudaFastSwitchOnDevice, TheEnvironmentSwitchReachesGenerate) {
    TL_REQUIRE_DEVICE();
    tinyloop::LoadOptions lo;
    lo.backend = Backend::Cuda;
    tinyloop::ModelHandle m = tinyloop::load_model_handle(kDir + "model-q4.tinyloop", lo);
    const std::vector<int32_t> prompt = tinyloop::tokenize(m.get(), "And God said");
    tinyloop::GenerateConfig g;
    g.max_tokens = 16;
    g.temperature = 0.0f;
    g.ignore_eos = true;
    ::setenv("TINYLOOP_CUDA_FAST", "fuse,pinned", 1);
    const std::vector<int32_t> fused = tinyloop::generate(m.get(), prompt.data(), int(prompt.size()), g);
    ::setenv("TINYLOOP_CUDA_FAST", "0", 1);
    const std::vector<int32_t> plain = tinyloop::generate(m.get(), prompt.data(), int(prompt.size()), g);
    EXPECT_EQ(fused, plain) << "fuse and pinned change no bit, so not the greedy tokens";
    ::setenv("TINYLOOP_CUDA_FAST", "fuse,warp", 1);
    try {
        tinyloop::generate(m.get(), prompt.data(), int(prompt.size()), g);
        ADD_FAILURE() << "TINYLOOP_CUDA_FAST=fuse,warp was accepted";
    } catch (const tinyloop::Error& e) {
        EXPECT_EQ(e.code(), tinyloop::ErrorCode::InvalidArgument) << e.what();
        EXPECT_NE(std::string(e.what()).find("TINYLOOP_CUDA_FAST"), std::string::npos) << e.what();
    }
    ::unsetenv("TINYLOOP_CUDA_FAST");
}

// The capture rules (kernels/cuda/capture_rules.h, tested on a strict fake in test_cuda_host)
// hold on the real Context: an allocation, an upload or a synchronisation while a step is being
// captured throws at the call, naming it, and the capture can still be ended and used.
TEST(CudaForward, CaptureRulesHoldOnTheRealContext) {
    TL_REQUIRE_DEVICE();
    kc::Context ctx(probe().device);
    kc::DeviceBuffer a(ctx, 64 * sizeof(int));
    const int one[1] = {1};
    ctx.begin_capture();
    EXPECT_THROW(kc::DeviceBuffer(ctx, 64), kc::CudaError);
    EXPECT_THROW(ctx.upload(a.get(), one, sizeof one), kc::CudaError);
    EXPECT_THROW(ctx.synchronize(), kc::CudaError);
    try {
        ctx.begin_capture();
        ADD_FAILURE() << "a nested begin_capture did not throw";
    } catch (const kc::CudaError& e) {
        EXPECT_NE(std::string(e.what()).find("already capturing"), std::string::npos) << e.what();
    }
    ctx.stage_ints(a.i32(), 1);  // recorded, not run
    kc::Graph g = ctx.end_capture();
    ctx.upload(a.get(), one, sizeof one);
    ctx.launch(g);
    ctx.synchronize();
    EXPECT_EQ(ctx.staged()[0], 1);
}

// Out of device memory reaches the engine as Error(OutOfMemory), naming what was allocated,
// and the weights stay usable afterwards.
TEST(CudaForward, OutOfDeviceMemoryIsAnEngineError) {
    TL_REQUIRE_DEVICE();
    const tinyloop::HParams hp = tltest::small_hparams();
    tinyloop::ModelHandle m = tinyloop::load_model_handle(tltest::write_random_model("cuda_oom.tinyloop", hp, 3), cpu());
    tinyloop::CudaWeights w(*m.get(), probe().device);
    try {
        tinyloop::with_cuda_errors("huge buffer", [&] {
            kc::Context ctx(probe().device);
            kc::DeviceBuffer b(ctx, size_t{1} << 50);
        });
        FAIL() << "a 1 PiB device allocation succeeded";
    } catch (const tinyloop::Error& e) {
        EXPECT_EQ(e.code(), tinyloop::ErrorCode::OutOfMemory) << e.what();
        EXPECT_NE(std::string(e.what()).find("huge buffer"), std::string::npos) << e.what();
    }
    tinyloop::CudaSession s(w, {});
    const int32_t t[3] = {1, 2, 3};
    const int32_t next = s.prefill(t, 3);
    EXPECT_GE(next, 0);
    EXPECT_LT(next, hp.vocab_size);
}

}  // namespace
