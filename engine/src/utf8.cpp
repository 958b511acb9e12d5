#include "utf8.h"

#include <string>

#include "tinyloop/tinyloop.h"

namespace tinyloop {

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), 0 if invalid, -1 if valid so far
// but cut by the end of s.
int seq_len(std::string_view s, size_t i) {
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
        return 0;
    }
    for (int k = 1; k < n; ++k) {
        if (i + k >= s.size()) return -1;
        const unsigned x = b(i + k);
        if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xbf)) return 0;
    }
    return n;
}

}  // namespace

size_t utf8_complete_prefix(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const int n = seq_len(s, i);
        if (n == -1) return i;
        i += n == 0 ? 1 : static_cast<size_t>(n);
    }
    return s.size();
}

std::string sanitize_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const int n = seq_len(s, i);
        if (n > 0) {
            out.append(s.substr(i, static_cast<size_t>(n)));
            i += static_cast<size_t>(n);
        } else {  // invalid byte, or a sequence cut by the end: one U+FFFD per maximal bad part
            out += "\xef\xbf\xbd";
            ++i;
            while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xc0) == 0x80 && n == -1) ++i;
        }
    }
    return out;
}

}  // namespace tinyloop
