// The stop policy and the text stream: EOS, token stop sequences (kept in the output), stop
// strings (cut from the text, as OpenAI's `stop`), and the hold-back of text that may still
// turn into a stop string or an incomplete UTF-8 character.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/model.h"

namespace tinyloop {

class TextStream {
public:
    TextStream(const Model& m, const std::vector<std::string>& stop_strings);
    // Adds an emitted token. Returns true when a stop string is now complete.
    bool push(int32_t id);
    // Text that is safe to show now (nothing that could still become a stop string or complete
    // a character); with `final`, everything left (cut at the stop string, if one matched).
    std::string take(bool final);
    // The whole continuation text (stop string excluded, invalid UTF-8 replaced).
    std::string text() const;

private:
    const Model& m_;
    std::vector<std::string> stops_;
    std::string bytes_;
    size_t released_ = 0;
    std::optional<size_t> cut_;
    size_t max_stop_ = 0;
};

// Whether `emitted` ends with one of the sequences.
bool tail_matches(const std::vector<int32_t>& emitted, const std::vector<std::vector<int32_t>>& seqs);

}  // namespace tinyloop
