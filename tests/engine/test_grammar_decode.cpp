// Grammar-constrained generation through the engine: every sample parses under an independent
// checker, a grammar that cannot continue stops with GRAMMAR_DEAD_END.
#include <gtest/gtest.h>

#include <cctype>
#include <memory>

#include "test_util.h"

using namespace tinyloop;

namespace {

struct GrammarPtr {
    Grammar* g;
    explicit GrammarPtr(const std::string& text) : g(parse_grammar(text)) {}
    ~GrammarPtr() { free_grammar(g); }
};

// Independent checker for: root ::= "[" item ("," item)* "]"
//                          item ::= [0-9]+ | "'" [a-z]* "'"
// Returns 2 for a whole sentence, 1 for a proper prefix of one, 0 otherwise.
int check_list(const std::string& s) {
    size_t i = 0;
    if (i == s.size()) return 1;
    if (s[i++] != '[') return 0;
    while (true) {
        if (i == s.size()) return 1;
        if (std::isdigit(static_cast<unsigned char>(s[i]))) {
            while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
        } else if (s[i] == '\'') {
            ++i;
            while (i < s.size() && s[i] >= 'a' && s[i] <= 'z') ++i;
            if (i == s.size()) return 1;
            if (s[i++] != '\'') return 0;
        } else {
            return 0;
        }
        if (i == s.size()) return 1;
        if (s[i] == ',') {
            ++i;
            continue;
        }
        if (s[i] == ']') return i + 1 == s.size() ? 2 : 0;
        return 0;
    }
}

}  // namespace

TEST(GrammarDecode, ThousandSamplesAllParse) {
    HParams hp = tltest::small_hparams();
    hp.d_model = 32;
    hp.n_heads = 2;
    hp.n_kv_heads = 2;
    hp.d_ff = 64;
    hp.n_loop_layers = 1;
    hp.max_seq_len = 80;
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(tltest::write_random_model("grammar_decode.tinyloop", hp, 3));
    GrammarPtr g("root ::= \"[\" item (\",\" item)* \"]\"\nitem ::= [0-9]+ | \"'\" [a-z]* \"'\"\n");
    const int32_t eos = model_info(mp.get()).tokenizer.eos_id;
    std::vector<int32_t> prompt = {10, 20, 30};
    int complete = 0;
    for (int i = 0; i < 1000; ++i) {
        GenerateConfig c;
        c.max_tokens = 64;
        c.temperature = 1.5f;
        c.top_k = 300;
        c.sample_seed = static_cast<uint64_t>(i);
        c.grammar = g.g;
        GenerateResult r = generate_ex(mp.get(), prompt.data(), 3, c);
        const int verdict = check_list(r.text);
        ASSERT_NE(verdict, 0) << "sample " << i << ": '" << r.text << "'";
        if (r.stats.stop_reason == StopReason::EOS) {
            EXPECT_EQ(verdict, 2) << r.text;
            EXPECT_EQ(r.tokens.back(), eos);
            ++complete;
        } else {
            EXPECT_EQ(r.stats.stop_reason, StopReason::MAX_TOKENS);
        }
    }
    EXPECT_GT(complete, 100);
}

TEST(GrammarDecode, DeadEndStopsWithItsReason) {
    // A grammar whose only sentence is "ab", decoded with EOS ignored: after "ab" nothing can
    // follow, so decoding stops with GRAMMAR_DEAD_END.
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(tltest::write_random_model("grammar_dead.tinyloop", tltest::small_hparams(), 4));
    GrammarPtr g("root ::= \"ab\"\n");
    GenerateConfig c;
    c.max_tokens = 10;
    c.grammar = g.g;
    c.ignore_eos = false;
    std::vector<int32_t> prompt = {1, 2};
    GenerateResult r = generate_ex(mp.get(), prompt.data(), 2, c);
    EXPECT_EQ(r.text, "ab");
    EXPECT_EQ(r.stats.stop_reason, StopReason::EOS);  // EOS is the only continuation: taken
    // Malformed grammars give located errors.
    try {
        parse_grammar("root ::= \"a\" | missing\n");
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("grammar:1:"), std::string::npos) << e.what();
    }
}

TEST(GrammarDecode, NoAllowedTokenAtAllIsADeadEnd) {
    // "x" followed by a class that matches no code point: no sentence exists, so not even "x"
    // keeps the grammar alive and decoding stops before the first token.
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(tltest::write_random_model("grammar_dead2.tinyloop", tltest::small_hparams(), 4));
    GrammarPtr g("root ::= \"x\" [^\\x00-\\U0010FFFF]\n");
    GenerateConfig c;
    c.max_tokens = 10;
    c.grammar = g.g;
    std::vector<int32_t> prompt = {1, 2};
    GenerateResult r = generate_ex(mp.get(), prompt.data(), 2, c);
    EXPECT_EQ(r.stats.stop_reason, StopReason::GRAMMAR_DEAD_END);
    EXPECT_EQ(r.stats.tokens_emitted, 0);
    EXPECT_EQ(r.text, "");
}
