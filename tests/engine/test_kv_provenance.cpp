// KV provenance (GenerateOptions::kv_provenance) against its definition on real runs of the
// bundled model: plain decoding computes every row; early exit computes the layers of the passes
// a position ran and propagates the rest from its exited state; a prefix cache's positions are
// reused. Also the early-exit signal trace (early_exit_signals) against the adaptive decode.
#include <gtest/gtest.h>

#include <memory>

#include "test_util.h"

using namespace tinyloop;

namespace {

const std::string kF32 = TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-f32.tinyloop";

Model* bundled() {
    static tinyloop::ModelHandle m = tinyloop::load_model_handle(kF32);
    return m.get();
}

std::vector<int32_t> prompt_ids() { return tokenize(bundled(), "And God said, Let there be light: and there was"); }

GenerateConfig early_exit_config(float threshold) {
    GenerateConfig c;
    c.max_tokens = 24;
    c.loops = 8;
    c.ignore_eos = true;
    c.early_exit.patience = 1;
    c.early_exit.min_L = 2;
    c.early_exit.criterion = EarlyExitCriterion::HiddenL2;
    c.early_exit.threshold = threshold;
    return c;
}

// Checks the shape and the byte counts every provenance must have.
void check_common(const KVProvenance& p, const GenerateResult& r, int loops, int max_tokens) {
    const HParams& hp = model_hparams(bundled());
    ASSERT_EQ(p.n_layers, hp.n_pre_blocks + loops * hp.n_loop_layers);
    ASSERT_EQ(p.n_positions, static_cast<int>(r.tokens.size()));
    ASSERT_EQ(p.origin.size(), static_cast<size_t>(p.n_layers) * p.n_positions);
    const size_t row_bytes = static_cast<size_t>(hp.n_kv_heads) * hp.head_dim * sizeof(float);
    // The call's cache holds prompt + max_tokens positions.
    EXPECT_EQ(p.kv_bytes_allocated, 2 * row_bytes * p.n_layers * static_cast<size_t>(r.prompt_len + max_tokens));
    size_t written = 0;
    for (KVOrigin o : p.origin) written += o != KVOrigin::None;
    EXPECT_EQ(p.kv_bytes_written, 2 * row_bytes * written);
    // The last emitted token is never run: its rows are never written.
    for (int e = 0; e < p.n_layers; ++e) EXPECT_EQ(p.at(e, p.n_positions - 1), KVOrigin::None);
}

}  // namespace

TEST(KVProvenance, PlainDecodeComputesEveryRow) {
    const auto prompt = prompt_ids();
    GenerateConfig c;
    c.max_tokens = 16;
    c.ignore_eos = true;
    KVProvenance p;
    GenerateOptions o;
    o.kv_provenance = &p;
    const GenerateResult r = generate_ex(bundled(), prompt.data(), static_cast<int>(prompt.size()), c, o);
    ASSERT_EQ(r.stats.tokens_emitted, 16);
    check_common(p, r, model_hparams(bundled()).default_loops, 16);
    for (int e = 0; e < p.n_layers; ++e)
        for (int pos = 0; pos + 1 < p.n_positions; ++pos) EXPECT_EQ(p.at(e, pos), KVOrigin::Computed) << e << "," << pos;
    // Recording changes nothing about the output.
    EXPECT_EQ(r.tokens, generate_ex(bundled(), prompt.data(), static_cast<int>(prompt.size()), c).tokens);
}

TEST(KVProvenance, EarlyExitPropagatesTheLayersAfterTheExit) {
    const auto prompt = prompt_ids();
    const HParams& hp = model_hparams(bundled());
    const GenerateConfig c = early_exit_config(0.2f);
    KVProvenance p;
    GenerateOptions o;
    o.kv_provenance = &p;
    const GenerateResult r = generate_ex(bundled(), prompt.data(), static_cast<int>(prompt.size()), c, o);
    check_common(p, r, 8, c.max_tokens);
    const int P = r.prompt_len;
    for (int pos = 0; pos < P; ++pos)  // the prompt is prefilled at full depth
        for (int e = 0; e < p.n_layers; ++e) EXPECT_EQ(p.at(e, pos), KVOrigin::Computed);
    int propagated_rows = 0;
    // Emitted token i (i >= 1) came from the row at position P+i-1, which ran depth_per_token[i].
    for (int i = 1; i < r.stats.tokens_emitted; ++i) {
        const int pos = P + i - 1;
        const int depth = r.stats.depth_per_token[static_cast<size_t>(i)];
        const int ran = hp.n_pre_blocks + depth * hp.n_loop_layers;
        for (int e = 0; e < p.n_layers; ++e) {
            const KVOrigin want = e < ran ? KVOrigin::Computed : KVOrigin::Propagated;
            EXPECT_EQ(p.at(e, pos), want) << "layer " << e << " position " << pos << " depth " << depth;
            propagated_rows += p.at(e, pos) == KVOrigin::Propagated;
        }
    }
    EXPECT_GT(propagated_rows, 0) << "the threshold should let some tokens exit early";
    // Same tokens and depths as without recording.
    const GenerateResult plain = generate_ex(bundled(), prompt.data(), static_cast<int>(prompt.size()), c);
    EXPECT_EQ(r.tokens, plain.tokens);
    EXPECT_EQ(r.stats.depth_per_token, plain.stats.depth_per_token);
}

TEST(KVProvenance, PrefixCachePositionsAreReused) {
    const auto prompt = prompt_ids();
    const int k = 5;
    ASSERT_GT(static_cast<int>(prompt.size()), k + 2);
    GenerateConfig c;
    c.max_tokens = 8;
    c.ignore_eos = true;
    Owned<PrefixCache> cache(create_prefix_cache(bundled(), prompt.data(), k));
    KVProvenance p;
    GenerateOptions o;
    o.kv_provenance = &p;
    const GenerateResult r = generate_with_prefix(bundled(), cache.get(), prompt.data(),
                                                  static_cast<int>(prompt.size()), c, o);
    check_common(p, r, model_hparams(bundled()).default_loops, c.max_tokens);
    for (int e = 0; e < p.n_layers; ++e)
        for (int pos = 0; pos + 1 < p.n_positions; ++pos)
            EXPECT_EQ(p.at(e, pos), pos < k ? KVOrigin::Reused : KVOrigin::Computed) << e << "," << pos;
    EXPECT_EQ(r.tokens, generate_ex(bundled(), prompt.data(), static_cast<int>(prompt.size()), c).tokens);

    // Through a pool: the reused length it reports is the provenance's reused span.
    Owned<PrefixPool> pool(create_prefix_pool(bundled()));
    prefix_pool_add(pool.get(), prompt.data(), 3);
    prefix_pool_add(pool.get(), prompt.data(), k + 1);
    int reused = -1;
    KVProvenance q;
    o.kv_provenance = &q;
    const GenerateResult rp =
        generate_with_pool(pool.get(), prompt.data(), static_cast<int>(prompt.size()), c, o, &reused);
    ASSERT_EQ(reused, k + 1);
    for (int pos = 0; pos + 1 < q.n_positions; ++pos)
        EXPECT_EQ(q.at(q.n_layers - 1, pos), pos < reused ? KVOrigin::Reused : KVOrigin::Computed);
    EXPECT_EQ(rp.tokens, r.tokens);

    // A resume handle holds the whole prompt: every prompt row is reused, the rest computed.
    Owned<ResumeHandle> handle(
        create_resume_handle(bundled(), prompt.data(), static_cast<int>(prompt.size()), 2));
    GenerateConfig deeper = c;
    deeper.loops = 6;
    KVProvenance h;
    o.kv_provenance = &h;
    const GenerateResult rh = resume_generate(handle.get(), deeper, o);
    ASSERT_EQ(h.n_layers, model_hparams(bundled()).n_pre_blocks + 6 * model_hparams(bundled()).n_loop_layers);
    for (int e = 0; e < h.n_layers; ++e)
        for (int pos = 0; pos + 1 < h.n_positions; ++pos)
            EXPECT_EQ(h.at(e, pos), pos < rh.prompt_len ? KVOrigin::Reused : KVOrigin::Computed);
}

TEST(KVProvenance, EarlyExitFromAPrefixCache) {
    const auto prompt = prompt_ids();
    const int k = 4;
    const GenerateConfig c = early_exit_config(0.2f);
    Owned<PrefixCache> cache(create_prefix_cache(bundled(), prompt.data(), k, 8));
    KVProvenance p;
    GenerateOptions o;
    o.kv_provenance = &p;
    const GenerateResult r = generate_with_prefix(bundled(), cache.get(), prompt.data(),
                                                  static_cast<int>(prompt.size()), c, o);
    for (int e = 0; e < p.n_layers; ++e) {
        for (int pos = 0; pos < k; ++pos) EXPECT_EQ(p.at(e, pos), KVOrigin::Reused);
        for (int pos = k; pos < r.prompt_len; ++pos) EXPECT_EQ(p.at(e, pos), KVOrigin::Computed);
    }
    const HParams& hp = model_hparams(bundled());
    for (int i = 1; i < r.stats.tokens_emitted; ++i) {
        const int ran = hp.n_pre_blocks + r.stats.depth_per_token[static_cast<size_t>(i)] * hp.n_loop_layers;
        for (int e = 0; e < p.n_layers; ++e)
            EXPECT_EQ(p.at(e, r.prompt_len + i - 1), e < ran ? KVOrigin::Computed : KVOrigin::Propagated);
    }
}

TEST(KVProvenance, BeamSearchRefusesItAndNothingRunIsNothingWritten) {
    const auto prompt = prompt_ids();
    GenerateConfig c;
    c.max_tokens = 4;
    c.beam_size = 2;
    KVProvenance p;
    GenerateOptions o;
    o.kv_provenance = &p;
    try {
        generate_ex(bundled(), prompt.data(), static_cast<int>(prompt.size()), c, o);
        FAIL() << "beam search with kv_provenance should be refused";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::NotSupported);
        EXPECT_NE(std::string(e.what()).find("kv_provenance"), std::string::npos);
    }
    c.beam_size = 0;
    c.max_tokens = 0;
    const GenerateResult r = generate_ex(bundled(), prompt.data(), static_cast<int>(prompt.size()), c, o);
    EXPECT_EQ(p.n_positions, static_cast<int>(r.tokens.size()));
    EXPECT_EQ(p.kv_bytes_written, 0u);
    for (KVOrigin x : p.origin) EXPECT_EQ(x, KVOrigin::None);
    EXPECT_STREQ(kv_origin_name(KVOrigin::Propagated), "propagated");
}

namespace {

// early_exit_signals: for each criterion, the exit depth read off the trace is the depth the
// adaptive decode uses for a row whose context ran at full depth (the second token of a
// two-token decode from a prompt that ends just before it).

void check_trace_gives_exit_depths(Model* m, const std::vector<int32_t>& ids) {
    GenerateConfig full;
    full.max_tokens = 10;
    full.loops = 8;
    full.ignore_eos = true;
    const GenerateResult g = generate_ex(m, ids.data(), static_cast<int>(ids.size()), full);
    const std::vector<int32_t>& seq = g.tokens;
    const ExitSignals s = early_exit_signals(m, seq.data(), static_cast<int>(seq.size()), 8);
    ASSERT_EQ(s.n_positions, static_cast<int>(seq.size()));
    ASSERT_EQ(s.loops, 8);
    struct Case { EarlyExitCriterion c; float t; };
    const Case cases[] = {{EarlyExitCriterion::HiddenL2, 0.2f}, {EarlyExitCriterion::KL, 0.5f},
                          {EarlyExitCriterion::LogitMargin, 2.0f}, {EarlyExitCriterion::EntropyDelta, 0.3f},
                          {EarlyExitCriterion::ArgmaxStable, 0.05f}};
    int exits = 0;
    for (const Case& k : cases) {
        for (int pos = g.prompt_len; pos + 1 < static_cast<int>(seq.size()); ++pos) {
            // min_L 2, patience 1, peek every pass: exit at the first pass >= 2 that is stable.
            int want = 8;
            for (int l = 2; l < 8; ++l) {
                const float v = s.at(k.c, pos, l);
                const bool stable = k.c == EarlyExitCriterion::LogitMargin ? -v >= k.t
                                    : k.c == EarlyExitCriterion::ArgmaxStable ? v == 0.0f
                                                                              : v < k.t;
                if (stable) {
                    want = l;
                    break;
                }
            }
            GenerateConfig c = full;
            c.max_tokens = 2;
            c.early_exit.patience = 1;
            c.early_exit.min_L = 2;
            c.early_exit.criterion = k.c;
            c.early_exit.threshold = k.t;
            const GenerateResult one = generate_ex(m, seq.data(), pos, c);
            ASSERT_EQ(one.tokens[static_cast<size_t>(pos)], seq[static_cast<size_t>(pos)]);
            EXPECT_EQ(one.stats.depth_per_token[1], want) << "criterion " << int(k.c) << " position " << pos;
            exits += want < 8;
        }
    }
    EXPECT_GT(exits, 0);
    EXPECT_THROW(early_exit_signals(m, seq.data(), 0, 8), Error);
    EXPECT_THROW(early_exit_signals(m, seq.data(), 3, 99), Error);
}

}  // namespace

TEST(ExitSignals, TraceGivesTheAdaptiveDecodesExitDepth) { check_trace_gives_exit_depths(bundled(), prompt_ids()); }

// The same on a random model with input injection (FORMAT.md §1a): the trace runs the passes.
TEST(ExitSignals, TraceGivesTheAdaptiveDecodesExitDepthWithInputInjection) {
    HParams hp = tltest::small_hparams();
    hp.max_loops = 8;
    hp.loop_input = LoopInput::Add;
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(tltest::write_random_model("signals-v2.tinyloop", hp, 3));
    check_trace_gives_exit_depths(mp.get(), {12, 140, 7, 99, 201, 33});
}
