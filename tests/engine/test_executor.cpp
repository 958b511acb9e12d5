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

// On the CPU whatever the machine has: these tests compare the CPU executor's primitives with
// the public calls, which with backend auto would run on a CUDA device where there is one.
Model* bundled() {
    static tinyloop::ModelHandle m = tinyloop::load_model_handle(kF32, LoadOptions{.backend = Backend::Cpu});
    return m.get();
}

}  // namespace

TEST(ExecutorRule, AutoRunsAWholeCallOnOneBackEnd) {
    // Weights on the device, backend auto: the device only when it runs every op of the call.
    EXPECT_EQ(choose_executor(true, false, {ExecOp::Decode}), ExecKind::Cuda);
    EXPECT_EQ(choose_executor(true, false, {ExecOp::SequenceLogits}), ExecKind::Cuda);
    // Steps the device has plus an op it lacks (every pass's states kept on the host, kv_sharing's
    // layouts): all of it on the CPU, never a mix.
    EXPECT_EQ(choose_executor(true, false, {ExecOp::Decode, ExecOp::KVSharing}), ExecKind::Cpu);
    // The batch engine runs on the device (cuda_batch.cpp), but not beside a coda (its rows would
    // read coda keys and values of several depths): then the whole engine is the CPU's.
    EXPECT_EQ(choose_executor(true, false, {ExecOp::Batch}), ExecKind::Cuda);
    EXPECT_EQ(choose_executor(true, false, {ExecOp::Batch, ExecOp::Int8Cache}), ExecKind::Cuda);
    EXPECT_EQ(choose_executor(true, false, {ExecOp::Batch, ExecOp::Coda}), ExecKind::Cpu);
    EXPECT_EQ(choose_executor(true, false, {ExecOp::Decode, ExecOp::EarlyExit, ExecOp::PassStates}), ExecKind::Cpu);
    // Early exit the device has (its row stepper): decoding with it stays there.
    EXPECT_EQ(choose_executor(true, false, {ExecOp::Decode, ExecOp::EarlyExit}), ExecKind::Cuda);
    EXPECT_EQ(choose_executor(true, false, {ExecOp::SequenceLogits, ExecOp::PassStates}), ExecKind::Cpu);
    // Weights on the host: the CPU, whatever the call needs.
    EXPECT_EQ(choose_executor(false, false, {ExecOp::Decode}), ExecKind::Cpu);
    EXPECT_EQ(choose_executor(false, true, {ExecOp::BeamSearch}), ExecKind::Cpu);
}

TEST(ExecutorRule, BackendCudaRefusesAMissingOpNamingItAndTheBackEnd) {
    EXPECT_EQ(choose_executor(true, true, {ExecOp::Decode}), ExecKind::Cuda);
    try {
        choose_executor(true, true, {ExecOp::SequenceLogits, ExecOp::PassStates});
        FAIL() << "backend cuda ran a call keeping every pass's states";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::NotSupported);
        const std::string msg = e.what();
        EXPECT_NE(msg.find("per-pass states"), std::string::npos) << msg;
        EXPECT_NE(msg.find("CUDA back end"), std::string::npos) << msg;
    }
    // Beam search forks device sessions (CudaSequence::fork), KV provenance is the decode loop's
    // own record, an INT8 cache the device's codes and scales: each runs there.
    EXPECT_EQ(choose_executor(true, true, {ExecOp::Decode, ExecOp::BeamSearch}), ExecKind::Cuda);
    EXPECT_EQ(choose_executor(true, true, {ExecOp::Decode, ExecOp::KVProvenance}), ExecKind::Cuda);
    EXPECT_EQ(choose_executor(true, true, {ExecOp::SequenceLogits, ExecOp::Int8Cache}), ExecKind::Cuda);
    // The batch engine's one call (create_batch_engine asks for ExecOp::Batch and the model's
    // math): the device's, except on a coda model, where backend cuda refuses it naming both.
    EXPECT_EQ(choose_executor(true, true, {ExecOp::Batch}), ExecKind::Cuda);
    try {
        choose_executor(true, true, {ExecOp::Batch, ExecOp::Coda});
        FAIL() << "backend cuda ran the batch engine on a coda model";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::NotSupported);
        EXPECT_NE(std::string(e.what()).find("the batch engine"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("coda"), std::string::npos) << e.what();
    }
}

TEST(ExecutorRule, TheCpuRunsEveryOpAndTheDeviceItsRows) {
    for (int i = 0; i < static_cast<int>(ExecOp::Count); ++i) {
        const auto op = static_cast<ExecOp>(i);
        EXPECT_TRUE(exec_supports(ExecKind::Cpu, op)) << exec_op_name(op);
        EXPECT_NE(std::string(exec_op_name(op)), "?");
    }
    EXPECT_TRUE(exec_supports(ExecKind::Cuda, ExecOp::Decode));
    EXPECT_TRUE(exec_supports(ExecKind::Cuda, ExecOp::EarlyExit));
    EXPECT_TRUE(exec_supports(ExecKind::Cuda, ExecOp::TreeSpeculation));
    EXPECT_TRUE(exec_supports(ExecKind::Cuda, ExecOp::DraftSpeculation));
    EXPECT_TRUE(exec_supports(ExecKind::Cuda, ExecOp::PipelinedSpeculation));
    EXPECT_FALSE(exec_supports(ExecKind::Cuda, ExecOp::HostForward));
    EXPECT_TRUE(exec_supports(ExecKind::Cuda, ExecOp::Batch));
    EXPECT_FALSE(exec_supports_together(ExecKind::Cuda, ExecOp::Batch, ExecOp::Coda));
    EXPECT_FALSE(exec_supports(ExecKind::Cuda, ExecOp::KVSharing));
}

TEST(ExecutorRule, AModelsBlockKindsAndPassFeaturesChooseTheBackEndAtLoad) {
    // FORMAT.md §1's pre-norm block: nothing beyond what every back end runs.
    EXPECT_TRUE(model_math_ops(bundled()->hp).empty());
    // Ouro's shape (sandwich_branch blocks, the norm after every pass, the exit gate): the device
    // runs it (the one forward on CudaOps; the gate read on the host from the downloaded states).
    HParams ouro = bundled()->hp;
    ouro.block = BlockKind::SandwichBranch;
    ouro.pass_norm = true;
    ouro.exit_gate = true;
    const std::vector<ExecOp> o_ops = model_math_ops(ouro);
    EXPECT_EQ(o_ops, (std::vector<ExecOp>{ExecOp::SandwichNorms, ExecOp::PassNorm, ExecOp::ExitGate}));
    EXPECT_EQ(choose_executor(true, false, o_ops), ExecKind::Cuda);
    EXPECT_EQ(choose_executor(true, true, o_ops), ExecKind::Cuda);
    // Huginn's: sandwich_sum, qk_bias, embed_scale, the adapter from a seeded state, and coda blocks.
    HParams huginn = bundled()->hp;
    huginn.block = BlockKind::SandwichSum;
    huginn.qk_bias = true;
    huginn.embed_scale = 8.0f;
    huginn.loop_input = LoopInput::Adapter;
    huginn.state_init.kind = StateInit::Kind::TruncNormal;
    const std::vector<ExecOp> h_ops = model_math_ops(huginn);
    EXPECT_EQ(h_ops, (std::vector<ExecOp>{ExecOp::SandwichNorms, ExecOp::QkBias, ExecOp::EmbedScale, ExecOp::Adapter,
                                          ExecOp::StateInit}));
    EXPECT_EQ(choose_executor(true, true, h_ops), ExecKind::Cuda);
    // With its coda: the device runs the model's whole-sequence calls (the coda after the last
    // pass), not those that stop or read out between passes. auto runs such a call on the CPU,
    // backend cuda refuses it naming the call and the coda.
    huginn.n_coda_blocks = 2;
    const std::vector<ExecOp> c_ops = model_math_ops(huginn);
    EXPECT_NE(std::find(c_ops.begin(), c_ops.end(), ExecOp::Coda), c_ops.end());
    EXPECT_EQ(choose_executor(true, true, c_ops), ExecKind::Cuda);
    for (ExecOp call : {ExecOp::Decode, ExecOp::SequenceLogits, ExecOp::Int8Cache, ExecOp::KVProvenance}) {
        std::vector<ExecOp> needs{call};
        needs.insert(needs.end(), c_ops.begin(), c_ops.end());
        EXPECT_EQ(choose_executor(true, true, needs), ExecKind::Cuda) << exec_op_name(call);
    }
    for (ExecOp call : {ExecOp::EarlyExit, ExecOp::ChainSpeculation, ExecOp::TreeSpeculation, ExecOp::PassReadouts,
                        ExecOp::CacheImport}) {
        std::vector<ExecOp> needs{ExecOp::Decode, call};
        needs.insert(needs.end(), c_ops.begin(), c_ops.end());
        EXPECT_EQ(choose_executor(true, false, needs), ExecKind::Cpu) << exec_op_name(call);
        try {
            choose_executor(true, true, needs);
            ADD_FAILURE() << "backend cuda accepted " << exec_op_name(call) << " on a coda model";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::NotSupported);
            const std::string what = e.what();
            EXPECT_NE(what.find(exec_op_name(call)), std::string::npos) << what;
            EXPECT_NE(what.find("coda"), std::string::npos) << what;
        }
        // apart, the device runs each
        EXPECT_TRUE(exec_supports(ExecKind::Cuda, call));
        EXPECT_TRUE(exec_supports_together(ExecKind::Cpu, call, ExecOp::Coda));
    }
    // Decoding watched by an observer reads the exit gate through the per-pass hooks, which the
    // device has (decode.cpp asks for PassReadouts); keeping every pass's states (PassStates) it lacks.
    EXPECT_TRUE(exec_supports(ExecKind::Cuda, ExecOp::PassReadouts));
    EXPECT_FALSE(exec_supports(ExecKind::Cuda, ExecOp::PassStates));
}

TEST(ExecutorCpu, ACallUnderAutoReportsOneBackEnd) {
    ModelHandle h = load_model_handle(kF32, LoadOptions{.backend = Backend::Auto});
    const Model& m = *h.get();
    const std::string loaded = model_info(h.get()).backend;
    // Every call's executor is the loaded back end or, for a call the device lacks an op of, the
    // CPU for the whole of it.
    EXPECT_EQ(run_executor(m, {ExecOp::Decode})->name(), loaded);
    EXPECT_EQ(run_executor(m, {ExecOp::SequenceLogits})->name(), loaded);
    EXPECT_STREQ(run_executor(m, {ExecOp::SequenceLogits, ExecOp::PassStates})->name(), "cpu");
    EXPECT_NO_THROW(require_host(m, {ExecOp::KVSharing}));
    // The batch engine asks for its executor like any call: the loaded back end (the device runs
    // it, cuda_batch.cpp), whose batch keeps its pools' rows where it reads them.
    const auto be = run_executor(m, {ExecOp::Batch});
    EXPECT_EQ(be->name(), loaded);
    const auto batch = be->batch();
    ASSERT_NE(batch, nullptr);
    EXPECT_EQ(batch->pages_on_host(), loaded == "cpu");
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

// ---------------------------------------------------------------------------------------------
// The sequence primitives the algorithms above the executor are written over (run_passes,
// logits, row, import_prefix, set_last_state), on the bundled model and on random models whose
// passes carry state beyond h: input injection ("add", §1a) and Huginn's adapter with a coda (§1b).

namespace {

struct Variant {
    const char* name;
    HParams hp;
};

std::vector<Variant> variants() {
    HParams add = tltest::small_hparams();
    add.loop_input = LoopInput::Add;
    HParams huginn = tltest::small_hparams();
    huginn.block = BlockKind::SandwichSum;
    huginn.qk_bias = true;
    huginn.n_coda_blocks = 2;
    huginn.loop_input = LoopInput::Adapter;
    huginn.n_kv_heads = huginn.n_heads;
    return {{"add", add}, {"huginn_coda", huginn}};
}

// The bundled model and each variant, loaded once (the handles free them at exit: LeakSanitizer
// reports a model a raw pointer kept past the statics' destruction).
std::vector<std::pair<std::string, Model*>> models() {
    static std::vector<ModelHandle> owned;
    static std::vector<std::pair<std::string, Model*>> all = [] {
        std::vector<std::pair<std::string, Model*>> v{{"kjv", bundled()}};
        for (const Variant& x : variants()) {
            owned.push_back(load_model_handle(tltest::write_random_model(std::string("exec_") + x.name + ".tinyloop", x.hp, 5)));
            v.emplace_back(x.name, owned.back().get());
        }
        return v;
    }();
    return all;
}

std::vector<int32_t> some_tokens(const Model& m, int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((37 * i + 11) % std::min(256, m.hp.vocab_size));
    return t;
}

}  // namespace

TEST(ExecutorPrimitives, PassesOneToPThenPPlusOneToLFromTheKeptStatesEqualOneRun) {
    for (const auto& [name, mp] : models()) {
        const Model& m = *mp;
        const int L = 4, n = 7, d = m.hp.d_model, V = m.hp.vocab_size;
        const std::vector<int32_t> tok = some_tokens(m, n);
        const auto ex = make_cpu_executor(m);
        const auto whole = ex->sequence({.loops = L, .capacity = n});
        whole->run_passes({.tokens = tok.data(), .n = n, .pos0 = 0});
        std::vector<float> want(static_cast<size_t>(n) * V);
        whole->logits(0, n, want.data());
        for (int p = 1; p < L; ++p) {
            const auto split = ex->sequence({.loops = L, .capacity = n});
            std::vector<float> h(static_cast<size_t>(n) * d), e(injects_input(m.hp) ? static_cast<size_t>(n) * d : 0);
            split->run_passes({.tokens = tok.data(), .n = n, .pos0 = 0, .first = 1, .last = p, .out_h = h.data(),
                               .out_e = e.empty() ? nullptr : e.data()});
            split->run_passes({.tokens = tok.data(), .n = n, .pos0 = 0, .first = p + 1, .last = L, .h_in = h.data(),
                               .e_in = e.empty() ? nullptr : e.data()});
            std::vector<float> got(static_cast<size_t>(n) * V);
            split->logits(0, n, got.data());
            EXPECT_EQ(got, want) << name << ": passes 1.." << p << " then " << p + 1 << ".." << L;
        }
        // The rows' logits are sequence_logits' (forward_logits') bits, and run()'s last row.
        EXPECT_EQ(want, ex->sequence_logits(tok.data(), n, L, KVCacheType::F32)) << name;
        const auto plain = ex->sequence({.loops = L, .capacity = n});
        plain->run(tok.data(), n, 0, nullptr);
        std::vector<float> last(static_cast<size_t>(V));
        plain->last_logits(last.data());
        EXPECT_TRUE(std::equal(last.begin(), last.end(), want.end() - V)) << name;
    }
}

TEST(ExecutorPrimitives, ARowRunPassByPassEqualsTheFullDepthStep) {
    for (const auto& [name, mp] : models()) {
        const Model& m = *mp;
        const int L = 4, n = 6, V = m.hp.vocab_size;
        const std::vector<int32_t> tok = some_tokens(m, n);
        const auto ex = make_cpu_executor(m);
        const auto ref = ex->sequence({.loops = L, .capacity = n});
        const auto rows = ex->sequence({.loops = L, .capacity = n});
        std::vector<float> want(static_cast<size_t>(V)), got(static_cast<size_t>(V));
        for (int p = 0; p < n; ++p) {
            ref->run(&tok[static_cast<size_t>(p)], 1, p, nullptr);
            ref->last_logits(want.data());
            ExecRow& row = rows->row(0);
            row.begin(tok[static_cast<size_t>(p)], p);
            for (int pass = 1; pass <= L; ++pass) row.pass(pass);
            row.finish();
            rows->last_logits(got.data());
            ASSERT_EQ(got, want) << name << " position " << p;
        }
    }
}

TEST(ExecutorPrimitives, AnExitedRowsPropagatedKeysAreThoseOfItsFrozenStateInEveryDeeperPass) {
    // A row that exits at e < L writes, for every loop layer of passes e+1..L, the keys/values of
    // its frozen state h_e (as those passes take it in, §1a). With one loop layer per pass that is
    // what running each deeper pass from h_e writes, so a later position, which reads those
    // rows, sees the same logits either way.
    for (const bool add : {false, true}) {
        HParams hp = tltest::small_hparams();
        hp.n_loop_layers = 1;
        if (add) hp.loop_input = LoopInput::Add;
        ModelHandle h = load_model_handle(tltest::write_random_model(add ? "exec_prop_add.tinyloop" : "exec_prop.tinyloop", hp, 9));
        const Model& m = *h.get();
        const int L = 4, e = 2, d = m.hp.d_model, V = m.hp.vocab_size;
        const std::vector<int32_t> tok = some_tokens(m, 2);
        const auto ex = make_cpu_executor(m);
        const auto a = ex->sequence({.loops = L, .capacity = 2});
        const auto b = ex->sequence({.loops = L, .capacity = 2});
        ExecRow& ra = a->row(0);
        ra.begin(tok[0], 0);
        for (int pass = 1; pass <= e; ++pass) ra.pass(pass);
        ra.propagate(e, L);
        ra.finish();
        ExecRow& rb = b->row(0);
        rb.begin(tok[0], 0);
        for (int pass = 1; pass <= e; ++pass) rb.pass(pass);
        const std::vector<float> h_e(rb.state(), rb.state() + d);
        for (int pass = e + 1; pass <= L; ++pass) {
            rb.set_state(h_e.data());  // every deeper pass takes the frozen state in
            rb.pass(pass);
        }
        std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(V));
        a->run(&tok[1], 1, 1, nullptr);
        b->run(&tok[1], 1, 1, nullptr);
        a->last_logits(la.data());
        b->last_logits(lb.data());
        EXPECT_EQ(la, lb) << (add ? "add" : "plain");
        // Without the propagation the deeper layers hold nothing: the next position reads otherwise.
        const auto c = ex->sequence({.loops = L, .capacity = 2});
        ExecRow& rc = c->row(0);
        rc.begin(tok[0], 0);
        for (int pass = 1; pass <= e; ++pass) rc.pass(pass);
        rc.finish();
        c->run(&tok[1], 1, 1, nullptr);
        c->last_logits(lb.data());
        EXPECT_NE(la, lb);
    }
}

TEST(ExecutorPrimitives, AnImportedPrefixThenTheRestEqualsAFreshRun) {
    for (const auto& [name, mp] : models()) {
        const Model& m = *mp;
        const int L = 3, n = 9, d = m.hp.d_model, V = m.hp.vocab_size;
        const std::vector<int32_t> tok = some_tokens(m, n);
        const auto ex = make_cpu_executor(m);
        const auto fresh = ex->sequence({.loops = L, .capacity = n});
        fresh->run(tok.data(), n, 0, nullptr);
        std::vector<float> want(static_cast<size_t>(V)), got(static_cast<size_t>(V));
        fresh->last_logits(want.data());
        for (int cached : {1, 5, n - 1}) {
            const auto resumed = ex->sequence({.loops = L, .capacity = n});
            resumed->import_prefix(*fresh, cached);
            resumed->run(tok.data() + cached, n - cached, cached, nullptr);
            resumed->last_logits(got.data());
            EXPECT_EQ(got, want) << name << ": " << cached << " positions imported";
        }
        // A wholly cached prompt: the kept last state (the last row's readout input) is the last row.
        std::vector<float> r(static_cast<size_t>(L) * d);
        const PassHook keep = last_row_hook(r, d);
        const auto states = ex->sequence({.loops = L, .capacity = n});
        states->run(tok.data(), n, 0, &keep);
        const auto kept = ex->sequence({.loops = L, .capacity = n});
        kept->set_last_state(r.data() + static_cast<size_t>(L - 1) * d);
        kept->last_logits(got.data());
        EXPECT_EQ(got, want) << name;
    }
}

TEST(ExecutorPrimitives, RowsWithTheirOwnPositionsAndVisibilityEqualTheSequenceTheyStandFor) {
    // A tree after a prefix of p + 1 committed rows: a chain a -> b at positions p+1, p+2 in
    // scratch rows S, S+1, and a sibling c of a at p+1 in row S+2 that must not see a or b. Run
    // through passes 1..D and then D+1..L from the kept states, the rows' logits are those of
    // the plain sequences prefix+a+b and prefix+c; the chain's rows copied to their positions
    // then serve a next token as if it had run there.
    for (const auto& [name, mp] : models()) {
        const Model& m = *mp;
        const int L = 4, D = 2, p = 5, d = m.hp.d_model, V = m.hp.vocab_size;
        const int S = 20;  // scratch rows past the positions used
        const std::vector<int32_t> tok = some_tokens(m, p + 4);  // prefix 0..p, a, b, then the next token
        const int32_t c_tok = static_cast<int32_t>((tok[static_cast<size_t>(p + 1)] + 1) % 256);
        const auto ex = make_cpu_executor(m);

        const auto tree = ex->sequence({.loops = L, .capacity = S + 3});
        tree->run(tok.data(), p + 1, 0, nullptr);
        RowLayout lay;
        lay.pos = {p + 1, p + 2, p + 1};
        lay.cache_row = {S, S + 1, S + 2};
        lay.visible_end = {p + 1, p + 1, p + 1};
        lay.extra_rows = {S, S, S + 1, S + 2};
        lay.extra_offsets = {0, 1, 3, 4};
        const int32_t rows_tok[3] = {tok[static_cast<size_t>(p + 1)], tok[static_cast<size_t>(p + 2)], c_tok};
        std::vector<float> h(3 * static_cast<size_t>(d)), e(injects_input(m.hp) ? 3 * static_cast<size_t>(d) : 0);
        tree->run_passes({.tokens = rows_tok, .n = 3, .first = 1, .last = D, .out_h = h.data(),
                          .out_e = e.empty() ? nullptr : e.data(), .layout = &lay});
        tree->run_passes({.n = 3, .first = D + 1, .last = L, .h_in = h.data(), .e_in = e.empty() ? nullptr : e.data(),
                          .layout = &lay});
        std::vector<float> got(3 * static_cast<size_t>(V));
        tree->logits(0, 3, got.data());

        const auto chain = ex->sequence({.loops = L, .capacity = S + 3});
        chain->run(tok.data(), p + 1, 0, nullptr);
        chain->run_passes({.tokens = tok.data() + p + 1, .n = 2, .pos0 = p + 1});
        std::vector<float> want(2 * static_cast<size_t>(V));
        chain->logits(0, 2, want.data());
        EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin())) << name << ": the chain a -> b";
        const auto sib = ex->sequence({.loops = L, .capacity = S + 3});
        sib->run(tok.data(), p + 1, 0, nullptr);
        sib->run(&c_tok, 1, p + 1, nullptr);
        std::vector<float> one(static_cast<size_t>(V));
        sib->last_logits(one.data());
        EXPECT_TRUE(std::equal(one.begin(), one.end(), got.begin() + 2 * V)) << name << ": the sibling c";

        // The chain's scratch rows copied to positions p+1, p+2: the next token reads them there.
        tree->copy_position(S, p + 1);
        tree->copy_position(S + 1, p + 2);
        tree->run(&tok[static_cast<size_t>(p + 3)], 1, p + 3, nullptr);
        chain->run(&tok[static_cast<size_t>(p + 3)], 1, p + 3, nullptr);
        std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V));
        tree->last_logits(a.data());
        chain->last_logits(b.data());
        EXPECT_EQ(a, b) << name << ": after copy_position";
    }
}

TEST(ExecutorPrimitives, AForkedSequenceGoesOnAsAFreshRunOfItsOwnTokens) {
    // Beam search's divergence: the parent and its fork take different next tokens; each then
    // equals a sequence that ran its own tokens from the start.
    for (const auto& [name, mp] : models()) {
        const Model& m = *mp;
        const int L = 3, n = 6, V = m.hp.vocab_size;
        const std::vector<int32_t> tok = some_tokens(m, n);
        const int32_t other = static_cast<int32_t>((tok[static_cast<size_t>(n - 1)] + 7) % 256);
        const auto ex = make_cpu_executor(m);
        const auto parent = ex->sequence({.loops = L, .capacity = n + 1});
        parent->run(tok.data(), n - 1, 0, nullptr);
        const std::unique_ptr<ExecSequence> child = parent->fork();
        std::vector<float> got(static_cast<size_t>(V)), want(static_cast<size_t>(V));
        child->last_logits(got.data());
        parent->last_logits(want.data());
        EXPECT_EQ(got, want) << name << ": the fork's last row";
        parent->run(&tok[static_cast<size_t>(n - 1)], 1, n - 1, nullptr);
        child->run(&other, 1, n - 1, nullptr);
        for (const bool own : {true, false}) {
            std::vector<int32_t> ids(tok.begin(), tok.end());
            if (!own) ids.back() = other;
            const auto fresh = ex->sequence({.loops = L, .capacity = n + 1});
            fresh->run(ids.data(), n, 0, nullptr);
            fresh->last_logits(want.data());
            (own ? parent : child)->last_logits(got.data());
            EXPECT_EQ(got, want) << name << (own ? ": the parent" : ": the fork");
        }
    }
}

// The multi-sequence run the batch engine is written over (ExecBatch): several sequences, each its
// own paged cache, depth and positions, their rows through the same passes together. Each
// sequence's logits are a lone sequence's bits (ExecSequence::run / last_logits), at every batch
// size, with a prompt split over two runs (a first chunk without logits) and with decode steps
// after; the one-row stepper over a paged cache (early exit) gives a lone row's bits too.
TEST(ExecutorPrimitives, TheBatchRunGivesEverySequenceItsLoneBits) {
    for (const auto& [name, mp] : models()) {
        const Model& m = *mp;
        const int V = m.hp.vocab_size, steps = 3;
        const int vocab = std::min(V, m.tokenizer.n_ids() > 0 ? m.tokenizer.n_ids() : V);
        const auto ex = make_cpu_executor(m);
        // deepest first, as ExecBatch::run asks; prompts of different lengths and tokens
        const std::vector<int> depth{4, 4, 3, 2};
        std::vector<std::vector<int32_t>> prompt;
        for (int i = 0; i < 4; ++i) {
            std::vector<int32_t> t = some_tokens(m, 5 + 3 * i);
            for (auto& x : t) x = static_cast<int32_t>((x + 7 * i) % std::min(256, V));
            prompt.push_back(t);
        }
        for (int B = 1; B <= 4; ++B) {
            SCOPED_TRACE(name + ": batch of " + std::to_string(B));
            KVPagePool pool;
            pool.allocate(m.hp, KVCacheType::F32, 256, 4);
            std::vector<KVCache> kv(static_cast<size_t>(B));
            std::vector<std::unique_ptr<ExecSequence>> lone;
            for (int i = 0; i < B; ++i) {
                const int n = static_cast<int>(prompt[i].size());
                pool.attach(kv[i], exec_layers(m.hp, depth[i]), n + steps + 1);
                lone.push_back(ex->sequence({.loops = depth[i], .capacity = n + steps + 1}));
            }
            const auto batch = ex->batch();
            // Runs the parts together; each wanted row's logits against its lone sequence's last
            // logits (run beforehand); returns the next tokens (greedy) of those sequences.
            auto check = [&](const std::vector<BatchPart>& parts) {
                int k = 0;
                for (const BatchPart& p : parts) k += p.logits ? 1 : 0;
                for (const BatchPart& p : parts) pool.ensure(*p.rows.kv, p.rows.pos0 + p.rows.n);
                std::vector<float> got(static_cast<size_t>(k) * V, -1.0f);
                batch->run(parts.data(), static_cast<int>(parts.size()), got.data());
                std::vector<int32_t> next;
                int j = 0;
                for (int i = 0; i < B; ++i) {
                    if (!parts[i].logits) continue;
                    std::vector<float> want(static_cast<size_t>(V));
                    lone[i]->last_logits(want.data());
                    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + static_cast<std::ptrdiff_t>(j) * V))
                        << "sequence " << i;
                    next.push_back(argmax(want.data(), vocab));
                    ++j;
                }
                return next;
            };
            // The prompts in two runs: a first chunk whose logits nobody asks for, then the rest.
            std::vector<BatchPart> parts(static_cast<size_t>(B));
            for (int i = 0; i < B; ++i) {
                const int half = static_cast<int>(prompt[i].size()) / 2;
                parts[i] = {.rows = {.kv = &kv[i], .tokens = prompt[i].data(), .n = half, .pos0 = 0, .loops = depth[i]},
                            .logits = false};
                lone[i]->run(prompt[i].data(), half, 0, nullptr);
            }
            EXPECT_TRUE(check(parts).empty());
            for (int i = 0; i < B; ++i) {
                const int half = static_cast<int>(prompt[i].size()) / 2, n = static_cast<int>(prompt[i].size());
                parts[i] = {.rows = {.kv = &kv[i], .tokens = prompt[i].data() + half, .n = n - half, .pos0 = half,
                                     .loops = depth[i]},
                            .logits = true};
                lone[i]->run(prompt[i].data() + half, n - half, half, nullptr);
            }
            std::vector<int32_t> tok = check(parts);
            ASSERT_EQ(static_cast<int>(tok.size()), B);
            // Decode steps: one row per sequence.
            for (int s = 0; s < steps - 1; ++s) {
                for (int i = 0; i < B; ++i) {
                    const int pos = static_cast<int>(prompt[i].size()) + s;
                    parts[i] = {.rows = {.kv = &kv[i], .tokens = &tok[i], .n = 1, .pos0 = pos, .loops = depth[i]},
                                .logits = true};
                    lone[i]->run(&tok[i], 1, pos, nullptr);
                }
                tok = check(parts);
            }
            // The last step row by row, one pass at a time (early exit's stepper) over the pages.
            for (int i = 0; i < B; ++i) {
                const int pos = static_cast<int>(prompt[i].size()) + steps - 1;
                pool.ensure(kv[i], pos + 1);
                ExecRow& r = batch->row(kv[i], 0);
                ExecRow& w = lone[i]->row(0);
                r.begin(tok[i], pos);
                w.begin(tok[i], pos);
                for (int l = 1; l <= depth[i]; ++l) {
                    r.pass(l);
                    w.pass(l);
                }
                r.finish();
                w.finish();
                std::vector<float> got(static_cast<size_t>(V)), want(static_cast<size_t>(V));
                batch->last_logits(got.data());
                lone[i]->last_logits(want.data());
                EXPECT_EQ(got, want) << "sequence " << i << ", row by row";
            }
        }
    }
}
