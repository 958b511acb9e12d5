// The logits pipeline against hand-computed values, and the sampler's frequencies.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "decode/sampling.h"

using namespace tinyloop;

TEST(Sampling, RepetitionPenaltyFollowsHuggingFace) {
    std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f};
    apply_repetition_penalty(l.data(), 4, {0, 1, 1, 7, -3}, 2.0f);  // out-of-range ids dropped
    EXPECT_FLOAT_EQ(l[0], 1.0f);   // positive: divided
    EXPECT_FLOAT_EQ(l[1], -4.0f);  // negative: multiplied, once despite two occurrences
    EXPECT_FLOAT_EQ(l[2], 1.0f);
    EXPECT_FLOAT_EQ(l[3], 0.5f);
}

TEST(Sampling, FrequencyAndPresencePenalties) {
    std::vector<float> l = {1.0f, 1.0f, 1.0f};
    apply_frequency_presence(l.data(), 3, {0, 0, 0, 2}, 0.5f, 0.25f);
    EXPECT_FLOAT_EQ(l[0], 1.0f - 1.5f - 0.25f);
    EXPECT_FLOAT_EQ(l[1], 1.0f);
    EXPECT_FLOAT_EQ(l[2], 1.0f - 0.5f - 0.25f);
}

TEST(Sampling, LogitBiasAndMask) {
    std::vector<float> l = {0.0f, 0.0f, 0.0f, 0.0f};
    apply_logit_bias(l.data(), 4, {{1, 3.0f}, {3, -100.0f}, {9, 5.0f}});
    EXPECT_FLOAT_EQ(l[1], 3.0f);
    EXPECT_FLOAT_EQ(l[3], -100.0f);
    mask_undecodable(l.data(), 4, 3);
    EXPECT_TRUE(std::isinf(l[3]) && l[3] < 0);
    EXPECT_EQ(argmax(l.data(), 4), 1);
}

TEST(Sampling, ArgmaxLowestIndexOnTies) {
    std::vector<float> l = {1.0f, 3.0f, 3.0f, NAN};
    EXPECT_EQ(argmax(l.data(), 4), 1);
}

TEST(Sampling, TemperatureTopKTopPMinP) {
    // logits log(0.5), log(0.25), log(0.15), log(0.1): probabilities at T=1.
    std::vector<float> l = {std::log(0.5f), std::log(0.25f), std::log(0.15f), std::log(0.1f)};
    auto p = sampling_probs(l.data(), 4, 1.0f, 50, 1.0f, 0.0f);
    EXPECT_NEAR(p[0], 0.5, 1e-6);
    EXPECT_NEAR(p[3], 0.1, 1e-6);
    p = sampling_probs(l.data(), 4, 1.0f, 2, 1.0f, 0.0f);  // top-k 2: 0.5/0.75, 0.25/0.75
    EXPECT_NEAR(p[0], 2.0 / 3, 1e-6);
    EXPECT_NEAR(p[1], 1.0 / 3, 1e-6);
    EXPECT_EQ(p[2], 0.0f);
    p = sampling_probs(l.data(), 4, 1.0f, 50, 0.8f, 0.0f);  // cumulative 0.5, 0.75, 0.9 -> keep 3
    EXPECT_NEAR(p[2], 0.15 / 0.9, 1e-6);
    EXPECT_EQ(p[3], 0.0f);
    p = sampling_probs(l.data(), 4, 1.0f, 50, 1.0f, 0.4f);  // keep p >= 0.2: two tokens
    EXPECT_NEAR(p[0], 2.0 / 3, 1e-6);
    EXPECT_EQ(p[2], 0.0f);
    p = sampling_probs(l.data(), 4, 2.0f, 50, 1.0f, 0.0f);  // T=2: p ∝ sqrt(p)
    const double s = std::sqrt(0.5) + std::sqrt(0.25) + std::sqrt(0.15) + std::sqrt(0.1);
    EXPECT_NEAR(p[1], std::sqrt(0.25) / s, 1e-6);
}

TEST(Sampling, FrequenciesMatchTheDistribution) {
    const std::vector<float> l = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
    const auto p = sampling_probs(l.data(), 4, 1.0f, 50, 1.0f, 0.0f);
    Rng rng(1234);
    const int N = 40000;
    std::vector<int> count(4, 0);
    for (int i = 0; i < N; ++i) ++count[draw(p, rng)];
    double chi2 = 0;
    for (int k = 0; k < 4; ++k) {
        const double e = N * p[k];
        chi2 += (count[k] - e) * (count[k] - e) / e;
    }
    EXPECT_LT(chi2, 11.34);  // 3 degrees of freedom, p = 0.01
    Rng a(99), b(99);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(draw(p, a), draw(p, b));
}

TEST(Sampling, NoRepeatNgramBansTheTokenThatWouldRepeat) {
    std::vector<float> l(10, 0.0f);
    // context 1 2 3 1 2 : with n = 3 the tail (1 2) was followed by 3 -> 3 is banned.
    ban_repeated_ngrams(l.data(), 10, {1, 2, 3, 1, 2}, 3);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(std::isinf(l[i]), i == 3) << i;
    std::vector<float> m(10, 0.0f);
    ban_repeated_ngrams(m.data(), 10, {4, 5, 4}, 2);  // tail (4) was followed by 5
    EXPECT_TRUE(std::isinf(m[5]));
    EXPECT_FALSE(std::isinf(m[4]));
    std::vector<float> o(10, 0.0f);
    ban_repeated_ngrams(o.data(), 10, {7, 8}, 1);  // n = 1: every seen token
    EXPECT_TRUE(std::isinf(o[7]) && std::isinf(o[8]));
    EXPECT_FALSE(std::isinf(o[6]));
}

TEST(Sampling, BadWordsBanSingleTokensAndCompletedSequences) {
    std::vector<float> l(10, 0.0f);
    ban_bad_words(l.data(), 10, {1, 2, 3}, {{9}, {3, 4}, {2, 5}, {7, 3, 6}});
    EXPECT_TRUE(std::isinf(l[9]));   // single token: always
    EXPECT_TRUE(std::isinf(l[4]));   // 3 is the tail
    EXPECT_FALSE(std::isinf(l[5]));  // 2 is not the tail
    EXPECT_FALSE(std::isinf(l[6]));  // (7, 3) is not the tail
}
