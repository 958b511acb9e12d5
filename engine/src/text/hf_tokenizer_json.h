// The "hf_byte_bpe" tokenizer object of a .tinyloop header (FORMAT.md §3b): one codec for the
// writer and the loader.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "tinyloop/tinyloop.h"

namespace tinyloop {

nlohmann::ordered_json hf_tokenizer_to_json(const TokenizerSpec& spec);

// Reads the object into `spec` (shape only; Tokenizer::init checks the values). `bad` receives
// "tokenizer.<field>: ..." and must throw.
void hf_tokenizer_from_json(const nlohmann::json& t, TokenizerSpec& spec,
                            const std::function<void(const std::string&)>& bad);

}  // namespace tinyloop
