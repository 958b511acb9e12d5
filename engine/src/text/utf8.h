// UTF-8 helpers for text shown to a person.
#pragma once

#include <cstddef>
#include <string_view>

namespace tinyloop {

// Length of the longest prefix of `s` that does not end inside an incomplete (but so far valid)
// multi-byte sequence: bytes after it may still complete a character.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace tinyloop
