// Beam search against exhaustive search on short lengths; several outputs and diverse beam
// search (Hugging Face's num_return_sequences, num_beam_groups, diversity_penalty): beam
// search's best N against exhaustive search, group beam search's groups, sampling's N draws
// against single draws, the refusals, and the results codec. tests/python/test_hf_peer.py and
// test_hf_peer_beams.py compare the same knobs with transformers itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "decode/sampling.h"
#include "test_util.h"
#include "tinyloop/json.h"

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

namespace {

// A random model for the tests of several outputs and diverse beam search.
struct Fixture {
    std::string path = tltest::write_random_model("beam-outputs.tinyloop", tltest::small_hparams(), 13);
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(path);
    Model* m = mp.get();
    int n_ids = model_info(m).tokenizer_vocab;
    GenerateResult run(const std::vector<int32_t>& prompt, const GenerateConfig& c,
                       const GenerateOptions& o = {}) const {
        return generate_ex(m, prompt.data(), static_cast<int>(prompt.size()), c, o);
    }
};

using tltest::refusal;

}  // namespace

TEST(BeamOutputs, BestNEqualExhaustiveSearchForTwoTokens) {
    const Fixture f;
    const std::vector<int32_t> prompt = {10, 20, 30};
    // Every (a, b) with its log-probability, best first.
    const auto l1 = logprobs(f.m, prompt);
    std::vector<std::pair<double, std::vector<int32_t>>> all;
    for (int a = 0; a < f.n_ids; ++a) {
        auto s = prompt;
        s.push_back(a);
        const auto l2 = logprobs(f.m, s);
        for (int b = 0; b < f.n_ids; ++b) all.push_back({l1[a] + l2[b], {a, b}});
    }
    std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    GenerateConfig c;
    c.max_tokens = 2;
    c.ignore_eos = true;
    c.beam_size = 16;
    c.num_return_sequences = 5;
    const GenerateResult r = f.run(prompt, c);
    ASSERT_EQ(r.sequences.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(r.sequences[i].output, all[i].second) << "sequence " << i;
        EXPECT_NEAR(r.sequences[i].score, all[i].first / 2.0, 1e-4) << "sequence " << i;  // len^1
        EXPECT_EQ(r.sequences[i].stop_reason, StopReason::MAX_TOKENS);
    }
    // The first is the plain result, which one output alone also gives.
    EXPECT_EQ(std::vector<int32_t>(r.tokens.begin() + 3, r.tokens.end()), r.sequences[0].output);
    EXPECT_EQ(r.text, r.sequences[0].text);
    c.num_return_sequences = 1;
    const GenerateResult one = f.run(prompt, c);
    EXPECT_EQ(one.tokens, r.tokens);
    EXPECT_TRUE(one.sequences.empty());
}

TEST(BeamOutputs, GroupsOfOneBeamWithoutPenaltyAreGreedyAndWithPenaltyDiffer) {
    const Fixture f;
    const std::vector<int32_t> prompt = {7, 8, 9, 10};
    GenerateConfig g;
    g.max_tokens = 6;
    g.ignore_eos = true;
    const GenerateResult greedy = f.run(prompt, g);
    const std::vector<int32_t> greedy_out(greedy.tokens.begin() + 4, greedy.tokens.end());

    GenerateConfig c = g;
    c.beam_size = 3;
    c.num_beam_groups = 3;  // three searches of one beam each: three greedy decodes
    c.num_return_sequences = 3;
    GenerateResult r = f.run(prompt, c);
    ASSERT_EQ(r.sequences.size(), 3u);
    for (const auto& q : r.sequences) EXPECT_EQ(q.output, greedy_out);

    // A penalty no score survives: at every step each group takes an id no earlier group took;
    // the first group is the plain search (greedy) still.
    c.diversity_penalty = 100.0f;
    r = f.run(prompt, c);
    ASSERT_EQ(r.sequences.size(), 3u);
    bool has_greedy = false;
    for (const auto& q : r.sequences) has_greedy |= q.output == greedy_out;
    EXPECT_TRUE(has_greedy);
    for (size_t t = 0; t < 6; ++t) {
        std::set<int32_t> ids;
        for (const auto& q : r.sequences) ids.insert(q.output.at(t));
        EXPECT_EQ(ids.size(), 3u) << "position " << t;
    }
    for (size_t i = 1; i < r.sequences.size(); ++i) EXPECT_GE(r.sequences[i - 1].score, r.sequences[i].score);

    // A mild penalty with two groups of two: the groups' best hypotheses, best first.
    c.beam_size = 4;
    c.num_beam_groups = 2;
    c.diversity_penalty = 0.5f;
    c.num_return_sequences = 4;
    r = f.run(prompt, c);
    ASSERT_EQ(r.sequences.size(), 4u);
    EXPECT_EQ(std::vector<int32_t>(r.tokens.begin() + 4, r.tokens.end()), r.sequences[0].output);
}

TEST(BeamOutputs, SampledOutputsAreSingleDrawsWithConsecutiveSeeds) {
    const Fixture f;
    const std::vector<int32_t> prompt = {3, 4, 5};
    GenerateConfig c;
    c.max_tokens = 8;
    c.temperature = 1.0f;
    c.sample_seed = 41;
    c.num_return_sequences = 4;
    std::vector<TokenEvent> events;
    GenerateOptions o;
    o.observer = [&](const TokenEvent& ev) {
        events.push_back(ev);
        return true;
    };
    const GenerateResult r = f.run(prompt, c, o);
    ASSERT_EQ(r.sequences.size(), 4u);
    std::set<std::vector<int32_t>> distinct;
    for (size_t i = 0; i < 4; ++i) {
        GenerateConfig one = c;
        one.num_return_sequences = 1;
        one.sample_seed = 41 + i;
        const GenerateResult s = f.run(prompt, one);
        EXPECT_EQ(r.sequences[i].output, std::vector<int32_t>(s.tokens.begin() + 3, s.tokens.end())) << i;
        EXPECT_EQ(r.sequences[i].text, s.text);
        EXPECT_EQ(r.sequences[i].stop_reason, s.stats.stop_reason);
        distinct.insert(r.sequences[i].output);
    }
    EXPECT_GT(distinct.size(), 1u);
    // The observer saw the first output only; its score is the sum of its tokens' log-probs.
    ASSERT_EQ(events.size(), r.sequences[0].output.size());
    double logp = 0;
    for (const auto& ev : events) logp += std::log(static_cast<double>(ev.prob));
    EXPECT_NEAR(r.sequences[0].score, logp, 1e-9);
    EXPECT_EQ(std::vector<int32_t>(r.tokens.begin() + 3, r.tokens.end()), r.sequences[0].output);
}

TEST(BeamOutputs, RangesAreCheckedNamingTheField) {
    const Fixture f;
    GenerateConfig c;
    c.num_return_sequences = 2;
    EXPECT_NE(refusal(f.m, c).find("num_return_sequences: 2 needs sampling"), std::string::npos);
    c.num_return_sequences = 0;
    EXPECT_NE(refusal(f.m, c).find("num_return_sequences: 0 is outside [1, 64]"), std::string::npos);
    c = {};
    c.beam_size = 4;
    c.num_return_sequences = 5;
    EXPECT_NE(refusal(f.m, c).find("num_return_sequences: 5 is outside [1, beam_size = 4]"), std::string::npos);
    c.num_return_sequences = 4;
    c.num_beam_groups = 3;
    EXPECT_NE(refusal(f.m, c).find("num_beam_groups: 3 must divide beam_size 4"), std::string::npos);
    c.num_beam_groups = 1;
    c.diversity_penalty = 0.5f;
    EXPECT_NE(refusal(f.m, c).find("diversity_penalty: 0.5 needs num_beam_groups >= 2"), std::string::npos);
    c.num_beam_groups = 2;
    c.diversity_penalty = -1.0f;
    EXPECT_NE(refusal(f.m, c).find("diversity_penalty: -1 is outside [0, 100]"), std::string::npos);
    c.diversity_penalty = NAN;
    EXPECT_NE(refusal(f.m, c).find("diversity_penalty: must be a finite number"), std::string::npos);
    c.diversity_penalty = 1.0f;
    EXPECT_EQ(refusal(f.m, c), "");
    c = {};
    c.num_beam_groups = 2;
    EXPECT_NE(refusal(f.m, c).find("num_beam_groups: 2 only applies to beam search"), std::string::npos);

    // The modes with one output refuse several, naming the field.
    c = {};
    c.temperature = 0.8f;
    c.num_return_sequences = 2;
    const std::vector<int32_t> prompt = {1, 2, 3};
    for (DecodeMode mode : {DecodeMode::Greedy, DecodeMode::Speculative, DecodeMode::Tree}) {
        RunSpec spec{.mode = mode, .config = c, .speculation = {}};
        try {
            run_decode(f.m, prompt.data(), 3, spec);
            ADD_FAILURE() << decode_mode_name(mode) << " accepted num_return_sequences 2";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("num_return_sequences: 2 needs sample or beam mode"), std::string::npos)
                << e.what();
        }
    }
    BatchEngineOptions bo;
    std::unique_ptr<BatchEngine, void (*)(BatchEngine*)> engine(create_batch_engine(f.m, bo), free_batch_engine);
    BatchRequest req;
    req.prompt = prompt;
    req.config = c;
    EXPECT_THROW(batch_submit(engine.get(), req), Error);
    // generate_batch runs such prompts one after another, each with its outputs.
    const auto results = generate_batch_ex(f.m, {prompt, {4, 5}}, c);
    ASSERT_EQ(results.size(), 2u);
    for (const auto& r : results) EXPECT_EQ(r.sequences.size(), 2u);
}

TEST(BeamOutputs, CodecCarriesTheKnobsAndTheSequences) {
    GenerateConfig c;
    c.beam_size = 6;
    c.num_return_sequences = 3;
    c.num_beam_groups = 3;
    c.diversity_penalty = 0.75f;
    const GenerateConfig back = config_from_json(config_to_json(c));
    EXPECT_EQ(back.num_return_sequences, 3);
    EXPECT_EQ(back.num_beam_groups, 3);
    EXPECT_EQ(back.diversity_penalty, 0.75f);
    try {
        config_from_json(nlohmann::json{{"beam_size", 4}, {"num_beam_groups", 3}});
        ADD_FAILURE() << "num_beam_groups 3 with beam_size 4 accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("num_beam_groups"), std::string::npos) << e.what();
    }

    std::vector<ReturnedSequence> seqs = {{{1, 2}, "ab", StopReason::EOS, -0.5}, {{3}, "c", StopReason::MAX_TOKENS, -1.25}};
    const nlohmann::json j = sequences_to_json(seqs);
    EXPECT_EQ(j[0]["stop_reason"], "EOS");
    const auto round = sequences_from_json(j);
    ASSERT_EQ(round.size(), 2u);
    EXPECT_EQ(round[1].output, std::vector<int32_t>{3});
    EXPECT_EQ(round[1].text, "c");
    EXPECT_EQ(round[1].stop_reason, StopReason::MAX_TOKENS);
    EXPECT_EQ(round[1].score, -1.25);
    EXPECT_THROW(sequences_from_json(nlohmann::json{{"output_ids", 1}}), Error);
    EXPECT_THROW(sequences_from_json(nlohmann::json::array({{{"stop_reason", "SOON"}}})), Error);
}
