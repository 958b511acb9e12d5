// Draft-model speculative decoding: greedy output equals the target's plain greedy token for
// token (bundled model with its q4 file as the draft; random models), under every logits and stop
// rule; sampled output has exactly the target's sampling distribution; mismatched vocabularies
// and bad knobs are refused naming the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "decode/sampling.h"
#include "chi_square.h"
#include "test_util.h"

using namespace tinyloop;

namespace {

const std::string kF32 = TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-f32.tinyloop";
const std::string kQ4 = TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-q4.tinyloop";

HParams target_hparams() {
    HParams hp = tltest::small_hparams();
    hp.max_loops = 8;
    hp.default_loops = 6;
    return hp;
}

const std::string& target_path() {
    static const std::string p = tltest::write_random_model("dspec_target.tinyloop", target_hparams(), 31);
    return p;
}

// The target re-stored as q4: close to it, not equal (accepts often, rejects sometimes).
const std::string& target_q4_path() {
    static const std::string p = [] {
        const std::string out = tltest::temp_path("dspec_target_q4.tinyloop");
        quantize_model_file(target_path(), out, DType::Q4, 32);
        return out;
    }();
    return p;
}

// A smaller, unrelated model with the same vocabulary (bytes + <|endoftext|>, vocab 300).
const std::string& small_draft_path() {
    static const std::string p = [] {
        HParams hp = tltest::small_hparams();
        hp.d_model = 32;
        hp.n_heads = 2;
        hp.n_kv_heads = 1;
        hp.d_ff = 48;
        hp.n_loop_layers = 1;
        hp.default_loops = 2;
        hp.max_loops = 4;
        return tltest::write_random_model("dspec_small_draft.tinyloop", hp, 5);
    }();
    return p;
}

void expect_stats_consistent(const GenerateResult& r, int gamma) {
    const GenerateStats& st = r.stats;
    ASSERT_EQ(st.spec_accept_hist.size(), static_cast<size_t>(gamma) + 1);
    int sum = 0, acc = 0;
    for (size_t k = 0; k < st.spec_accept_hist.size(); ++k) {
        sum += st.spec_accept_hist[k];
        acc += static_cast<int>(k) * st.spec_accept_hist[k];
    }
    EXPECT_EQ(sum, st.spec_cycles);
    EXPECT_EQ(acc, st.spec_accepted);
    EXPECT_LE(st.spec_accepted, st.spec_tested);
    EXPECT_LE(st.spec_drafted, st.spec_cycles * gamma);
    EXPECT_EQ(static_cast<int>(r.tokens.size()) - r.prompt_len, st.tokens_emitted);
}

GenerateResult spec(Model* t, Model* d, const std::vector<int32_t>& p, const GenerateConfig& c, int gamma,
                    int draft_loops = 0, const GenerateOptions& o = {}) {
    DraftSpeculativeConfig sc;
    sc.gamma = gamma;
    sc.draft_loops = draft_loops;
    return draft_speculative_generate_ex(t, d, p.data(), static_cast<int>(p.size()), c, sc, o);
}

// Chi-square critical value at p = 0.01 (Wilson-Hilferty; within 1% for df >= 3).
double chi2_crit_001(int df) {
    static const double small[] = {0, 6.63, 9.21, 11.34};
    if (df <= 3) return small[df];
    const double z = 2.3263, a = 2.0 / (9.0 * df);
    return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

}  // namespace

TEST(DraftSpeculative, BundledGreedyEqualsTargetGreedyWithQ4Draft) {
    tinyloop::ModelHandle target = tinyloop::load_model_handle(kF32);
    tinyloop::ModelHandle draft = tinyloop::load_model_handle(kQ4);
    const std::vector<std::string> texts = {
        "In the beginning God created",
        "And the LORD said unto Moses,",
        "Blessed are the",
        "For God so loved the world",
        "The",
        "And it came to pass, when",
        "Thou shalt not",
        "Jesus wept.",
    };
    int cycles = 0, accepted = 0, tested = 0, eos_stops = 0;
    for (int gamma : {1, 3, 4, 8}) {
        for (int draft_loops : {0, 2}) {
            for (const auto& t : texts) {
                const auto p = tokenize(target.get(), t);
                GenerateConfig c;
                c.max_tokens = 48;
                const GenerateResult plain = generate_ex(target.get(), p.data(), static_cast<int>(p.size()), c);
                const GenerateResult r = spec(target.get(), draft.get(), p, c, gamma, draft_loops);
                ASSERT_EQ(plain.tokens, r.tokens) << "gamma " << gamma << " draft_loops " << draft_loops << ": " << t;
                EXPECT_EQ(plain.text, r.text);
                EXPECT_EQ(plain.stats.stop_reason, r.stats.stop_reason);
                expect_stats_consistent(r, gamma);
                cycles += r.stats.spec_cycles;
                accepted += r.stats.spec_accepted;
                tested += r.stats.spec_tested;
                eos_stops += r.stats.stop_reason == StopReason::EOS;
            }
        }
    }
    EXPECT_GT(cycles, 0);
    EXPECT_GT(accepted, 0);
    EXPECT_LT(accepted, tested);  // rejections happened too: the correction path ran
    // The q4 file is the same model: most drafts pass.
    EXPECT_GT(static_cast<double>(accepted) / tested, 0.5);
}

TEST(DraftSpeculative, BundledGreedyStopsLikeGreedy) {
    tinyloop::ModelHandle target = tinyloop::load_model_handle(kF32);
    tinyloop::ModelHandle draft = tinyloop::load_model_handle(kQ4);
    const auto p = tokenize(target.get(), "And God said, Let there be light:");
    // Stop strings and sequences taken from the plain output itself, so they really fire inside
    // a cycle (after an accepted draft) rather than never.
    GenerateConfig base;
    base.max_tokens = 60;
    base.ignore_eos = true;
    const GenerateResult full = generate_ex(target.get(), p.data(), static_cast<int>(p.size()), base);
    ASSERT_GE(full.stats.tokens_emitted, 20);
    const std::vector<int32_t> out(full.tokens.begin() + full.prompt_len, full.tokens.end());

    std::vector<GenerateConfig> cases;
    for (int mt : {0, 1, 2, 3, 4, 5, 9, 17}) {
        GenerateConfig c = base;
        c.max_tokens = mt;
        cases.push_back(c);
    }
    {
        GenerateConfig c = base;
        c.stop_sequences = {{out[11], out[12]}};
        cases.push_back(c);
    }
    {
        GenerateConfig c = base;
        const std::string piece = detokenize(target.get(), out.data() + 7, 3);
        c.stop_strings = {piece.substr(piece.size() / 2)};
        cases.push_back(c);
    }
    {
        GenerateConfig c = base;
        c.ignore_eos = false;
        c.max_tokens = 200;
        cases.push_back(c);
    }
    for (size_t i = 0; i < cases.size(); ++i) {
        for (int gamma : {1, 2, 5}) {
            const GenerateResult plain = generate_ex(target.get(), p.data(), static_cast<int>(p.size()), cases[i]);
            const GenerateResult r = spec(target.get(), draft.get(), p, cases[i], gamma);
            ASSERT_EQ(plain.tokens, r.tokens) << "case " << i << " gamma " << gamma;
            EXPECT_EQ(plain.text, r.text) << "case " << i;
            EXPECT_EQ(plain.stats.stop_reason, r.stats.stop_reason) << "case " << i;
            EXPECT_LE(r.stats.tokens_emitted, cases[i].max_tokens);
        }
    }
    // The stop rules above really ended the runs early.
    GenerateResult r = spec(target.get(), draft.get(), p, cases[8], 4);
    EXPECT_EQ(r.stats.stop_reason, StopReason::STOP_SEQUENCE);
    r = spec(target.get(), draft.get(), p, cases[9], 4);
    EXPECT_EQ(r.stats.stop_reason, StopReason::STOP_STRING);
}

TEST(DraftSpeculative, RandomModelsGreedyEqualsTargetGreedyUnderEveryRule) {
    tinyloop::ModelHandle target = tinyloop::load_model_handle(target_path());
    tinyloop::ModelHandle q4 = tinyloop::load_model_handle(target_q4_path());
    tinyloop::ModelHandle small = tinyloop::load_model_handle(small_draft_path());
    const auto ps = tltest::random_prompts(12, 3);
    std::vector<GenerateConfig> cases(1);
    cases[0].max_tokens = 24;
    cases[0].ignore_eos = true;
    auto with = [&](auto f) {
        GenerateConfig c = cases[0];
        f(c);
        cases.push_back(c);
    };
    with([](GenerateConfig& c) { c.repetition_penalty = 1.4f; });
    with([](GenerateConfig& c) {
        c.frequency_penalty = 0.7f;
        c.presence_penalty = 0.5f;
    });
    with([](GenerateConfig& c) { c.logit_bias = {{65, 3.0f}, {66, -100.0f}}; });
    with([](GenerateConfig& c) { c.no_repeat_ngram_size = 2; });
    with([](GenerateConfig& c) { c.bad_words = {{65}, {66, 67}}; });
    with([](GenerateConfig& c) { c.cache_window = 5; });
    with([](GenerateConfig& c) { c.loops = 3; });
    with([](GenerateConfig& c) { c.ignore_eos = false; });
    with([](GenerateConfig& c) { c.kv_cache = KVCacheType::Int8; });  // both caches int8
    int accepted = 0, tested = 0;
    for (Model* d : {q4.get(), small.get()}) {
        for (size_t ci = 0; ci < cases.size(); ++ci) {
            for (int gamma : {1, 4, 7}) {
                for (const auto& p : ps) {
                    const GenerateResult plain =
                        generate_ex(target.get(), p.data(), static_cast<int>(p.size()), cases[ci]);
                    const GenerateResult r = spec(target.get(), d, p, cases[ci], gamma);
                    ASSERT_EQ(plain.tokens, r.tokens) << "case " << ci << " gamma " << gamma;
                    EXPECT_EQ(plain.stats.stop_reason, r.stats.stop_reason);
                    expect_stats_consistent(r, gamma);
                    accepted += r.stats.spec_accepted;
                    tested += r.stats.spec_tested;
                }
            }
        }
    }
    EXPECT_GT(accepted, 0);
    EXPECT_LT(accepted, tested);
}

TEST(DraftSpeculative, GrammarConstrainedGreedyEqualsGreedy) {
    tinyloop::ModelHandle target = tinyloop::load_model_handle(kF32);
    tinyloop::ModelHandle draft = tinyloop::load_model_handle(kQ4);
    Grammar* g = parse_grammar("root ::= [A-Za-z ]+ (\",\" | \".\") [a-z ]*\n");
    const auto p = tokenize(target.get(), "And the LORD spake unto");
    for (int mt : {8, 30}) {
        GenerateConfig c;
        c.max_tokens = mt;
        c.grammar = g;
        const GenerateResult plain = generate_ex(target.get(), p.data(), static_cast<int>(p.size()), c);
        for (int gamma : {1, 4}) {
            const GenerateResult r = spec(target.get(), draft.get(), p, c, gamma);
            EXPECT_EQ(plain.tokens, r.tokens) << "max_tokens " << mt << " gamma " << gamma;
            EXPECT_EQ(plain.stats.stop_reason, r.stats.stop_reason);
        }
    }
    free_grammar(g);
}

TEST(DraftSpeculative, EventsDescribeCyclesAndCallbacksAbort) {
    tinyloop::ModelHandle target = tinyloop::load_model_handle(kF32);
    tinyloop::ModelHandle draft = tinyloop::load_model_handle(kQ4);
    const auto p = tokenize(target.get(), "In the beginning");
    GenerateConfig c;
    c.max_tokens = 30;
    c.ignore_eos = true;
    std::vector<TokenEvent> evs;
    GenerateOptions o;
    o.lens = true;
    o.observer = [&](const TokenEvent& e) {
        evs.push_back(e);
        return true;
    };
    const GenerateResult r = spec(target.get(), draft.get(), p, c, 4, 0, o);
    ASSERT_EQ(evs.size(), 30u);
    const int L = model_hparams(target.get()).default_loops;
    EXPECT_EQ(evs[0].cycle, -1);  // from the prefill
    EXPECT_TRUE(evs[0].from_verifier);
    std::string pieces;
    for (size_t i = 0; i < evs.size(); ++i) {
        const TokenEvent& e = evs[i];
        pieces += e.piece;
        EXPECT_EQ(e.index, static_cast<int>(i));
        EXPECT_EQ(e.position, r.prompt_len + static_cast<int>(i));
        EXPECT_EQ(e.token, r.tokens[static_cast<size_t>(e.position)]);
        ASSERT_EQ(e.lens.size(), static_cast<size_t>(L));
        // The lens at the last depth is the target's own distribution of the emitted token.
        EXPECT_NEAR(e.lens.back().p_emitted, e.prob, 1e-4);
        if (i == 0 || e.cycle < 0) continue;
        EXPECT_LE(e.accepted, static_cast<int>(e.drafted.size()));
        if (!e.from_verifier) {
            EXPECT_NE(std::find(e.drafted.begin(), e.drafted.end(), e.token), e.drafted.end());
        }
    }
    EXPECT_EQ(pieces, r.text);
    // An observer returning false stops at once, keeping that token.
    int seen = 0;
    o.lens = false;
    o.observer = [&](const TokenEvent&) { return ++seen < 7; };
    const GenerateResult ab = spec(target.get(), draft.get(), p, c, 4, 0, o);
    EXPECT_EQ(ab.stats.tokens_emitted, 7);
    EXPECT_EQ(ab.stats.stop_reason, StopReason::CALLBACK_ABORT);
    EXPECT_EQ(std::vector<int32_t>(ab.tokens.begin(), ab.tokens.end()),
              std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + r.prompt_len + 7));
}

TEST(DraftSpeculative, StochasticIsLossless) {
    // The joint distribution of the first four emitted tokens (the first from the prefill, the
    // next three from one cycle of two drafts plus the target's token) against the exact
    // distribution of sampling the target with the same logits pipeline (a repetition penalty
    // over prompt + output, top-k, temperature).
    HParams hp = target_hparams();
    hp.d_model = 32;
    hp.n_heads = 2;
    hp.n_kv_heads = 2;
    hp.d_ff = 64;
    hp.n_loop_layers = 1;
    const std::string tpath = tltest::write_random_model("dspec_lossless.tinyloop", hp, 77);
    const std::string dpath = tltest::temp_path("dspec_lossless_q4.tinyloop");
    quantize_model_file(tpath, dpath, DType::Q4, 32);
    tinyloop::ModelHandle target = tinyloop::load_model_handle(tpath);
    tinyloop::ModelHandle draft = tinyloop::load_model_handle(dpath);
    const std::vector<int32_t> prompt = {65, 66, 67};
    GenerateConfig c;
    c.max_tokens = 4;
    c.loops = 6;
    c.temperature = 1.0f;
    c.top_k = 3;
    c.repetition_penalty = 1.5f;
    c.ignore_eos = true;
    const int V = hp.vocab_size;
    const int n_ids = model_info(target.get()).tokenizer_vocab;
    auto dist = [&](const std::vector<int32_t>& seq) {
        auto l = forward_logits(target.get(), seq.data(), static_cast<int>(seq.size()), c.loops);
        std::vector<float> row(l.end() - V, l.end());
        apply_repetition_penalty(row.data(), V, seq, c.repetition_penalty);
        mask_undecodable(row.data(), V, n_ids);
        return sampling_probs(row.data(), V, c.temperature, c.top_k, 1.0f, 0.0f);
    };
    std::map<std::vector<int32_t>, double> expected;
    std::vector<std::pair<std::vector<int32_t>, double>> frontier = {{prompt, 1.0}};
    for (int step = 0; step < 4; ++step) {
        std::vector<std::pair<std::vector<int32_t>, double>> next;
        for (const auto& [seq, pr] : frontier) {
            const auto pd = dist(seq);
            for (int t = 0; t < V; ++t)
                if (pd[t] > 0) {
                    auto s = seq;
                    s.push_back(t);
                    next.emplace_back(s, pr * pd[t]);
                }
        }
        frontier = std::move(next);
    }
    for (const auto& [seq, pr] : frontier) expected[std::vector<int32_t>(seq.begin() + 3, seq.end())] = pr;

    const int N = 20000;
    std::map<std::vector<int32_t>, int> seen;
    int accepted = 0, tested = 0;
    for (int i = 0; i < N; ++i) {
        c.sample_seed = static_cast<uint64_t>(i) * 7919 + 1;
        const GenerateResult r = spec(target.get(), draft.get(), prompt, c, 2, 2);
        ASSERT_EQ(r.tokens.size(), 7u);
        ++seen[std::vector<int32_t>(r.tokens.begin() + 3, r.tokens.end())];
        accepted += r.stats.spec_accepted;
        tested += r.stats.spec_tested;
    }
    const tltest::ChiSquare cs = tltest::pooled_chi_square(expected, seen, N);
    const double chi2 = cs.chi2;
    const int cells = cs.cells;
    for (const auto& [k, o] : seen) EXPECT_TRUE(expected.count(k)) << "a sequence plain sampling never makes";
    ASSERT_GE(cells, 10);
    EXPECT_LT(chi2, chi2_crit_001(cells - 1)) << "cells " << cells;
    // Draft (q4 at 2 loops) and target (f32 at 6) agree about one time in ten: both the accept
    // and the resample path ran thousands of times.
    EXPECT_GT(accepted, 1000);
    EXPECT_GT(tested - accepted, 1000);
    EXPECT_LT(accepted, tested);
}

TEST(DraftSpeculative, StochasticSeedDeterminesOutput) {
    tinyloop::ModelHandle target = tinyloop::load_model_handle(kF32);
    tinyloop::ModelHandle draft = tinyloop::load_model_handle(kQ4);
    const auto p = tokenize(target.get(), "And the LORD said");
    GenerateConfig c;
    c.max_tokens = 40;
    c.temperature = 0.9f;
    c.top_k = 40;
    c.top_p = 0.95f;
    c.ignore_eos = true;
    c.sample_seed = 1234;
    const GenerateResult a = spec(target.get(), draft.get(), p, c, 4);
    const GenerateResult b = spec(target.get(), draft.get(), p, c, 4);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.stats.spec_accepted, b.stats.spec_accepted);
    int differ = 0;
    for (uint64_t s = 1; s <= 5; ++s) {
        c.sample_seed = s;
        differ += spec(target.get(), draft.get(), p, c, 4).tokens != a.tokens;
    }
    EXPECT_GE(differ, 4);
    EXPECT_GT(a.stats.spec_accepted, 0);
}

TEST(DraftSpeculative, RefusesMismatchedVocabularyAndBadKnobs) {
    tinyloop::ModelHandle target = tinyloop::load_model_handle(target_path());
    tinyloop::ModelHandle bundled = tinyloop::load_model_handle(kF32);
    const std::vector<int32_t> p = {65, 66, 67};
    GenerateConfig c;
    c.max_tokens = 8;
    c.ignore_eos = true;
    auto expect_error = [&](Model* t, Model* d, const GenerateConfig& cfg, const DraftSpeculativeConfig& sc,
                            ErrorCode code, const std::string& needle) {
        try {
            draft_speculative_generate_ex(t, d, p.data(), 3, cfg, sc);
            ADD_FAILURE() << "no error; expected " << needle;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), code) << e.what();
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    const DraftSpeculativeConfig ok;
    expect_error(target.get(), nullptr, c, ok, ErrorCode::InvalidArgument, "draft: ");
    expect_error(nullptr, target.get(), c, ok, ErrorCode::InvalidArgument, "model: ");
    // vocab_size 2048 against 300.
    expect_error(target.get(), bundled.get(), c, ok, ErrorCode::InvalidArgument, "vocab_size 2048");
    expect_error(bundled.get(), target.get(), c, ok, ErrorCode::InvalidArgument, "vocab_size 300");
    // Same vocab_size, different merges.
    {
        ModelSpec s = random_model_spec(target_hparams(), 31);
        s.tokenizer.merges = {{104, 101}};
        s.tokenizer.special_tokens = {{"<|endoftext|>", 257}};
        s.tokenizer.eos_id = 257;
        const std::string path = tltest::temp_path("dspec_merges.tinyloop");
        save_model(path, s);
        tinyloop::ModelHandle other = tinyloop::load_model_handle(path);
        expect_error(target.get(), other.get(), c, ok, ErrorCode::InvalidArgument, "merges");
    }
    // Same merges, different special token.
    {
        ModelSpec s = random_model_spec(target_hparams(), 31);
        s.tokenizer.special_tokens = {{"<|end|>", 256}};
        const std::string path = tltest::temp_path("dspec_specials.tinyloop");
        save_model(path, s);
        tinyloop::ModelHandle other = tinyloop::load_model_handle(path);
        expect_error(target.get(), other.get(), c, ok, ErrorCode::InvalidArgument, "special tokens");
    }
    DraftSpeculativeConfig sc;
    for (int g : {0, -1, 33}) {
        sc.gamma = g;
        expect_error(target.get(), target.get(), c, sc, ErrorCode::InvalidArgument, "gamma: " + std::to_string(g) + " is outside [1, 32]");
    }
    sc = {};
    sc.draft_loops = 9;
    expect_error(target.get(), target.get(), c, sc, ErrorCode::InvalidArgument, "draft_loops: 9 is outside [1, 8]");
    sc.draft_loops = -1;
    expect_error(target.get(), target.get(), c, sc, ErrorCode::InvalidArgument, "draft_loops");
    // The config's own rules come from validate_config.
    GenerateConfig bad = c;
    bad.top_p = 0;
    bad.temperature = 1;
    expect_error(target.get(), target.get(), bad, ok, ErrorCode::InvalidArgument, "top_p");
    bad = c;
    bad.beam_size = 4;
    expect_error(target.get(), target.get(), bad, ok, ErrorCode::NotSupported, "beam_size");
    bad = c;
    bad.early_exit.patience = 1;
    expect_error(target.get(), target.get(), bad, ok, ErrorCode::NotSupported, "early_exit_patience");
    // The draft's context limit counts too.
    {
        LoadOptions lo;
        lo.max_seq_len = 16;
        tinyloop::ModelHandle short_draft = tinyloop::load_model_handle(target_path(), lo);
        bad = c;
        bad.max_tokens = 20;
        expect_error(target.get(), short_draft.get(), bad, ok, ErrorCode::InvalidArgument, "draft model's max_seq_len 16");
    }
    const std::vector<int32_t> outside = {65, 400};
    EXPECT_THROW(draft_speculative_generate_ex(target.get(), target.get(), outside.data(), 2, c, ok), Error);
    // Refusals leave both models usable.
    const GenerateResult r = draft_speculative_generate(target.get(), target.get(), p.data(), 3, c);
    EXPECT_EQ(r.stats.tokens_emitted, 8);
    EXPECT_EQ(r.stats.spec_accepted, r.stats.spec_tested);  // a model drafting for itself is always right
}
