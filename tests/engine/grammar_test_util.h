// Shared by the grammar engine's tests (test_grammar.cpp: parsing and matching;
// test_grammar_samples.cpp: random constrained samples, speed, long outputs, threads): a
// byte-level BPE vocabulary builder and the test grammars' tokenizer, an independent reference
// matcher, the brute-force mask check, the path of a bundled grammar.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace tinyloop::grammar_test {

using GrammarPtr = Owned<Grammar>;
inline GrammarPtr parse(const std::string& text) { return GrammarPtr(parse_grammar(text)); }

inline std::string utf8(uint32_t cp) {
    std::string out;
    append_utf8(cp, out);
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

// Tokens for the test grammars, including tokens that end or start inside a UTF-8 character.
inline const Tokenizer& test_tokenizer() {
    static Tokenizer tok = [] {
        VocabBuilder vb;
        for (const char* s : {"()", "((", "))", "[]", "([", "])", "()()", "(()", "yes", "no", ", because ",
                              "because", "the ", " and", "sky", "12", "3.14", " + ", " * ", "(-", "0.", ".5",
                              "{\"", "\":", "\": ", "true", "false", "null", ", \"", "\"}", "[1", "1,", "\\n",
                              "\\u00", "e-", "xx", "a.", "ab", "abc"})
            vb.add(s);
        for (const std::string& s : std::vector<std::string>{utf8(0x3B1), utf8(0x3B2), utf8(0x3C9), utf8(0x3B1) + utf8(0x3B2),
                                     std::string("x") + utf8(0x4E2D), "x\xCE", "\xB1\xCE", "\xB2.", "\xCF\x80", "\xF0\x9F",
                                     std::string("\x98\x80"), "\xE4\xB8", "\xAD.", "x\xF0", "\x9F\x98",
                                     "\xCE\xB1x", "\xED\x9F", "\xC3"})
            vb.add(s);
        Tokenizer t;
        vb.build(t);
        return t;
    }();
    return tok;
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
inline void expect_mask_matches_brute_force(const GrammarMatcher& m, const Tokenizer& tok, const std::string& context) {
    std::vector<char> mask;
    m.allowed(mask);
    ASSERT_EQ(mask.size(), static_cast<size_t>(tok.n_ids()));
    for (int32_t id = 0; id < tok.n_ids(); ++id) {
        const bool want = tok.is_special(id) ? (id == tok.eos_id() && m.complete()) : m.can_accept_bytes(tok.bytes_of(id));
        ASSERT_EQ(mask[static_cast<size_t>(id)] != 0, want) << "token " << id << " after '" << context << "'";
    }
}

inline std::string read_resource(const std::string& name) {
    return std::string(TL_SOURCE_DIR) + "/resources/grammars/" + name;
}

}  // namespace tinyloop::grammar_test
