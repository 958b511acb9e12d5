#include "text/utf8.h"

#include <string>

#include "tinyloop/tinyloop.h"

namespace tinyloop {

namespace {

// The sequence starting at s[i]: its length n (1..4) when valid; otherwise -m where m >= 1 is the
// length of its maximal subpart (the longest prefix of a valid sequence, Unicode §3.9), and
// `cut` is set when that subpart runs into the end of s (it may still complete).
int seq_len(std::string_view s, size_t i, bool& cut) {
    cut = false;
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned c = b(i);
    int n;
    unsigned lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;  // no surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        return -1;
    }
    for (int k = 1; k < n; ++k) {
        if (i + k >= s.size()) {
            cut = true;
            return -k;
        }
        const unsigned x = b(i + k);
        if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xbf)) return -k;
    }
    return n;
}

}  // namespace

size_t utf8_complete_prefix(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        bool cut;
        const int n = seq_len(s, i, cut);
        if (cut) return i;
        i += static_cast<size_t>(n > 0 ? n : -n);
    }
    return s.size();
}

std::string sanitize_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        bool cut;
        const int n = seq_len(s, i, cut);
        if (n > 0) {
            out.append(s.substr(i, static_cast<size_t>(n)));
            i += static_cast<size_t>(n);
        } else {  // one U+FFFD per maximal subpart of an ill-formed sequence
            out += "\xef\xbf\xbd";
            i += static_cast<size_t>(-n);
        }
    }
    return out;
}

void append_utf8(uint32_t cp, std::string& out) {
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
}

}  // namespace tinyloop
