// The tokenizer of an imported checkpoint: tokenizer.json (and tokenizer_config.json's chat
// template) as the header's "tokenizer" object (FORMAT.md §3). The one place the importer
// touches the tokenizer, so the tokenizer room's reader is called from here only.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tinyloop {

// The "tokenizer" object for `dir`/tokenizer.json, with `stop_ids` (generation_config.json's
// eos_token_id), checked against vocab_size; *chat_template gets tokenizer_config.json's chat
// template ("" when none). Throws Error naming the file and field.
nlohmann::ordered_json hf_tokenizer_json(const std::string& dir, int vocab_size, const std::vector<int32_t>& stop_ids,
                                         std::string* chat_template);

}  // namespace tinyloop
