// Grammar-constrained decoding's grammar engine: GBNF parsing with located errors, the byte-level
// matcher (classes as UTF-8 code points, code points split across tokens), token masks against a
// brute force, random constrained samples checked by independent checkers, dead ends, speed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <string>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "text/tokenizer.h"

using namespace tinyloop;

namespace {

using GrammarPtr = Owned<Grammar>;
GrammarPtr parse(const std::string& text) { return GrammarPtr(parse_grammar(text)); }

std::string utf8(uint32_t cp) {
    std::string out;
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return out;
}

// A byte-level BPE vocabulary: bytes 0-255, one merge chain per extra token, optional EOS.
class VocabBuilder {
public:
    int32_t add(const std::string& s) {
        if (s.size() == 1) return static_cast<unsigned char>(s[0]);
        const auto it = ids_.find(s);
        if (it != ids_.end()) return it->second;
        const int32_t a = add(s.substr(0, s.size() - 1));
        const int32_t b = static_cast<unsigned char>(s.back());
        merges_.emplace_back(a, b);
        const int32_t id = 255 + static_cast<int32_t>(merges_.size());
        ids_.emplace(s, id);
        return id;
    }
    // Adds a merge of two existing ids (BPE training); false when its bytes already exist.
    bool add_pair(int32_t a, int32_t b, const std::string& bytes) {
        if (ids_.count(bytes) || bytes.size() < 2) return false;
        merges_.emplace_back(a, b);
        ids_.emplace(bytes, 255 + static_cast<int32_t>(merges_.size()));
        return true;
    }
    size_t n_merges() const { return merges_.size(); }
    void build(Tokenizer& tok, bool with_eos = true) const {
        TokenizerSpec spec;
        spec.merges = merges_;
        const int32_t next = 256 + static_cast<int32_t>(merges_.size());
        if (with_eos) {
            spec.special_tokens.emplace_back("<|endoftext|>", next);
            spec.eos_id = next;
        }
        tok.init(spec, next + (with_eos ? 1 : 0));
    }

private:
    std::map<std::string, int32_t> ids_;
    std::vector<std::pair<int32_t, int32_t>> merges_;
};

const Tokenizer& bytes_tokenizer() {
    static Tokenizer tok = [] {
        Tokenizer t;
        VocabBuilder().build(t);
        return t;
    }();
    return tok;
}

// Tokens for the test grammars, including tokens that end or start inside a UTF-8 character.
const Tokenizer& test_tokenizer() {
    static Tokenizer tok = [] {
        VocabBuilder vb;
        for (const char* s : {"()", "((", "))", "[]", "([", "])", "()()", "(()", "yes", "no", ", because ",
                              "because", "the ", " and", "sky", "12", "3.14", " + ", " * ", "(-", "0.", ".5",
                              "{\"", "\":", "\": ", "true", "false", "null", ", \"", "\"}", "[1", "1,", "\\n",
                              "\\u00", "e-", "xx", "a.", "ab", "abc"})
            vb.add(s);
        for (const std::string& s : std::vector<std::string>{utf8(0x3B1), utf8(0x3B2), utf8(0x3C9), utf8(0x3B1) + utf8(0x3B2),
                                     "x" + utf8(0x4E2D), "x\xCE", "\xB1\xCE", "\xB2.", "\xCF\x80", "\xF0\x9F",
                                     std::string("\x98\x80"), "\xE4\xB8", "\xAD.", "x\xF0", "\x9F\x98",
                                     "\xCE\xB1x", "\xED\x9F", "\xC3"})
            vb.add(s);
        Tokenizer t;
        vb.build(t);
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

// An independent reference: a memoised recursive matcher over the compiled rules (sets of end
// positions; no stacks, no trie, no caches). In prefix mode, running out of input in the middle
// of a productive element counts as a match.
class RefMatcher {
public:
    explicit RefMatcher(const Grammar& g) : g_(g) {
        productive_.assign(g.rules.size(), 0);
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t r = 0; r < g.rules.size(); ++r) {
                if (productive_[r]) continue;
                for (int32_t a : g.rules[r].alts)
                    if (seq_productive(a)) {
                        productive_[r] = 1;
                        changed = true;
                        break;
                    }
            }
        }
    }
    bool accepts(const std::string& w) { return run(w, false); }
    bool viable(const std::string& w) { return run(w, true); }

private:
    const Grammar& g_;
    std::vector<char> productive_;
    std::string w_;
    bool prefix_ = false;
    std::map<std::pair<int32_t, size_t>, std::vector<size_t>> memo_;

    bool seq_productive(int32_t p) const {
        for (; g_.elems[p].kind != GrammarElem::End; ++p)
            if (g_.elems[p].kind == GrammarElem::Ref && !productive_[g_.elems[p].rule]) return false;
        return true;
    }
    bool run(const std::string& w, bool prefix) {
        w_ = w;
        prefix_ = prefix;
        memo_.clear();
        const std::vector<size_t> ends = seq(0, 0);
        return std::find(ends.begin(), ends.end(), w.size()) != ends.end();
    }
    std::vector<size_t> seq(int32_t p, size_t i) {
        const GrammarElem& e = g_.elems[p];
        if (e.kind == GrammarElem::End) return {i};
        if (prefix_ && i == w_.size()) return seq_productive(p) ? std::vector<size_t>{i} : std::vector<size_t>{};
        if (e.kind == GrammarElem::Bytes) {
            if (i == w_.size()) return {};
            const uint8_t b = static_cast<uint8_t>(w_[i]);
            if (b < e.lo || b > e.hi) return {};
            return seq(p + 1, i + 1);
        }
        std::set<size_t> out;
        for (size_t j : rule(e.rule, i))
            for (size_t k : seq(p + 1, j)) out.insert(k);
        return {out.begin(), out.end()};
    }
    std::vector<size_t> rule(int32_t r, size_t i) {
        const auto key = std::make_pair(r, i);
        const auto it = memo_.find(key);
        if (it != memo_.end()) return it->second;
        std::set<size_t> out;
        for (int32_t a : g_.rules[r].alts)
            for (size_t k : seq(a, i)) out.insert(k);
        std::vector<size_t> v(out.begin(), out.end());
        memo_.emplace(key, v);
        return v;
    }
};

// Brute force: each token allowed iff its bytes can be accepted from the current state.
void expect_mask_matches_brute_force(const GrammarMatcher& m, const Tokenizer& tok, const std::string& context) {
    std::vector<char> mask;
    m.allowed(mask);
    ASSERT_EQ(mask.size(), static_cast<size_t>(tok.n_ids()));
    for (int32_t id = 0; id < tok.n_ids(); ++id) {
        const bool want = tok.is_special(id) ? (id == tok.eos_id() && m.complete()) : m.can_accept_bytes(tok.bytes_of(id));
        ASSERT_EQ(mask[static_cast<size_t>(id)] != 0, want) << "token " << id << " after '" << context << "'";
    }
}

// ---- hand-written checkers for the test grammars (independent of the grammar engine) ---------

// Result of a checker: Full (a sentence), Prefix (a proper prefix of one), Bad.
enum class Verdict { Full, Prefix, Bad };

const char* kBrackets = "root ::= item*\nitem ::= \"(\" item* \")\" | \"[\" item* \"]\"\n";
Verdict check_brackets(const std::string& w) {
    std::vector<char> st;
    for (char c : w) {
        if (c == '(' || c == '[') st.push_back(c);
        else if (c == ')' && !st.empty() && st.back() == '(') st.pop_back();
        else if (c == ']' && !st.empty() && st.back() == '[') st.pop_back();
        else return Verdict::Bad;
    }
    return st.empty() ? Verdict::Full : Verdict::Prefix;
}

// resources/grammars/arithmetic.gbnf, by recursive descent; Eof = the input ran out mid-way.
struct Eof {};
struct Mismatch {};
class ArithChecker {
public:
    Verdict check(const std::string& w) {
        w_ = w;
        i_ = 0;
        try {
            expr();
        } catch (const Eof&) {
            return Verdict::Prefix;
        } catch (const Mismatch&) {
            return Verdict::Bad;
        }
        return i_ == w_.size() ? Verdict::Full : Verdict::Bad;
    }

private:
    std::string w_;
    size_t i_ = 0;
    bool end() const { return i_ >= w_.size(); }
    // After an operand: optional space then one of ops; true (consumed) / false (nothing consumed).
    bool op(const char* ops) {
        size_t j = i_;
        if (j < w_.size() && w_[j] == ' ') ++j;
        if (j == w_.size()) {
            if (j > i_) throw Eof{};  // "1 " may go on with an operator
            return false;
        }
        if (!std::strchr(ops, w_[j])) return false;
        i_ = j + 1;
        if (!end() && w_[i_] == ' ') ++i_;
        return true;
    }
    void expr() {
        term();
        while (op("+-")) term();
    }
    void term() {
        factor();
        while (op("*/")) factor();
    }
    void digits() {
        if (end()) throw Eof{};
        if (!std::isdigit(static_cast<unsigned char>(w_[i_]))) throw Mismatch{};
        while (!end() && std::isdigit(static_cast<unsigned char>(w_[i_]))) ++i_;
    }
    void factor() {
        if (end()) throw Eof{};
        const char c = w_[i_];
        if (std::isdigit(static_cast<unsigned char>(c))) {
            digits();
            if (!end() && w_[i_] == '.') {
                ++i_;
                digits();
            }
        } else if (c == '(') {
            ++i_;
            if (!end() && w_[i_] == ' ') ++i_;
            expr();
            if (!end() && w_[i_] == ' ') ++i_;
            if (end()) throw Eof{};
            if (w_[i_] != ')') throw Mismatch{};
            ++i_;
        } else if (c == '-') {
            ++i_;
            factor();
        } else {
            throw Mismatch{};
        }
    }
};

// resources/grammars/answer.gbnf.
Verdict check_answer(const std::string& w) {
    for (const std::string head : {"yes, because ", "no, because "}) {
        if (w.size() <= head.size()) {
            if (head.compare(0, w.size(), w) == 0) return Verdict::Prefix;
            continue;
        }
        if (w.compare(0, head.size(), head) != 0) continue;
        for (size_t i = head.size(); i < w.size(); ++i) {
            const char c = w[i];
            const bool first = i == head.size();
            if (c >= 'a' && c <= 'z') continue;
            if (!first && (c == ' ' || c == ',' || c == '\'')) continue;
            if (!first && c == '.' && i + 1 == w.size()) return Verdict::Full;
            return Verdict::Bad;
        }
        return Verdict::Prefix;
    }
    return Verdict::Bad;
}

// Code points split across tokens: greek lower-case letters, or 'x' and any other non-ASCII code
// point; then a full stop.
const char* kUtf8 = "root ::= item+ \".\"\nitem ::= [α-ω] | \"x\" [^\\x00-\\x7fα-ω]\n";
// Length of a well-formed UTF-8 sequence at w[i..] (0 = malformed, -1 = a valid but cut prefix).
int utf8_at(const std::string& w, size_t i, uint32_t& cp) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(w[k]); };
    const uint8_t c = b(i);
    int len;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
        cp = c;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    for (int k = 1; k < len; ++k) {
        if (i + k >= w.size()) return -1;
        const uint8_t t = b(i + k);
        if (t < (k == 1 ? lo : 0x80) || t > (k == 1 ? hi : 0xBF)) return 0;
        cp = (cp << 6) | (t & 0x3F);
    }
    return len;
}
Verdict check_utf8(const std::string& w) {
    size_t i = 0;
    int items = 0;
    while (i < w.size()) {
        uint32_t cp = 0;
        const int n = utf8_at(w, i, cp);
        if (n == 0) return Verdict::Bad;
        if (n < 0) return (w[i] == '\xCE' || w[i] == '\xCF') && i + 1 == w.size() ? Verdict::Prefix : Verdict::Bad;
        i += static_cast<size_t>(n);
        if (cp >= 0x3B1 && cp <= 0x3C9) {
            ++items;
        } else if (cp == 'x') {
            if (i == w.size()) return Verdict::Prefix;
            const int m = utf8_at(w, i, cp);
            if (m < 0) return Verdict::Prefix;  // any well-formed non-ASCII start will do
            if (m == 0 || cp < 0x80 || (cp >= 0x3B1 && cp <= 0x3C9)) return Verdict::Bad;
            i += static_cast<size_t>(m);
            ++items;
        } else if (cp == '.' && items > 0 && i == w.size()) {
            return Verdict::Full;
        } else {
            return Verdict::Bad;
        }
    }
    return Verdict::Prefix;
}

// CPU time of this thread (the test machines are shared: wall time says little).
double cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

std::string read_resource(const std::string& name) {
    return std::string(TL_SOURCE_DIR) + "/resources/grammars/" + name;
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

// Random walks: masks against the brute force and the reference matcher, then 1,000 samples per
// grammar drawn uniformly from the allowed tokens, each checked by an independent checker.
TEST(GrammarMatch, RandomConstrainedSamples) {
    const Tokenizer& tok = test_tokenizer();
    ArithChecker arith;
    struct Case {
        std::string name, text;
        std::function<Verdict(const std::string&)> check;  // null: the reference matcher only
    };
    const auto load = [](const char* f) {
        GrammarPtr g(load_grammar_file(read_resource(f)));
        (void)g;
        FILE* fp = std::fopen(read_resource(f).c_str(), "rb");
        std::string s;
        char buf[4096];
        size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, fp)) > 0) s.append(buf, n);
        std::fclose(fp);
        return s;
    };
    const Case cases[] = {
        {"brackets", kBrackets, check_brackets},
        {"arithmetic", load("arithmetic.gbnf"), [&](const std::string& w) { return arith.check(w); }},
        {"answer", load("answer.gbnf"), check_answer},
        {"utf8", kUtf8, check_utf8},
        {"json", load("json_object.gbnf"), nullptr},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        GrammarPtr g = parse(c.text);
        RefMatcher ref(*g);
        std::mt19937 rng(1234);
        int completed = 0, cut = 0, dead = 0;
        const double t0 = cpu_ms();
        double ref_ms = 0;
        for (int sample = 0; sample < 1000; ++sample) {
            GrammarMatcher m(*g, tok);
            std::string out;
            bool finished = false;
            std::vector<char> mask;
            for (int step = 0; step < 64 && !finished; ++step) {
                if (sample < 5) expect_mask_matches_brute_force(m, tok, out);
                if (sample < 2 && step % 8 == 0) {
                    m.allowed(mask);
                    for (int32_t id = 0; id < tok.n_ids(); ++id) {
                        if (tok.is_special(id)) continue;
                        ASSERT_EQ(mask[id] != 0, ref.viable(out + tok.bytes_of(id))) << "token " << id << " after '" << out << "'";
                    }
                }
                m.allowed(mask);
                std::vector<int32_t> ids;
                for (int32_t id = 0; id < tok.n_ids(); ++id)
                    if (mask[id]) ids.push_back(id);
                if (ids.empty()) {
                    ++dead;
                    break;
                }
                const int32_t pick = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
                m.accept(pick);
                if (pick == tok.eos_id()) finished = true;
                else out += tok.bytes_of(pick);
            }
            const double r0 = cpu_ms();
            if (finished) {
                ++completed;
                EXPECT_TRUE(ref.accepts(out)) << out;
                if (c.check) {
                    EXPECT_EQ(c.check(out), Verdict::Full) << out;
                }
            } else {
                ++cut;
                EXPECT_TRUE(ref.viable(out)) << out;
                if (c.check) {
                    EXPECT_NE(c.check(out), Verdict::Bad) << out;
                }
            }
            ref_ms += cpu_ms() - r0;
            if (HasFailure()) return;
        }
        std::printf("[ grammar  ] %-10s 1000 samples: %d completed, %d cut at 64 tokens, %d dead ends "
                    "(CPU %.0f ms, checkers %.0f ms)\n",
                    c.name.c_str(), completed, cut, dead, cpu_ms() - t0, ref_ms);
        EXPECT_EQ(dead, 0);
        if (c.name != "json") {
            EXPECT_GT(completed, 100);
        }
    }
}

// allowed() on a 2k-4k vocabulary learned by BPE from JSON-like text.
TEST(GrammarMatch, AllowedIsFastOnALargeVocabulary) {
    std::mt19937 rng(7);
    const char* words[] = {"name", "age", "id", "title", "value", "items", "true", "false", "null", "tags", "the",
                           "city", "count", "price", "user", "data", "list", "type", "ok", "error", "message"};
    std::string corpus;
    for (int k = 0; k < 1500; ++k) {
        corpus += "{\"";
        corpus += words[rng() % 21];
        corpus += "\": ";
        switch (rng() % 4) {
            case 0: corpus += std::to_string(rng() % 100000); break;
            case 1: corpus += "\"" + std::string(words[rng() % 21]) + " " + words[rng() % 21] + "\""; break;
            case 2: corpus += "[" + std::to_string(rng() % 100) + ", " + std::to_string(rng() % 1000) + "]"; break;
            default: corpus += words[6 + rng() % 3];
        }
        corpus += ", \"" + std::string(words[rng() % 21]) + "\": \"" + std::to_string(rng() % 10) + "x\"}\n";
    }
    // Byte-pair training, several merges per counting round.
    VocabBuilder vb;
    std::vector<int32_t> ids;
    std::vector<std::string> bytes(256);
    for (int b = 0; b < 256; ++b) bytes[b] = std::string(1, static_cast<char>(b));
    for (char c : corpus) ids.push_back(static_cast<unsigned char>(c));
    while (vb.n_merges() < 3000) {
        std::unordered_map<uint64_t, int> count;
        for (size_t i = 0; i + 1 < ids.size(); ++i) ++count[(static_cast<uint64_t>(ids[i]) << 32) | static_cast<uint32_t>(ids[i + 1])];
        std::vector<std::pair<int, uint64_t>> top;
        for (const auto& [k, n] : count) top.emplace_back(n, k);
        if (top.empty()) break;
        std::sort(top.rbegin(), top.rend());
        size_t added = 0;
        for (size_t t = 0; t < top.size() && added < 100 && vb.n_merges() < 3000; ++t) {
            const int32_t a = static_cast<int32_t>(top[t].second >> 32), b = static_cast<int32_t>(top[t].second & 0xFFFFFFFF);
            if (!vb.add_pair(a, b, bytes[a] + bytes[b])) continue;
            const int32_t id = static_cast<int32_t>(bytes.size());
            bytes.push_back(bytes[a] + bytes[b]);
            ++added;
            std::vector<int32_t> next;
            for (size_t i = 0; i < ids.size(); ++i) {
                if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
                    next.push_back(id);
                    ++i;
                } else {
                    next.push_back(ids[i]);
                }
            }
            ids.swap(next);
        }
        if (added == 0) break;
    }
    Tokenizer tok;
    vb.build(tok);
    ASSERT_GE(tok.n_ids(), 2000);

    GrammarPtr g(load_grammar_file(read_resource("json_object.gbnf")));
    double build_ms = 0, allowed_ms = 0, worst_ms = 0, first_ms = 0;
    long calls = 0;
    std::vector<char> mask;
    std::mt19937 pick_rng(99);
    const int samples = 20;
    for (int sample = 0; sample < samples; ++sample) {
        double t0 = cpu_ms();
        GrammarMatcher m(*g, tok);
        build_ms += cpu_ms() - t0;
        for (int step = 0; step < 64; ++step) {
            t0 = cpu_ms();
            m.allowed(mask);
            const double ms = cpu_ms() - t0;
            if (step == 0) first_ms += ms;
            allowed_ms += ms;
            worst_ms = std::max(worst_ms, ms);
            ++calls;
            if (sample == 0 && step < 8) expect_mask_matches_brute_force(m, tok, "");
            std::vector<int32_t> ok;
            for (int32_t id = 0; id < tok.n_ids(); ++id)
                if (mask[id]) ok.push_back(id);
            ASSERT_FALSE(ok.empty());
            const int32_t pick = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(pick_rng)];
            if (pick == tok.eos_id()) break;
            m.accept(pick);
        }
    }
    std::printf("[ grammar  ] vocabulary %d ids, CPU time: matcher setup %.3f ms, allowed() mean %.1f us, "
                "first call %.1f us, worst %.1f us over %ld calls\n",
                tok.n_ids(), build_ms / samples, 1000.0 * allowed_ms / calls, 1000.0 * first_ms / samples,
                1000.0 * worst_ms, calls);
    EXPECT_LT(allowed_ms / calls, 5.0);  // generous: a forward pass of the smallest model takes longer
}

// A long output (deep nesting: new stack sets at every depth) keeps masks right while the
// matcher's caches are dropped and rebuilt.
TEST(GrammarMatch, LongOutputKeepsMasksRight) {
    const Tokenizer& tok = test_tokenizer();
    GrammarPtr g = parse(kBrackets);
    GrammarMatcher m(*g, tok);
    std::vector<char> mask;
    std::string out;
    for (int i = 0; i < 5000; ++i) {
        m.allowed(mask);
        ASSERT_TRUE(mask['(']);
        ASSERT_EQ(mask[')'] != 0, i > 0);
        if (i % 1000 == 999) expect_mask_matches_brute_force(m, tok, "(((...");
        m.accept('(');
    }
    EXPECT_LT(m.n_stacks(), 4u);
    for (int i = 0; i < 5000; ++i) m.accept(')');
    EXPECT_TRUE(m.complete());
    m.allowed(mask);
    EXPECT_TRUE(mask[tok.eos_id()]);
}

// One Grammar, several matchers on several threads: each gets what a lone matcher gets.
TEST(GrammarMatch, OneGrammarSharedByThreads) {
    const Tokenizer& tok = test_tokenizer();
    GrammarPtr g(load_grammar_file(read_resource("json_object.gbnf")));
    const auto run = [&](uint32_t seed) {
        GrammarMatcher m(*g, tok);
        std::mt19937 rng(seed);
        std::string out;
        std::vector<char> mask;
        for (int step = 0; step < 200; ++step) {
            m.allowed(mask);
            std::vector<int32_t> ids;
            for (int32_t id = 0; id < tok.n_ids(); ++id)
                if (mask[id] && id != tok.eos_id()) ids.push_back(id);
            if (ids.empty()) break;
            const int32_t pick = ids[rng() % ids.size()];
            m.accept(pick);
            out += tok.bytes_of(pick);
        }
        return out;
    };
    std::vector<std::string> alone(4), shared(4);
    for (uint32_t t = 0; t < 4; ++t) alone[t] = run(t);
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < 4; ++t) threads.emplace_back([&, t] { shared[t] = run(t); });
    for (std::thread& th : threads) th.join();
    EXPECT_EQ(shared, alone);
}
