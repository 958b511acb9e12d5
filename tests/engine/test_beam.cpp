// Beam search against exhaustive search on short lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "decode/sampling.h"
#include "test_util.h"

using namespace tinyloop;

namespace {

// A model with peaked distributions: the tied embedding (and so the head) scaled up.
std::string peaked_model(LoopInput input = LoopInput::None) {
    HParams hp = tltest::small_hparams();
    hp.loop_input = input;
    ModelSpec spec = random_model_spec(hp, 5);
    for (auto& t : spec.tensors)
        if (t.name == "embed")
            for (float& x : t.values) x *= 4.0f;
    const std::string path = tltest::temp_path(std::string("beam-") + loop_input_name(input) + ".tinyloop");
    save_model(path, spec);
    return path;
}

std::vector<double> logprobs(Model* m, const std::vector<int32_t>& seq) {
    const int V = model_hparams(m).vocab_size;
    const int n_ids = model_info(m).tokenizer_vocab;
    auto l = forward_logits(m, seq.data(), static_cast<int>(seq.size()), 0);
    std::vector<float> row(l.end() - V, l.end());
    mask_undecodable(row.data(), V, n_ids);
    double mx = *std::max_element(row.begin(), row.end()), s = 0;
    for (float x : row) s += std::exp(x - mx);
    std::vector<double> out(V);
    for (int i = 0; i < V; ++i) out[i] = row[i] - mx - std::log(s);
    return out;
}

}  // namespace

TEST(Beam, EqualsExhaustiveSearchForTwoTokens) {
    for (LoopInput input : {LoopInput::None, LoopInput::Add}) {  // and with input injection (§1a)
    SCOPED_TRACE(loop_input_name(input));
    const std::string path = peaked_model(input);
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(path);
    Model* m = mp.get();
    const int n_ids = model_info(m).tokenizer_vocab;
    int differs_from_greedy = 0;
    for (std::vector<int32_t> prompt : {std::vector<int32_t>{10, 20, 30}, {200, 1}, {5}, {99, 98, 97, 96}, {42, 43}}) {
        // Exhaustive: every (a, b).
        const auto l1 = logprobs(m, prompt);
        double best = -1e300;
        std::vector<int32_t> best_seq;
        for (int a = 0; a < n_ids; ++a) {
            auto s = prompt;
            s.push_back(a);
            const auto l2 = logprobs(m, s);
            for (int b = 0; b < n_ids; ++b)
                if (l1[a] + l2[b] > best) {
                    best = l1[a] + l2[b];
                    best_seq = {a, b};
                }
        }
        GenerateConfig c;
        c.max_tokens = 2;
        c.ignore_eos = true;
        c.beam_size = 16;
        auto out = generate(m, prompt.data(), static_cast<int>(prompt.size()), c);
        ASSERT_EQ(out.size(), prompt.size() + 2);
        EXPECT_EQ(std::vector<int32_t>(out.end() - 2, out.end()), best_seq);
        GenerateConfig g;
        g.max_tokens = 2;
        g.ignore_eos = true;
        auto gr = generate(m, prompt.data(), static_cast<int>(prompt.size()), g);
        differs_from_greedy += gr != out;
        // One token: beam search is greedy.
        c.max_tokens = 1;
        g.max_tokens = 1;
        EXPECT_EQ(generate(m, prompt.data(), static_cast<int>(prompt.size()), c),
                  generate(m, prompt.data(), static_cast<int>(prompt.size()), g));
    }
    RecordProperty(std::string("differs_from_greedy_") + loop_input_name(input), differs_from_greedy);
    }
}

TEST(Beam, LengthPenaltyAndEosRanking) {
    const std::string path = peaked_model();
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(path);
    Model* m = mp.get();
    const int32_t eos = model_info(m).tokenizer.eos_id;
    std::vector<int32_t> prompt = {10, 20, 30};
    GenerateConfig c;
    c.max_tokens = 6;
    c.beam_size = 4;
    c.logit_bias = {{eos, 6.0f}};  // make EOS competitive so hypotheses finish early
    GenerateResult r = generate_ex(m, prompt.data(), 3, c);
    EXPECT_GE(r.stats.tokens_emitted, 1);
    EXPECT_LE(r.stats.tokens_emitted, 6);
    if (r.tokens.back() == eos) {
        EXPECT_EQ(r.stats.stop_reason, StopReason::EOS);
    }
    // Inconsistent knobs are errors that name the field.
    GenerateConfig bad;
    bad.beam_size = 1;
    bad.length_penalty = 2.0f;
    EXPECT_THROW(generate(m, prompt.data(), 3, bad), Error);
    bad.beam_size = 65;
    bad.length_penalty = 1.0f;
    EXPECT_THROW(generate(m, prompt.data(), 3, bad), Error);
}
