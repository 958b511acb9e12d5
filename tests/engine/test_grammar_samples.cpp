// Grammar-constrained decoding's grammar engine, part 2: token masks against a brute force and a
// reference matcher on random walks, random constrained samples checked by independent checkers,
// allowed() on a large vocabulary, long outputs, one grammar shared by threads.
// Part 1 (parsing, matching, dead ends): test_grammar.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/grammar_test_util.h"
#include "grammar/grammar.h"
#include "text/tokenizer.h"

using namespace tinyloop;
using namespace tinyloop::grammar_test;

namespace {

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

}  // namespace

// ---- constrained samples, speed, threads ------------------------------------------------------

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
            case 1: {
                const char* first = words[rng() % 21];
                const char* second = words[rng() % 21];
                for (const char* piece : {"\"", first, " ", second, "\""}) corpus += piece;
                break;
            }
            case 2: {
                const std::string a = std::to_string(rng() % 100), b = std::to_string(rng() % 1000);
                for (const std::string& piece : {std::string("["), a, std::string(", "), b, std::string("]")}) corpus += piece;
                break;
            }
            default: corpus += words[6 + rng() % 3];
        }
        const char* key = words[rng() % 21];
        const std::string digit = std::to_string(rng() % 10);
        for (const std::string& piece : {std::string(", \""), std::string(key), std::string("\": \""), digit, std::string("x\"}\n")})
            corpus += piece;
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
