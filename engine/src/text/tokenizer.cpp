// Byte-level BPE with the tinyloop-ascii-v1 pretokenizer (FORMAT.md §3).
#include "text/tokenizer.h"

#include <algorithm>
#include <queue>

namespace tinyloop {

namespace {

// A hostile merge list can double a token's length with every merge; these caps keep init
// bounded (real vocabularies have tokens of a few dozen bytes).
constexpr size_t kMaxTokenBytes = size_t{1} << 16;
constexpr size_t kMaxTotalBytes = size_t{1} << 26;

[[noreturn]] void refuse(const std::string& msg) { throw Error(ErrorCode::InvalidArgument, msg); }

// Byte classes of the pretokenizer. Bytes >= 0x80 are letters so UTF-8 sequences stay whole.
inline bool is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
inline bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
inline bool is_letter(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c >= 0x80;
}
inline bool is_other(unsigned char c) { return !is_space(c) && !is_digit(c) && !is_letter(c); }

// Length of the chunk starting at i: the regex
//   ` ?[0-9]` | ` ?[A-Za-z\x80-\xff]+` | ` ?[^\sA-Za-z0-9\x80-\xff]+` | `\s+(?!\S)` | `\s+`
// with the first matching alternative winning (not the longest).
size_t chunk_len(std::string_view t, size_t i) {
    const size_t n = t.size();
    auto at = [&](size_t k) { return static_cast<unsigned char>(t[k]); };
    // The optional leading space of the first three alternatives is only a space, never \t/\n.
    const size_t body = (at(i) == ' ' && i + 1 < n) ? i + 1 : i;
    const unsigned char c = at(body);
    if (body != i || !is_space(c)) {
        if (is_digit(c)) return body + 1 - i;
        if (is_letter(c) || is_other(c)) {
            const bool letter = is_letter(c);
            size_t j = body + 1;
            while (j < n && (letter ? is_letter(at(j)) : is_other(at(j)))) ++j;
            return j - i;
        }
        // body != i and c is whitespace: a space followed by whitespace; fall through.
    }
    if (!is_space(at(i))) return 1;  // unreachable: every non-space byte is handled above
    size_t j = i;
    while (j < n && is_space(at(j))) ++j;
    // `\s+(?!\S)`: the whole run at the end of text; before a non-space, the run minus its last
    // byte (which then starts the next chunk). A run of one before a non-space falls to `\s+`.
    if (j == n) return j - i;
    if (j - i >= 2) return j - i - 1;
    return 1;
}

template <class Fn>
void for_each_chunk(std::string_view text, Fn&& fn) {
    size_t i = 0;
    while (i < text.size()) {
        const size_t len = chunk_len(text, i);
        fn(text.substr(i, len));
        i += len;
    }
}

inline uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

void Tokenizer::init(const TokenizerSpec& spec, int vocab_size) {
    if (spec.type == "hf_byte_bpe") {
        auto hf = std::make_shared<HfBpe>();
        hf->init(spec, vocab_size);
        set_stop_ids(spec, hf->n_ids());
        hf_ = std::move(hf);
        eos_id_ = spec.eos_id;
        return;
    }
    if (spec.type != "byte_bpe")
        refuse("tokenizer.type: '" + spec.type + "' unknown, allowed byte_bpe, hf_byte_bpe");
    if (spec.pretokenizer != "tinyloop-ascii-v1")
        refuse("tokenizer.pretokenizer: '" + spec.pretokenizer +
               "' unknown, allowed tinyloop-ascii-v1");
    if (vocab_size < 256)
        refuse("hparams.vocab_size: " + std::to_string(vocab_size) +
               " cannot hold the 256 byte ids, allowed 256 .. 1048576");

    const int64_t n_merges = static_cast<int64_t>(spec.merges.size());
    const int64_t n_special = static_cast<int64_t>(spec.special_tokens.size());
    if (256 + n_merges > vocab_size)
        refuse("tokenizer.merges: " + std::to_string(n_merges) + " merges make ids up to " +
               std::to_string(255 + n_merges) + ", allowed at most " +
               std::to_string(vocab_size - 256) + " merges (ids below vocab_size " +
               std::to_string(vocab_size) + ")");
    if (256 + n_merges + n_special > vocab_size)
        refuse("tokenizer.special_tokens: " + std::to_string(n_special) + " special tokens after " +
               std::to_string(n_merges) + " merges need ids up to " +
               std::to_string(255 + n_merges + n_special) + ", allowed below vocab_size " +
               std::to_string(vocab_size));

    std::vector<std::string> id_bytes;
    id_bytes.reserve(static_cast<size_t>(256 + n_merges + n_special));
    for (int b = 0; b < 256; ++b) id_bytes.emplace_back(1, static_cast<char>(b));
    std::unordered_map<uint64_t, int32_t> merge_rank;
    merge_rank.reserve(static_cast<size_t>(n_merges));
    size_t total = 256;
    for (int64_t k = 0; k < n_merges; ++k) {
        const auto [a, b] = spec.merges[static_cast<size_t>(k)];
        const int64_t limit = 256 + k;  // both parts must already exist
        const std::string field = "tokenizer.merges[" + std::to_string(k) + "]: ";
        for (int32_t id : {a, b})
            if (id < 0 || id >= limit)
                refuse(field + "id " + std::to_string(id) + " out of range, allowed 0 .. " +
                       std::to_string(limit - 1) + " (ids made before this merge)");
        const size_t len =
            id_bytes[static_cast<size_t>(a)].size() + id_bytes[static_cast<size_t>(b)].size();
        if (len > kMaxTokenBytes)
            refuse(field + "token would be " + std::to_string(len) +
                   " bytes long, allowed at most " + std::to_string(kMaxTokenBytes));
        total += len;
        if (total > kMaxTotalBytes)
            refuse(field + "the vocabulary's tokens would exceed " +
                   std::to_string(kMaxTotalBytes) + " bytes in all");
        id_bytes.push_back(id_bytes[static_cast<size_t>(a)] + id_bytes[static_cast<size_t>(b)]);
        // A repeated pair keeps its first (lowest) rank; the later id is never produced.
        merge_rank.emplace(pair_key(a, b), static_cast<int32_t>(limit));
    }

    const int32_t first_special = static_cast<int32_t>(256 + n_merges);
    const int32_t end_special = static_cast<int32_t>(first_special + n_special);
    id_bytes.resize(static_cast<size_t>(end_special));
    std::vector<bool> taken(static_cast<size_t>(n_special), false);
    std::vector<std::pair<std::string, int32_t>> specials;
    for (const auto& [name, id] : spec.special_tokens) {
        const std::string field = "tokenizer.special_tokens." + name + ": ";
        if (name.empty()) refuse("tokenizer.special_tokens: a special token's string is empty");
        if (name.size() > kMaxTokenBytes)
            refuse(field + "string is " + std::to_string(name.size()) +
                   " bytes long, allowed at most " + std::to_string(kMaxTokenBytes));
        if (id < first_special || id >= end_special)
            refuse(field + "id " + std::to_string(id) + " out of range, allowed " +
                   std::to_string(first_special) + " .. " + std::to_string(end_special - 1) +
                   " (special tokens take the ids right after the merges)");
        for (const auto& [other, other_id] : specials)
            if (other == name) refuse(field + "listed twice, allowed once");
        if (taken[static_cast<size_t>(id - first_special)])
            refuse(field + "id " + std::to_string(id) +
                   " is already used by another special token, allowed distinct ids");
        taken[static_cast<size_t>(id - first_special)] = true;
        id_bytes[static_cast<size_t>(id)] = name;
        specials.emplace_back(name, id);
    }
    std::sort(specials.begin(), specials.end(), [](const auto& x, const auto& y) {
        return x.first.size() != y.first.size() ? x.first.size() > y.first.size()
                                                : x.first < y.first;
    });

    const int32_t n_ids = end_special;
    for (const auto& [field, id] : {std::pair<const char*, int32_t>{"eos_id", spec.eos_id},
                                    std::pair<const char*, int32_t>{"bos_id", spec.bos_id}})
        if (id != -1 && (id < 0 || id >= n_ids))
            refuse(std::string("tokenizer.") + field + ": " + std::to_string(id) +
                   " out of range, allowed -1 (none) or 0 .. " + std::to_string(n_ids - 1));

    set_stop_ids(spec, n_ids);
    hf_.reset();
    id_bytes_ = std::move(id_bytes);
    merge_rank_ = std::move(merge_rank);
    specials_ = std::move(specials);
    first_special_ = first_special;
    eos_id_ = spec.eos_id;
}

void Tokenizer::set_stop_ids(const TokenizerSpec& spec, int n_ids) {
    if (spec.type != "hf_byte_bpe" && !spec.stop_ids.empty())
        refuse("tokenizer.stop_ids: only an hf_byte_bpe tokenizer carries them (FORMAT.md §3b)");
    constexpr size_t kMaxStopIds = 64;
    if (spec.stop_ids.size() > kMaxStopIds)
        refuse("tokenizer.stop_ids: " + std::to_string(spec.stop_ids.size()) + " ids, allowed at most " +
               std::to_string(kMaxStopIds));
    std::vector<int32_t> stops;
    if (spec.eos_id >= 0) stops.push_back(spec.eos_id);
    for (size_t k = 0; k < spec.stop_ids.size(); ++k) {
        const int32_t id = spec.stop_ids[k];
        const std::string field = "tokenizer.stop_ids[" + std::to_string(k) + "]: ";
        if (id < 0 || id >= n_ids)
            refuse(field + std::to_string(id) + " out of range, allowed 0 .. " + std::to_string(n_ids - 1));
        if (std::find(spec.stop_ids.begin(), spec.stop_ids.begin() + static_cast<std::ptrdiff_t>(k), id) !=
            spec.stop_ids.begin() + static_cast<std::ptrdiff_t>(k))
            refuse(field + std::to_string(id) + " is listed twice, allowed distinct ids");
        if (std::find(stops.begin(), stops.end(), id) == stops.end()) stops.push_back(id);
    }
    stop_ids_ = std::move(stops);
}

std::vector<std::string_view> Tokenizer::pretokenize(std::string_view text) {
    std::vector<std::string_view> chunks;
    for_each_chunk(text, [&](std::string_view c) { chunks.push_back(c); });
    return chunks;
}

bool Tokenizer::is_special(int32_t id) const {
    if (hf_) return valid_id(id) && hf_->is_special(id);
    return id >= first_special_ && id < n_ids();
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special,
                                       bool add_special) const {
    if (hf_) return hf_->encode(text, parse_special, add_special);
    (void)add_special;  // byte_bpe has no post-processor
    std::vector<int32_t> out;
    out.reserve(text.size() / 2 + 1);
    auto encode_text = [&](std::string_view t) {
        for_each_chunk(t, [&](std::string_view c) { encode_chunk(c, out); });
    };
    if (!parse_special || specials_.empty()) {
        encode_text(text);
        return out;
    }
    size_t start = 0, i = 0;
    while (i < text.size()) {
        const std::pair<std::string, int32_t>* hit = nullptr;
        for (const auto& s : specials_)  // longest first
            if (text.compare(i, s.first.size(), s.first) == 0) {
                hit = &s;
                break;
            }
        if (!hit) {
            ++i;
            continue;
        }
        encode_text(text.substr(start, i - start));
        out.push_back(hit->second);
        i += hit->first.size();
        start = i;
    }
    encode_text(text.substr(start));
    return out;
}

// Repeatedly applies the lowest-ranked applicable merge, leftmost on ties: symbols form a
// linked list, candidate pairs sit in a min-heap keyed by (merged id = 256 + rank, left
// position), and stale entries are skipped when popped. O(n log n) per chunk.
void Tokenizer::encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const {
    const int n = static_cast<int>(chunk.size());
    if (n == 0) return;
    if (n == 1 || merge_rank_.empty()) {
        for (char c : chunk) out.push_back(static_cast<unsigned char>(c));
        return;
    }
    struct Sym {
        int32_t id;
        int prev, next;
    };
    std::vector<Sym> sym(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
        sym[static_cast<size_t>(i)] = {static_cast<unsigned char>(chunk[static_cast<size_t>(i)]),
                                       i - 1, i + 1 < n ? i + 1 : -1};
    struct Cand {
        int32_t merged;
        int left, right;
        int32_t a, b;
        bool operator>(const Cand& o) const {
            return merged != o.merged ? merged > o.merged : left > o.left;
        }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto consider = [&](int l, int r) {
        const int32_t a = sym[static_cast<size_t>(l)].id, b = sym[static_cast<size_t>(r)].id;
        const auto it = merge_rank_.find(pair_key(a, b));
        if (it != merge_rank_.end()) heap.push({it->second, l, r, a, b});
    };
    for (int i = 0; i + 1 < n; ++i) consider(i, i + 1);
    while (!heap.empty()) {
        const Cand c = heap.top();
        heap.pop();
        Sym& L = sym[static_cast<size_t>(c.left)];
        Sym& R = sym[static_cast<size_t>(c.right)];
        // A node's id only grows in length, so matching ids and adjacency mean "still valid".
        if (L.id != c.a || R.id != c.b || L.next != c.right) continue;
        L.id = c.merged;
        L.next = R.next;
        if (R.next != -1) sym[static_cast<size_t>(R.next)].prev = c.left;
        R.id = -1;
        R.next = R.prev = -1;
        if (L.prev != -1) consider(L.prev, c.left);
        if (L.next != -1) consider(c.left, L.next);
    }
    for (int i = 0; i != -1; i = sym[static_cast<size_t>(i)].next)
        out.push_back(sym[static_cast<size_t>(i)].id);
}

}  // namespace tinyloop
