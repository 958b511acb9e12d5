// Byte-level BPE tokenizer with the tinyloop-ascii-v1 pretokenizer (FORMAT.md §3).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tinyloop/tinyloop.h"

namespace tinyloop {

class Tokenizer {
public:
    // Validates the spec against vocab_size (ids in range, merges refer only to lower ids,
    // special ids from 256 + merges upward and below vocab_size, eos/bos valid or -1) and builds
    // the tables. Throws Error(InvalidArgument) with a message naming the field
    // ("tokenizer.merges[12]: ...") for anything out of range.
    void init(const TokenizerSpec& spec, int vocab_size);

    // Split into pretokenizer chunks (FORMAT.md §3, tinyloop-ascii-v1), as views into text.
    static std::vector<std::string_view> pretokenize(std::string_view text);

    // Encode bytes. Special-token strings are matched only when parse_special (longest first).
    std::vector<int32_t> encode(std::string_view text, bool parse_special = false) const;

    // Number of ids the tokenizer can produce: 256 + merges + specials.
    int n_ids() const { return static_cast<int>(id_bytes_.size()); }
    bool valid_id(int32_t id) const { return id >= 0 && id < n_ids(); }
    // Bytes of one id (the special token's string for specials). Caller checks valid_id.
    const std::string& bytes_of(int32_t id) const { return id_bytes_[static_cast<size_t>(id)]; }
    bool is_special(int32_t id) const;
    int32_t eos_id() const { return eos_id_; }

private:
    std::vector<std::string> id_bytes_;
    std::unordered_map<uint64_t, int32_t> merge_rank_;  // (a << 32 | b) -> merged id
    std::vector<std::pair<std::string, int32_t>> specials_;  // sorted longest first
    int32_t first_special_ = 0;
    int32_t eos_id_ = -1;
    void encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const;
};

}  // namespace tinyloop
