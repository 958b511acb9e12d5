// Grammar-constrained decoding's grammar engine, part 1: GBNF parsing with located errors, the
// byte-level matcher (classes as UTF-8 code points, code points split across tokens), dead ends.
// Part 2 (random constrained samples, speed, long outputs, threads): test_grammar_samples.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <ios>
#include <string>
#include <vector>

#include "engine/grammar_test_util.h"
#include "grammar/grammar.h"
#include "text/tokenizer.h"

using namespace tinyloop;
using namespace tinyloop::grammar_test;

namespace {

const Tokenizer& bytes_tokenizer() {
    static Tokenizer tok = [] {
        Tokenizer t;
        VocabBuilder().build(t);
        return t;
    }();
    return tok;
}

bool full_match(const Grammar& g, const std::string& s) {
    GrammarMatcher m(g, bytes_tokenizer());
    return m.accept_bytes(s) && m.complete();
}

std::string expect_error(const std::string& text) {
    try {
        GrammarPtr g = parse(text);
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        return e.what();
    }
    ADD_FAILURE() << "no error for: " << text;
    return "";
}

}  // namespace

// ---- parsing ----------------------------------------------------------------------------------

TEST(GrammarParse, ValidGrammarsParse) {
    const char* ok[] = {
        "root ::= \"a\"",
        "root ::= \"\"",
        "root ::= [a-z0-9_]+ (\",\" [a-z]*)? # trailing comment\n",
        "# leading comment\n\nroot ::= x | y\nx ::= \"x\"\ny ::= \"y\"\n",
        "root ::=\n  \"{\" (\n    \"a\" |\n    \"b\"\n  ) \"}\"\n",
        "root ::= \"a\"\n       | \"b\"   # a continuation line\n       | \"c\"\n",
        "root ::= \"a\" |\n  \"b\"\n",
        "root ::= \"\\n\\t\\r\\\\\\\"\\x41\\u00e9\\U0001F600\" [\\]\\[\\-^\\x00-\\x1f] [^\\\"] .",
        "root ::= [-a] [a-] [α-ω] \"ünï\"",
        "root ::= ((\"a\")) ((\"b\")+)* \"c\"?",
        "root ::= x\r\nx ::= \"x\"\r\n",
        "root ::= p\np ::= \"(\" p \")\" | \"\"",
    };
    for (const char* text : ok) {
        SCOPED_TRACE(text);
        EXPECT_NO_THROW(parse(text));
    }
    GrammarPtr g = parse("root ::= \"\\x41\\u00e9\\U0001F600\"");
    EXPECT_TRUE(full_match(*g, "A\xC3\xA9\xF0\x9F\x98\x80"));
    g = parse("root ::= \"a\"\n       | \"b\"\n");
    EXPECT_TRUE(full_match(*g, "b"));
    g = parse("root ::= [-a]+");
    EXPECT_TRUE(full_match(*g, "a-a"));
    EXPECT_FALSE(full_match(*g, "b"));
}

TEST(GrammarParse, MalformedGrammarsGiveLocatedErrors) {
    struct Case {
        const char* text;
        const char* location;
        const char* words;
    };
    const Case cases[] = {
        {"root ::= foo", "grammar:1:10: ", "undefined rule 'foo'"},
        {"root ::= \"a\"\nx ::= \"b\" bar\n", "grammar:2:11: ", "undefined rule 'bar'"},
        {"root ::= \"abc", "grammar:1:10: ", "unterminated string"},
        {"root ::= \"a\"\n\nx ::= \"abc\n\"", "grammar:3:7: ", "unterminated string"},
        {"root ::= [a-z", "grammar:1:10: ", "unterminated character class"},
        {"root ::= (\"a\" | \"b\"", "grammar:1:10: ", "unbalanced '('"},
        {"root ::= x\nx ::= (\"a\"\ny ::= \"b\"", "grammar:2:7: ", "unbalanced '('"},
        {"root ::= \"a\" )", "grammar:1:14: ", "unbalanced ')'"},
        {"root ::= \"a\"\nempty ::=\n", "grammar:2:1: ", "rule 'empty' is empty"},
        {"root ::= \"a\"\nempty ::=\nx ::= \"x\"", "grammar:2:1: ", "rule 'empty' is empty"},
        {"x ::= \"a\"", "grammar:1:1: ", "missing the start rule 'root'"},
        {"root ::= \"a\\qb\"", "grammar:1:12: ", "bad escape"},
        {"root ::= [\\x4]", "grammar:1:11: ", "bad escape"},
        {"root ::= \"\\ud800\"", "grammar:1:11: ", "surrogate"},
        {"root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]\n", "grammar:2:1: ", "left-recursive"},
        {"root ::= a\na ::= b? \"x\"\nb ::= \"y\"* a\n", "grammar:2:1: ", "left-recursive"},
        {"root ::= (\"a\"?)*", "grammar:1:16: ", "repeated expression can match the empty string"},
        {"root ::= ((\"b\")*)+", "grammar:1:18: ", "repeated expression can match the empty string"},
        {"root ::= [z-a]", "grammar:1:11: ", "bad character range"},
        {"root ::= \"a\"{3,2}", "grammar:1:13: ", "maximum is below the minimum"},
        {"root ::= \"a\"{2", "grammar:1:13: ", "unterminated repetition"},
        {"root ::= \"a\"{x}", "grammar:1:14: ", "expected a count"},
        {"root ::= \"a\"?{2,}", "grammar:1:14: ", "repeated expression can match the empty string"},
        {"root ::= \"a\"\nroot ::= \"b\"", "grammar:2:1: ", "defined twice"},
        {"root ::= \"a\" |", "grammar:1:14: ", "expected an expression after '|'"},
        {"root ::= \"a\" | )", "grammar:1:14: ", "expected an expression after '|'"},
        {"root ::= ()", "grammar:1:10: ", "empty group"},
        {"root ::= []", "grammar:1:10: ", "empty character class"},
        {"root ::= * \"a\"", "grammar:1:10: ", "must follow a term"},
        {"root = \"a\"", "grammar:1:6: ", "expected '::='"},
        {"root ::= \"α\" }", "grammar:1:14: ", "unexpected '}'"},  // columns count code points
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.text);
        const std::string msg = expect_error(c.text);
        EXPECT_EQ(msg.rfind(c.location, 0), 0u) << msg;
        EXPECT_NE(msg.find(c.words), std::string::npos) << msg;
    }
}

TEST(GrammarParse, ExampleGrammarsParseAndMatch) {
    for (const char* name : {"json_object.gbnf", "arithmetic.gbnf", "answer.gbnf"}) {
        SCOPED_TRACE(name);
        Grammar* g = nullptr;
        ASSERT_NO_THROW(g = load_grammar_file(read_resource(name)));
        free_grammar(g);
    }
    GrammarPtr json(load_grammar_file(read_resource("json_object.gbnf")));
    EXPECT_TRUE(full_match(*json, "{}"));
    EXPECT_TRUE(full_match(*json, "{\"name\": \"Ada\", \"age\": 36, \"tags\": [\"m\\u00e9\", \"\xC3\xA9\"], \"ok\": false}"));
    EXPECT_TRUE(full_match(*json, "{\"a\": {\"b\": [1.5e-3, -0, null, true, {}]}}\n"));
    EXPECT_FALSE(full_match(*json, "{\"a\": 01}"));
    EXPECT_FALSE(full_match(*json, "{\"a\" 1}"));
    EXPECT_FALSE(full_match(*json, "{\"a\": \"\x01\"}"));
    EXPECT_FALSE(full_match(*json, "{\"a\": \"\xC3\"}"));  // a cut code point is not a character
    EXPECT_FALSE(full_match(*json, "[1]"));
    GrammarPtr arith(load_grammar_file(read_resource("arithmetic.gbnf")));
    EXPECT_TRUE(full_match(*arith, "-(1.5 + 2) * 3 / 4"));
    EXPECT_FALSE(full_match(*arith, "1 +"));
    GrammarPtr answer(load_grammar_file(read_resource("answer.gbnf")));
    EXPECT_TRUE(full_match(*answer, "yes, because the sky is blue."));
    EXPECT_FALSE(full_match(*answer, "maybe, because."));
}

TEST(GrammarParse, FileErrorsNameThePath) {
    try {
        load_grammar_file("/nonexistent/dir/g.gbnf");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Io);
        EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/g.gbnf"), std::string::npos) << e.what();
    }
    const std::string path = ::testing::TempDir() + "/bad.gbnf";
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("root ::= \"a\"\nx ::= y\n", f);
    std::fclose(f);
    try {
        load_grammar_file(path);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        EXPECT_EQ(std::string(e.what()).rfind(path + ":2:7: ", 0), 0u) << e.what();
    }
}

// ---- matching ---------------------------------------------------------------------------------

TEST(GrammarMatch, HandBuiltCases) {
    struct Case {
        const char* grammar;
        std::vector<std::string> yes, no;
    };
    const Case cases[] = {
        {"root ::= \"abc\"", {"abc"}, {"", "ab", "abcd", "abd"}},
        {"root ::= \"\"", {""}, {"a"}},
        {"root ::= [a-c0-9_]", {"a", "c", "0", "9", "_"}, {"d", "A", "", "ab", "-"}},
        {"root ::= [^a-c]", {"d", "A", "\n", "\xC3\xA9", "\xF0\x9F\x98\x80", "\xEF\xBF\xBF"},
         {"a", "b", "", "\xC3", "\xED\xA0\x80", "\xC0\x80", "\xF4\x90\x80\x80", "dd"}},
        {"root ::= \"a\"? \"b\"", {"ab", "b"}, {"a", "aab", ""}},
        {"root ::= \"ab\"{2} [0-9]{1,3} \"x\"{0,} \"!\"{ 0 , 1 }", {"abab1", "abab123xx!", "abab12!"},
         {"ab1", "abab", "abab1234", "abab1!!"}},
        {"root ::= \"a\"* \"b\"", {"b", "ab", "aaaab"}, {"a", "ba", ""}},
        {"root ::= \"ab\"+", {"ab", "abab"}, {"", "a", "aba"}},
        {"root ::= \"cat\" | \"dog\" | \"\"", {"cat", "dog", ""}, {"ca", "catdog"}},
        {"root ::= (\"a\" (\"b\" | \"c\")* \"d\")+", {"ad", "abcd", "adad", "abbdacd"}, {"a", "abc", "add"}},
        {"root ::= p\np ::= \"(\" p \")\" p | \"\"", {"", "()", "(())()", "((()))"}, {"(", ")(", "(()"}},
        {"root ::= .+", {"a", "\xCE\xB1\xCE\xB2", "\n"}, {"", "\xCE", "\xFF"}},
        {"root ::= [α-ω]+", {"\xCE\xB1\xCF\x89"}, {"\xCE\x91", "a"}},
        {"root ::= x y\nx ::= \"a\"*\ny ::= \"a\"", {"a", "aaa"}, {"", "b"}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.grammar);
        GrammarPtr g = parse(c.grammar);
        RefMatcher ref(*g);
        for (const std::string& s : c.yes) {
            EXPECT_TRUE(full_match(*g, s)) << "'" << s << "'";
            EXPECT_TRUE(ref.accepts(s)) << "'" << s << "'";
        }
        for (const std::string& s : c.no) {
            EXPECT_FALSE(full_match(*g, s)) << "'" << s << "'";
            EXPECT_FALSE(ref.accepts(s)) << "'" << s << "'";
        }
    }
}

// Every code point (and a sample of malformed sequences) against the class it should match.
TEST(GrammarMatch, ClassesMatchExactlyTheirCodePoints) {
    struct Case {
        const char* grammar;
        std::function<bool(uint32_t)> in;
    };
    const Case cases[] = {
        {"root ::= [^a-z\\u00e9] \"!\"", [](uint32_t c) { return !(c >= 'a' && c <= 'z') && c != 0xE9; }},
        {"root ::= [α-ω\\u4e00-\\u9fff\\U0001F600-\\U0001F64F\\x80] \"!\"",
         [](uint32_t c) { return (c >= 0x3B1 && c <= 0x3C9) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x1F600 && c <= 0x1F64F) || c == 0x80; }},
        {"root ::= [\\u07ff-\\u0800\\uffff\\U00010000\\U0010FFFF\\ud7ff\\ue000] \"!\"",
         [](uint32_t c) { return c == 0x7FF || c == 0x800 || c == 0xFFFF || c == 0x10000 || c == 0x10FFFF || c == 0xD7FF || c == 0xE000; }},
        {"root ::= . \"!\"", [](uint32_t) { return true; }},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.grammar);
        GrammarPtr g = parse(c.grammar);
        GrammarMatcher m(*g, bytes_tokenizer());
        int wrong = 0;
        for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            if (m.can_accept_bytes(utf8(cp) + "!") != c.in(cp) && ++wrong <= 5) ADD_FAILURE() << "U+" << std::hex << cp;
        }
        EXPECT_EQ(wrong, 0);
        // Malformed: surrogates, overlong forms, beyond U+10FFFF, stray continuation bytes.
        for (const char* bad : {"\xED\xA0\x80!", "\xC0\xAF!", "\xE0\x80\xAF!", "\xF0\x80\x80\xAF!", "\xF4\x90\x80\x80!",
                                "\x80!", "\xFF!", "\xC3\xC3!"})
            EXPECT_FALSE(m.can_accept_bytes(bad));
    }
}

TEST(GrammarMatch, CodePointsSplitAcrossTokens) {
    const Tokenizer& tok = test_tokenizer();
    GrammarPtr g = parse("root ::= \"x\" [α-ω] [^a-z]");
    GrammarMatcher m(*g, tok);
    const auto id = [&](const std::string& s) {
        for (int32_t i = 0; i < tok.n_ids(); ++i)
            if (!tok.is_special(i) && tok.bytes_of(i) == s) return i;
        ADD_FAILURE() << "no token for " << s;
        return 0;
    };
    std::vector<char> mask;
    m.allowed(mask);
    EXPECT_TRUE(mask[id("x")]);
    EXPECT_TRUE(mask[id("x\xCE")]);         // ends inside α
    EXPECT_FALSE(mask[id("x" + utf8(0x4E2D))]);  // 中 is not greek
    EXPECT_FALSE(mask[id("x\xF0")]);
    m.accept(id("x\xCE"));
    expect_mask_matches_brute_force(m, tok, "x\\xCE");
    m.allowed(mask);
    EXPECT_TRUE(mask[0xB1]);
    EXPECT_TRUE(mask[0xBF]);
    EXPECT_FALSE(mask[0x91]);  // U+0391 Α is upper case
    EXPECT_FALSE(mask[0xCE]);
    EXPECT_TRUE(mask[id("\xB1\xCE")]);  // finishes α, starts the next character
    EXPECT_TRUE(mask[id("\xB2.")]);
    EXPECT_FALSE(mask[id("\xCF\x80")]);
    EXPECT_FALSE(mask[tok.eos_id()]);
    m.accept(id("\xB1\xCE"));
    EXPECT_FALSE(m.complete());
    m.allowed(mask);
    EXPECT_TRUE(mask[0x80]);  // U+0380 is not a-z
    EXPECT_FALSE(mask['x']);
    EXPECT_THROW(m.accept(id("a")), Error);
    m.accept(0x80);
    EXPECT_TRUE(m.complete());
    m.allowed(mask);
    for (int32_t i = 0; i < tok.n_ids(); ++i) EXPECT_EQ(mask[i] != 0, i == tok.eos_id()) << i;
    m.accept(tok.eos_id());  // a no-op
    EXPECT_TRUE(m.complete());
}

TEST(GrammarMatch, DeadEndIsDetectable) {
    GrammarPtr g = parse("root ::= \"ab\"");
    VocabBuilder vb;
    vb.add("ab");
    Tokenizer no_eos;
    vb.build(no_eos, false);
    GrammarMatcher m(*g, no_eos);
    std::vector<char> mask;
    m.allowed(mask);
    EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), 2);  // "a" and "ab"
    m.accept(256);
    EXPECT_TRUE(m.complete());
    EXPECT_TRUE(m.at_end());
    m.allowed(mask);
    EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), 0);  // the decoder stops: GRAMMAR_DEAD_END

    // A grammar no token can start (the vocabulary has no such byte sequence) is dead at once.
    GrammarPtr never = parse("root ::= [^\\x00-\\U0010FFFF]");
    GrammarMatcher n(*never, bytes_tokenizer());
    n.allowed(mask);
    EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), 0);
    EXPECT_FALSE(n.complete());
}

TEST(GrammarMatch, RejectedTokenLeavesTheStateUnchanged) {
    GrammarPtr g = parse("root ::= \"ab\" \"c\"*");
    const Tokenizer& tok = test_tokenizer();
    GrammarMatcher m(*g, tok);
    EXPECT_THROW(m.accept('b'), Error);
    EXPECT_THROW(m.accept(tok.eos_id()), Error);
    EXPECT_THROW(m.accept(tok.n_ids()), Error);
    m.accept('a');
    EXPECT_THROW(m.accept('a'), Error);
    m.accept('b');
    EXPECT_TRUE(m.complete());
    m.accept('c');
    EXPECT_TRUE(m.complete());
}
