// Quantization across depth (tinyloop_analysis): the divergence at each depth at one position,
// recomputed by hand from the two models' forward_lens_logits; a file against itself shows none;
// a different model is refused naming the field.
#include <algorithm>
#include <cmath>
#include <memory>

#include <tinyloop_analysis/quant_across_depth.h>

#include "test_util.h"
#include <gtest/gtest.h>

#include "analysis_test_util.h"

using namespace tinyloop::analysis;
using namespace analysis_test;

TEST(QuantAcrossDepth, DivergenceEqualsDirectLens) {

    std::unique_ptr<tinyloop::Model, void (*)(tinyloop::Model*)> q4(tinyloop::load_model(kQ4), tinyloop::free_model);
    tinyloop::Model* a = bundled();
    tinyloop::Model* b = q4.get();
    const auto tokens = tinyloop::tokenize(a, kPrompt);
    const int n = static_cast<int>(tokens.size());
    const QuantData q = compare_quantized(a, b, tokens, 6);
    EXPECT_EQ(q.loops, 6);
    EXPECT_EQ(q.n, n);
    const int V = tinyloop::model_hparams(a).vocab_size;
    const auto za = tinyloop::forward_lens_logits(a, tokens.data(), n, 6);
    const auto zb = tinyloop::forward_lens_logits(b, tokens.data(), n, 6);
    const int pos = 4;  // the hand-checked position
    bool differs = false;
    for (int l = 1; l <= 6; ++l) {
        const float* ra = za.data() + (static_cast<size_t>(l - 1) * n + pos) * V;
        const float* rb = zb.data() + (static_cast<size_t>(l - 1) * n + pos) * V;
        // KL(A||B) = sum_i pA_i ((a_i - lseA) - (b_i - lseB)), log-sum-exp in long double
        long double ma = ra[0], mb = rb[0];
        for (int i = 1; i < V; ++i) {
            ma = std::max<long double>(ma, ra[i]);
            mb = std::max<long double>(mb, rb[i]);
        }
        long double sa = 0, sb = 0;
        for (int i = 0; i < V; ++i) {
            sa += std::exp(static_cast<long double>(ra[i]) - ma);
            sb += std::exp(static_cast<long double>(rb[i]) - mb);
        }
        const long double lsa = ma + std::log(sa), lsb = mb + std::log(sb);
        long double kl = 0;
        float mx = 0;
        for (int i = 0; i < V; ++i) {
            const long double la = ra[i] - lsa, lb = rb[i] - lsb;
            kl += std::exp(la) * (la - lb);
            mx = std::max(mx, std::fabs(ra[i] - rb[i]));
        }
        const float got = q.kl[q.at(l, pos)];
        EXPECT_LE(std::fabs(got - static_cast<double>(kl)), 1e-6 + 1e-5 * static_cast<double>(kl))
            << "depth " << l << ": " << got << " vs " << static_cast<double>(kl);
        EXPECT_EQ(q.max_abs_diff[q.at(l, pos)], mx);
        EXPECT_EQ(q.top1_a[q.at(l, pos)], static_cast<int32_t>(std::max_element(ra, ra + V) - ra));
        EXPECT_EQ(q.top1_b[q.at(l, pos)], static_cast<int32_t>(std::max_element(rb, rb + V) - rb));
        differs = differs || mx > 0;
    }
    EXPECT_TRUE(differs) << "q4 and f32 logits should differ somewhere";
    // Same file twice: no divergence at all.
    const QuantData same = compare_quantized(a, a, tokens, 3);
    for (float x : same.kl) EXPECT_EQ(x, 0.0f);
    // Not the same model: refused, naming the field.
    const std::string tiny = tltest::write_random_model("analysis_quant_other.tinyloop", tltest::small_hparams());
    std::unique_ptr<tinyloop::Model, void (*)(tinyloop::Model*)> other(tinyloop::load_model(tiny), tinyloop::free_model);
    try {
        compare_quantized(a, other.get(), tokens, 2);
        FAIL() << "a different model accepted";
    } catch (const tinyloop::Error& e) {
        EXPECT_TRUE(contains(e.what(), "vocab_size"));
    }
}
