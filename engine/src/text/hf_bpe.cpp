// The "hf_byte_bpe" tokenizer (FORMAT.md §3b), written to match the `tokenizers` package
// (tokenizers/src/{tokenizer/added_vocabulary.rs, tokenizer/normalizer.rs (split),
// pre_tokenizers/{byte_level,digits,split}.rs, models/bpe/word.rs}) step for step; the parity
// test (tests/python/test_tokenizer_hf_parity.py) checks it against that package.
#include "text/hf_bpe.h"

#include <algorithm>
#include <queue>

#include "text/utf8.h"

namespace tinyloop {

namespace {

constexpr size_t kMaxTokenBytes = size_t{1} << 16;
constexpr int64_t kMaxIds = int64_t{1} << 22;

// tokenizers' SplitDelimiterBehavior, in FORMAT.md §3b's spelling.
constexpr const char* kBehaviors[] = {"removed", "isolated", "merged_with_previous",
                                      "merged_with_next", "contiguous"};
enum Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// The pattern tokenizers' ByteLevel pre-tokenizer uses when use_regex is true (GPT-2's).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

[[noreturn]] void refuse(const std::string& msg) { throw Error(ErrorCode::InvalidArgument, msg); }

inline uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Length of the well-formed UTF-8 sequence at t[i] (Unicode Table 3-7), 0 when there is none.
size_t utf8_seq_len(std::string_view t, size_t i) {
    auto at = [&](size_t k) { return k < t.size() ? static_cast<unsigned char>(t[k]) : 0u; };
    const unsigned c = at(i);
    auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
        return at(k) >= lo && at(k) <= hi;
    };
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return cont(i + 1) ? 2 : 0;
    if (c == 0xE0) return cont(i + 1, 0xA0) && cont(i + 2) ? 3 : 0;
    if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(i + 1) && cont(i + 2) ? 3 : 0;
    if (c == 0xED) return cont(i + 1, 0x80, 0x9F) && cont(i + 2) ? 3 : 0;
    if (c == 0xF0) return cont(i + 1, 0x90) && cont(i + 2) && cont(i + 3) ? 4 : 0;
    if (c >= 0xF1 && c <= 0xF3) return cont(i + 1) && cont(i + 2) && cont(i + 3) ? 4 : 0;
    if (c == 0xF4) return cont(i + 1, 0x80, 0x8F) && cont(i + 2) && cont(i + 3) ? 4 : 0;
    return 0;
}

// Probe texts for catastrophic patterns: runs of one kind of character, then a character that
// makes a greedy match fail, the shape on which nested quantifiers backtrack exponentially.
const std::vector<std::string>& probe_texts() {
    static const std::vector<std::string> probes = [] {
        std::vector<std::string> v;
        for (const char* unit : {"a", " ", "1", "\xc3\xa9", "\n", "a1 ", "<|", "'", "\\", "\t",
                                 "\xf0\x9f\x98\x80", "ab", "a ", "$"}) {
            std::string run;
            while (run.size() < 256) run += unit;
            for (const char* tail : {"", "!", "a", " ", "1", "\n"}) v.push_back(run + tail);
        }
        return v;
    }();
    return probes;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() {
    static const std::array<std::string, 256> table = [] {
        std::array<std::string, 256> t;
        uint32_t n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            append_utf8(printable ? static_cast<uint32_t>(b) : 256 + n++, t[static_cast<size_t>(b)]);
        }
        return t;
    }();
    return table;
}

int byte_level_byte(uint32_t cp) {
    if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return static_cast<int>(cp);
    if (cp < 256 || cp >= 256 + 68) return -1;
    // The 68 unprintable bytes, in increasing order, map to U+0100 .. U+0143.
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        if (!printable && 256 + n++ == cp) return b;
    }
    return -1;
}

std::string byte_level_decode(std::string_view token) {
    std::string out;
    size_t i = 0;
    while (i < token.size()) {
        const size_t len = utf8_seq_len(token, i);
        if (len == 0) return std::string(token);
        uint32_t cp = static_cast<unsigned char>(token[i]);
        if (len > 1) {
            cp &= 0x7Fu >> len;
            for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(token[i + k]) & 0x3F);
        }
        const int b = byte_level_byte(cp);
        if (b < 0) return std::string(token);
        out.push_back(static_cast<char>(b));
        i += len;
    }
    return out;
}

void HfBpe::init(const TokenizerSpec& spec, int vocab_size) {
    if (spec.type != "hf_byte_bpe")
        refuse("tokenizer.type: '" + spec.type + "' unknown, allowed byte_bpe or hf_byte_bpe");
    const int64_t n_vocab = static_cast<int64_t>(spec.vocab.size());
    if (n_vocab == 0 || n_vocab > kMaxIds)
        refuse("tokenizer.vocab: " + std::to_string(n_vocab) + " entries, allowed 1 .. " +
               std::to_string(kMaxIds));
    std::unordered_map<std::string, int32_t> index;
    index.reserve(spec.vocab.size());
    for (int64_t i = 0; i < n_vocab; ++i) {
        const std::string& s = spec.vocab[static_cast<size_t>(i)];
        if (s.empty()) continue;  // an id the model's vocab does not hold
        const std::string field = "tokenizer.vocab[" + std::to_string(i) + "]: ";
        if (s.size() > kMaxTokenBytes)
            refuse(field + std::to_string(s.size()) + " bytes, allowed at most " +
                   std::to_string(kMaxTokenBytes));
        bool valid = true;
        for (size_t k = 0; valid && k < s.size(); k += std::max<size_t>(1, utf8_seq_len(s, k)))
            valid = utf8_seq_len(s, k) != 0;
        if (!valid)
            refuse(field + "not valid UTF-8, allowed a token string as tokenizer.json writes it");
        const auto [it, fresh] = index.emplace(s, static_cast<int32_t>(i));
        if (!fresh)
            refuse(field + "the same string as id " + std::to_string(it->second) +
                   ", allowed distinct token strings");
    }
    int64_t n_ids = n_vocab;
    for (size_t k = 0; k < spec.added_tokens.size(); ++k) {
        const auto& a = spec.added_tokens[k];
        const std::string field = "tokenizer.added_tokens[" + std::to_string(k) + "]";
        if (a.id < 0 || a.id >= kMaxIds)
            refuse(field + ".id: " + std::to_string(a.id) + " out of range, allowed 0 .. " +
                   std::to_string(kMaxIds - 1));
        if (a.content.empty() || a.content.size() > kMaxTokenBytes)
            refuse(field + ".content: " + std::to_string(a.content.size()) +
                   " bytes, allowed 1 .. " + std::to_string(kMaxTokenBytes));
        for (size_t j = 0; j < k; ++j)
            if (spec.added_tokens[j].id == a.id)
                refuse(field + ".id: " + std::to_string(a.id) + " is also added_tokens[" +
                       std::to_string(j) + "]'s, allowed distinct ids");
        n_ids = std::max<int64_t>(n_ids, int64_t{a.id} + 1);
    }
    if (vocab_size > 0 && n_ids > vocab_size)
        refuse("tokenizer.vocab: the tokenizer has ids up to " + std::to_string(n_ids - 1) +
               ", allowed below hparams.vocab_size " + std::to_string(vocab_size));

    std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges;
    merges.reserve(spec.merges.size());
    for (size_t k = 0; k < spec.merges.size(); ++k) {
        const auto [a, b] = spec.merges[k];
        const std::string field = "tokenizer.merges[" + std::to_string(k) + "]: ";
        for (int32_t id : {a, b})
            if (id < 0 || id >= n_vocab || spec.vocab[static_cast<size_t>(id)].empty())
                refuse(field + "id " + std::to_string(id) +
                       " is not a token of the vocab, allowed ids of tokenizer.vocab");
        const std::string merged =
            spec.vocab[static_cast<size_t>(a)] + spec.vocab[static_cast<size_t>(b)];
        const auto it = index.find(merged);
        if (it == index.end())
            refuse(field + "the merged token is not in the vocab, allowed merges whose result "
                           "is a token of tokenizer.vocab");
        // As tokenizers builds its merge map: a repeated pair takes its last rank.
        merges[pair_key(a, b)] = {static_cast<uint32_t>(k), it->second};
    }

    std::vector<std::unique_ptr<Regex>> regexes;
    std::vector<Step> steps;
    for (size_t k = 0; k < spec.hf_pre.size(); ++k) {
        const HfPreStep& p = spec.hf_pre[k];
        const std::string field = "tokenizer.pre_tokenizer[" + std::to_string(k) + "]";
        Step s;
        if (p.kind == "split") {
            regexes.push_back(std::make_unique<Regex>(p.pattern, field + ".pattern"));
            s.regex = regexes.back().get();
            const auto* end = std::end(kBehaviors);
            const auto* hit = std::find_if(std::begin(kBehaviors), end,
                                           [&](const char* b) { return p.behavior == b; });
            if (hit == end)
                refuse(field + ".behavior: '" + p.behavior + "' unknown, allowed removed, "
                               "isolated, merged_with_previous, merged_with_next, contiguous");
            s.behavior = static_cast<int>(hit - std::begin(kBehaviors));
            s.invert = p.invert;
        } else if (p.kind == "digits") {
            // tokenizers' Digits: char::is_numeric (Nd, Nl, No) isolated, or runs contiguous.
            regexes.push_back(std::make_unique<Regex>(R"(\p{N})", field));
            s.regex = regexes.back().get();
            s.behavior = p.individual_digits ? Isolated : Contiguous;
        } else if (p.kind == "byte_level") {
            s.kind = Step::ByteLevel;
            s.add_prefix_space = p.add_prefix_space;
            if (p.use_regex) {
                regexes.push_back(std::make_unique<Regex>(kGpt2Pattern, field + ".use_regex"));
                s.regex = regexes.back().get();
            }
        } else {
            refuse(field + ".kind: '" + p.kind + "' unknown, allowed split, digits, byte_level");
        }
        steps.push_back(s);
    }
    for (const auto& r : regexes)
        for (const auto& probe : probe_texts()) r->find_all(probe);

    for (const auto& [field, ids] : {std::pair<const char*, const std::vector<int32_t>*>{
                                         "tokenizer.post_processor.prefix", &spec.prefix_ids},
                                     {"tokenizer.post_processor.suffix", &spec.suffix_ids}})
        for (int32_t id : *ids)
            if (id < 0 || id >= n_ids)
                refuse(std::string(field) + ": id " + std::to_string(id) +
                       " out of range, allowed 0 .. " + std::to_string(n_ids - 1));
    for (const auto& [field, id] : {std::pair<const char*, int32_t>{"eos_id", spec.eos_id},
                                    std::pair<const char*, int32_t>{"bos_id", spec.bos_id}})
        if (id != -1 && (id < 0 || id >= n_ids))
            refuse(std::string("tokenizer.") + field + ": " + std::to_string(id) +
                   " out of range, allowed -1 (none) or 0 .. " + std::to_string(n_ids - 1));

    // Bytes of each id as tokenizers' decode makes them: an added token's content, else the
    // vocab string, through the ByteLevel decoder.
    std::vector<std::string> id_bytes(static_cast<size_t>(n_ids));
    std::vector<bool> special(static_cast<size_t>(n_ids), false);
    for (int64_t i = 0; i < n_vocab; ++i)
        id_bytes[static_cast<size_t>(i)] = byte_level_decode(spec.vocab[static_cast<size_t>(i)]);
    std::vector<Added> added[2];
    for (const auto& a : spec.added_tokens) {
        id_bytes[static_cast<size_t>(a.id)] = byte_level_decode(a.content);
        special[static_cast<size_t>(a.id)] = a.special;
        added[a.normalized ? 1 : 0].push_back({a.content, a.id, a.special});
    }
    std::array<int32_t, 256> byte_id{};
    for (int b = 0; b < 256; ++b) {
        const auto it = index.find(byte_level_chars()[static_cast<size_t>(b)]);
        byte_id[static_cast<size_t>(b)] = it == index.end() ? -1 : it->second;
    }

    id_bytes_ = std::move(id_bytes);
    special_ = std::move(special);
    vocab_index_ = std::move(index);
    byte_id_ = byte_id;
    merges_ = std::move(merges);
    regexes_ = std::move(regexes);
    steps_ = std::move(steps);
    added_[0] = std::move(added[0]);
    added_[1] = std::move(added[1]);
    prefix_ = spec.prefix_ids;
    suffix_ = spec.suffix_ids;
    ignore_merges_ = spec.ignore_merges;
}

std::vector<int32_t> HfBpe::encode(std::string_view text, bool parse_special,
                                   bool add_special) const {
    std::vector<int32_t> out;
    if (add_special) out = prefix_;
    size_t start = 0, i = 0;
    while (i < text.size()) {
        const size_t len = utf8_seq_len(text, i);
        if (len > 0) {
            i += len;
            continue;
        }
        encode_valid(text.substr(start, i - start), parse_special, out);
        const int32_t id = byte_id_[static_cast<unsigned char>(text[i])];
        if (id >= 0) out.push_back(id);
        start = ++i;
    }
    encode_valid(text.substr(start), parse_special, out);
    if (add_special) out.insert(out.end(), suffix_.begin(), suffix_.end());
    return out;
}

// tokenizers' AddedVocabulary: tokens not normalized are split out first, then the normalized
// ones in what is left (with no normalizer the two see the same text); each pass takes the
// leftmost match, the longest at that position.
void HfBpe::encode_valid(std::string_view text, bool parse_special,
                         std::vector<int32_t>& out) const {
    if (text.empty()) return;
    struct Piece {
        std::string_view text;
        int32_t id;  // >= 0: an added token
    };
    std::vector<Piece> pieces{{text, -1}};
    for (const auto& set : added_) {
        if (set.empty()) continue;
        std::vector<Piece> next;
        for (const Piece& p : pieces) {
            if (p.id >= 0) {
                next.push_back(p);
                continue;
            }
            const std::string_view t = p.text;
            size_t from = 0, i = 0;
            while (i < t.size()) {
                const Added* best = nullptr;
                for (const Added& a : set)
                    if ((parse_special || !a.special) && a.content.size() <= t.size() - i &&
                        (!best || a.content.size() > best->content.size()) &&
                        t.compare(i, a.content.size(), a.content) == 0)
                        best = &a;
                if (!best) {
                    ++i;
                    continue;
                }
                if (i > from) next.push_back({t.substr(from, i - from), -1});
                next.push_back({t.substr(i, best->content.size()), best->id});
                i += best->content.size();
                from = i;
            }
            if (from < t.size()) next.push_back({t.substr(from), -1});
        }
        pieces = std::move(next);
    }
    for (const Piece& p : pieces) {
        if (p.id >= 0)
            out.push_back(p.id);
        else
            encode_plain(p.text, out);
    }
}

// The pre-tokenizer steps in order (tokenizers' NormalizedString::split for each Split), then
// BPE on every resulting piece.
void HfBpe::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<std::string> pieces{std::string(text)};
    for (const Step& s : steps_) {
        std::vector<std::string> next;
        for (std::string& p : pieces) {
            if (s.kind == Step::ByteLevel) {
                if (s.add_prefix_space && p[0] != ' ') p.insert(p.begin(), ' ');
                if (!s.regex) {
                    next.push_back(std::move(p));
                    continue;
                }
            }
            // find_matches: the matches and the gaps between them, in order.
            std::vector<std::pair<std::pair<size_t, size_t>, bool>> m;
            size_t prev = 0;
            for (const auto& [a, b] : s.regex->find_all(p)) {
                if (prev != a) m.push_back({{prev, a}, false});
                m.push_back({{a, b}, true});
                prev = b;
            }
            if (prev != p.size()) m.push_back({{prev, p.size()}, false});
            if (s.invert)
                for (auto& e : m) e.second = !e.second;
            std::vector<std::pair<size_t, size_t>> cut;
            const int behavior = s.kind == Step::ByteLevel ? Isolated : s.behavior;
            bool prev_match = false;
            switch (behavior) {
                case Removed:
                    for (const auto& [o, is] : m)
                        if (!is) cut.push_back(o);
                    break;
                case Isolated:
                    for (const auto& e : m) cut.push_back(e.first);
                    break;
                case MergedWithPrevious:
                    for (const auto& [o, is] : m) {
                        if (is && !prev_match && !cut.empty())
                            cut.back().second = o.second;
                        else
                            cut.push_back(o);
                        prev_match = is;
                    }
                    break;
                case Contiguous:
                    for (const auto& [o, is] : m) {
                        if (is == prev_match && !cut.empty())
                            cut.back().second = o.second;
                        else
                            cut.push_back(o);
                        prev_match = is;
                    }
                    break;
                case MergedWithNext:
                    for (auto it = m.rbegin(); it != m.rend(); ++it) {
                        if (it->second && !prev_match && !cut.empty())
                            cut.back().first = it->first.first;
                        else
                            cut.push_back(it->first);
                        prev_match = it->second;
                    }
                    std::reverse(cut.begin(), cut.end());
                    break;
            }
            for (const auto& [a, b] : cut)
                if (b > a) next.push_back(p.substr(a, b - a));
        }
        pieces = std::move(next);
    }
    for (const std::string& p : pieces) bpe(p, out);
}

// tokenizers' Word::merge_all: a min-heap of candidate merges by (rank, position); an entry is
// stale when the pair now at its position no longer merges into the same id.
void HfBpe::bpe(std::string_view piece, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        std::string word;
        for (char c : piece) word += byte_level_chars()[static_cast<unsigned char>(c)];
        const auto it = vocab_index_.find(word);
        if (it != vocab_index_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    struct Sym {
        int32_t id;
        int prev, next;
    };
    std::vector<Sym> sym;
    sym.reserve(piece.size());
    for (char c : piece) {
        const int32_t id = byte_id_[static_cast<unsigned char>(c)];
        if (id < 0) continue;  // a byte the vocab lacks (no unk token): tokenizers drops it
        const int n = static_cast<int>(sym.size());
        sym.push_back({id, n - 1, -1});
        if (n > 0) sym[static_cast<size_t>(n - 1)].next = n;
    }
    if (sym.empty()) return;
    struct Cand {
        uint32_t rank;
        int pos;
        int32_t merged;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto lookup = [&](int l, int r) -> const std::pair<uint32_t, int32_t>* {
        const auto it = merges_.find(pair_key(sym[static_cast<size_t>(l)].id, sym[static_cast<size_t>(r)].id));
        return it == merges_.end() ? nullptr : &it->second;
    };
    auto consider = [&](int l, int r) {
        if (const auto* m = lookup(l, r)) heap.push({m->first, l, m->second});
    };
    for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) consider(i, i + 1);
    while (!heap.empty()) {
        const Cand c = heap.top();
        heap.pop();
        Sym& L = sym[static_cast<size_t>(c.pos)];
        if (L.id < 0 || L.next == -1) continue;
        const auto* m = lookup(c.pos, L.next);
        if (!m || m->second != c.merged) continue;
        Sym& R = sym[static_cast<size_t>(L.next)];
        L.id = c.merged;
        L.next = R.next;
        if (R.next != -1) sym[static_cast<size_t>(R.next)].prev = c.pos;
        R.id = -1;
        if (L.prev != -1) consider(L.prev, c.pos);
        if (L.next != -1) consider(c.pos, L.next);
    }
    for (int i = 0; i != -1; i = sym[static_cast<size_t>(i)].next) out.push_back(sym[static_cast<size_t>(i)].id);
}

}  // namespace tinyloop
