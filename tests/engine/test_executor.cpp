// The executor (engine/src/forward/executor.h): the rule of backend auto (one back end for a whole
// call, from every op it needs), the one place an op a back end lacks is refused, and the CPU
// executor's primitives against the public calls written over them (decode, forward_logits).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "forward/executor.h"
#include "model/model.h"
#include "test_util.h"

using namespace tinyloop;

namespace {

const std::string kF32 = TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-f32.tinyloop";

Model* bundled() {
    static tinyloop::ModelHandle m = tinyloop::load_model_handle(kF32);
    return m.get();
}

}  // namespace

TEST(ExecutorRule, AutoRunsAWholeCallOnOneBackEnd) {
    // Weights on the device, backend auto: the device only when it runs every op of the call.
    EXPECT_EQ(choose_executor(true, false, {ExecOp::Decode}), ExecKind::Cuda);
    EXPECT_EQ(choose_executor(true, false, {ExecOp::SequenceLogits}), ExecKind::Cuda);
    // Greedy steps the device has plus speculation it lacks: all of it on the CPU, never a mix.
    EXPECT_EQ(choose_executor(true, false, {ExecOp::Decode, ExecOp::ChainSpeculation}), ExecKind::Cpu);
    EXPECT_EQ(choose_executor(true, false, {ExecOp::Decode, ExecOp::EarlyExit}), ExecKind::Cpu);
    EXPECT_EQ(choose_executor(true, false, {ExecOp::SequenceLogits, ExecOp::Int8Cache}), ExecKind::Cpu);
    // Weights on the host: the CPU, whatever the call needs.
    EXPECT_EQ(choose_executor(false, false, {ExecOp::Decode}), ExecKind::Cpu);
    EXPECT_EQ(choose_executor(false, true, {ExecOp::BeamSearch}), ExecKind::Cpu);
}

TEST(ExecutorRule, BackendCudaRefusesAMissingOpNamingItAndTheBackEnd) {
    EXPECT_EQ(choose_executor(true, true, {ExecOp::Decode}), ExecKind::Cuda);
    try {
        choose_executor(true, true, {ExecOp::Decode, ExecOp::BeamSearch});
        FAIL() << "backend cuda ran a call with beam search";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::NotSupported);
        const std::string msg = e.what();
        EXPECT_NE(msg.find("beam search"), std::string::npos) << msg;
        EXPECT_NE(msg.find("CUDA back end"), std::string::npos) << msg;
    }
}

TEST(ExecutorRule, TheCpuRunsEveryOpAndTheDeviceItsRows) {
    for (int i = 0; i < static_cast<int>(ExecOp::Count); ++i) {
        const auto op = static_cast<ExecOp>(i);
        EXPECT_TRUE(exec_supports(ExecKind::Cpu, op)) << exec_op_name(op);
        EXPECT_NE(std::string(exec_op_name(op)), "?");
    }
    EXPECT_TRUE(exec_supports(ExecKind::Cuda, ExecOp::Decode));
    EXPECT_FALSE(exec_supports(ExecKind::Cuda, ExecOp::TreeSpeculation));
    EXPECT_FALSE(exec_supports(ExecKind::Cuda, ExecOp::HostForward));
}

TEST(ExecutorRule, AModelsBlockKindsAndPassFeaturesChooseTheBackEndAtLoad) {
    // FORMAT.md §1's pre-norm block: nothing beyond what every back end runs.
    EXPECT_TRUE(model_math_ops(bundled()->hp).empty());
    HParams hp = bundled()->hp;
    hp.block = BlockKind::SandwichSum;
    hp.qk_bias = true;
    const std::vector<ExecOp> ops = model_math_ops(hp);
    EXPECT_EQ(ops, (std::vector<ExecOp>{ExecOp::SandwichNorms, ExecOp::QkBias}));
    // The device lacks them: auto loads such a model on the CPU, backend cuda refuses naming the kind.
    EXPECT_EQ(choose_executor(true, false, ops), ExecKind::Cpu);
    try {
        choose_executor(true, true, ops);
        FAIL() << "backend cuda accepted sandwich norms";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("sandwich"), std::string::npos) << e.what();
    }
}

TEST(ExecutorCpu, ACallUnderAutoReportsOneBackEnd) {
    ModelHandle h = load_model_handle(kF32, LoadOptions{.backend = Backend::Auto});
    const Model& m = *h.get();
    const std::string loaded = model_info(h.get()).backend;
    // Every call's executor is the loaded back end or, for a call the device lacks an op of, the
    // CPU for the whole of it.
    EXPECT_EQ(run_executor(m, {ExecOp::Decode})->name(), loaded);
    EXPECT_EQ(run_executor(m, {ExecOp::SequenceLogits})->name(), loaded);
    EXPECT_STREQ(run_executor(m, {ExecOp::Decode, ExecOp::TreeSpeculation})->name(), "cpu");
    EXPECT_NO_THROW(require_host(m, {ExecOp::Batch}));
}

TEST(ExecutorCpu, GreedyOverTheSequencePrimitivesEqualsGenerate) {
    Model* mp = bundled();
    const Model& m = *mp;
    const std::vector<int32_t> prompt = tokenize(mp, "And God said, Let there be light: and there was");
    GenerateConfig c;
    c.max_tokens = 16;
    c.loops = 3;
    c.temperature = 0.0f;
    c.ignore_eos = true;
    // generate's tokens: the prompt, then the generated ones.
    const std::vector<int32_t> all = generate(mp, prompt.data(), static_cast<int>(prompt.size()), c);
    ASSERT_EQ(all.size(), prompt.size() + static_cast<size_t>(c.max_tokens));
    const std::vector<int32_t> want(all.begin() + static_cast<std::ptrdiff_t>(prompt.size()), all.end());

    const std::unique_ptr<Executor> ex = make_cpu_executor(m);
    const int n = static_cast<int>(prompt.size());
    const auto seq = ex->sequence({.loops = 3, .capacity = n + c.max_tokens});
    ASSERT_NE(seq->host(), nullptr);
    std::vector<float> logits(static_cast<size_t>(m.hp.vocab_size));
    std::vector<int32_t> got;
    seq->run(prompt.data(), n, 0, nullptr);
    for (int i = 0; i < c.max_tokens; ++i) {
        seq->last_logits(logits.data());
        got.push_back(argmax(logits.data(), std::min(m.hp.vocab_size, m.tokenizer.n_ids())));
        if (i + 1 < c.max_tokens) seq->run(&got.back(), 1, n + i, nullptr);
    }
    EXPECT_EQ(got, want);

    // Every row's logits of a sequence: forward_logits' bits.
    const std::vector<float> rows = ex->sequence_logits(prompt.data(), n, 3, KVCacheType::F32);
    EXPECT_EQ(rows, forward_logits(mp, prompt.data(), n, 3));
}
