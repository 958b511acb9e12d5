// The Hugging Face generate() semantics the engine follows (tests/python/test_hf_peer.py checks
// them against transformers itself): the processors' order, min_new_tokens / min_length, beam
// search on log-softmax scores, early_stopping, and the one deliberate difference (bad_words may
// ban EOS).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "decode/emit.h"
#include "model/model.h"
#include "decode/sampling.h"
#include "test_util.h"

using namespace tinyloop;

namespace {

struct Fixture {
    std::string path = tltest::write_random_model("hf-processors.tinyloop", tltest::small_hparams(), 11);
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(path);
    Model* m = mp.get();
    int32_t eos = model_info(m).tokenizer.eos_id;
    std::vector<int32_t> prompt = {10, 20, 30, 40};
    std::vector<int32_t> run(const GenerateConfig& c) const {
        const auto out = generate(m, prompt.data(), static_cast<int>(prompt.size()), c);
        return std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(prompt.size()), out.end());
    }
};

using tltest::refusal;

}  // namespace

TEST(HfProcessors, LogitBiasComesBeforeTheRepetitionPenalty) {
    Fixture f;
    GenerateConfig c;
    c.logit_bias = {{7, 3.0f}};
    c.repetition_penalty = 2.0f;
    const LogitsPipeline pipe(*f.m, c);
    const int V = f.m->hp.vocab_size;
    std::vector<float> logits(static_cast<size_t>(V), -1.0f), z;
    pipe.process(logits.data(), {1, 7}, {}, nullptr, z);
    EXPECT_FLOAT_EQ(z[7], (-1.0f + 3.0f) / 2.0f);  // HF: sequence_bias, then the penalty (not -2 + 3)
    EXPECT_FLOAT_EQ(z[1], -2.0f);
    EXPECT_FLOAT_EQ(z[2], -1.0f);
}

TEST(HfProcessors, MinNewTokensAndMinLengthHoldEosBack) {
    Fixture f;
    GenerateConfig c;
    c.max_tokens = 10;
    c.logit_bias = {{f.eos, 100.0f}};  // EOS wins whenever it is allowed
    EXPECT_EQ(f.run(c), std::vector<int32_t>{f.eos});
    for (int beam : {0, 3}) {
        SCOPED_TRACE(beam);
        c.beam_size = beam;
        c.min_new_tokens = 4;
        std::vector<int32_t> out = f.run(c);
        ASSERT_EQ(out.size(), 5u);
        EXPECT_EQ(out.back(), f.eos);
        EXPECT_EQ(std::count(out.begin(), out.end(), f.eos), 1);
        c.min_new_tokens = 0;
        c.min_length = static_cast<int>(f.prompt.size()) + 4;  // prompt + emitted, as HF's min_length
        EXPECT_EQ(f.run(c), out);
        c.min_length = 0;
    }
}

// The documented difference: HF drops a bad_words_ids entry equal to [eos]; here it bans EOS.
TEST(HfProcessors, BadWordsMayBanEos) {
    Fixture f;
    GenerateConfig c;
    c.max_tokens = 6;
    c.logit_bias = {{f.eos, 100.0f}};
    c.bad_words = {{f.eos}};
    const GenerateResult r = generate_ex(f.m, f.prompt.data(), 4, c);
    EXPECT_EQ(r.stats.tokens_emitted, 6);
    EXPECT_EQ(r.stats.stop_reason, StopReason::MAX_TOKENS);
    EXPECT_EQ(std::count(r.tokens.begin(), r.tokens.end(), f.eos), 0);
}

// One beam step is the argmax of the processed log-softmax (HF hands its processors log-probs):
// a repetition penalty multiplies a seen token's negative log-prob.
TEST(HfProcessors, BeamProcessorsSeeLogSoftmaxScores) {
    Fixture f;
    const int V = f.m->hp.vocab_size, n_ids = model_info(f.m).tokenizer_vocab;
    auto logits = forward_logits(f.m, f.prompt.data(), 4, 0);
    std::vector<float> row(logits.end() - V, logits.end());
    mask_undecodable(row.data(), V, n_ids);
    const float mx = *std::max_element(row.begin(), row.end());
    double s = 0;
    for (float x : row) s += std::exp(static_cast<double>(x) - mx);
    for (float& x : row) x = x - mx - static_cast<float>(std::log(s));
    for (float penalty : {0.5f, 3.0f}) {
        SCOPED_TRACE(penalty);
        std::vector<float> z = row;
        apply_repetition_penalty(z.data(), V, f.prompt, penalty);
        GenerateConfig c;
        c.max_tokens = 1;
        c.beam_size = 4;
        c.repetition_penalty = penalty;
        c.ignore_eos = true;
        EXPECT_EQ(f.run(c), std::vector<int32_t>{argmax(z.data(), n_ids)});
        c.renormalize_logits = true;  // a shift per beam: one step's order is the same
        EXPECT_EQ(f.run(c), std::vector<int32_t>{argmax(z.data(), n_ids)});
    }
}

TEST(HfProcessors, EarlyStoppingModes) {
    Fixture f;
    GenerateConfig c;
    c.max_tokens = 12;
    c.beam_size = 3;
    c.logit_bias = {{f.eos, 4.0f}};  // hypotheses finish along the way
    std::vector<std::vector<int32_t>> outs;
    for (EarlyStopping e : {EarlyStopping::Heuristic, EarlyStopping::WhenFull, EarlyStopping::Never}) {
        c.early_stopping = e;
        outs.push_back(f.run(c));
        EXPECT_GE(outs.back().size(), 1u);
    }
    // HF: with length_penalty <= 0 "never" bounds a live beam by its current score, as false does.
    c.length_penalty = 0.0f;
    c.early_stopping = EarlyStopping::Never;
    const auto never0 = f.run(c);
    c.early_stopping = EarlyStopping::Heuristic;
    EXPECT_EQ(f.run(c), never0);
}

TEST(HfProcessors, RangesAreChecked) {
    Fixture f;
    GenerateConfig c;
    c.early_stopping = EarlyStopping::Never;
    EXPECT_NE(refusal(f.m, c).find("early_stopping: only applies to beam search"), std::string::npos);
    c = {};
    c.renormalize_logits = true;
    EXPECT_NE(refusal(f.m, c).find("renormalize_logits"), std::string::npos);
    c = {};
    c.min_new_tokens = -1;
    EXPECT_NE(refusal(f.m, c).find("min_new_tokens: -1 is outside [0, 128]"), std::string::npos);
    c = {};
    c.min_length = 129;
    EXPECT_NE(refusal(f.m, c).find("min_length: 129 is outside [0, 128]"), std::string::npos);
    c = {};
    c.beam_size = 2;
    c.early_stopping = static_cast<EarlyStopping>(7);
    EXPECT_NE(refusal(f.m, c).find("early_stopping: 7 is not one of"), std::string::npos);
    c.early_stopping = EarlyStopping::WhenFull;
    c.renormalize_logits = true;
    c.min_new_tokens = 3;
    EXPECT_EQ(refusal(f.m, c), "");
}
