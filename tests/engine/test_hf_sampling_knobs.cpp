// Hugging Face's sampling-side GenerationConfig knobs on hand-made logits (test_hf_peer.py checks
// them against transformers itself): suppress_tokens, begin_suppress_tokens, forced_eos_token_id,
// exponential_decay_length_penalty in the logits pipeline; typical_p, epsilon_cutoff, eta_cutoff
// in the sampling distribution (after temperature, top-k, top-p and min-p, as HF orders them).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "decode/emit.h"
#include "decode/sampling.h"
#include "model/model.h"
#include "test_util.h"

using namespace tinyloop;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Fixture {
    std::string path = tltest::write_random_model("hf-sampling-knobs.tinyloop", tltest::small_hparams(), 13);
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(path);
    Model* m = mp.get();
    int V = m->hp.vocab_size;
    int32_t eos = model_info(m).tokenizer.eos_id;
    std::vector<int32_t> prompt = {10, 20, 30, 40};
    std::vector<int32_t> run(const GenerateConfig& c) const {
        const auto out = generate(m, prompt.data(), static_cast<int>(prompt.size()), c);
        return std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(prompt.size()), out.end());
    }
    // The pipeline's output for flat logits 1.0 after `output` (the context is prompt + output).
    std::vector<float> processed(const GenerateConfig& c, const std::vector<int32_t>& output) const {
        std::vector<int32_t> context = prompt;
        context.insert(context.end(), output.begin(), output.end());
        std::vector<float> logits(static_cast<size_t>(V), 1.0f), z;
        LogitsPipeline(*m, c).process(logits.data(), context, output, nullptr, z);
        return z;
    }
};

// q = {0.5, 0.3, 0.15, 0.05} as logits; its entropy is 1.14212 nats.
const std::vector<float> kLogits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};

std::vector<float> probs(float typical, float epsilon, float eta, int top_k = 50) {
    return sampling_probs(kLogits.data(), 4, 1.0f, top_k, 1.0f, 0.0f, {typical, epsilon, eta});
}

void expect_probs(const std::vector<float>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "token " << i;
}

}  // namespace

TEST(HfSamplingKnobs, SuppressTokensAlwaysBeginSuppressTokensAtTheFirstNewToken) {
    Fixture f;
    GenerateConfig c;
    c.suppress_tokens = {3, 9};
    c.begin_suppress_tokens = {5};
    std::vector<float> z = f.processed(c, {});
    EXPECT_EQ(z[3], kNegInf);
    EXPECT_EQ(z[9], kNegInf);
    EXPECT_EQ(z[5], kNegInf);
    EXPECT_EQ(z[4], 1.0f);
    z = f.processed(c, {7});
    EXPECT_EQ(z[3], kNegInf);
    EXPECT_EQ(z[5], 1.0f);  // only the first new token (HF: input length == the prompt's)

    // Greedy and beam: the suppressed ids never come out, the first token is not the begin one.
    for (int beam : {0, 3}) {
        SCOPED_TRACE(beam);
        GenerateConfig g;
        g.max_tokens = 12;
        g.beam_size = beam;
        const std::vector<int32_t> plain = f.run(g);
        ASSERT_FALSE(plain.empty());
        g.suppress_tokens = {plain[0], plain.back()};
        for (int32_t t : f.run(g)) EXPECT_TRUE(t != plain[0] && t != plain.back()) << t;
        g.suppress_tokens.clear();
        g.begin_suppress_tokens = {plain[0]};
        EXPECT_NE(f.run(g).at(0), plain[0]);
    }
}

TEST(HfSamplingKnobs, ForcedEosIsTheOnlyChoiceForTheLastAllowedToken) {
    Fixture f;
    GenerateConfig c;
    c.max_tokens = 6;
    c.forced_eos_token_id = 7;
    EXPECT_EQ(f.processed(c, {1, 2, 3, 4}), f.processed(GenerateConfig{}, {1, 2, 3, 4}));
    const std::vector<float> z = f.processed(c, {1, 2, 3, 4, 5});  // HF: cur_len == max_length - 1
    for (int i = 0; i < f.V; ++i) EXPECT_EQ(z[i], i == 7 ? 0.0f : kNegInf) << i;

    for (int beam : {0, 3}) {
        SCOPED_TRACE(beam);
        c.beam_size = beam;
        c.forced_eos_token_id = f.eos;
        c.ignore_eos = false;
        std::vector<int32_t> out = f.run(c);
        EXPECT_EQ(out.back(), f.eos);
        EXPECT_LE(out.size(), 6u);
    }
    c.beam_size = 0;
    c.ignore_eos = true;
    c.forced_eos_token_id = 7;  // any id: it ends the output only when it is the model's EOS
    const std::vector<int32_t> out = f.run(c);
    ASSERT_EQ(out.size(), 6u);
    EXPECT_EQ(out.back(), 7);
}

TEST(HfSamplingKnobs, ExponentialDecayRaisesEosByItsMagnitude) {
    Fixture f;
    GenerateConfig c;
    c.exponential_decay_length_penalty = std::pair<int, float>{3, 1.5f};
    std::vector<float> logits(static_cast<size_t>(f.V), 0.5f);
    for (float eos_logit : {2.0f, -2.0f}) {
        logits[static_cast<size_t>(f.eos)] = eos_logit;
        std::vector<float> z;
        const LogitsPipeline pipe(*f.m, c);
        pipe.process(logits.data(), {1, 2, 3}, {1, 2, 3}, nullptr, z);  // 3 emitted: not past start_index
        EXPECT_FLOAT_EQ(z[f.eos], eos_logit);
        // 5 emitted, after a 9-token prompt: the count is of new tokens (HF adds the prompt's length
        // to start_index). s + |s| * (1.5^2 - 1): 2 -> 4.5 and -2 -> 0.5.
        const std::vector<int32_t> context = {9, 9, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, 4, 5};
        pipe.process(logits.data(), context, {1, 2, 3, 4, 5}, nullptr, z);
        EXPECT_FLOAT_EQ(z[f.eos], eos_logit + 2.0f * 1.25f);
        EXPECT_FLOAT_EQ(z[0], 0.5f);
    }
    logits[static_cast<size_t>(f.eos)] = kNegInf;  // a banned EOS stays banned
    std::vector<float> z;
    LogitsPipeline(*f.m, c).process(logits.data(), {1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}, nullptr, z);
    EXPECT_EQ(z[f.eos], kNegInf);
    // A large factor saturates at the float range instead of reaching inf.
    c.exponential_decay_length_penalty = std::pair<int, float>{0, 10.0f};
    logits[static_cast<size_t>(f.eos)] = 1.0f;
    std::vector<int32_t> long_output(100, 1);
    LogitsPipeline(*f.m, c).process(logits.data(), long_output, long_output, nullptr, z);
    EXPECT_EQ(z[f.eos], std::numeric_limits<float>::max());
}

TEST(HfSamplingKnobs, TypicalKeepsTheMostTypicalTokensUpToTheMass) {
    // |-log q - H|: 0.449, 0.062, 0.755, 1.854, so the order is 1, 0, 2, 3 (cumulative 0.3, 0.8,
    // 0.95, 1); HF keeps up to and including the token whose cumulative mass reaches typical_p.
    expect_probs(probs(0.2f, 0, 0), {0, 1, 0, 0});  // the most probable token is not the most typical
    expect_probs(probs(0.5f, 0, 0), {0.625, 0.375, 0, 0});
    expect_probs(probs(0.9f, 0, 0), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0});
    expect_probs(probs(1.0f, 0, 0), {0.5, 0.3, 0.15, 0.05});
    // After top-k 2 (HF's order): {0.625, 0.375}, H = 0.662, token 0 is now the most typical.
    expect_probs(probs(0.5f, 0, 0, 2), {1, 0, 0, 0});
}

TEST(HfSamplingKnobs, EpsilonAndEtaDropTheUnlikelyTokensButNeverTheMostProbable) {
    expect_probs(probs(1, 0.1f, 0), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0});
    expect_probs(probs(1, 0.6f, 0), {1, 0, 0, 0});  // all below: the most probable stays
    // eta 0.5: min(0.5, sqrt(0.5) * e^-1.14212) = 0.2257, so 0.3 stays (epsilon 0.5 would drop it).
    expect_probs(probs(1, 0, 0.5f), {0.625, 0.375, 0, 0});
    expect_probs(probs(1, 0.5f, 0), {1, 0, 0, 0});
    // eta 0.1: min(0.1, 0.1009) = 0.1.
    expect_probs(probs(1, 0, 0.1f), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0});
    // One after another, each on what the one before left: typical 0.9 leaves {0.5, 0.3, 0.15}
    // renormalised (0.158 for the last), so epsilon 0.16 then drops it.
    expect_probs(probs(0.9f, 0.16f, 0), {0.625, 0.375, 0, 0});
}

TEST(HfSamplingKnobs, RangesAreChecked) {
    Fixture f;
    auto refused = [&](auto set, const std::string& message) {
        GenerateConfig c;
        set(c);
        std::string why = "accepted";
        try { validate_config(f.m, 4, c); } catch (const Error& e) { why = e.what(); }
        EXPECT_NE(why.find(message), std::string::npos) << why;
    };
    const std::string vocab = std::to_string(f.V);
    refused([](GenerateConfig& c) { c.forced_eos_token_id = -2; }, "forced_eos_token_id: -2 is outside [0, " + vocab + ") (-1 disables)");
    refused([&](GenerateConfig& c) { c.forced_eos_token_id = f.V; }, "forced_eos_token_id: " + vocab + " is outside");
    refused([](GenerateConfig& c) { c.forced_eos_token_id = 4, c.suppress_tokens = {4}; }, "is also in suppress_tokens");
    refused([](GenerateConfig& c) { c.exponential_decay_length_penalty = std::pair<int, float>{-1, 1.1f}; },
            "exponential_decay_length_penalty: start_index -1 is outside [0, 128]");
    refused([](GenerateConfig& c) { c.exponential_decay_length_penalty = std::pair<int, float>{2, 0.0f}; },
            "exponential_decay_length_penalty: decay_factor 0 is outside (0, 10]");
    refused([](GenerateConfig& c) { c.exponential_decay_length_penalty = std::pair<int, float>{2, NAN}; },
            "decay_factor nan is outside");
    refused([](GenerateConfig& c) { c.suppress_tokens = {1, -1}; }, "suppress_tokens[1]: token id -1 is outside the vocabulary");
    refused([&](GenerateConfig& c) { c.begin_suppress_tokens = {f.V}; }, "begin_suppress_tokens[0]: token id");
    refused([&](GenerateConfig& c) { for (int i = f.V - 1; i >= 0; --i) c.suppress_tokens.push_back(i); },
            "suppress_tokens: bans every id of the vocabulary");
    refused([](GenerateConfig& c) { c.typical_p = 0.0f; }, "typical_p: 0 is outside (0, 1] (1 disables)");
    refused([](GenerateConfig& c) { c.typical_p = 1.5f; }, "typical_p: 1.5 is outside (0, 1]");
    refused([](GenerateConfig& c) { c.epsilon_cutoff = 1.0f; }, "epsilon_cutoff: 1 is outside [0, 1) (0 disables)");
    refused([](GenerateConfig& c) { c.eta_cutoff = -0.5f; }, "eta_cutoff: -0.5 is outside [0, 1)");
    refused([](GenerateConfig& c) { c.eta_cutoff = INFINITY; }, "eta_cutoff: must be a finite number");
    GenerateConfig ok;  // the ends of each range
    ok.forced_eos_token_id = f.V - 1;
    ok.exponential_decay_length_penalty = std::pair<int, float>{0, 10.0f};
    ok.suppress_tokens = ok.begin_suppress_tokens = {0, f.V - 2};
    ok.epsilon_cutoff = ok.eta_cutoff = 0.999f;
    EXPECT_NO_THROW(validate_config(f.m, 4, ok));
}
