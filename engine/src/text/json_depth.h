// How deep JSON text nests, measured before parsing it (one helper for every reader of untrusted
// JSON: the model file's header, safetensors headers, tokenizer.json and the other files of an
// imported folder).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tinyloop {

// Deepest [ / { nesting of JSON text, strings skipped. nlohmann's parser is iterative, but
// dumping or destroying a deeply nested value recurses, so readers cap the depth first.
inline size_t json_nesting_depth(const uint8_t* p, size_t n) {
    size_t depth = 0, max_depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < n; ++i) {
        const uint8_t c = p[i];
        if (in_string) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            max_depth = std::max(max_depth, ++depth);
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return max_depth;
}

}  // namespace tinyloop
