// The grammar matcher (grammar.h): a set of hash-consed parse stacks advanced byte by byte, and
// a byte trie of the vocabulary walked with that set to build the token mask.
#include <algorithm>

#include "grammar/grammar.h"

namespace tinyloop {

namespace {
// Expansions of one closure beyond this mean a grammar the left-recursion check missed.
constexpr size_t kMaxClosureNodes = size_t{1} << 22;
}  // namespace

GrammarMatcher::GrammarMatcher(const Grammar& g, const Tokenizer& tok) : g_(g), tok_(tok) {
    nodes_.push_back({-1, -1});  // node 0: the empty stack (the sentence is finished)
    after_off_.push_back(0);
    after_len_.push_back(0);
    closure(intern(0, 0), cur_);
    std::sort(cur_.begin(), cur_.end());
    build_trie();
}

int32_t GrammarMatcher::intern(int32_t pos, int32_t parent) const {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
    const auto it = intern_.find(key);
    if (it != intern_.end()) return it->second;
    const int32_t id = static_cast<int32_t>(nodes_.size());
    nodes_.push_back({pos, parent});
    after_off_.push_back(-1);
    after_len_.push_back(0);
    intern_.emplace(key, id);
    return id;
}

// Appends to `out` the stacks with a byte (or nothing: node 0) on top that `node` expands to.
// Nodes never point at an End: a finished alternative is popped when it is reached.
void GrammarMatcher::closure(int32_t node, std::vector<int32_t>& out) const {
    if (++cgen_ == 0) {
        std::fill(cstamp_.begin(), cstamp_.end(), 0);
        cgen_ = 1;
    }
    const size_t nodes_before = nodes_.size();
    work_.clear();
    work_.push_back(node);
    while (!work_.empty()) {
        const int32_t n = work_.back();
        work_.pop_back();
        if (cstamp_.size() < nodes_.size()) cstamp_.resize(nodes_.size() * 2, 0);
        if (cstamp_[n] == cgen_) continue;
        cstamp_[n] = cgen_;
        if (n == 0) {
            out.push_back(0);
            continue;
        }
        const Node nd = nodes_[n];
        const GrammarElem& e = g_.elems[nd.pos];
        if (e.kind == GrammarElem::Bytes) {
            out.push_back(n);
            continue;
        }
        // A rule reference: what follows it in this alternative becomes the parent frame (none
        // when it is last, so right recursion such as x* does not grow the stack).
        const int32_t rest = g_.elems[nd.pos + 1].kind == GrammarElem::End ? nd.parent : intern(nd.pos + 1, nd.parent);
        for (int32_t a : g_.rules[e.rule].alts)
            work_.push_back(g_.elems[a].kind == GrammarElem::End ? rest : intern(a, rest));
        if (nodes_.size() - nodes_before > kMaxClosureNodes)
            throw Error(ErrorCode::Internal, "grammar: stack expansion does not terminate (rule '" +
                                                 g_.rules[e.rule].name + "')");
    }
}

// The stacks after the byte on top of `node` is consumed (same for every byte it accepts).
void GrammarMatcher::successors(int32_t node) const {
    if (after_off_[node] >= 0) return;
    const Node nd = nodes_[node];
    const int32_t next = g_.elems[nd.pos + 1].kind == GrammarElem::End ? nd.parent : intern(nd.pos + 1, nd.parent);
    std::vector<int32_t> tmp;
    closure(next, tmp);
    after_off_[node] = static_cast<int32_t>(after_pool_.size());
    after_len_[node] = static_cast<int32_t>(tmp.size());
    after_pool_.insert(after_pool_.end(), tmp.begin(), tmp.end());
}

void GrammarMatcher::step(const std::vector<int32_t>& set, uint8_t byte, std::vector<int32_t>& out) const {
    out.clear();
    if (++gen_ == 0) {
        std::fill(stamp_.begin(), stamp_.end(), 0);
        gen_ = 1;
    }
    for (int32_t s : set) {
        if (s == 0) continue;
        const GrammarElem& e = g_.elems[nodes_[s].pos];
        if (byte < e.lo || byte > e.hi) continue;
        successors(s);
        if (stamp_.size() < nodes_.size()) stamp_.resize(nodes_.size() * 2, 0);
        const int32_t off = after_off_[s], len = after_len_[s];
        for (int32_t k = 0; k < len; ++k) {
            const int32_t t = after_pool_[static_cast<size_t>(off + k)];
            if (stamp_[t] != gen_) {
                stamp_[t] = gen_;
                out.push_back(t);
            }
        }
    }
}

bool GrammarMatcher::advance(std::vector<int32_t>& set, std::string_view bytes) const {
    std::vector<int32_t> next;
    for (char b : bytes) {
        step(set, static_cast<uint8_t>(b), next);
        if (next.empty()) return false;
        std::sort(next.begin(), next.end());
        set.swap(next);
    }
    return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
    std::vector<int32_t> set = cur_;
    if (!advance(set, bytes)) return false;
    cur_.swap(set);
    return true;
}

bool GrammarMatcher::can_accept_bytes(std::string_view bytes) const {
    std::vector<int32_t> set = cur_;
    return advance(set, bytes);
}

bool GrammarMatcher::complete() const { return std::find(cur_.begin(), cur_.end(), 0) != cur_.end(); }

bool GrammarMatcher::at_end() const {
    for (int32_t s : cur_)
        if (s != 0) return false;
    return true;
}

void GrammarMatcher::accept(int32_t id) {
    if (!tok_.valid_id(id))
        throw Error(ErrorCode::InvalidArgument, "grammar: token id " + std::to_string(id) + " is outside [0, " +
                                                    std::to_string(tok_.n_ids()) + ")");
    if (tok_.is_special(id)) {
        if (tok_.is_stop(id) && complete()) return;
        throw Error(ErrorCode::InvalidArgument,
                    "grammar: special token " + std::to_string(id) + " is not allowed here");
    }
    if (!accept_bytes(tok_.bytes_of(id)))
        throw Error(ErrorCode::InvalidArgument,
                    "grammar: token " + std::to_string(id) + " does not fit the grammar here");
}

void GrammarMatcher::build_trie() {
    // Insert the tokens in byte order: each one shares the path of the previous token up to
    // their common prefix, and new children are always the last of their parent's.
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < tok_.n_ids(); ++id)
        if (!tok_.is_special(id) && !tok_.bytes_of(id).empty()) ids.push_back(id);
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return tok_.bytes_of(a) < tok_.bytes_of(b); });
    trie_.assign(1, TrieNode{});
    trie_tok_.clear();
    std::vector<int32_t> path{0}, last_child{-1};  // per depth along the previous token
    const std::string* prev = nullptr;
    for (int32_t id : ids) {
        const std::string& b = tok_.bytes_of(id);
        size_t common = 0;
        if (prev)
            while (common < b.size() && common < prev->size() && b[common] == (*prev)[common]) ++common;
        path.resize(common + 1);
        last_child.resize(common + 1);
        for (size_t k = common; k < b.size(); ++k) {
            const int32_t n = static_cast<int32_t>(trie_.size());
            trie_.push_back(TrieNode{});
            trie_.back().byte = static_cast<uint8_t>(b[k]);
            const int32_t parent = path.back();
            if (last_child.back() < 0) trie_[parent].first_child = n;
            else trie_[last_child.back()].next_sibling = n;
            last_child.back() = n;
            path.push_back(n);
            last_child.push_back(-1);
        }
        TrieNode& t = trie_[path.back()];
        if (t.tok_count == 0) t.tok_begin = static_cast<int32_t>(trie_tok_.size());
        trie_tok_.push_back(id);  // equal byte strings are adjacent in the sorted order
        ++t.tok_count;
        prev = &b;
    }
}

size_t GrammarMatcher::SetHash::operator()(const std::vector<int32_t>& v) const noexcept {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h ^ (h >> 29));
}

int32_t GrammarMatcher::set_id(const std::vector<int32_t>& sorted) const {
    const auto it = set_ids_.find(sorted);
    if (it != set_ids_.end()) return it->second;
    const int32_t id = static_cast<int32_t>(sets_.size());
    sets_.push_back(sorted);
    set_ids_.emplace(sorted, id);
    trans_.resize(trans_.size() + 256, -2);
    return id;
}

int32_t GrammarMatcher::transition(int32_t set, uint8_t byte) const {
    int32_t& t = trans_[static_cast<size_t>(set) * 256 + byte];
    if (t != -2) return t;
    step(sets_[static_cast<size_t>(set)], byte, scratch_);
    int32_t next = -1;
    if (!scratch_.empty()) {
        std::sort(scratch_.begin(), scratch_.end());
        next = set_id(scratch_);
    }
    trans_[static_cast<size_t>(set) * 256 + byte] = next;  // trans_ may have moved
    return next;
}

// Depth first with an explicit stack of (next child to visit, its parent's set), in the order a
// recursion would take: the trie is as deep as the longest token (up to 64 KiB of bytes in a
// model file), too deep for recursion on a small thread stack.
void GrammarMatcher::walk(int32_t trie_node, int32_t set, std::vector<char>& mask) const {
    walk_stack_.assign(1, {trie_[trie_node].first_child, set});
    while (!walk_stack_.empty()) {
        auto& top = walk_stack_.back();
        const int32_t c = top.first;
        if (c < 0) {
            walk_stack_.pop_back();
            continue;
        }
        const int32_t parent_set = top.second;
        top.first = trie_[c].next_sibling;  // before a push can move `top`
        const TrieNode& child = trie_[c];
        const int32_t next = transition(parent_set, child.byte);
        if (next < 0) continue;
        for (int32_t j = 0; j < child.tok_count; ++j) mask[trie_tok_[static_cast<size_t>(child.tok_begin + j)]] = 1;
        if (child.first_child >= 0) walk_stack_.emplace_back(child.first_child, next);
    }
}

void GrammarMatcher::allowed(std::vector<char>& mask) const {
    // The DFA cache is bounded: sets that depend on nesting depth keep coming in a long output.
    constexpr size_t kMaxSets = 4096;
    if (sets_.size() > kMaxSets) {
        sets_.clear();
        set_ids_.clear();
        trans_.clear();
    }
    mask.assign(static_cast<size_t>(tok_.n_ids()), 0);
    walk(0, set_id(cur_), mask);
    if (complete())
        for (int32_t eos : tok_.stop_ids()) mask[static_cast<size_t>(eos)] = 1;
}

}  // namespace tinyloop
