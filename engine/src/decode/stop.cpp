#include "decode/stop.h"

#include <algorithm>

#include "text/utf8.h"

namespace tinyloop {

TextStream::TextStream(const Model& m, const std::vector<std::string>& stop_strings)
    : m_(m), stops_(stop_strings) {
    for (const std::string& s : stops_) max_stop_ = std::max(max_stop_, s.size());
}

bool TextStream::push(int32_t id) {
    if (cut_) return true;
    // Special tokens are not text, nor are a padded vocabulary's ids past the tokenizer's (a beam
    // forced to one, force_words): bytes_of would read past its table.
    if (m_.tokenizer.is_special(id) || !m_.tokenizer.valid_id(id)) return false;
    const size_t old = bytes_.size();
    bytes_ += m_.tokenizer.bytes_of(id);
    if (stops_.empty()) return false;
    // A new match must end in the new bytes: search from max_stop_ bytes before them.
    const size_t from = old > max_stop_ ? old - max_stop_ : 0;
    size_t best = std::string::npos;
    for (const std::string& s : stops_) {
        const size_t at = bytes_.find(s, from);
        if (at != std::string::npos) best = std::min(best, at);
    }
    if (best == std::string::npos) return false;
    cut_ = std::max(best, released_);  // never take back text already shown
    return true;
}

std::string TextStream::take(bool final) {
    size_t end;
    if (cut_) {
        end = *cut_;
    } else if (final) {
        end = bytes_.size();
    } else {
        end = utf8_complete_prefix(bytes_);
        // Hold back the longest tail that is a proper prefix of some stop string.
        size_t hold = 0;
        for (const std::string& s : stops_)
            for (size_t k = std::min(s.size() - 1, bytes_.size()); k > hold; --k)
                if (bytes_.compare(bytes_.size() - k, k, s, 0, k) == 0) {
                    hold = k;
                    break;
                }
        end = std::min(end, bytes_.size() - hold);
    }
    if (end <= released_) return {};
    std::string out = sanitize_utf8(std::string_view(bytes_).substr(released_, end - released_));
    released_ = end;
    return out;
}

std::string TextStream::text() const {
    return sanitize_utf8(std::string_view(bytes_).substr(0, cut_ ? *cut_ : bytes_.size()));
}

bool tail_matches(const std::vector<int32_t>& emitted, const std::vector<std::vector<int32_t>>& seqs) {
    for (const auto& s : seqs) {
        if (s.empty() || s.size() > emitted.size()) continue;
        if (std::equal(s.begin(), s.end(), emitted.end() - static_cast<std::ptrdiff_t>(s.size()))) return true;
    }
    return false;
}

}  // namespace tinyloop
