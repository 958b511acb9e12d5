// The GBNF-style grammar parser and compiler (grammar.h): text -> rules of byte-level elements,
// with located errors and the left-recursion check the stack matcher needs.
#include <algorithm>
#include <fstream>
#include <memory>

#include "grammar/grammar.h"
#include "text/utf8.h"

namespace tinyloop {

namespace {

using Seq = std::vector<GrammarElem>;  // one alternative while parsing (no End)

struct RuleDraft {
    std::string name;
    bool generated = false;
    bool defined = false;
    size_t def_at = 0;                    // text offset of its definition
    size_t first_ref = std::string::npos;  // text offset of its first reference
    std::vector<Seq> alts;
};

GrammarElem byte_elem(uint8_t lo, uint8_t hi) {
    GrammarElem e;
    e.kind = GrammarElem::Bytes;
    e.lo = lo;
    e.hi = hi;
    return e;
}

GrammarElem ref_elem(int32_t rule) {
    GrammarElem e;
    e.kind = GrammarElem::Ref;
    e.rule = rule;
    return e;
}


constexpr long kMaxRepeat = 4096;  // the largest count of {m}, {m,}, {m,n}
// Groups nest at most this deep: the parser recurses once per '(' (a named error beyond).
constexpr int kMaxGroupDepth = 256;
// The compiled grammar holds at most this many elements and rules (repetitions multiply a
// term; the bound keeps a short grammar from compiling to gigabytes).
constexpr size_t kMaxGrammarElems = size_t{1} << 22;
constexpr size_t kMaxGrammarRules = size_t{1} << 20;

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

class Parser {
public:
    Parser(const std::string& text, const std::string& source) : s_(text), source_(source) {}

    Grammar* run() {
        skip_space(true);
        while (i_ < s_.size()) {
            parse_rule();
            skip_space(true);
        }
        return compile();
    }

private:
    const std::string& s_;
    const std::string& source_;
    size_t i_ = 0;
    std::vector<RuleDraft> rules_;
    std::unordered_map<std::string, int32_t> by_name_;
    std::vector<size_t> rule_at_;  // per rule: offset used for its location
    std::string current_;          // the named rule being parsed (names generated rules)
    int generated_count_ = 0;
    int group_depth_ = 0;          // '(' currently open
    size_t elems_ = 0;             // elements emitted so far (bounded by kMaxGrammarElems)

    // Counts `n` more compiled elements; refuses a grammar that grows past the bound.
    void charge(size_t n, size_t at) {
        elems_ += n;
        if (elems_ > kMaxGrammarElems)
            fail(at, "grammar too large: it compiles to more than " + std::to_string(kMaxGrammarElems) +
                         " elements (repetitions multiply their term)");
    }

    [[noreturn]] void fail(size_t at, const std::string& msg) const {
        int line = 1;
        size_t line_start = 0;
        for (size_t k = 0; k < at && k < s_.size(); ++k)
            if (s_[k] == '\n') {
                ++line;
                line_start = k + 1;
            }
        int col = 1;
        for (size_t k = line_start; k < at && k < s_.size(); ++k)
            if ((static_cast<unsigned char>(s_[k]) & 0xC0) != 0x80) ++col;
        throw Error(ErrorCode::InvalidArgument,
                    source_ + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + msg);
    }

    bool at_end() const { return i_ >= s_.size(); }
    char peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }

    // Spaces, tabs, CRs and comments; newlines too when newline_ok.
    void skip_space(bool newline_ok) {
        while (i_ < s_.size()) {
            const char c = s_[i_];
            if (c == ' ' || c == '\t' || c == '\r') {
                ++i_;
            } else if (c == '#') {
                while (i_ < s_.size() && s_[i_] != '\n') ++i_;
            } else if (c == '\n' && newline_ok) {
                ++i_;
            } else {
                break;
            }
        }
    }

    // Offset of the next character that is not space, newline or comment, from `k`.
    size_t next_significant(size_t k) const {
        while (k < s_.size()) {
            const char c = s_[k];
            if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
                ++k;
            } else if (c == '#') {
                while (k < s_.size() && s_[k] != '\n') ++k;
            } else {
                break;
            }
        }
        return k;
    }

    // `name ::=` starts at k (a new rule).
    bool rule_starts_at(size_t k) const {
        size_t j = k;
        while (j < s_.size() && is_name_char(s_[j])) ++j;
        if (j == k) return false;
        while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t')) ++j;
        return s_.compare(j, 3, "::=") == 0;
    }

    int32_t rule_id(const std::string& name, size_t at) {
        auto it = by_name_.find(name);
        if (it != by_name_.end()) return it->second;
        if (rules_.size() >= kMaxGrammarRules)
            fail(at, "grammar too large: more than " + std::to_string(kMaxGrammarRules) + " rules");
        const int32_t id = static_cast<int32_t>(rules_.size());
        rules_.emplace_back();
        rules_.back().name = name;
        rule_at_.push_back(0);
        by_name_.emplace(name, id);
        return id;
    }

    int32_t new_generated(size_t at) {
        if (rules_.size() >= kMaxGrammarRules)
            fail(at, "grammar too large: more than " + std::to_string(kMaxGrammarRules) + " rules");
        const int32_t id = static_cast<int32_t>(rules_.size());
        rules_.emplace_back();
        RuleDraft& r = rules_.back();
        r.name = current_ + "/" + std::to_string(++generated_count_);
        r.generated = true;
        r.defined = true;
        r.def_at = at;
        rule_at_.push_back(at);
        return id;
    }

    void parse_rule() {
        const size_t name_at = i_;
        while (i_ < s_.size() && is_name_char(s_[i_])) ++i_;
        if (i_ == name_at) {
            if (peek() == '|') fail(i_, "expected a rule name ('|' continues a rule only after a newline inside it)");
            fail(i_, std::string("expected a rule name, found '") + peek() + "'");
        }
        const std::string name = s_.substr(name_at, i_ - name_at);
        skip_space(false);
        if (s_.compare(i_, 3, "::=") != 0) fail(i_, "expected '::=' after rule name '" + name + "'");
        i_ += 3;
        skip_space(true);
        if (at_end() || rule_starts_at(i_)) fail(name_at, "rule '" + name + "' is empty (write \"\" for the empty string)");

        const int32_t id = rule_id(name, name_at);
        if (rules_[id].defined) fail(name_at, "rule '" + name + "' is defined twice");
        rules_[id].defined = true;
        rules_[id].def_at = name_at;
        rule_at_[id] = name_at;
        current_ = name;
        generated_count_ = 0;
        std::vector<Seq> alts = parse_alternates(false, name_at);
        rules_[id].alts = std::move(alts);

        skip_space(false);
        if (at_end() || peek() == '\n') return;
        if (peek() == ')') fail(i_, "unbalanced ')' (no matching '(')");
        fail(i_, std::string("unexpected '") + peek() + "'");
    }

    // alternatives separated by '|'. `open_at`: the '(' (nested) or the rule name.
    std::vector<Seq> parse_alternates(bool nested, size_t open_at) {
        std::vector<Seq> alts;
        Seq first;
        if (parse_sequence(nested, first) == 0) {
            if (nested && peek() == ')') fail(open_at, "empty group (write \"\" for the empty string)");
            if (peek() == '|') fail(i_, "expected an expression before '|'");
            fail(i_, at_end() ? std::string("unexpected end of grammar") : std::string("unexpected '") + peek() + "'");
        }
        alts.push_back(std::move(first));
        for (;;) {
            skip_space(nested);
            if (!nested && peek() == '\n') {
                const size_t j = next_significant(i_);
                if (j < s_.size() && s_[j] == '|') i_ = j;
                else break;
            }
            if (peek() != '|') break;
            const size_t bar_at = i_;
            ++i_;
            skip_space(true);
            Seq seq;
            if (parse_sequence(nested, seq) == 0) fail(bar_at, "expected an expression after '|'");
            alts.push_back(std::move(seq));
        }
        return alts;
    }

    // Terms up to '|', ')', the end, a newline (top level) or a new rule. Returns the number of
    // terms (an empty literal "" is a term with no elements).
    int parse_sequence(bool nested, Seq& out) {
        int terms = 0;
        for (;;) {
            skip_space(nested);
            if (at_end()) break;
            const char c = peek();
            if (c == '|' || c == ')' || c == '\n') break;
            // After '|' on a new line the next rule may start; never swallow it.
            if (is_name_char(c) && rule_starts_at(i_)) {
                // Inside a group the ')' is missing; after '|' the alternative is: callers say.
                if (nested || terms == 0) break;
                fail(i_, "a new rule must start on a new line");
            }
            const size_t term_at = i_;
            const size_t start = out.size();
            if (c == '"') {
                parse_literal(out);
            } else if (c == '[') {
                out.push_back(ref_elem(parse_class()));
            } else if (c == '.') {
                ++i_;
                const int32_t r = new_generated(term_at);
                add_class_alts(r, {{0, 0x10FFFF}});
                out.push_back(ref_elem(r));
            } else if (c == '(') {
                if (group_depth_ >= kMaxGroupDepth)
                    fail(term_at, "groups nested too deep: more than " + std::to_string(kMaxGroupDepth) +
                                      " '(' open at once");
                ++i_;
                skip_space(true);
                const int32_t r = new_generated(term_at);
                ++group_depth_;
                std::vector<Seq> alts = parse_alternates(true, term_at);
                --group_depth_;
                skip_space(true);
                if (peek() != ')') fail(term_at, "unbalanced '(' (no matching ')')");
                ++i_;
                rules_[r].alts = std::move(alts);
                out.push_back(ref_elem(r));
            } else if (is_name_char(c)) {
                const size_t at = i_;
                while (i_ < s_.size() && is_name_char(s_[i_])) ++i_;
                const int32_t r = rule_id(s_.substr(at, i_ - at), at);
                if (rules_[r].first_ref == std::string::npos) rules_[r].first_ref = at;
                out.push_back(ref_elem(r));
            } else {
                if (c == '*' || c == '+' || c == '?') fail(i_, std::string("'") + c + "' must follow a term");
                fail(i_, std::string("unexpected '") + c + "'");
            }
            ++terms;
            // Postfix operators apply to the term just parsed.
            for (;;) {
                skip_space(nested);
                const char op = peek();
                if (op != '*' && op != '+' && op != '?' && op != '{') break;
                const size_t op_at = i_;
                ++i_;
                Seq term(out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
                out.resize(start);
                if (op == '{') {
                    repeat(term, op_at, out);
                    continue;
                }
                const int32_t r = new_generated(op_at);
                charge(2 * term.size() + 2, op_at);
                Seq with_self = term;
                with_self.push_back(ref_elem(r));
                if (op == '?') rules_[r].alts = {term, Seq{}};
                else if (op == '*') rules_[r].alts = {with_self, Seq{}};
                else rules_[r].alts = {with_self, term};
                out.push_back(ref_elem(r));
            }
        }
        return terms;
    }

    // x{m}, x{m,}, x{m,n}: m copies, then x* or (n - m) nested optionals.
    void repeat(const Seq& term, size_t op_at, Seq& out) {
        const auto number = [&]() -> long {
            skip_space(true);
            if (!(peek() >= '0' && peek() <= '9')) return -1;
            long v = 0;
            while (peek() >= '0' && peek() <= '9') {
                v = v * 10 + (peek() - '0');
                if (v > kMaxRepeat) fail(op_at, "repetition count above " + std::to_string(kMaxRepeat));
                ++i_;
            }
            return v;
        };
        const long m = number();
        if (m < 0) fail(i_, "expected a count after '{'");
        long n = m;
        skip_space(true);
        if (peek() == ',') {
            ++i_;
            n = number();  // -1: no upper bound
        }
        skip_space(true);
        if (peek() != '}') fail(op_at, "unterminated repetition '{' (expected '}')");
        ++i_;
        if (n >= 0 && n < m) fail(op_at, "bad repetition: the maximum is below the minimum");
        charge(term.size() * static_cast<size_t>(std::max(m, n) + 1) + static_cast<size_t>(std::max(m, n)), op_at);
        for (long k = 0; k < m; ++k) out.insert(out.end(), term.begin(), term.end());
        if (n < 0) {
            const int32_t r = new_generated(op_at);
            Seq with_self = term;
            with_self.push_back(ref_elem(r));
            rules_[r].alts = {with_self, Seq{}};
            out.push_back(ref_elem(r));
            return;
        }
        Seq tail;
        for (long k = m; k < n; ++k) {
            const int32_t r = new_generated(op_at);
            Seq alt = term;
            alt.insert(alt.end(), tail.begin(), tail.end());
            rules_[r].alts = {alt, Seq{}};
            tail = {ref_elem(r)};
        }
        out.insert(out.end(), tail.begin(), tail.end());
    }

    // One character of a literal or class at i_ (escape or one UTF-8 code point).
    uint32_t parse_char(bool in_class) {
        const size_t at = i_;
        const unsigned char c = static_cast<unsigned char>(s_[i_]);
        if (c == '\\') {
            if (i_ + 1 >= s_.size()) fail(at, "unfinished escape");
            const char e = s_[i_ + 1];
            i_ += 2;
            switch (e) {
                case 'n': return '\n';
                case 't': return '\t';
                case 'r': return '\r';
                case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
                    return static_cast<unsigned char>(e);
                case 'x': case 'u': case 'U': {
                    const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    uint32_t v = 0;
                    for (int k = 0; k < digits; ++k) {
                        const char h = peek();
                        int d;
                        if (h >= '0' && h <= '9') d = h - '0';
                        else if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
                        else if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
                        else fail(at, std::string("bad escape: \\") + e + " needs " + std::to_string(digits) + " hex digits");
                        v = v * 16 + static_cast<uint32_t>(d);
                        ++i_;
                    }
                    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                        fail(at, "bad escape: not a Unicode scalar value (surrogate or above U+10FFFF)");
                    return v;
                }
                default:
                    fail(at, std::string("bad escape '\\") + e + "'" + (in_class ? " in a character class" : ""));
            }
        }
        // A raw UTF-8 code point.
        int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || i_ + len > s_.size()) fail(at, "invalid UTF-8 in the grammar");
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        for (int k = 1; k < len; ++k) {
            const unsigned char t = static_cast<unsigned char>(s_[i_ + k]);
            if ((t & 0xC0) != 0x80) fail(at, "invalid UTF-8 in the grammar");
            cp = (cp << 6) | (t & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            fail(at, "invalid UTF-8 in the grammar");
        i_ += static_cast<size_t>(len);
        return cp;
    }

    void parse_literal(Seq& out) {
        const size_t open = i_;
        ++i_;
        std::string bytes;
        for (;;) {
            if (at_end() || peek() == '\n') fail(open, "unterminated string literal");
            if (peek() == '"') break;
            if (peek() == '\\') append_utf8(parse_char(false), bytes);
            else bytes += s_[i_++];  // raw bytes as written (UTF-8 text stays UTF-8)
        }
        ++i_;
        charge(bytes.size(), open);
        for (char b : bytes) out.push_back(byte_elem(static_cast<uint8_t>(b), static_cast<uint8_t>(b)));
    }

    int32_t parse_class() {
        const size_t open = i_;
        ++i_;
        bool negated = false;
        if (peek() == '^') {
            negated = true;
            ++i_;
        }
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        for (;;) {
            if (at_end() || peek() == '\n') fail(open, "unterminated character class");
            if (peek() == ']') break;
            const size_t item_at = i_;
            const uint32_t lo = parse_char(true);
            uint32_t hi = lo;
            if (peek() == '-' && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
                ++i_;
                if (at_end() || peek() == '\n') fail(open, "unterminated character class");
                hi = parse_char(true);
                if (hi < lo) fail(item_at, "bad character range: the end is below the start");
            }
            ranges.emplace_back(lo, hi);
        }
        ++i_;
        if (ranges.empty()) fail(open, "empty character class");
        std::sort(ranges.begin(), ranges.end());
        std::vector<std::pair<uint32_t, uint32_t>> merged;
        for (const auto& r : ranges) {
            if (!merged.empty() && r.first <= merged.back().second + 1)
                merged.back().second = std::max(merged.back().second, r.second);
            else
                merged.push_back(r);
        }
        if (negated) {
            std::vector<std::pair<uint32_t, uint32_t>> inv;
            uint32_t next = 0;
            for (const auto& r : merged) {
                if (r.first > next) inv.emplace_back(next, r.first - 1);
                next = r.second + 1;
            }
            if (next <= 0x10FFFF) inv.emplace_back(next, 0x10FFFF);
            merged = std::move(inv);
        }
        const int32_t r = new_generated(open);
        add_class_alts(r, merged);
        return r;
    }

    // One alternative per UTF-8 byte-range sequence of the code point ranges.
    void add_class_alts(int32_t rule, const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
        std::vector<Utf8Sequence> seqs;
        for (const auto& r : ranges) utf8_sequences(r.first, r.second, seqs);
        for (const Utf8Sequence& q : seqs) {
            charge(q.size() + 1, rule_at_[rule]);
            Seq alt;
            for (const auto& b : q) alt.push_back(byte_elem(b.first, b.second));
            rules_[rule].alts.push_back(std::move(alt));
        }
    }

    Grammar* compile() {
        // Undefined names: report the earliest reference.
        size_t bad_at = std::string::npos;
        std::string bad;
        for (const RuleDraft& r : rules_)
            if (!r.defined && r.first_ref < bad_at) {
                bad_at = r.first_ref;
                bad = r.name;
            }
        if (bad_at != std::string::npos) fail(bad_at, "undefined rule '" + bad + "'");
        const auto root_it = by_name_.find("root");
        if (root_it == by_name_.end()) fail(0, "missing the start rule 'root'");

        auto g = std::make_unique<Grammar>();
        g->root = root_it->second;
        g->elems.push_back(ref_elem(g->root));
        g->elems.push_back(GrammarElem{});
        for (size_t k = 0; k < rules_.size(); ++k) {
            GrammarRule gr;
            gr.name = rules_[k].name;
            gr.generated = rules_[k].generated;
            for (const Seq& alt : rules_[k].alts) {
                gr.alts.push_back(static_cast<int32_t>(g->elems.size()));
                g->elems.insert(g->elems.end(), alt.begin(), alt.end());
                g->elems.push_back(GrammarElem{});
            }
            g->rules.push_back(std::move(gr));
        }
        set_locations(*g);
        compute_nullable(*g);
        check_left_recursion(*g);
        return g.release();
    }

    // Line and column of every rule, in one pass over the text (rules sorted by offset).
    void set_locations(Grammar& g) const {
        std::vector<int32_t> order(rules_.size());
        for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int32_t>(k);
        std::stable_sort(order.begin(), order.end(),
                         [&](int32_t a, int32_t b) { return rule_at_[a] < rule_at_[b]; });
        int line = 1, col = 1;
        size_t k = 0;
        for (int32_t r : order) {
            const size_t at = std::min(rule_at_[r], s_.size());
            for (; k < at; ++k) {
                if (s_[k] == '\n') {
                    ++line;
                    col = 1;
                } else if ((static_cast<unsigned char>(s_[k]) & 0xC0) != 0x80) {
                    ++col;
                }
            }
            g.rules[r].line = line;
            g.rules[r].col = col;
        }
    }

    // Which rules can match the empty string: a worklist over the alternatives (each counts its
    // elements not yet known nullable), linear in the grammar's size.
    static void compute_nullable(Grammar& g) {
        const size_t n = g.rules.size();
        g.nullable.assign(n, 0);
        std::vector<int32_t> alt_rule, pending;          // per alternative
        std::vector<std::vector<int32_t>> used_in(n);    // per rule: alternatives referring to it
        std::vector<int32_t> work;
        for (size_t r = 0; r < n; ++r)
            for (int32_t a : g.rules[r].alts) {
                const int32_t id = static_cast<int32_t>(alt_rule.size());
                alt_rule.push_back(static_cast<int32_t>(r));
                int32_t count = 0;
                for (int32_t p = a; g.elems[p].kind != GrammarElem::End; ++p) {
                    if (g.elems[p].kind == GrammarElem::Bytes) {
                        count = -1;  // never nullable
                        break;
                    }
                    ++count;
                }
                pending.push_back(count);
                if (count < 0) continue;
                for (int32_t p = a; g.elems[p].kind != GrammarElem::End; ++p) used_in[g.elems[p].rule].push_back(id);
                if (count == 0 && !g.nullable[r]) {
                    g.nullable[r] = 1;
                    work.push_back(static_cast<int32_t>(r));
                }
            }
        while (!work.empty()) {
            const int32_t r = work.back();
            work.pop_back();
            for (int32_t id : used_in[r]) {
                if (--pending[id] != 0) continue;
                const int32_t owner = alt_rule[id];
                if (!g.nullable[owner]) {
                    g.nullable[owner] = 1;
                    work.push_back(owner);
                }
            }
        }
    }

    // The stack matcher expands rules until a byte is on top; a rule that reaches itself without
    // consuming input would expand forever. Find such a cycle and report it.
    void check_left_recursion(const Grammar& g) const {
        const size_t n = g.rules.size();
        std::vector<std::vector<int32_t>> left(n);  // rules reachable at the left edge
        for (size_t r = 0; r < n; ++r)
            for (int32_t a : g.rules[r].alts)
                for (int32_t p = a; g.elems[p].kind == GrammarElem::Ref; ++p) {
                    left[r].push_back(g.elems[p].rule);
                    if (!g.nullable[g.elems[p].rule]) break;
                }
        std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
        std::vector<int32_t> path;
        struct Frame {
            int32_t rule;
            size_t next;
        };
        for (size_t s = 0; s < n; ++s) {
            if (color[s]) continue;
            std::vector<Frame> st{{static_cast<int32_t>(s), 0}};
            color[s] = 1;
            path.assign(1, static_cast<int32_t>(s));
            while (!st.empty()) {
                Frame& f = st.back();
                if (f.next == left[f.rule].size()) {
                    color[f.rule] = 2;
                    st.pop_back();
                    path.pop_back();
                    continue;
                }
                const int32_t to = left[f.rule][f.next++];
                if (color[to] == 1) {
                    const auto from = std::find(path.begin(), path.end(), to);
                    report_cycle(std::vector<int32_t>(from, path.end()));
                }
                if (color[to] == 0) {
                    color[to] = 1;
                    st.push_back({to, 0});
                    path.push_back(to);
                }
            }
        }
    }

    [[noreturn]] void report_cycle(const std::vector<int32_t>& cycle) const {
        int32_t best = -1;
        for (int32_t r : cycle)
            if (!rules_[r].generated && (best < 0 || rule_at_[r] < rule_at_[best])) best = r;
        if (best >= 0)
            fail(rule_at_[best], "rule '" + rules_[best].name +
                                     "' is left-recursive (it can reach itself without consuming input)");
        for (int32_t r : cycle)
            if (best < 0 || rule_at_[r] < rule_at_[best]) best = r;
        fail(rule_at_[best], "repeated expression can match the empty string");
    }
};

}  // namespace

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out) {
    // Split [lo, hi] until each piece has one encoded length and, per byte, a plain range
    // (the construction of Rust's regex-syntax utf8 module).
    std::vector<std::pair<uint32_t, uint32_t>> work{{lo, std::min<uint32_t>(hi, 0x10FFFF)}};
    while (!work.empty()) {
        auto [s, e] = work.back();
        work.pop_back();
        if (s > e) continue;
        if (s <= 0xDFFF && e >= 0xD800) {
            if (e > 0xDFFF) work.emplace_back(0xE000, e);
            if (s < 0xD800) work.emplace_back(s, 0xD7FF);
            continue;
        }
        bool split = false;
        for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu})
            if (s <= max && e > max) {
                work.emplace_back(max + 1, e);
                work.emplace_back(s, max);
                split = true;
                break;
            }
        if (split) continue;
        if (e <= 0x7F) {
            out.push_back({{static_cast<uint8_t>(s), static_cast<uint8_t>(e)}});
            continue;
        }
        for (int k = 1; k < 4 && !split; ++k) {
            const uint32_t m = (1u << (6 * k)) - 1;
            if ((s & ~m) != (e & ~m)) {
                if ((s & m) != 0) {
                    work.emplace_back((s | m) + 1, e);
                    work.emplace_back(s, s | m);
                    split = true;
                } else if ((e & m) != m) {
                    work.emplace_back(e & ~m, e);
                    work.emplace_back(s, (e & ~m) - 1);
                    split = true;
                }
            }
        }
        if (split) continue;
        std::string a, b;
        append_utf8(s, a);
        append_utf8(e, b);
        Utf8Sequence q;
        for (size_t k = 0; k < a.size(); ++k)
            q.emplace_back(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k]));
        out.push_back(std::move(q));
    }
}

Grammar* parse_grammar_named(const std::string& text, const std::string& source) {
    return Parser(text, source).run();
}

Grammar* parse_grammar(const std::string& text) { return parse_grammar_named(text, "grammar"); }

Grammar* load_grammar_file(const std::string& path) {
    // Read in bounded chunks and stop past the cap: a path such as /dev/zero or a FIFO never
    // ends, and slurping it whole grows memory without bound (the CLI's --prompt-file and
    // score --file refuse the same size).
    constexpr std::streamsize kMaxGrammarBytes = std::streamsize(64) << 20;
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error(ErrorCode::Io, path + ": cannot open the grammar file");
    std::string text;
    char buf[1 << 16];
    while (f.read(buf, sizeof(buf)) || f.gcount() > 0) {
        text.append(buf, static_cast<size_t>(f.gcount()));
        if (static_cast<std::streamsize>(text.size()) > kMaxGrammarBytes)
            throw Error(ErrorCode::InvalidArgument,
                        path + ": the grammar file is larger than 64 MiB (or a stream without an end)");
    }
    if (f.bad()) throw Error(ErrorCode::Io, path + ": cannot read the grammar file");
    return parse_grammar_named(text, path);
}

void free_grammar(Grammar* g) { delete g; }

}  // namespace tinyloop
