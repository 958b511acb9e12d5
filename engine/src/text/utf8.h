// UTF-8 helpers for text shown to a person.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tinyloop {

// Length of the longest prefix of `s` that does not end inside an incomplete (but so far valid)
// multi-byte sequence: bytes after it may still complete a character.
size_t utf8_complete_prefix(std::string_view s);

// Appends code point `cp` (<= 0x10FFFF) to `out` as UTF-8.
void append_utf8(uint32_t cp, std::string& out);

}  // namespace tinyloop
