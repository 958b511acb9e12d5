// Grammar-constrained decoding: a GBNF-style grammar (llama.cpp's dialect, a subset) compiled to
// byte-level rules, and a pushdown matcher that says which tokens keep the output inside the
// grammar.
//
// ---------------------------------------------------------------------------------------------
// PUBLIC API (declarations for tinyloop.h, namespace tinyloop; `struct Grammar;` is already
// declared there):
//
//     // Parses a GBNF-style grammar (see "The grammar language" below). Throws
//     // Error(InvalidArgument) "grammar:LINE:COL: message" for a malformed grammar.
//     Grammar* parse_grammar(const std::string& text);
//     // Reads and parses a grammar file: Error(Io) naming the path when it cannot be read,
//     // Error(InvalidArgument) "PATH:LINE:COL: message" when it is malformed.
//     Grammar* load_grammar_file(const std::string& path);
//     // Frees a grammar; nullptr is a no-op. A Grammar is immutable after parsing, so one may be
//     // shared by any number of concurrent generate calls; free it after the last one returns.
//     void free_grammar(Grammar* g);
// ---------------------------------------------------------------------------------------------
//
// The grammar language
// --------------------
//     root   ::= "yes" | "no" reason?        # the start rule is always `root`
//     reason ::= ", because " [a-z ,]+ "."
//
//  * rule names: [a-zA-Z0-9_-]+; each rule is defined once; `root` must exist.
//  * terms: "literal" (matched as its UTF-8 bytes), [class] / [^class] (one code point, ranges
//    a-z), `.` (any one code point), a rule name, ( group ); postfix ? * + and {m} {m,} {m,n}
//    (counts up to 4096) on any term.
//  * escapes in literals and classes: \n \t \r \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH
//    (\x, \u, \U give a code point, written as UTF-8).
//  * # starts a comment to the end of the line.
//  * A rule ends at a newline outside parentheses, except that it continues onto the next line
//    when the line ends with `::=` or `|`, or when the next non-blank line starts with `|`.
//  * The empty string is written "" (an empty rule, group or alternative is an error).
//  * Left recursion (a rule reaching itself without consuming input, including a repeated term
//    that can match the empty string) is refused at the rule (or the operator) that causes it.
//  * Columns in error locations count code points from 1.
//  * Bounds (each an error naming it, so hostile text costs bounded stack, time and memory):
//    groups nest at most 256 deep; the compiled grammar holds at most 4,194,304 elements and
//    1,048,576 rules (repetitions multiply their term). Parsing is linear in the text's size.
//
// Matching is on bytes: classes are compiled to the UTF-8 byte sequences of their code points,
// so a token that ends in the middle of a multi-byte character simply leaves the matcher inside
// that character's byte sequence, and only well-formed UTF-8 can match a class.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tinyloop/tinyloop.h"
#include "text/tokenizer.h"

namespace tinyloop {

// Public entry points (see the PUBLIC API block above); declared here until tinyloop.h has them.
Grammar* parse_grammar(const std::string& text);
Grammar* load_grammar_file(const std::string& path);
void free_grammar(Grammar* g);

// One element of a compiled alternative.
struct GrammarElem {
    enum Kind : uint8_t { End, Bytes, Ref };
    Kind kind = End;
    uint8_t lo = 0, hi = 0;  // Bytes: one byte in [lo, hi]
    int32_t rule = -1;       // Ref: the rule's index
};

struct GrammarRule {
    std::string name;        // generated rules: "<rule>/<n>" (groups, repetitions, classes)
    bool generated = false;
    int line = 0, col = 0;   // where it was defined (generated: the '(' '[' or operator)
    std::vector<int32_t> alts;  // index in Grammar::elems of each alternative's first element
};

// A compiled grammar: every alternative is a run of elements in `elems` closed by an End.
// elems[0] = Ref root, elems[1] = End is the start of every sentence.
struct Grammar {
    std::vector<GrammarElem> elems;
    std::vector<GrammarRule> rules;
    std::vector<char> nullable;  // per rule: can match the empty string
    int32_t root = -1;
};

// Same as parse_grammar, with `source` in place of "grammar" in error locations.
Grammar* parse_grammar_named(const std::string& text, const std::string& source);

// The UTF-8 byte sequences of the code points in [lo, hi] (surrogates excluded), each a run of
// byte ranges; together they match exactly the well-formed encodings of those code points.
using Utf8Sequence = std::vector<std::pair<uint8_t, uint8_t>>;
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out);

// Which tokens keep the output a prefix of some sentence of the grammar.
//
// The state is a set of parse stacks (llama.cpp's design). Stacks are hash-consed into a node
// arena (a node is a grammar position plus its parent node), so equal stacks are one integer and
// the set after one byte of each stack is computed once and cached. allowed() walks a byte trie
// of the vocabulary with the stack set, so shared token prefixes are evaluated once.
//
// Not thread-safe (allowed() fills caches); one matcher per generate call. `g` and `tok` must
// outlive it.
class GrammarMatcher {
public:
    GrammarMatcher(const Grammar& g, const Tokenizer& tok);

    // mask.size() becomes tok.n_ids(); mask[id] = 1 when the token's bytes keep the grammar
    // alive. Special tokens are never allowed, except EOS when complete().
    void allowed(std::vector<char>& mask) const;
    // Advances by the token's bytes (EOS: no-op). Throws Error(InvalidArgument) when the token
    // is not allowed (the state is then unchanged).
    void accept(int32_t id);
    // The output so far is a whole sentence of the grammar.
    bool complete() const;
    // No byte can follow (and, unless complete(), the output can never be finished).
    bool at_end() const;

    // Advances by raw bytes; false (state unchanged) when they leave the grammar.
    bool accept_bytes(std::string_view bytes);
    // Whether accept_bytes(bytes) would succeed, without changing the state.
    bool can_accept_bytes(std::string_view bytes) const;

    size_t n_stacks() const { return cur_.size(); }
    size_t n_nodes() const { return nodes_.size(); }

private:
    struct Node {
        int32_t pos;     // element index (never an End); -1 for the empty stack
        int32_t parent;  // node index; 0 is the empty stack
    };
    struct TrieNode {
        int32_t first_child = -1, next_sibling = -1;
        int32_t tok_begin = 0, tok_count = 0;  // in trie_tok_: ids whose bytes end here
        uint8_t byte = 0;
    };
    struct SetHash {
        size_t operator()(const std::vector<int32_t>& v) const noexcept;
    };

    const Grammar& g_;
    const Tokenizer& tok_;
    std::vector<int32_t> cur_;  // the current stack set, sorted (node ids; 0 = finished)

    // Caches (filled lazily, also from const methods).
    mutable std::vector<Node> nodes_;
    mutable std::unordered_map<uint64_t, int32_t> intern_;
    mutable std::vector<int32_t> after_off_, after_len_;  // per node: its successors in after_pool_
    mutable std::vector<int32_t> after_pool_;
    mutable std::vector<uint32_t> stamp_, cstamp_;
    mutable uint32_t gen_ = 0, cgen_ = 0;
    mutable std::vector<int32_t> work_, scratch_;
    // Stack sets met while walking the trie, interned, with their byte transitions (a lazily
    // built DFA): trans_[set * 256 + byte] is the next set, -1 dead, -2 not computed yet.
    mutable std::vector<std::vector<int32_t>> sets_;
    mutable std::unordered_map<std::vector<int32_t>, int32_t, SetHash> set_ids_;
    mutable std::vector<int32_t> trans_;
    mutable std::vector<std::pair<int32_t, int32_t>> walk_stack_;  // walk(): (next child, set id)

    std::vector<TrieNode> trie_;
    std::vector<int32_t> trie_tok_;

    int32_t intern(int32_t pos, int32_t parent) const;
    void closure(int32_t node, std::vector<int32_t>& out) const;
    void successors(int32_t node) const;
    void step(const std::vector<int32_t>& set, uint8_t byte, std::vector<int32_t>& out) const;
    bool advance(std::vector<int32_t>& set, std::string_view bytes) const;
    int32_t set_id(const std::vector<int32_t>& sorted) const;
    int32_t transition(int32_t set, uint8_t byte) const;
    void walk(int32_t trie_node, int32_t set, std::vector<char>& mask) const;
    void build_trie();
};

}  // namespace tinyloop
