// The model's tokenizer (FORMAT.md §3): byte-level BPE with the tinyloop-ascii-v1 pretokenizer
// ("byte_bpe"), or a Hugging Face tokenizer.json byte-level BPE ("hf_byte_bpe", §3b, HfBpe).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/hf_bpe.h"
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
    // add_special: the post-processor's BOS/EOS ids around the result (hf_byte_bpe; byte_bpe
    // has none).
    std::vector<int32_t> encode(std::string_view text, bool parse_special = false,
                                bool add_special = false) const;

    // Number of ids the tokenizer can produce: 256 + merges + specials (byte_bpe), the vocab and
    // added tokens (hf_byte_bpe).
    int n_ids() const { return hf_ ? hf_->n_ids() : static_cast<int>(id_bytes_.size()); }
    bool valid_id(int32_t id) const { return id >= 0 && id < n_ids(); }
    // Bytes of one id (the special token's string for specials). Caller checks valid_id.
    const std::string& bytes_of(int32_t id) const {
        return hf_ ? hf_->bytes_of(id) : id_bytes_[static_cast<size_t>(id)];
    }
    bool is_special(int32_t id) const;
    int32_t eos_id() const { return eos_id_; }
    // The ids that end generation: eos_id (when there is one) and the spec's stop_ids, in that
    // order, each once. The one answer to "does this token stop the output".
    const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
    bool is_stop(int32_t id) const {
        return std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
    }

private:
    std::shared_ptr<const HfBpe> hf_;  // set for hf_byte_bpe; then the members below are unused
    std::vector<std::string> id_bytes_;
    std::unordered_map<uint64_t, int32_t> merge_rank_;  // (a << 32 | b) -> merged id
    std::vector<std::pair<std::string, int32_t>> specials_;  // sorted longest first
    int32_t first_special_ = 0;
    int32_t eos_id_ = -1;
    std::vector<int32_t> stop_ids_;
    void set_stop_ids(const TokenizerSpec& spec, int n_ids);
    void encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const;
};

}  // namespace tinyloop
