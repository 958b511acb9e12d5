// The "hf_byte_bpe" tokenizer (FORMAT.md §3b): a Hugging Face tokenizer.json byte-level BPE
// run the way the `tokenizers` package runs it — added tokens split out first, then the
// pre-tokenizer steps (PCRE2), then BPE by merge rank on the GPT-2 byte<->unicode form.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/pcre_regex.h"
#include "tinyloop/tinyloop.h"

namespace tinyloop {

// GPT-2's byte -> code point map (printable Latin-1 bytes map to themselves, the rest to
// U+0100 upward), as UTF-8 strings, and the inverse (code point -> byte, -1 when unmapped).
const std::array<std::string, 256>& byte_level_chars();
int byte_level_byte(uint32_t code_point);
// tokenizers' ByteLevel decoder for one token string: each character back to its byte; a token
// holding any character outside the map stays its own UTF-8 bytes.
std::string byte_level_decode(std::string_view token);

class HfBpe {
public:
    // Validates `spec` (type hf_byte_bpe) against vocab_size (0: no bound) and builds the tables;
    // throws Error(InvalidArgument) naming the field ("tokenizer.merges[3]: ...").
    void init(const TokenizerSpec& spec, int vocab_size);

    // parse_special: special added tokens in the text are matched (as tokenizers does by
    // default); without it they are ordinary text (tokenizers' split_special_tokens). Non-special
    // added tokens are always matched. Invalid UTF-8: the text is cut at every byte that does not
    // begin a well-formed UTF-8 sequence; such a byte becomes its byte token, each valid stretch
    // is encoded on its own. add_special: the post-processor's prefix/suffix ids around it.
    std::vector<int32_t> encode(std::string_view text, bool parse_special, bool add_special) const;

    int n_ids() const { return static_cast<int>(id_bytes_.size()); }
    const std::string& bytes_of(int32_t id) const { return id_bytes_[static_cast<size_t>(id)]; }
    bool is_special(int32_t id) const { return special_[static_cast<size_t>(id)]; }

private:
    struct Step {
        enum Kind { Split, ByteLevel } kind = Split;
        const Regex* regex = nullptr;  // Split; ByteLevel with use_regex (GPT-2 pattern)
        int behavior = 1;              // index into kBehaviors (Split)
        bool invert = false;
        bool add_prefix_space = false;
    };
    struct Added {
        std::string content;
        int32_t id;
        bool special;
    };
    std::vector<std::string> id_bytes_;
    std::vector<bool> special_;
    std::unordered_map<std::string, int32_t> vocab_index_;  // model vocab string -> id
    std::array<int32_t, 256> byte_id_{};                    // id of each byte's single char, -1
    std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges_;  // pair -> (rank, id)
    std::vector<std::unique_ptr<Regex>> regexes_;
    std::vector<Step> steps_;
    std::vector<Added> added_[2];  // [0]: not normalized (matched first), [1]: normalized
    std::vector<int32_t> prefix_, suffix_;
    bool ignore_merges_ = false;

    void encode_valid(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;
    void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
    void bpe(std::string_view piece, std::vector<int32_t>& out) const;
};

}  // namespace tinyloop
