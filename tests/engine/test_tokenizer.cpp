// The byte-level BPE tokenizer (FORMAT.md §3): pretokenizer chunks, merge order, round trips,
// special tokens and the refusals of Tokenizer::init.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "text/tokenizer.h"

using namespace tinyloop;

namespace {

std::vector<std::string> chunks(std::string_view text) {
    std::vector<std::string> out;
    for (std::string_view c : Tokenizer::pretokenize(text)) out.emplace_back(c);
    return out;
}

using Chunks = std::vector<std::string>;

TokenizerSpec bytes_only() { return TokenizerSpec{}; }

std::string decode(const Tokenizer& t, const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) {
        EXPECT_TRUE(t.valid_id(id)) << id;
        s += t.bytes_of(id);
    }
    return s;
}

// Reference BPE: scan the whole chunk for the lowest-ranked pair, leftmost, merge, repeat.
std::vector<int32_t> naive_bpe(const TokenizerSpec& spec, std::string_view text) {
    std::map<std::pair<int32_t, int32_t>, int32_t> rank;
    for (size_t k = 0; k < spec.merges.size(); ++k) rank.emplace(spec.merges[k], int32_t(256 + k));
    std::vector<int32_t> out;
    for (std::string_view chunk : Tokenizer::pretokenize(text)) {
        std::vector<int32_t> s;
        for (char c : chunk) s.push_back(static_cast<unsigned char>(c));
        for (;;) {
            size_t best = SIZE_MAX;
            int32_t best_id = INT32_MAX;
            for (size_t i = 0; i + 1 < s.size(); ++i) {
                const auto it = rank.find({s[i], s[i + 1]});
                if (it != rank.end() && it->second < best_id) {
                    best_id = it->second;
                    best = i;
                }
            }
            if (best == SIZE_MAX) break;
            s[best] = best_id;
            s.erase(s.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        }
        out.insert(out.end(), s.begin(), s.end());
    }
    return out;
}

void expect_refused(const TokenizerSpec& spec, int vocab, const std::string& field) {
    Tokenizer t;
    try {
        t.init(spec, vocab);
        ADD_FAILURE() << "init accepted a spec that should be refused (" << field << ")";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find(field), std::string::npos)
            << "message '" << e.what() << "' does not name " << field;
        EXPECT_NE(std::string(e.what()).find("allowed"), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(Pretokenizer, DigitsAreOneChunkEach) {
    EXPECT_EQ(chunks("123"), (Chunks{"1", "2", "3"}));
    EXPECT_EQ(chunks(" 42"), (Chunks{" 4", "2"}));
    EXPECT_EQ(chunks("ab12cd"), (Chunks{"ab", "1", "2", "cd"}));
    EXPECT_EQ(chunks("a 1"), (Chunks{"a", " 1"}));
}

TEST(Pretokenizer, LettersTakeOneLeadingSpace) {
    EXPECT_EQ(chunks("hello world"), (Chunks{"hello", " world"}));
    EXPECT_EQ(chunks(" hello"), (Chunks{" hello"}));
    EXPECT_EQ(chunks("In the beginning"), (Chunks{"In", " the", " beginning"}));
}

TEST(Pretokenizer, Utf8BytesCountAsLetters) {
    EXPECT_EQ(chunks("h\xc3\xa9llo w\xc3\xb6rld"), (Chunks{"h\xc3\xa9llo", " w\xc3\xb6rld"}));
    EXPECT_EQ(chunks("\xe4\xb8\xad\xe6\x96\x87!"), (Chunks{"\xe4\xb8\xad\xe6\x96\x87", "!"}));
    // Invalid UTF-8 stays together too: every byte >= 0x80 is a letter.
    EXPECT_EQ(chunks("a\xff\xfe b"), (Chunks{"a\xff\xfe", " b"}));
}

TEST(Pretokenizer, PunctuationRuns) {
    EXPECT_EQ(chunks("hi !!!?"), (Chunks{"hi", " !!!?"}));
    EXPECT_EQ(chunks("x+=1;"), (Chunks{"x", "+=", "1", ";"}));
    EXPECT_EQ(chunks("don't"), (Chunks{"don", "'", "t"}));
    EXPECT_EQ(chunks(" \x01\x02z"), (Chunks{" \x01\x02", "z"}));
    EXPECT_EQ(chunks(std::string("a\0b", 3)), (Chunks{"a", std::string(1, '\0'), "b"}));
}

TEST(Pretokenizer, WhitespaceRunBacksOffOneBeforeText) {
    // `\s+(?!\S)` leaves the run's last byte to start the next chunk.
    EXPECT_EQ(chunks("  \n\nfoo"), (Chunks{"  \n", "\n", "foo"}));
    EXPECT_EQ(chunks("a  b"), (Chunks{"a", " ", " b"}));
    EXPECT_EQ(chunks("a   b"), (Chunks{"a", "  ", " b"}));
    EXPECT_EQ(chunks("a\n b"), (Chunks{"a", "\n", " b"}));
    EXPECT_EQ(chunks("x\n\n1"), (Chunks{"x", "\n", "\n", "1"}));
}

TEST(Pretokenizer, OnlyASpaceJoinsTheNextWord) {
    // A lone \t or \n before a word is its own chunk (`\s+`), never a prefix of the word.
    EXPECT_EQ(chunks("a\tb"), (Chunks{"a", "\t", "b"}));
    EXPECT_EQ(chunks("\tfoo"), (Chunks{"\t", "foo"}));
    EXPECT_EQ(chunks("\t\tx"), (Chunks{"\t", "\t", "x"}));
    EXPECT_EQ(chunks("a \tb"), (Chunks{"a", " ", "\t", "b"}));
    EXPECT_EQ(chunks("\n!"), (Chunks{"\n", "!"}));
    EXPECT_EQ(chunks("\r\n7"), (Chunks{"\r", "\n", "7"}));
}

TEST(Pretokenizer, TrailingWhitespaceIsOneChunk) {
    EXPECT_EQ(chunks("hi  "), (Chunks{"hi", "  "}));
    EXPECT_EQ(chunks("hi \n"), (Chunks{"hi", " \n"}));
    EXPECT_EQ(chunks("x\r\n"), (Chunks{"x", "\r\n"}));
    EXPECT_EQ(chunks(" "), (Chunks{" "}));
    EXPECT_EQ(chunks("\v\f"), (Chunks{"\v\f"}));
    EXPECT_EQ(chunks(""), (Chunks{}));
}

// Random strings over the tricky bytes, chunked by Python's `re` with FORMAT.md's pattern
// (bytes mode, where \s is exactly [ \t\n\r\f\v]): input hex, then the chunks' hex.
TEST(Pretokenizer, MatchesTheRegexOnGoldenCases) {
    auto from_hex = [](std::string_view h) {
        std::string out;
        for (size_t i = 0; i + 1 < h.size(); i += 2)
            out += static_cast<char>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16));
        return out;
    };
    const std::vector<std::pair<const char*, const char*>> cases = {
        {"0b000c1c002d00c3a9202031202d", "0b 00 0c 1c002d00 c3a9 20 2031 202d"},
        {"1c0dc3a92020200a090c5a2d", "1c 0d c3a9 2020200a09 0c 5a 2d"},
        {"613109210d20", "61 31 09 21 0d20"},
        {"610b0a20202d1c", "61 0b0a20 202d1c"},
        {"0a1c1c090a21215a0a", "0a 1c1c 09 0a 2121 5a 0a"},
        {"202d200d1c", "202d 20 0d 1c"},
        {"0a2d0a0b0c0d", "0a 2d 0a0b0c0d"},
        {"2020c3a9c3a90d0a000d2020610b20", "20 20c3a9c3a9 0d 0a 00 0d20 2061 0b20"},
        {"610a20200a0b090c0b", "61 0a20200a0b090c0b"},
        {"212021c3a9000c090b0c2d0b5a", "21 2021 c3a9 00 0c090b 0c 2d 0b 5a"},
        {"0a5a5a000a200b20", "0a 5a5a 00 0a200b20"},
        {"2d6120311c610c61", "2d 61 2031 1c 61 0c 61"},
        {"2d205a20000a210d091c0d2020", "2d 205a 2000 0a 21 0d 09 1c 0d2020"},
        {"0c310c2020310b1c5a0921", "0c 31 0c20 2031 0b 1c 5a 09 21"},
        {"2d0b2061090d0c31", "2d 0b 2061 090d 0c 31"},
        {"0c20200a0c0b20200031090bc3a90c", "0c20200a0c0b20 2000 31 09 0b c3a9 0c"},
        {"0a1c09c3a90a0000", "0a 1c 09 c3a9 0a 0000"},
        {"5a0a0020092131", "5a 0a 00 20 09 21 31"},
        {"200d00210c2d0b5ac3a9", "20 0d 0021 0c 2d 0b 5ac3a9"},
        {"0a202020c3a9201c5a0c2d", "0a2020 20c3a9 201c 5a 0c 2d"},
        {"0a00210ac3a92020", "0a 0021 0a c3a9 2020"},
        {"090a610c0a202d610b", "09 0a 61 0c0a 202d 61 0b"},
        {"5a2020212d0a", "5a 20 20212d 0a"},
        {"5a5a00000c5a0b0b5a612020", "5a5a 0000 0c 5a 0b 0b 5a61 2020"},
        {"09612d310a", "09 61 2d 31 0a"},
        {"2d0c0a095a0b311c312d", "2d 0c0a 09 5a 0b 31 1c 31 2d"},
        {"0c091c1c1c0c0021c3a9201c", "0c 09 1c1c1c 0c 0021 c3a9 201c"},
        {"0c3100c3a90b2d5a", "0c 31 00 c3a9 0b 2d 5a"},
        {"1c00000b0cc3a90a", "1c0000 0b 0c c3a9 0a"},
        {"2d205a311c0b0cc3a90b5a0b2d", "2d 205a 31 1c 0b 0c c3a9 0b 5a 0b 2d"},
    };
    for (const auto& [in, want] : cases) {
        Chunks expected;
        std::string_view w = want;
        while (!w.empty()) {
            const size_t sp = w.find(' ');
            expected.push_back(from_hex(w.substr(0, sp)));
            w = sp == std::string_view::npos ? std::string_view() : w.substr(sp + 1);
        }
        EXPECT_EQ(chunks(from_hex(in)), expected) << in;
    }
}

TEST(Pretokenizer, ChunksCoverTheInputOnRandomBytes) {
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        std::string s(rng() % 64, '\0');
        for (char& c : s) c = static_cast<char>(" \t\nab1!\xc3\xa9Z9"[rng() % 12]);
        std::string joined;
        for (const std::string& c : chunks(s)) {
            ASSERT_FALSE(c.empty());
            joined += c;
        }
        EXPECT_EQ(joined, s);
    }
}

TEST(Bpe, LowestRankFirstNotLeftmost) {
    TokenizerSpec spec;
    spec.merges = {{'b', 'c'}, {'a', 'b'}};  // 256 = "bc", 257 = "ab"
    Tokenizer t;
    t.init(spec, 300);
    // "abc": "bc" (rank 0) beats the leftmost "ab" (rank 1), leaving a + bc.
    EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{'a', 256}));
    EXPECT_EQ(t.encode("abd"), (std::vector<int32_t>{257, 'd'}));
}

TEST(Bpe, LeftmostOnTiesAndMergesOfMerges) {
    TokenizerSpec spec;
    // 256 "bc", 257 "ab", 258 "aa", 259 "aaaa", 260 "abc"
    spec.merges = {{'b', 'c'}, {'a', 'b'}, {'a', 'a'}, {258, 258}, {'a', 256}};
    Tokenizer t;
    t.init(spec, 300);
    EXPECT_EQ(t.n_ids(), 261);
    EXPECT_EQ(t.bytes_of(259), "aaaa");
    EXPECT_EQ(t.bytes_of(260), "abc");
    EXPECT_EQ(t.encode("aaa"), (std::vector<int32_t>{258, 'a'}));
    EXPECT_EQ(t.encode("aaaa"), (std::vector<int32_t>{259}));
    EXPECT_EQ(t.encode("aaaaa"), (std::vector<int32_t>{259, 'a'}));
    EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{260}));
    EXPECT_EQ(t.encode("cabc"), (std::vector<int32_t>{'c', 260}));
    EXPECT_EQ(t.encode(" abc"), (std::vector<int32_t>{' ', 260}));
    // Merges never cross chunk boundaries.
    EXPECT_EQ(t.encode("ab ab"), (std::vector<int32_t>{257, ' ', 257}));
    EXPECT_EQ(t.encode("aa1aa"), (std::vector<int32_t>{258, '1', 258}));
    EXPECT_EQ(t.encode(""), (std::vector<int32_t>{}));
}

TEST(Bpe, MatchesTheNaiveReferenceAndRoundTrips) {
    std::mt19937_64 rng(11);
    TokenizerSpec spec;
    // Random merges biased to a small alphabet so that they fire often.
    const std::string alphabet = " etaoinsh\n";
    for (int k = 0; k < 300; ++k) {
        auto pick = [&]() -> int32_t {
            if (k == 0 || rng() % 2)
                return static_cast<unsigned char>(alphabet[rng() % alphabet.size()]);
            return static_cast<int32_t>(256 + rng() % k);
        };
        spec.merges.emplace_back(pick(), pick());
    }
    Tokenizer t;
    t.init(spec, 1024);
    for (int trial = 0; trial < 300; ++trial) {
        std::string s(rng() % 200, '\0');
        if (trial % 3 == 0) {
            for (char& c : s) c = static_cast<char>(rng());  // any bytes, invalid UTF-8 included
        } else {
            for (char& c : s) c = alphabet[rng() % alphabet.size()];
        }
        const std::vector<int32_t> ids = t.encode(s);
        EXPECT_EQ(decode(t, ids), s);
        EXPECT_EQ(ids, naive_bpe(spec, s));
    }
}

TEST(Bpe, BytesOnlyRoundTripsAnyBytes) {
    Tokenizer t;
    t.init(bytes_only(), 256);
    std::string all;
    for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
    const auto ids = t.encode(all);
    ASSERT_EQ(ids.size(), 256u);
    for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<size_t>(b)], b);
    EXPECT_EQ(decode(t, ids), all);
}

TEST(Specials, ParsedOnlyWhenAsked) {
    TokenizerSpec spec;
    spec.merges = {{'a', 'b'}};
    spec.special_tokens = {{"<|endoftext|>", 257}, {"<|end|>", 258}, {"<|end|>x", 259}};
    spec.eos_id = 257;
    Tokenizer t;
    t.init(spec, 300);
    EXPECT_EQ(t.n_ids(), 260);
    EXPECT_TRUE(t.is_special(257));
    EXPECT_FALSE(t.is_special(256));
    EXPECT_EQ(t.eos_id(), 257);
    EXPECT_EQ(t.bytes_of(257), "<|endoftext|>");

    const std::string text = "ab<|endoftext|>ab";
    const auto plain = t.encode(text);
    for (int32_t id : plain) EXPECT_FALSE(t.is_special(id));
    EXPECT_EQ(decode(t, plain), text);
    EXPECT_EQ(t.encode(text, true), (std::vector<int32_t>{256, 257, 256}));
    // Longest match first.
    EXPECT_EQ(t.encode("<|end|>x<|end|>", true), (std::vector<int32_t>{259, 258}));
    EXPECT_EQ(t.encode("<|end|", true), t.encode("<|end|"));
    EXPECT_EQ(t.encode("<|endoftext|><|endoftext|>", true), (std::vector<int32_t>{257, 257}));
}

TEST(Init, RefusesWithTheFieldAndRange) {
    TokenizerSpec s = bytes_only();
    s.type = "wordpiece";
    expect_refused(s, 300, "tokenizer.type");
    s = bytes_only();
    s.pretokenizer = "gpt2";
    expect_refused(s, 300, "tokenizer.pretokenizer");
    expect_refused(bytes_only(), 255, "vocab_size");

    s = bytes_only();
    s.merges = {{'a', 'b'}, {256, 257}};  // 257 does not exist before merge 1
    expect_refused(s, 300, "tokenizer.merges[1]");
    s.merges = {{-1, 'b'}};
    expect_refused(s, 300, "tokenizer.merges[0]");
    s.merges.assign(50, {'a', 'b'});
    expect_refused(s, 300, "tokenizer.merges");  // ids 256..305 do not fit below 300
    s.merges.clear();
    for (int k = 0; k < 40; ++k)  // each merge doubles the token: 2^40 bytes
        s.merges.emplace_back(k == 0 ? 'a' : 255 + k, k == 0 ? 'a' : 255 + k);
    expect_refused(s, 300, "tokenizer.merges[");

    s = bytes_only();
    s.special_tokens = {{"<|endoftext|>", 299}};  // specials come right after the merges
    expect_refused(s, 300, "tokenizer.special_tokens.<|endoftext|>");
    s.special_tokens = {{"<|endoftext|>", 300}};
    expect_refused(s, 300, "tokenizer.special_tokens.<|endoftext|>");
    s.special_tokens = {{"<a>", 256}, {"<b>", 256}};
    expect_refused(s, 300, "tokenizer.special_tokens.<b>");
    s.special_tokens = {{"<a>", 256}, {"<a>", 257}};
    expect_refused(s, 300, "tokenizer.special_tokens.<a>");
    s.special_tokens = {{"<a>", 256}};
    expect_refused(s, 256, "tokenizer.special_tokens");  // 257 ids do not fit a vocab of 256

    s = bytes_only();
    s.eos_id = 256;
    expect_refused(s, 300, "tokenizer.eos_id");
    s.eos_id = -2;
    expect_refused(s, 300, "tokenizer.eos_id");
    s.eos_id = -1;
    s.bos_id = 1000;
    expect_refused(s, 300, "tokenizer.bos_id");
}

TEST(Init, AFailedInitLeavesTheOldTables) {
    TokenizerSpec good;
    good.merges = {{'a', 'b'}};
    Tokenizer t;
    t.init(good, 300);
    TokenizerSpec bad = good;
    bad.eos_id = 999;
    EXPECT_THROW(t.init(bad, 300), Error);
    EXPECT_EQ(t.encode("ab"), (std::vector<int32_t>{256}));
}
