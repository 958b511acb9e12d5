// Generation: prefill/decode agreement, the stop policy, callbacks, cache_window, stats and the
// errors the seed lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "forward/forward.h"
#include "model/model.h"
#include "test_util.h"

using namespace tinyloop;

namespace {

const std::string& model_path() {
    static const std::string p = tltest::write_random_model("gen.tinyloop", tltest::small_hparams(), 11);
    return p;
}

// The same weights with input injection (FORMAT.md §1a).
const std::string& injecting_model_path() {
    static const std::string p = [] {
        HParams hp = tltest::small_hparams();
        hp.loop_input = LoopInput::Add;
        return tltest::write_random_model("gen-v2.tinyloop", hp, 11);
    }();
    return p;
}

std::vector<int32_t> prompt_ids() { return {10, 200, 33, 71, 5, 250, 100}; }

}  // namespace

TEST(Forward, PrefillEqualsTokenByTokenDecodeBitForBit) {
    for (const std::string& path : {model_path(), injecting_model_path()})
    for (int chunk : {64, 3, 1}) {
        SCOPED_TRACE(path);
        LoadOptions o;
        o.prefill_chunk = chunk;
        o.threads = 2;
        tinyloop::ModelHandle mp = tinyloop::load_model_handle(path, o);
        const Model& m = *mp.get();
        const auto ids = prompt_ids();
        const int n = static_cast<int>(ids.size());
        const int L = 4;
        const int V = m.hp.vocab_size;
        // All at once.
        KVCache kv1;
        kv1.allocate(exec_layers(m.hp, L), n, m.hp.n_kv_heads * m.hp.head_dim);
        Workspace ws1;
        std::vector<float> h1, all(static_cast<size_t>(n) * V);
        ForwardArgs fa;
        fa.tokens = ids.data();
        fa.n = n;
        fa.loops = L;
        forward(m, kv1, ws1, fa, h1);
        compute_logits(m, h1.data(), n, all.data(), ws1);
        // One token at a time.
        KVCache kv2;
        kv2.allocate(exec_layers(m.hp, L), n, m.hp.n_kv_heads * m.hp.head_dim);
        Workspace ws2;
        std::vector<float> h2, one(static_cast<size_t>(V));
        for (int t = 0; t < n; ++t) {
            ForwardArgs f1 = fa;
            f1.tokens = &ids[t];
            f1.n = 1;
            f1.pos0 = t;
            forward(m, kv2, ws2, f1, h2);
            compute_logits(m, h2.data(), 1, one.data(), ws2);
            EXPECT_EQ(0, std::memcmp(one.data(), all.data() + static_cast<size_t>(t) * V, V * sizeof(float)))
                << "position " << t << " chunk " << chunk;
        }
        EXPECT_EQ(0, std::memcmp(kv1.own.k.data(), kv2.own.k.data(), kv1.own.k.size() * sizeof(float)));
    }
}

TEST(Forward, ThreadCountDoesNotChangeBits) {
    const auto ids = prompt_ids();
    std::vector<float> ref;
    for (int threads : {1, 2, 3}) {
        LoadOptions o;
        o.threads = threads;
        tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path(), o);
        auto l = forward_logits(mp.get(), ids.data(), static_cast<int>(ids.size()), 3);
        if (ref.empty()) ref = l;
        else EXPECT_EQ(0, std::memcmp(ref.data(), l.data(), l.size() * sizeof(float))) << threads;
    }
}

TEST(Generate, GreedyIsDeterministicAndMatchesArgmaxOfScoredLogits) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto ids = prompt_ids();
    GenerateConfig c;
    c.max_tokens = 12;
    c.ignore_eos = true;
    auto out = generate(mp.get(), ids.data(), static_cast<int>(ids.size()), c);
    ASSERT_EQ(out.size(), ids.size() + 12);
    // Each emitted token is the argmax (over producible ids) of a fresh forward of its prefix.
    const int V = model_hparams(mp.get()).vocab_size;
    const int n_ids = model_info(mp.get()).tokenizer_vocab;
    for (size_t t = ids.size(); t < out.size(); ++t) {
        auto l = forward_logits(mp.get(), out.data(), static_cast<int>(t), 0);
        const float* row = l.data() + (t - 1) * V;
        int best = 0;
        for (int j = 1; j < n_ids; ++j)
            if (row[j] > row[best]) best = j;
        EXPECT_EQ(out[t], best) << "token " << t;
    }
    EXPECT_EQ(out, generate(mp.get(), ids.data(), static_cast<int>(ids.size()), c));
}

TEST(Generate, SameSeedSameTokensDifferentSeedDiffers) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto ids = prompt_ids();
    GenerateConfig c;
    c.max_tokens = 24;
    c.temperature = 1.5f;
    c.top_k = 200;
    c.ignore_eos = true;
    c.sample_seed = 5;
    auto a = generate(mp.get(), ids.data(), 7, c);
    auto b = generate(mp.get(), ids.data(), 7, c);
    EXPECT_EQ(a, b);
    c.sample_seed = 6;
    EXPECT_NE(a, generate(mp.get(), ids.data(), 7, c));
}

TEST(Generate, StopsOnEosAndKeepsIt) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const int32_t eos = model_info(mp.get()).tokenizer.eos_id;
    ASSERT_GE(eos, 0);
    GenerateConfig c;
    c.max_tokens = 10;
    c.logit_bias = {{eos, 100.0f}};
    GenerateResult r = generate_ex(mp.get(), prompt_ids().data(), 7, c);
    EXPECT_EQ(r.stats.stop_reason, StopReason::EOS);
    EXPECT_EQ(r.stats.tokens_emitted, 1);
    EXPECT_EQ(r.tokens.back(), eos);
    EXPECT_EQ(r.text, "");  // special tokens are not text
    c.ignore_eos = true;
    r = generate_ex(mp.get(), prompt_ids().data(), 7, c);
    EXPECT_EQ(r.stats.stop_reason, StopReason::MAX_TOKENS);
    EXPECT_EQ(r.stats.tokens_emitted, 10);
}

TEST(Generate, StopSequenceTailMatchIsIncluded) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    GenerateConfig c;
    c.max_tokens = 16;
    c.ignore_eos = true;
    auto full = generate(mp.get(), prompt_ids().data(), 7, c);
    std::vector<int32_t> seq(full.begin() + 7 + 3, full.begin() + 7 + 5);  // emitted tokens 3..4
    c.stop_sequences = {{1, 2, 3}, seq};
    GenerateResult r = generate_ex(mp.get(), prompt_ids().data(), 7, c);
    EXPECT_EQ(r.stats.stop_reason, StopReason::STOP_SEQUENCE);
    // The first place the tail matches may be earlier than 5 if the pair repeats; it ends in seq.
    ASSERT_GE(r.tokens.size(), 9u);
    EXPECT_TRUE(std::equal(seq.begin(), seq.end(), r.tokens.end() - 2));
    EXPECT_LE(r.tokens.size(), 7u + 5u);
}

TEST(Generate, StopStringIsCutFromTheTextAndPiecesAddUp) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    GenerateConfig c;
    c.max_tokens = 20;
    c.ignore_eos = true;
    GenerateResult full = generate_ex(mp.get(), prompt_ids().data(), 7, c);
    // Pick a stop string from the middle of the generated bytes (random model: bytes are arbitrary).
    const std::string bytes = detokenize(mp.get(), full.tokens.data() + 7, full.tokens.size() - 7);
    ASSERT_GE(bytes.size(), 8u);
    const std::string stop = bytes.substr(4, 2);
    const size_t first = bytes.find(stop);
    c.stop_strings = {stop};
    std::string pieces;
    GenerateOptions opt;
    opt.observer = [&](const TokenEvent& ev) {
        pieces += ev.piece;
        return true;
    };
    GenerateResult r = generate_ex(mp.get(), prompt_ids().data(), 7, c, opt);
    EXPECT_EQ(r.stats.stop_reason, StopReason::STOP_STRING);
    EXPECT_EQ(r.text, sanitize_utf8(bytes.substr(0, first)));
    EXPECT_EQ(pieces, r.text);
}

TEST(Generate, MaxTimeStopsWithItsOwnReason) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    GenerateConfig c;
    c.max_tokens = 100;
    c.ignore_eos = true;
    c.max_time = 1e-9;  // already over after the first token
    GenerateResult r = generate_ex(mp.get(), prompt_ids().data(), 7, c);
    EXPECT_EQ(r.stats.stop_reason, StopReason::MAX_TIME);
    EXPECT_EQ(r.stats.tokens_emitted, 1);
}

TEST(Generate, BadWordsAndNgramBansHoldInGeneration) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    GenerateConfig c;
    c.max_tokens = 30;
    c.ignore_eos = true;
    auto plain = generate(mp.get(), prompt_ids().data(), 7, c);
    const int32_t first = plain[7];
    c.bad_words = {{first}};
    auto out = generate(mp.get(), prompt_ids().data(), 7, c);
    for (size_t i = 7; i < out.size(); ++i) EXPECT_NE(out[i], first);
    GenerateConfig n;
    n.max_tokens = 30;
    n.ignore_eos = true;
    n.no_repeat_ngram_size = 2;
    out = generate(mp.get(), prompt_ids().data(), 7, n);
    std::set<std::pair<int32_t, int32_t>> seen;
    for (size_t i = 0; i + 1 < out.size(); ++i) EXPECT_TRUE(seen.insert({out[i], out[i + 1]}).second) << i;
}

TEST(Generate, CallbackAbortKeepsTheLastToken) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    GenerateConfig c;
    c.max_tokens = 20;
    c.ignore_eos = true;
    std::vector<std::pair<int32_t, int>> seen;
    GenerateStats st;
    auto out = generate_stream(mp.get(), prompt_ids().data(), 7, c,
                               [&](int32_t tok, int pos) {
                                   seen.emplace_back(tok, pos);
                                   return seen.size() < 4;
                               },
                               &st);
    EXPECT_EQ(st.stop_reason, StopReason::CALLBACK_ABORT);
    ASSERT_EQ(seen.size(), 4u);
    EXPECT_EQ(out.size(), 7u + 4u);
    for (size_t i = 0; i < seen.size(); ++i) {
        EXPECT_EQ(seen[i].first, out[7 + i]);
        EXPECT_EQ(seen[i].second, static_cast<int>(7 + i));
    }
}

TEST(Generate, CacheWindowOfOneSeesOnlyTheTokenItself) {
    // With a window of 1 every position attends only to itself, so its logits depend on its own
    // token alone: greedy decoding is a chain of single-token forwards.
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    GenerateConfig c;
    c.max_tokens = 6;
    c.ignore_eos = true;
    c.cache_window = 1;
    auto out = generate(mp.get(), prompt_ids().data(), 7, c);
    const int V = model_hparams(mp.get()).vocab_size;
    const int n_ids = model_info(mp.get()).tokenizer_vocab;
    for (size_t t = 7; t < out.size(); ++t) {
        auto l = forward_logits(mp.get(), &out[t - 1], 1, 0);
        EXPECT_EQ(out[t], std::max_element(l.begin(), l.begin() + n_ids) - l.begin());
        (void)V;
    }
    c.cache_window = 1000;  // a window wider than the sequence changes nothing
    GenerateConfig plain = c;
    plain.cache_window = 0;
    EXPECT_EQ(generate(mp.get(), prompt_ids().data(), 7, c), generate(mp.get(), prompt_ids().data(), 7, plain));
}

TEST(Generate, StatsAreConsistent) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    GenerateConfig c;
    c.max_tokens = 9;
    c.ignore_eos = true;
    c.loops = 5;
    int events = 0;
    GenerateOptions opt;
    opt.observer = [&](const TokenEvent& ev) {
        EXPECT_EQ(ev.index, events);
        EXPECT_EQ(ev.depth, 5);
        ++events;
        return true;
    };
    GenerateResult r = generate_ex(mp.get(), prompt_ids().data(), 7, c, opt);
    const GenerateStats& s = r.stats;
    EXPECT_EQ(s.tokens_emitted, 9);
    EXPECT_EQ(events, 9);
    EXPECT_EQ(static_cast<int>(r.tokens.size()) - r.prompt_len, s.tokens_emitted);
    EXPECT_EQ(s.prompt_tokens, 7);
    EXPECT_EQ(s.loops_used, 5);
    EXPECT_EQ(s.depth_per_token.size(), 9u);
    EXPECT_GE(s.prefill_ms, 0);
    EXPECT_GE(s.first_token_ms, s.prefill_ms);
    EXPECT_GE(s.decode_ms, 0);
    EXPECT_GE(s.total_ms, s.first_token_ms);
    EXPECT_GE(s.total_ms, s.decode_ms);
    EXPECT_EQ(s.stop_reason, StopReason::MAX_TOKENS);
}

TEST(Generate, LensRowAtFinalDepthMatchesTheEmittedDistribution) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    GenerateConfig c;
    c.max_tokens = 4;
    c.ignore_eos = true;
    GenerateOptions opt;
    opt.lens = true;
    opt.lens_top_k = 3;
    std::vector<TokenEvent> evs;
    opt.observer = [&](const TokenEvent& ev) {
        evs.push_back(ev);
        return true;
    };
    GenerateResult r = generate_ex(mp.get(), prompt_ids().data(), 7, c, opt);
    ASSERT_EQ(evs.size(), 4u);
    const int V = model_hparams(mp.get()).vocab_size;
    for (const auto& ev : evs) {
        ASSERT_EQ(static_cast<int>(ev.lens.size()), 3);  // default_loops
        // The final lens row is the raw distribution of the row that produced the token.
        auto l = forward_logits(mp.get(), r.tokens.data(), ev.position, 0);
        const float* row = l.data() + static_cast<size_t>(ev.position - 1) * V;
        const int best = static_cast<int>(std::max_element(row, row + V) - row);
        double mx = row[best], z = 0;
        for (int j = 0; j < V; ++j) z += std::exp(row[j] - mx);
        EXPECT_EQ(ev.lens.back().top_ids[0], best);
        EXPECT_NEAR(ev.lens.back().p_emitted, std::exp(row[ev.token] - mx) / z, 1e-6);
        EXPECT_NEAR(ev.lens.back().top_probs[0], 1.0 / z, 1e-6);
    }
}

TEST(Generate, BatchIsTheConcatenationOfSingleRuns) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    GenerateConfig c;
    c.max_tokens = 5;
    c.ignore_eos = true;
    std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {40, 50}, {7, 8, 9, 10}};
    std::vector<int> lens;
    auto flat = generate_batch(mp.get(), prompts, c, &lens);
    auto parts = split_batch_output(flat, lens);
    ASSERT_EQ(parts.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
        EXPECT_EQ(parts[i], generate(mp.get(), prompts[i].data(), static_cast<int>(prompts[i].size()), c));
}

namespace {

void expect_invalid(Model* m, const GenerateConfig& c, const std::string& field, int prompt_len = 7,
                    ErrorCode code = ErrorCode::InvalidArgument) {
    std::vector<int32_t> p(static_cast<size_t>(std::max(prompt_len, 1)), 5);
    try {
        generate(m, p.data(), prompt_len, c);
        ADD_FAILURE() << "no error for " << field;
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(Generate, BadConfigsThrowNamingTheField) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    Model* m = mp.get();
    GenerateConfig c;
    expect_invalid(m, c, "prompt_len", 0);
    { GenerateConfig x; x.max_tokens = -1; expect_invalid(m, x, "max_tokens"); }
    { GenerateConfig x; x.max_tokens = 200; expect_invalid(m, x, "max_seq_len"); }
    { GenerateConfig x; x.loops = 7; expect_invalid(m, x, "loops"); }
    { GenerateConfig x; x.loops = -1; expect_invalid(m, x, "loops"); }
    { GenerateConfig x; x.temperature = -0.5f; expect_invalid(m, x, "temperature"); }
    { GenerateConfig x; x.temperature = NAN; expect_invalid(m, x, "temperature"); }
    { GenerateConfig x; x.temperature = 0.7f; x.top_k = 0; expect_invalid(m, x, "top_k"); }
    { GenerateConfig x; x.top_p = 0.0f; expect_invalid(m, x, "top_p"); }
    { GenerateConfig x; x.top_p = 1.5f; expect_invalid(m, x, "top_p"); }
    { GenerateConfig x; x.min_p = -0.1f; expect_invalid(m, x, "min_p"); }
    { GenerateConfig x; x.cache_window = -2; expect_invalid(m, x, "cache_window"); }
    { GenerateConfig x; x.repetition_penalty = 0.0f; expect_invalid(m, x, "repetition_penalty"); }
    { GenerateConfig x; x.frequency_penalty = 2.5f; expect_invalid(m, x, "frequency_penalty"); }
    { GenerateConfig x; x.presence_penalty = -3.0f; expect_invalid(m, x, "presence_penalty"); }
    { GenerateConfig x; x.logit_bias = {{300, 1.0f}}; expect_invalid(m, x, "logit_bias[0]"); }
    { GenerateConfig x; x.logit_bias = {{3, 101.0f}}; expect_invalid(m, x, "logit_bias[0]"); }
    { GenerateConfig x; x.stop_sequences = {{}}; expect_invalid(m, x, "stop_sequences[0]"); }
    { GenerateConfig x; x.stop_sequences = {{1, -1}}; expect_invalid(m, x, "stop_sequences[0][1]"); }
    { GenerateConfig x; x.stop_strings = {""}; expect_invalid(m, x, "stop_strings[0]"); }
    { GenerateConfig x; x.length_penalty = 0.5f; expect_invalid(m, x, "length_penalty"); }
    { GenerateConfig x; x.beam_size = -1; expect_invalid(m, x, "beam_size"); }
    { GenerateConfig x; x.early_exit.min_L = 0; expect_invalid(m, x, "early_exit_min_L"); }
    { GenerateConfig x; x.early_exit.peek_every = 0; expect_invalid(m, x, "early_exit_peek_every"); }
    // Token ids outside the vocabulary.
    std::vector<int32_t> p = {1, 2, 300};
    try {
        generate(m, p.data(), 3, c);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("prompt[2]"), std::string::npos) << e.what();
    }
    try {
        generate(nullptr, p.data(), 2, c);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("model"), std::string::npos);
    }
    // The model still works after all of these.
    GenerateConfig ok;
    ok.max_tokens = 5;
    ok.ignore_eos = true;
    EXPECT_EQ(generate(m, prompt_ids().data(), 7, ok).size(), 12u);
}

TEST(Generate, ScoreMatchesLogSoftmaxOfForwardLogits) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(model_path());
    const auto ids = prompt_ids();
    ScoreResult s = score(mp.get(), ids.data(), 7, 2);
    ASSERT_EQ(s.token_logprobs.size(), 6u);
    auto l = forward_logits(mp.get(), ids.data(), 7, 2);
    const int V = model_hparams(mp.get()).vocab_size;
    double nll = 0;
    for (int i = 0; i < 6; ++i) {
        const float* row = l.data() + static_cast<size_t>(i) * V;
        double mx = *std::max_element(row, row + V), z = 0;
        for (int j = 0; j < V; ++j) z += std::exp(row[j] - mx);
        const double lp = row[ids[i + 1]] - mx - std::log(z);
        EXPECT_NEAR(s.token_logprobs[i], lp, 1e-5);
        nll -= lp;
    }
    EXPECT_NEAR(s.total_nll, nll, 1e-4);
    EXPECT_NEAR(s.perplexity, std::exp(nll / 6), 1e-3 * s.perplexity);
}
