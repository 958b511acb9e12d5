// Continuous batching: every request through the BatchEngine gets exactly the tokens generate()
// gives it alone, whatever else runs beside it and whenever it arrives; pages all go back to the
// pool; a pool too small makes requests wait (or refuses one that can never fit); cancel,
// callbacks and generate_batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <thread>
#include <string>

#include "test_util.h"

using namespace tinyloop;

namespace {

const std::string kBundled = TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-f32.tinyloop";

struct EngineDeleter {
    void operator()(BatchEngine* e) const { free_batch_engine(e); }
};
using EnginePtr = std::unique_ptr<BatchEngine, EngineDeleter>;

// 16 requests that differ in prompt, length, config and arrival step.
struct Case {
    std::string prompt;
    GenerateConfig cfg;
    int arrive = 0;  // step at which it is submitted
};

std::vector<Case> sixteen_cases(Grammar* grammar) {
    const char* prompts[] = {
        "In the beginning",
        "And God said, Let there be light",
        "The LORD is my shepherd; I shall not want.",
        "And it came to pass",
        "Blessed are the meek: for they shall inherit the earth.",
        "For God so loved the world",
        "Thou shalt not",
        "And the earth was without form, and void; and darkness was upon the face of the deep.",
        "Wisdom",
        "Then said Jesus unto them",
        "Vanity of vanities, saith the Preacher",
        "A",
        "And he said unto them, Go ye into all the world, and preach",
        "Honour thy father and thy mother",
        "Ask, and it shall be given you",
        "The words of the Preacher, the son of David, king in Jerusalem.",
    };
    std::vector<Case> cs(16);
    for (int i = 0; i < 16; ++i) {
        cs[static_cast<size_t>(i)].prompt = prompts[i];
        cs[static_cast<size_t>(i)].arrive = (i * 5) % 23;  // spread over the first ~20 steps
        GenerateConfig& c = cs[static_cast<size_t>(i)].cfg;
        c.max_tokens = 8 + (i * 7) % 29;
        c.loops = 1 + i % 6;
    }
    // Sampling with seeds and filters.
    for (int i : {1, 4, 7, 10, 13}) {
        GenerateConfig& c = cs[static_cast<size_t>(i)].cfg;
        c.temperature = 0.7f + 0.1f * static_cast<float>(i % 3);
        c.top_k = 20 + i;
        c.top_p = 0.9f;
        c.sample_seed = 1000 + static_cast<uint64_t>(i);
    }
    cs[2].cfg.stop_strings = {"the"};
    cs[3].cfg.stop_strings = {",", "."};
    cs[5].cfg.repetition_penalty = 1.3f;
    cs[5].cfg.no_repeat_ngram_size = 2;
    cs[6].cfg.cache_window = 5;
    cs[8].cfg.max_tokens = 0;                // nothing to emit
    cs[9].cfg.kv_cache = KVCacheType::Int8;  // the INT8 pool beside the f32 one
    cs[11].cfg.kv_cache = KVCacheType::Int8;
    cs[11].cfg.temperature = 1.0f;
    cs[11].cfg.sample_seed = 5;
    cs[12].cfg.early_exit.patience = 1;      // unbatched decode steps, batched prefill
    cs[12].cfg.early_exit.threshold = 0.2f;
    cs[12].cfg.loops = 6;
    cs[14].cfg.frequency_penalty = 0.5f;
    cs[14].cfg.presence_penalty = 0.5f;
    cs[14].cfg.logit_bias = {{32, -5.0f}};
    cs[15].cfg.grammar = grammar;
    cs[15].cfg.max_tokens = 20;
    return cs;
}

}  // namespace

TEST(Batch, SixteenRequestsEqualGenerateAlone) {
    LoadOptions lo;
    lo.threads = 2;
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(kBundled, lo);
    Model* m = mp.get();
    Grammar* g = parse_grammar("root ::= \" \" [a-z]+ (\" \" [a-z]+)* \".\"\n");
    const std::vector<Case> cs = sixteen_cases(g);

    BatchEngineOptions o;
    o.page_size = 8;
    o.prefill_chunk = 24;  // long prompts take several steps
    EnginePtr e(create_batch_engine(m, o));
    std::vector<uint64_t> ids(cs.size(), 0);
    std::vector<std::vector<int32_t>> streamed(cs.size());
    size_t submitted = 0;
    int max_active = 0;
    for (int step = 0; step < 10000; ++step) {
        for (size_t i = 0; i < cs.size(); ++i) {
            if (ids[i] == 0 && cs[i].arrive == step) {
                BatchRequest r;
                r.prompt = tokenize(m, cs[i].prompt);
                r.config = cs[i].cfg;
                r.on_token = [&streamed, i](int32_t tok, int) {
                    streamed[i].push_back(tok);
                    return true;
                };
                ids[i] = batch_submit(e.get(), std::move(r));
                ++submitted;
            }
        }
        const int left = batch_step(e.get());
        max_active = std::max(max_active, batch_stats(e.get()).active);
        if (left == 0 && submitted == cs.size()) break;
    }
    EXPECT_GE(max_active, 8) << "requests should overlap";
    for (size_t i = 0; i < cs.size(); ++i) {
        ASSERT_TRUE(batch_done(e.get(), ids[i])) << i;
        const GenerateResult b = batch_result(e.get(), ids[i]);
        const std::vector<int32_t> p = tokenize(m, cs[i].prompt);
        const GenerateResult a = generate_ex(m, p.data(), static_cast<int>(p.size()), cs[i].cfg);
        EXPECT_EQ(b.tokens, a.tokens) << "request " << i;
        EXPECT_EQ(b.text, a.text) << "request " << i;
        EXPECT_EQ(b.stats.stop_reason, a.stats.stop_reason) << "request " << i;
        EXPECT_EQ(b.stats.depth_per_token, a.stats.depth_per_token) << "request " << i;
        EXPECT_EQ(streamed[i], std::vector<int32_t>(b.tokens.begin() + b.prompt_len, b.tokens.end())) << i;
        if (cs[i].cfg.max_tokens > 0) {
            EXPECT_GT(b.stats.kv_cache_bytes, 0u) << i;
        }
        EXPECT_THROW(batch_result(e.get(), ids[i]), Error) << "a result is taken once";
    }
    // The cases really exercise the stop rules.
    const BatchEngineStats st = batch_stats(e.get());
    EXPECT_EQ(st.queued, 0);
    EXPECT_EQ(st.active, 0);
    EXPECT_EQ(st.pages_free, st.pages_total) << "every page back in the pool";
    EXPECT_EQ(st.pages_total, 2 * o.kv_pages) << "an f32 and an int8 pool";
    free_grammar(g);
}

TEST(Batch, StopReasonsCoveredBySixteenCases) {
    // Guards the test above against cases that all end the same way.
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(kBundled);
    Model* m = mp.get();
    Grammar* g = parse_grammar("root ::= \" \" [a-z]+ (\" \" [a-z]+)* \".\"\n");
    std::set<StopReason> seen;
    for (const Case& c : sixteen_cases(g)) {
        const std::vector<int32_t> p = tokenize(m, c.prompt);
        seen.insert(generate_ex(m, p.data(), static_cast<int>(p.size()), c.cfg).stats.stop_reason);
    }
    EXPECT_TRUE(seen.count(StopReason::MAX_TOKENS));
    EXPECT_TRUE(seen.count(StopReason::STOP_STRING));
    EXPECT_GE(seen.size(), 2u);
    free_grammar(g);
}

TEST(Batch, SmallPoolMakesRequestsWaitAndRefusesOneThatCannotFit) {
    const std::string path = tltest::write_random_model("batch.tinyloop", tltest::small_hparams(), 21);
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(path);
    Model* m = mp.get();
    const HParams& hp = model_hparams(m);
    GenerateConfig c;
    c.max_tokens = 20;
    c.ignore_eos = true;
    c.loops = 3;
    const int need = 7 * ((10 + 20 + 7) / 8);  // 7 execution layers, 30 positions, pages of 8
    BatchEngineOptions o;
    o.page_size = 8;
    o.kv_pages = 2 * need + 1;  // room for two requests at a time
    EnginePtr e(create_batch_engine(m, o));
    std::vector<std::vector<int32_t>> prompts;
    std::vector<uint64_t> ids;
    for (int i = 0; i < 6; ++i) {
        std::vector<int32_t> p;
        for (int j = 0; j < 10; ++j) p.push_back((17 * i + 5 * j + 3) % 256);
        prompts.push_back(p);
        BatchRequest r;
        r.prompt = p;
        r.config = c;
        ids.push_back(batch_submit(e.get(), std::move(r)));
    }
    ASSERT_EQ(hp.n_pre_blocks + c.loops * hp.n_loop_layers, 7);
    int max_active = 0, steps = 0;
    while (batch_step(e.get()) > 0 && ++steps < 10000) max_active = std::max(max_active, batch_stats(e.get()).active);
    EXPECT_EQ(max_active, 2) << "the pool holds two requests at a time; the rest wait";
    for (size_t i = 0; i < ids.size(); ++i) {
        const GenerateResult b = batch_result(e.get(), ids[i]);
        EXPECT_EQ(b.tokens, generate(m, prompts[i].data(), 10, c)) << i;
    }
    const BatchEngineStats st = batch_stats(e.get());
    EXPECT_EQ(st.pages_free, st.pages_total);

    // Longer than the whole pool: refused at submit, naming kv_pages.
    BatchRequest big;
    big.prompt = prompts[0];
    big.config = c;
    big.config.max_tokens = 100;
    try {
        batch_submit(e.get(), big);
        FAIL() << "expected an error";
    } catch (const Error& err) {
        EXPECT_EQ(err.code(), ErrorCode::InvalidArgument);
        EXPECT_NE(std::string(err.what()).find("kv_pages"), std::string::npos) << err.what();
    }
}

TEST(Batch, OptionsAndRequestsAreValidated) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(kBundled);
    Model* m = mp.get();
    auto refused = [&](BatchEngineOptions o, const char* field) {
        try {
            free_batch_engine(create_batch_engine(m, o));
            ADD_FAILURE() << "expected an error for " << field;
        } catch (const Error& err) {
            EXPECT_EQ(err.code(), ErrorCode::InvalidArgument);
            EXPECT_NE(std::string(err.what()).find(field), std::string::npos) << err.what();
        }
    };
    BatchEngineOptions o;
    o.kv_pages = 0;
    refused(o, "kv_pages");
    o = {};
    o.page_size = 5000;
    refused(o, "page_size");
    o = {};
    o.max_batch = 0;
    refused(o, "max_batch");
    o = {};
    o.prefill_chunk = -1;
    refused(o, "prefill_chunk");
    EXPECT_THROW(create_batch_engine(nullptr, {}), Error);

    EnginePtr e(create_batch_engine(m, {}));
    BatchRequest r;
    r.prompt = {1, 2, 3};
    r.config.temperature = -1.0f;
    EXPECT_THROW(batch_submit(e.get(), r), Error);
    r.config = {};
    r.config.beam_size = 2;
    EXPECT_THROW(batch_submit(e.get(), r), Error);
    r.config = {};
    r.prompt = {};
    EXPECT_THROW(batch_submit(e.get(), r), Error);
    r.prompt = {1, 99999};
    EXPECT_THROW(batch_submit(e.get(), r), Error);
    r.prompt = {1, 2};
    r.config.kv_cache = static_cast<KVCacheType>(9);
    EXPECT_THROW(batch_submit(e.get(), r), Error);
    EXPECT_THROW(batch_result(e.get(), 12345), Error);
    EXPECT_FALSE(batch_cancel(e.get(), 12345));
    EXPECT_EQ(batch_step(e.get()), 0) << "an idle engine steps without work";
}

TEST(Batch, CancelAndCallbackAbortKeepTheTokensSoFar) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(kBundled);
    Model* m = mp.get();
    EnginePtr e(create_batch_engine(m, {}));
    GenerateConfig c;
    c.max_tokens = 30;
    c.ignore_eos = true;
    const std::vector<int32_t> p = tokenize(m, "And God said");
    const std::vector<int32_t> alone = generate(m, p.data(), static_cast<int>(p.size()), c);

    BatchRequest r;
    r.prompt = p;
    r.config = c;
    int seen = 0;
    r.observer = [&seen](const TokenEvent&) { return ++seen < 3; };
    const uint64_t aborted = batch_submit(e.get(), r);
    r.observer = nullptr;
    const uint64_t cancelled = batch_submit(e.get(), r);
    const uint64_t queued_then_cancelled = batch_submit(e.get(), r);
    std::string done_error = "unset";
    r.on_done = [&done_error](uint64_t, const GenerateResult&, const std::string& err) { done_error = err; };
    const uint64_t full = batch_submit(e.get(), r);
    EXPECT_TRUE(batch_cancel(e.get(), queued_then_cancelled));
    for (int i = 0; i < 6; ++i) batch_step(e.get());
    EXPECT_TRUE(batch_cancel(e.get(), cancelled));
    batch_run_until_idle(e.get());
    EXPECT_FALSE(batch_cancel(e.get(), cancelled)) << "already finished";

    const GenerateResult a = batch_result(e.get(), aborted);
    EXPECT_EQ(a.stats.stop_reason, StopReason::CALLBACK_ABORT);
    EXPECT_EQ(a.stats.tokens_emitted, 3);
    EXPECT_TRUE(std::equal(a.tokens.begin(), a.tokens.end(), alone.begin()));
    const GenerateResult b = batch_result(e.get(), cancelled);
    EXPECT_EQ(b.stats.stop_reason, StopReason::CALLBACK_ABORT);
    EXPECT_GT(b.stats.tokens_emitted, 0);
    EXPECT_LT(b.stats.tokens_emitted, 30);
    EXPECT_TRUE(std::equal(b.tokens.begin(), b.tokens.end(), alone.begin()));
    const GenerateResult q = batch_result(e.get(), queued_then_cancelled);
    EXPECT_EQ(q.stats.stop_reason, StopReason::CALLBACK_ABORT);
    EXPECT_EQ(q.stats.tokens_emitted, 0);
    EXPECT_EQ(batch_result(e.get(), full).tokens, alone);
    EXPECT_EQ(done_error, "");
    const BatchEngineStats st = batch_stats(e.get());
    EXPECT_EQ(st.pages_free, st.pages_total);
}

TEST(Batch, ThrowingCallbackFailsOnlyItsRequest) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(kBundled);
    Model* m = mp.get();
    EnginePtr e(create_batch_engine(m, {}));
    BatchRequest r;
    r.prompt = tokenize(m, "In the beginning");
    r.config.max_tokens = 10;
    const uint64_t ok = batch_submit(e.get(), r);
    r.on_token = [](int32_t, int) -> bool { throw Error(ErrorCode::InvalidArgument, "callback refused"); };
    const uint64_t bad = batch_submit(e.get(), r);
    batch_run_until_idle(e.get());
    EXPECT_EQ(batch_result(e.get(), ok).stats.tokens_emitted, 10);
    try {
        batch_result(e.get(), bad);
        FAIL() << "expected the callback's error";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("callback refused"), std::string::npos);
    }
    const BatchEngineStats st = batch_stats(e.get());
    EXPECT_EQ(st.pages_free, st.pages_total);
}

TEST(Batch, SubmitFromThreadsWhileStepping) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(kBundled);
    Model* m = mp.get();
    EnginePtr e(create_batch_engine(m, {}));
    GenerateConfig c;
    c.max_tokens = 12;
    c.temperature = 0.8f;
    std::vector<uint64_t> ids(8);
    std::vector<std::thread> th;
    for (int t = 0; t < 4; ++t) {
        th.emplace_back([&, t] {
            for (int k = 0; k < 2; ++k) {
                BatchRequest r;
                r.prompt = {static_cast<int32_t>(40 + t), static_cast<int32_t>(70 + k), 101};
                r.config = c;
                r.config.sample_seed = static_cast<uint64_t>(t * 2 + k);
                ids[static_cast<size_t>(t * 2 + k)] = batch_submit(e.get(), std::move(r));
            }
        });
    }
    int idle_steps = 0;
    while (idle_steps < 3) idle_steps = batch_step(e.get()) == 0 ? idle_steps + 1 : 0;
    for (auto& x : th) x.join();
    batch_run_until_idle(e.get());
    for (int t = 0; t < 4; ++t) {
        for (int k = 0; k < 2; ++k) {
            const std::vector<int32_t> p = {static_cast<int32_t>(40 + t), static_cast<int32_t>(70 + k), 101};
            GenerateConfig cc = c;
            cc.sample_seed = static_cast<uint64_t>(t * 2 + k);
            EXPECT_EQ(batch_result(e.get(), ids[static_cast<size_t>(t * 2 + k)]).tokens, generate(m, p.data(), 3, cc));
        }
    }
}

TEST(Batch, GenerateBatchEqualsGenerateEach) {
    const std::string path = tltest::write_random_model("batch2.tinyloop", tltest::small_hparams(), 5, DType::Q4);
    // the CPU whatever the machine has: this is the CPU's batch engine (the device's is
    // test_cuda_engine's BatchEngineOnTheDeviceEqualsItsGreedyDecoding)
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(path, LoadOptions{.backend = Backend::Cpu});
    Model* m = mp.get();
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 70; ++i) {  // more than one engine's 64 slots
        std::vector<int32_t> p;
        for (int j = 0; j <= i % 9; ++j) p.push_back((31 * i + 7 * j + 1) % 257);
        prompts.push_back(p);
    }
    GenerateConfig c;
    c.max_tokens = 9;
    c.temperature = 0.9f;
    c.sample_seed = 77;
    std::vector<int> lens;
    const std::vector<int32_t> flat = generate_batch(m, prompts, c, &lens);
    const auto outs = split_batch_output(flat, lens);
    ASSERT_EQ(outs.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i)
        EXPECT_EQ(outs[i], generate(m, prompts[i].data(), static_cast<int>(prompts[i].size()), c)) << i;
    c.beam_size = 2;  // beam search: one prompt after another, same contract
    const std::vector<std::vector<int32_t>> two(prompts.begin(), prompts.begin() + 2);
    const auto beams = split_batch_output(generate_batch(m, two, c, &lens), lens);
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(beams[i], generate(m, two[i].data(), static_cast<int>(two[i].size()), c));
}

// generate_batch_ex: each prompt's whole result (text, stop reason, token events by prompt
// index) equals generate_ex's for it alone, batched or (lens) one after another; an observer
// returning false stops only its own prompt; a bad prompt is named before anything decodes.
TEST(Batch, GenerateBatchExGivesEachPromptItsOwnResultAndEvents) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(kBundled);
    Model* m = mp.get();
    const std::vector<std::string> texts = {"In the beginning", "And God said", "The LORD is my shepherd", "Wisdom"};
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& t : texts) prompts.push_back(tokenize(m, t));
    GenerateConfig c;
    c.max_tokens = 12;
    c.temperature = 0.8f;
    c.top_k = 40;
    c.sample_seed = 3;
    c.stop_strings = {"."};
    for (bool lens : {false, true}) {
        std::vector<std::vector<TokenEvent>> seen(prompts.size());
        GenerateBatchOptions o;
        o.lens = lens;
        o.lens_top_k = 3;
        o.observer = [&seen](size_t i, const TokenEvent& ev) {
            seen.at(i).push_back(ev);
            return true;
        };
        const std::vector<GenerateResult> rs = generate_batch_ex(m, prompts, c, o);
        ASSERT_EQ(rs.size(), prompts.size());
        for (size_t i = 0; i < prompts.size(); ++i) {
            std::vector<TokenEvent> alone;
            GenerateOptions go;
            go.lens = lens;
            go.lens_top_k = 3;
            go.observer = [&alone](const TokenEvent& ev) {
                alone.push_back(ev);
                return true;
            };
            const GenerateResult want = generate_ex(m, prompts[i].data(), static_cast<int>(prompts[i].size()), c, go);
            EXPECT_EQ(rs[i].tokens, want.tokens) << "lens " << lens << " prompt " << i;
            EXPECT_EQ(rs[i].text, want.text) << i;
            EXPECT_EQ(rs[i].stats.stop_reason, want.stats.stop_reason) << i;
            EXPECT_EQ(rs[i].stats.tokens_emitted, want.stats.tokens_emitted) << i;
            ASSERT_EQ(seen[i].size(), alone.size()) << i;
            for (size_t k = 0; k < alone.size(); ++k) {
                EXPECT_EQ(seen[i][k].token, alone[k].token);
                EXPECT_EQ(seen[i][k].index, alone[k].index);
                EXPECT_EQ(seen[i][k].piece, alone[k].piece);
                EXPECT_EQ(seen[i][k].lens.size(), lens ? alone[k].lens.size() : 0u);
            }
            if (lens) {
                ASSERT_FALSE(seen[i].empty());
                EXPECT_EQ(static_cast<int>(seen[i][0].lens.size()), seen[i][0].depth);
            }
        }
    }
    // An observer that refuses prompt 1's third token stops prompt 1 alone.
    GenerateConfig g;
    g.max_tokens = 10;
    g.ignore_eos = true;
    GenerateBatchOptions o;
    o.observer = [](size_t i, const TokenEvent& ev) { return !(i == 1 && ev.index == 2); };
    const std::vector<GenerateResult> rs = generate_batch_ex(m, prompts, g, o);
    for (size_t i = 0; i < rs.size(); ++i) {
        if (i == 1) {
            EXPECT_EQ(rs[i].stats.stop_reason, StopReason::CALLBACK_ABORT);
            EXPECT_EQ(rs[i].stats.tokens_emitted, 3);
        } else {
            EXPECT_EQ(rs[i].stats.stop_reason, StopReason::MAX_TOKENS) << i;
            EXPECT_EQ(rs[i].stats.tokens_emitted, 10) << i;
        }
    }
    // A bad prompt is refused by index before any decoding.
    prompts[2] = {static_cast<int32_t>(model_hparams(m).vocab_size)};
    try {
        generate_batch_ex(m, prompts, g, o);
        FAIL() << "an out-of-vocabulary prompt was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("prompts[2]"), std::string::npos) << e.what();
    }
}

TEST(Batch, HeldRequestWaitsWithoutStallingTheOthers) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(kBundled);
    Model* m = mp.get();
    EnginePtr e(create_batch_engine(m, {}));
    GenerateConfig c;
    c.max_tokens = 12;
    c.ignore_eos = true;
    const std::vector<int32_t> p = tokenize(m, "Thou shalt not");
    const std::vector<int32_t> alone = generate(m, p.data(), static_cast<int>(p.size()), c);
    bool held = true;
    int held_tokens = 0;
    BatchRequest r;
    r.prompt = p;
    r.config = c;
    r.hold = [&held] { return held; };
    r.on_token = [&held_tokens](int32_t, int) {
        ++held_tokens;
        return true;
    };
    const uint64_t slow = batch_submit(e.get(), r);
    BatchRequest o;
    o.prompt = p;
    o.config = c;
    const uint64_t fast = batch_submit(e.get(), o);
    for (int i = 0; i < 30 && !batch_done(e.get(), fast); ++i) batch_step(e.get());
    EXPECT_TRUE(batch_done(e.get(), fast)) << "the other request went on";
    EXPECT_EQ(held_tokens, 0) << "a held request takes no step";
    EXPECT_FALSE(batch_done(e.get(), slow));
    held = false;
    batch_run_until_idle(e.get());
    EXPECT_EQ(batch_result(e.get(), slow).tokens, alone);
    EXPECT_EQ(batch_result(e.get(), fast).tokens, alone);
}
