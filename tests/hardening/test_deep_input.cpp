// Deep and large input for every parser a request or a file reaches: the grammar parser (groups
// nested 100,000 deep, 100,000 rules, repetitions that would compile to gigabytes) and nlohmann
// json under the model header (nesting far past any recursion limit, a 64 MiB header of '[').
// Each input must end in bounded time with a result or a named tinyloop::Error, never a crash.
// (Time is bounded by the CTest timeout; speed is measured in `tinyloop bench`, not here.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <pthread.h>

#include "grammar/grammar.h"
#include "test_util.h"

using namespace tinyloop;

namespace {

using GrammarPtr = Owned<Grammar>;

GrammarPtr parse(const std::string& text) { return GrammarPtr(parse_grammar(text)); }

// parse_grammar must throw Error(InvalidArgument) whose message contains `named`.
void expect_grammar_refused(const std::string& text, const std::string& named) {
    try {
        parse(text);
        ADD_FAILURE() << "accepted; expected an error naming '" << named << "'";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
        EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
}

// "r<k>" (built by append: GCC 12 warns falsely about "r" + std::to_string(k)).
std::string rule(int k) { return std::string("r").append(std::to_string(k)); }

std::string nested_groups(size_t depth) {
    std::string text = "root ::= ";
    text.append(depth, '(').append("\"a\"").append(depth, ')').append("\n");
    return text;
}

TEST(DeepGrammar, GroupsNestedFarTooDeepAreRefusedByName) {
    // The reproducer (16,000, a 32 KB request) and the 100,000-deep case.
    for (size_t depth : {size_t{257}, size_t{16000}, size_t{100000}}) {
        SCOPED_TRACE(depth);
        expect_grammar_refused(nested_groups(depth), "groups nested too deep: more than 256");
        expect_grammar_refused(nested_groups(depth), "grammar:1:");
    }
    // Unbalanced: only '(' (the limit comes before the missing ')').
    expect_grammar_refused("root ::= " + std::string(100000, '('), "nested too deep");
}

TEST(DeepGrammar, GroupsAtTheLimitParse) {
    const GrammarPtr g = parse(nested_groups(256));
    EXPECT_GE(g->rules.size(), 257u);
    EXPECT_FALSE(g->nullable[g->root]);
}

// 100,000 rules in a chain, each nullable only through the next one and defined before it:
// the order that made the old nullable fixpoint take one pass per rule (quadratic).
TEST(DeepGrammar, HundredThousandRuleChainParses) {
    const int n = 100000;
    std::string text = "root ::= r0 \"x\"\n";
    for (int k = 0; k + 1 < n; ++k) text += rule(k) + " ::= " + rule(k + 1) + " \"\"\n";
    text += rule(n - 1) + " ::= \"\" | \"y\"\n";
    const GrammarPtr g = parse(text);
    ASSERT_EQ(g->rules.size(), static_cast<size_t>(n + 1));
    for (size_t k = 0; k < g->rules.size(); ++k) {
        if (g->rules[k].name != "root") {
            ASSERT_TRUE(g->nullable[k]) << g->rules[k].name;
        }
    }
    EXPECT_FALSE(g->nullable[g->root]);
    // Locations survive the one-pass computation: rule k sits on line k + 2, column 1.
    const GrammarRule& last = g->rules.back();
    EXPECT_EQ(last.name, rule(n - 1));
    EXPECT_EQ(last.line, n + 1);
    EXPECT_EQ(last.col, 1);
}

// 100,000 groups on one line (100,000 generated rules whose locations share that line).
TEST(DeepGrammar, HundredThousandGroupsOnOneLineParse) {
    std::string text = "root ::=";
    for (int k = 0; k < 100000; ++k) text += " (\"a\" | \"b\")";
    const GrammarPtr g = parse(text + "\n");
    ASSERT_EQ(g->rules.size(), 100001u);
    EXPECT_EQ(g->rules.back().line, 1);
    EXPECT_EQ(g->rules.back().col, static_cast<int>(text.size() - 10));  // the last (
}

// A 100,000-rule chain that is left-recursive through all of them: refused, naming the rule.
TEST(DeepGrammar, HundredThousandRuleLeftRecursionIsRefused) {
    const int n = 100000;
    std::string text = "root ::= r0\n";
    for (int k = 0; k + 1 < n; ++k) text += rule(k) + " ::= " + rule(k + 1) + " \"a\"\n";
    text += rule(n - 1) + " ::= r0 | \"b\"\n";
    expect_grammar_refused(text, "is left-recursive");
}

TEST(DeepGrammar, RepetitionsThatWouldCompileToGigabytesAreRefused) {
    // 1,000 bytes x 4,096 copies: 4 million elements from a 1 KB grammar.
    expect_grammar_refused("root ::= \"" + std::string(1100, 'a') + "\"{4096}\n", "grammar too large");
    // Many small repetitions, each within its count bound, together past the size bound.
    std::string many = "root ::=";
    for (int k = 0; k < 1200; ++k) many += " \"ab\"{4096}";
    expect_grammar_refused(many + "\n", "grammar too large");
    // Nested repetitions multiply only through one generated rule each: fine.
    const GrammarPtr g = parse("root ::= ((\"ab\"{4096}){4096}){4096}\n");
    EXPECT_GT(g->elems.size(), 3u * 4096u);
}

// A token 65,536 bytes long (the longest a model file may hold, made by 16 doubling merges): the
// matcher's vocabulary trie is that deep, and allowed() walks it without recursion, on a thread
// with a small stack.
TEST(DeepGrammar, LongestTokenIsWalkedWithoutRecursion) {
    TokenizerSpec spec;
    spec.merges.emplace_back('a', 'a');  // id 256: "aa"
    for (int32_t k = 0; k < 15; ++k) spec.merges.emplace_back(256 + k, 256 + k);  // id 256 + k: 2^(k+1) a's
    Tokenizer tok;
    tok.init(spec, 256 + static_cast<int>(spec.merges.size()));
    const int32_t longest = 256 + 15;
    ASSERT_EQ(tok.bytes_of(longest).size(), 65536u);
    const GrammarPtr g = parse("root ::= \"a\"* \"b\"\n");
    struct Job {
        const Grammar* g;
        const Tokenizer* tok;
        std::vector<char> mask;
    } job{g.get(), &tok, {}};
    // A 512 KiB stack: a recursive walk (a frame per trie level) would overflow it.
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, size_t{512} << 10);
    pthread_t worker;
    ASSERT_EQ(pthread_create(&worker, &attr, [](void* p) -> void* {
        Job& j = *static_cast<Job*>(p);
        GrammarMatcher m(*j.g, *j.tok);
        m.allowed(j.mask);
        return nullptr;
    }, &job), 0);
    pthread_join(worker, nullptr);
    pthread_attr_destroy(&attr);
    const std::vector<char>& mask = job.mask;
    ASSERT_EQ(mask.size(), static_cast<size_t>(tok.n_ids()));
    EXPECT_TRUE(mask[longest]);
    EXPECT_TRUE(mask['a'] && mask['b'] && mask[256]);
    EXPECT_FALSE(mask['c']);
}

// nlohmann json parses and destroys without recursion (3.11): far deeper than any stack allows.
TEST(DeepJson, MillionDeepArrayParsesAndDestroys) {
    const size_t depth = 1000000;
    const std::string text = std::string(depth, '[') + std::string(depth, ']');
    {
        nlohmann::json j = nlohmann::json::parse(text);
        EXPECT_TRUE(j.is_array());
    }  // destroyed here
    const nlohmann::json bad = nlohmann::json::parse(std::string(depth, '['), nullptr, false);
    EXPECT_TRUE(bad.is_discarded());
}

// The model header at its size bound, all '[': refused by the depth check, before parsing.
TEST(DeepJson, SixtyFourMebibyteHeaderOfBracketsIsRefused) {
    const uint64_t header_bytes = uint64_t{64} << 20;
    const std::string path = tltest::temp_path("brackets.tinyloop");
    {
        std::ofstream f(path, std::ios::binary);
        uint8_t pre[24] = {};
        std::memcpy(pre, "TINYLOOP", 8);
        pre[8] = 1;  // version 1, flags 0
        std::memcpy(pre + 16, &header_bytes, 8);
        f.write(reinterpret_cast<const char*>(pre), sizeof pre);
        const std::string chunk(1 << 20, '[');
        for (int k = 0; k < 64; ++k) f.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    }
    try {
        Model* m = load_model(path);
        free_model(m);
        ADD_FAILURE() << "a header of 64 MiB of '[' was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("nested"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("64"), std::string::npos) << e.what();
    }
    std::remove(path.c_str());
}

}  // namespace
