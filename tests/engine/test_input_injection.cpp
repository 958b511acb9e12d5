// Input injection (FORMAT.md §1a: loop_input "add", file version 2): the file (version field,
// header, round trip, refusals, the quantizer) and the decoding paths that resume from a drafted
// state or batch rows of several depths, on an injecting model: chain, tree and draft-model
// speculation equal plain greedy, the batch engine equals generate alone. The forward against the
// double reference, prefill vs decode, early exit, depth upgrade, the caches and beam search run
// on both kinds of model in test_golden_forward, test_generate, test_looped and test_beam.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "test_util.h"

using namespace tinyloop;

namespace {

HParams injecting_hparams() {
    HParams hp = tltest::small_hparams();
    hp.max_loops = 8;
    hp.default_loops = 6;
    hp.loop_input = LoopInput::Add;
    return hp;
}

const std::string& model_path() {
    static const std::string p = tltest::write_random_model("inject.tinyloop", injecting_hparams(), 41);
    return p;
}

// The same weights without injection: a version-1 file.
const std::string& plain_model_path() {
    static const std::string p = [] {
        HParams hp = injecting_hparams();
        hp.loop_input = LoopInput::None;
        return tltest::write_random_model("plain.tinyloop", hp, 41);
    }();
    return p;
}

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

uint32_t version_of(const std::string& bytes) {
    uint32_t v = 0;
    std::memcpy(&v, bytes.data() + 8, 4);  // little-endian hosts only run these tests
    return v;
}

std::string with_version(std::string bytes, uint32_t v) {
    std::memcpy(bytes.data() + 8, &v, 4);
    return bytes;
}

// `bytes` with the first `from` replaced by `to` (the caller keeps the header's length).
std::string patched(std::string bytes, const std::string& from, const std::string& to) {
    const size_t at = bytes.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) bytes.replace(at, from.size(), to);
    return bytes;
}

// Loading `bytes` fails with BadFile and a message holding `field`.
void expect_refused(const std::string& bytes, const std::string& field) {
    const std::string path = tltest::temp_path("refused.tinyloop");
    write_bytes(path, bytes);
    try {
        free_model(load_model(path));
        ADD_FAILURE() << "loaded a file that must be refused (" << field << ")";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::BadFile) << e.what();
        EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
}

// The model as a spec again (what the quantizer and a re-export do).
ModelSpec spec_of(Model* m) {
    const ModelInfo info = model_info(m);
    ModelSpec s;
    s.hparams = info.hparams;
    s.tokenizer = info.tokenizer;
    s.metadata_json = info.metadata_json;
    for (const TensorInfo& t : info.tensors) s.tensors.push_back({t.name, t.shape, tensor_as_f32(m, t.name), t.dtype, 32});
    return s;
}

}  // namespace

TEST(InjectionFile, VersionTwoExactlyWhenInjectingAndRoundTripsByteForByte) {
    const std::string& v1 = plain_model_path();
    for (const std::string& path : {v1, model_path()}) {
        const std::string bytes = read_bytes(path);
        tinyloop::ModelHandle mp = tinyloop::load_model_handle(path);
        const bool injects = model_hparams(mp.get()).loop_input == LoopInput::Add;
        EXPECT_EQ(injects, path == model_path());
        EXPECT_EQ(model_info(mp.get()).hparams.loop_input, model_hparams(mp.get()).loop_input);
        EXPECT_EQ(version_of(bytes), injects ? 2u : 1u);
        EXPECT_EQ(bytes.find("\"loop_input\":\"add\"") != std::string::npos, injects);
        EXPECT_EQ(bytes.find("loop_input") != std::string::npos, injects) << "version 1 has no loop_input key";
        // Loaded and written again: the same bytes.
        const std::string again = tltest::temp_path("again.tinyloop");
        save_model(again, spec_of(mp.get()));
        EXPECT_TRUE(read_bytes(again) == bytes) << path;
    }
    // Same weights, two recurrences: the outputs differ from pass 2 on, never at pass 1.
    tinyloop::ModelHandle a = tinyloop::load_model_handle(v1);
    tinyloop::ModelHandle b = tinyloop::load_model_handle(model_path());
    const std::vector<int32_t> t = {5, 70, 9, 200};
    EXPECT_EQ(forward_logits(a.get(), t.data(), 4, 1), forward_logits(b.get(), t.data(), 4, 1));
    EXPECT_NE(forward_logits(a.get(), t.data(), 4, 2), forward_logits(b.get(), t.data(), 4, 2));
}

TEST(InjectionFile, LoaderRefusesVersionTwoWithoutAddAndAnyOtherValue) {
    const std::string v1 = read_bytes(plain_model_path());
    const std::string v2 = read_bytes(model_path());
    expect_refused(with_version(v1, 2), "version: 2 without hparams.loop_input \"add\"");
    expect_refused(with_version(v2, 1), "hparams.loop_input: \"add\" in a version-1 file");
    expect_refused(with_version(v2, 4), "version: 4, allowed 1, 2 or 3");  // 3: FORMAT.md §1b
    expect_refused(with_version(v2, 3), "version: 3, allowed 2");
    expect_refused(patched(v2, "\"loop_input\":\"add\"", "\"loop_input\":\"mul\""), "hparams.loop_input: \"mul\"");
    expect_refused(patched(v2, "\"loop_input\":\"add\"", "\"loop_input\":12345"), "hparams.loop_input: 12345");
    // "none" spelled out (one byte longer than "add": the metadata's seed gives one back) is the
    // default in version 1 and refused in version 2.
    const std::string none = patched(patched(v2, "\"seed\":41", "\"seed\":4"), "\"loop_input\":\"add\"",
                                     "\"loop_input\":\"none\"");
    expect_refused(none, "version: 2 without hparams.loop_input \"add\"");
    const std::string none_v1 = tltest::temp_path("none-v1.tinyloop");
    write_bytes(none_v1, with_version(none, 1));
    tinyloop::ModelHandle loaded = tinyloop::load_model_handle(none_v1);
    EXPECT_EQ(model_hparams(loaded.get()).loop_input, LoopInput::None);
    // The writer refuses a value outside the enum, naming the field.
    ModelSpec bad = random_model_spec(tltest::small_hparams(), 1);
    bad.hparams.loop_input = static_cast<LoopInput>(7);
    try {
        save_model(tltest::temp_path("bad.tinyloop"), bad);
        ADD_FAILURE() << "wrote loop_input 7";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("hparams.loop_input"), std::string::npos) << e.what();
    }
    EXPECT_EQ(parse_loop_input("add"), LoopInput::Add);
    EXPECT_STREQ(loop_input_name(LoopInput::None), "none");
    EXPECT_THROW(parse_loop_input("concat"), Error);
}

TEST(InjectionFile, QuantizerKeepsInputInjection) {
    const std::string out = tltest::temp_path("inject-q8.tinyloop");
    quantize_model_file(model_path(), out, DType::Q8, 32);
    EXPECT_EQ(version_of(read_bytes(out)), 2u);
    tinyloop::ModelHandle q = tinyloop::load_model_handle(out);
    tinyloop::ModelHandle f = tinyloop::load_model_handle(model_path());
    EXPECT_EQ(model_hparams(q.get()).loop_input, LoopInput::Add);
    // Quantized weights, same recurrence: the logits stay close to the f32 model's.
    const std::vector<int32_t> t = {5, 70, 9, 200, 31};
    const auto lq = forward_logits(q.get(), t.data(), 5, 6), lf = forward_logits(f.get(), t.data(), 5, 6);
    double worst = 0, ref = 0;
    for (size_t i = 0; i < lf.size(); ++i) {
        worst = std::max(worst, std::fabs(static_cast<double>(lq[i]) - lf[i]));
        ref = std::max(ref, std::fabs(static_cast<double>(lf[i])));
    }
    EXPECT_LT(worst / ref, 0.1) << "q8 logits far from f32: the recurrence changed?";
}

TEST(InjectionDecode, ChainAndTreeSpeculationEqualPlainGreedy) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    int accepted = 0, rejected = 0;
    for (const auto& p : tltest::random_prompts(12, 3)) {
        const int n = static_cast<int>(p.size());
        GenerateConfig g;
        g.max_tokens = 16;
        g.loops = 6;
        g.ignore_eos = true;
        const GenerateResult plain = generate_ex(mp.get(), p.data(), n, g);
        for (auto [D, K] : {std::pair{1, 2}, std::pair{2, 4}, std::pair{4, 3}}) {
            SpeculativeConfig c;
            c.max_tokens = 16;
            c.draft_loops = D;
            c.verify_loops = 6;
            c.draft_ahead = K;
            c.ignore_eos = true;
            const GenerateResult spec = generate_speculative_ex(mp.get(), p.data(), n, c);
            ASSERT_EQ(spec.tokens, plain.tokens) << "chain D=" << D << " K=" << K;
            accepted += spec.stats.spec_accepted;
            rejected += spec.stats.spec_tested - spec.stats.spec_accepted;
            TreeSpeculativeConfig t;
            t.max_tokens = 16;
            t.draft_loops = D;
            t.verify_loops = 6;
            t.draft_ahead = K;
            t.K_branches = 2;
            t.ignore_eos = true;
            ASSERT_EQ(generate_tree_speculative_ex(mp.get(), p.data(), n, t).tokens, plain.tokens)
                << "tree D=" << D << " K=" << K;
        }
    }
    EXPECT_GT(accepted, 0);  // both branches of the verification ran
    EXPECT_GT(rejected, 0);
}

// Draft-model speculation with an injecting target, the draft injecting (the target itself at
// fewer passes) or not (the same weights as a version-1 file), f32 and int8 caches.
TEST(InjectionDecode, DraftModelSpeculationEqualsGreedyWithEitherKindOfDraft) {
    tinyloop::ModelHandle target = tinyloop::load_model_handle(model_path());
    tinyloop::ModelHandle plain = tinyloop::load_model_handle(plain_model_path());
    int accepted = 0;
    for (Model* draft : {target.get(), plain.get()}) {
        for (KVCacheType kv : {KVCacheType::F32, KVCacheType::Int8}) {
            for (const auto& p : tltest::random_prompts(6, 7)) {
                const int n = static_cast<int>(p.size());
                GenerateConfig g;
                g.max_tokens = 12;
                g.loops = 6;
                g.ignore_eos = true;
                g.kv_cache = kv;
                DraftSpeculativeConfig s;
                s.gamma = 3;
                s.draft_loops = 2;
                const GenerateResult r = draft_speculative_generate_ex(target.get(), draft, p.data(), n, g, s);
                EXPECT_EQ(r.tokens, generate_ex(target.get(), p.data(), n, g).tokens);
                accepted += r.stats.spec_accepted;
            }
        }
    }
    EXPECT_GT(accepted, 0);
}

TEST(InjectionDecode, BatchEngineEqualsGenerateAlone) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    Model* m = mp.get();
    const auto ps = tltest::random_prompts(8, 5);
    std::vector<GenerateConfig> cfg(ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
        cfg[i].max_tokens = 6 + static_cast<int>(i);
        cfg[i].loops = 1 + static_cast<int>(i) % 8;  // rows of several depths in one forward
        cfg[i].ignore_eos = true;
    }
    cfg[2].temperature = 0.8f;
    cfg[2].sample_seed = 9;
    cfg[5].early_exit.patience = 1;  // the adaptive step beside the batched rows
    cfg[5].early_exit.threshold = 0.3f;
    cfg[5].loops = 8;
    cfg[6].cache_window = 3;
    BatchEngineOptions o;
    o.page_size = 4;
    o.prefill_chunk = 5;
    Owned<BatchEngine> e(create_batch_engine(m, o));
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < ps.size(); ++i) {
        BatchRequest r;
        r.prompt = ps[i];
        r.config = cfg[i];
        ids.push_back(batch_submit(e.get(), std::move(r)));
        batch_step(e.get());  // staggered arrivals: prefill beside decode
    }
    while (batch_step(e.get()) > 0) {
    }
    for (size_t i = 0; i < ps.size(); ++i) {
        const GenerateResult b = batch_result(e.get(), ids[i]);
        const GenerateResult a = generate_ex(m, ps[i].data(), static_cast<int>(ps[i].size()), cfg[i]);
        EXPECT_EQ(b.tokens, a.tokens) << "request " << i;
        EXPECT_EQ(b.stats.depth_per_token, a.stats.depth_per_token) << "request " << i;
    }
}
