// PCRE2 (UTF + UCP, JIT where available) behind a small interface for the tokenizer's
// pre-tokenizer: find-iteration with Oniguruma's empty-match rule and a match limit, so a
// pattern that backtracks catastrophically is an error, never a hang.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tinyloop {

class Regex {
public:
    // Compiles `pattern`; throws Error(InvalidArgument) "<field>: ..." when it does not compile.
    Regex(const std::string& pattern, std::string field);

    // The (start, end) byte offsets of the successive matches in `text` (valid UTF-8), searched
    // as the `onig` crate's find_iter does (the one tokenizers uses): each search starts where
    // the last match ended, and an empty match right at the end of the previous match is skipped
    // by one character. Throws Error(InvalidArgument) naming the field when one search exceeds
    // the match limit (catastrophic backtracking) or fails otherwise.
    std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

    const std::string& field() const { return field_; }

private:
    struct Code;
    std::shared_ptr<const Code> code_;
    std::string field_;
};

}  // namespace tinyloop
