// Constrained beam search (force_words, Hugging Face's force_words_ids): every forced word (or one
// of its alternatives) appears in the output, the constraint tracking follows HF's
// ConstraintListState (banks, the order of pending entries, a broken entry not retried on the
// token that broke it), the refusals name the field and the range, and the codec carries HF's
// mixed form. tests/python/test_hf_peer_beams.py compares the outputs with transformers 4.53.3's
// constrained beam search token for token.
#include <gtest/gtest.h>

#include <algorithm>

#include "decode/beam_constraints.h"
#include "test_util.h"
#include "tinyloop/json.h"

using namespace tinyloop;
using tinyloop::beam::ConstraintState;
using tinyloop::beam::ForcedWords;

namespace {

struct Fixture {
    std::string path = tltest::write_random_model("beam-constrained.tinyloop", tltest::small_hparams(), 13);
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(path);
    Model* m = mp.get();
    GenerateResult run(const std::vector<int32_t>& prompt, const GenerateConfig& c) const {
        return generate_ex(m, prompt.data(), static_cast<int>(prompt.size()), c);
    }
};

// Beam search of `beam_size` beams over `max_tokens` tokens, EOS ignored.
GenerateConfig beams(int beam_size, int max_tokens) {
    GenerateConfig c;
    c.beam_size = beam_size;
    c.max_tokens = max_tokens;
    c.ignore_eos = true;
    return c;
}

bool holds(const std::vector<int32_t>& seq, const std::vector<int32_t>& word) {
    return std::search(seq.begin(), seq.end(), word.begin(), word.end()) != seq.end();
}

ConstraintState after(const ForcedWords& w, const std::vector<int32_t>& toks) {
    ConstraintState s(w);
    s.reset({}, toks);
    return s;
}

}  // namespace

TEST(ConstrainedBeam, EveryForcedWordAppearsInTheOutput) {
    const Fixture f;
    const std::vector<int32_t> prompt = {7, 8, 9, 10};
    GenerateConfig c = beams(4, 10);
    const GenerateResult plain = f.run(prompt, c);
    const std::vector<int32_t> plain_out(plain.tokens.begin() + 4, plain.tokens.end());
    // Words the plain search does not emit: ids it never chose, and a pair of them.
    std::vector<int32_t> absent;
    for (int32_t t = 40; static_cast<int>(absent.size()) < 5; ++t)
        if (!holds(plain_out, {t}) && !holds(prompt, {t})) absent.push_back(t);
    const std::vector<ForcedWords> cases = {
        {{{absent[0]}}},
        {{{absent[1], absent[2]}}},
        {{{absent[0]}}, {{absent[3], absent[4]}}},
        {{{absent[1]}, {absent[2], absent[3]}}},                  // either alternative
        {{{absent[0], absent[1]}, {absent[0], absent[2]}}, {{absent[4]}}},  // a shared prefix
    };
    // Whether `out` holds every entry (one of its alternatives), by search and by HF's tracking.
    auto fulfilled = [&](const ForcedWords& words, const std::vector<int32_t>& out) {
        ConstraintState state(words);
        state.reset(prompt, out);
        const bool all = std::all_of(words.begin(), words.end(), [&](const auto& alts) {
            return std::any_of(alts.begin(), alts.end(), [&](const auto& w) { return holds(out, w); });
        });
        EXPECT_TRUE(all || !state.completed()) << nlohmann::json(out).dump();
        return all && state.completed();
    };
    for (const ForcedWords& words : cases) {
        SCOPED_TRACE(nlohmann::json(words).dump());
        c.force_words = words;
        c.num_return_sequences = 1;
        const GenerateResult r = f.run(prompt, c);
        const std::vector<int32_t> out(r.tokens.begin() + 4, r.tokens.end());
        EXPECT_TRUE(fulfilled(words, out)) << nlohmann::json(out).dump();
        // Several outputs: when fewer than N live beams hold every entry, HF's finalize adds the
        // others too, ranked by score with them; with N = beam_size all of them come back.
        c.num_return_sequences = 4;
        const GenerateResult all = f.run(prompt, c);
        ASSERT_EQ(all.sequences.size(), 4u);
        EXPECT_TRUE(std::any_of(all.sequences.begin(), all.sequences.end(),
                                [&](const ReturnedSequence& q) { return q.output == out; }));
        for (size_t i = 1; i < 4; ++i) EXPECT_GE(all.sequences[i - 1].score, all.sequences[i].score);
    }
}

TEST(ConstrainedBeam, ConstraintStateFollowsHuggingFace) {
    const ForcedWords words = {{{5, 6, 7}}, {{8}}};
    EXPECT_EQ(after(words, {}).advance(), (std::vector<int32_t>{5, 8}));
    EXPECT_EQ(after(words, {5}).bank(), 1);  // longest entry 3: 0 x 3 + (3 - remaining 2)
    EXPECT_EQ(after(words, {5}).advance(), std::vector<int32_t>{6});
    EXPECT_EQ(after(words, {5, 6, 7}).bank(), 3);
    EXPECT_EQ(after(words, {8}).bank(), 3);
    EXPECT_EQ(after(words, {8}).advance(), std::vector<int32_t>{5});
    EXPECT_FALSE(after(words, {5, 6, 7}).completed());
    EXPECT_TRUE(after(words, {5, 6, 7, 1, 8}).completed());
    EXPECT_EQ(after(words, {5, 6, 7, 1, 8}).bank(), 6);
    EXPECT_TRUE(after(words, {5, 6, 7, 1, 8}).advance().empty());
    // A broken entry goes back to the end of the pending ones, and the breaking token is not tried
    // again: 5 5 6 7 does not fulfil 5 6 7 (HF's ConstraintListState.add).
    EXPECT_EQ(after(words, {5, 5}).bank(), 0);
    EXPECT_EQ(after(words, {5, 5}).advance(), (std::vector<int32_t>{8, 5}));
    EXPECT_EQ(after(words, {5, 5, 6, 7}).bank(), 0);
    EXPECT_EQ(after(words, {5, 5, 5, 6, 7}).bank(), 3);
    // Alternatives: a trie; fulfilled when no alternative continues.
    const ForcedWords alts = {{{1, 2}, {1, 3, 4}, {9}}};
    EXPECT_EQ(after(alts, {}).advance(), (std::vector<int32_t>{1, 9}));
    EXPECT_EQ(after(alts, {1}).advance(), (std::vector<int32_t>{2, 3}));
    EXPECT_EQ(after(alts, {1}).bank(), 1);
    EXPECT_TRUE(after(alts, {1, 2}).completed());
    EXPECT_FALSE(after(alts, {1, 3}).completed());
    EXPECT_EQ(after(alts, {1, 3}).bank(), 2);
    EXPECT_TRUE(after(alts, {1, 3, 4}).completed());
    EXPECT_TRUE(after(alts, {9}).completed());
    ConstraintState s(alts);  // the prompt counts, as in HF
    s.reset({0, 9}, {});
    EXPECT_TRUE(s.completed());
}

TEST(ConstrainedBeam, RangesAreCheckedNamingTheField) {
    const Fixture f;
    auto refused = [&](const GenerateConfig& c, const std::string& what) {
        const std::string why = tltest::refusal(f.m, c);
        EXPECT_NE(why.find(what), std::string::npos) << "got '" << why << "', expected '" << what << "'";
    };
    GenerateConfig c;
    c.force_words = {{{5}}};
    refused(c, "force_words: constrained beam search needs beam_size >= 2");
    c.beam_size = 4;
    EXPECT_EQ(tltest::refusal(f.m, c), "");
    c.num_beam_groups = 2;
    refused(c, "force_words: cannot be combined with num_beam_groups 2");
    c.num_beam_groups = 1;
    c.force_words = {{{5}}, {}};
    refused(c, "force_words[1]: must not be empty");
    c.force_words = {{{5}, {}}};
    refused(c, "force_words[0][1]: must not be empty");
    c.force_words = {{{5, 300}}};
    refused(c, "force_words[0][1]: token id 300 is outside the vocabulary [0, 300)");
    c.force_words = {{{5, 6}, {5}}};
    refused(c, "force_words[0][1]: is a prefix of alternative 0");
    c.force_words = {{{5, 6}, {5, 6}}};
    refused(c, "force_words[0][0]: is the same as alternative 1");
    c.force_words = ForcedWords(17, {{5}});
    refused(c, "force_words: 17 entries is outside [0, 16]");
    c.force_words = {{std::vector<int32_t>(65, 5)}};
    refused(c, "force_words[0]: 65 tokens is outside [1, 64]");
    const int32_t eos = model_info(f.m).tokenizer.eos_id;
    c.force_words = {{{5}, {6, eos}}};
    refused(c, "force_words[0]: holds the model's EOS id " + std::to_string(eos));
}

TEST(ConstrainedBeam, CodecCarriesHuggingFacesMixedForm) {
    const nlohmann::json hf = {{"beam_size", 4}, {"force_words", {{5, 6}, {{7}, {8, 9}}}}};
    const GenerateConfig c = config_from_json(hf);
    EXPECT_EQ(c.force_words, (ForcedWords{{{5, 6}}, {{7}, {8, 9}}}));
    EXPECT_EQ(config_to_json(c)["force_words"], hf["force_words"]);
    for (const auto& [bad, what] : std::vector<std::pair<nlohmann::json, std::string>>{
             {{{"force_words", 5}}, "force_words: expected an array"},
             {{{"force_words", {5}}}, "force_words[0]: expected [token ids]"},
             {{{"force_words", {{{1}, 2}}}}, "force_words[0][1]: expected an array of token ids"},
             {{{"force_words", {{1, "x"}}}}, "force_words[0][1]: expected an integer"},
             {{{"force_words", {{1}}}}, "force_words: constrained beam search needs beam_size >= 2"}}) {
        try {
            config_from_json(bad);
            ADD_FAILURE() << bad.dump() << " accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    }
}
