// hf_tokenizer.h: tokenizer.json (+ tokenizer_config.json) through the tokenizer room's reader
// (tokenizer_spec_from_hf), checked as a loader checks it against the model's vocab_size, and
// written with the one codec of the hf_byte_bpe header object (text/hf_tokenizer_json.h).
#include "import/hf_tokenizer.h"

#include <filesystem>

#include "text/hf_tokenizer_json.h"
#include "text/tokenizer.h"
#include "tinyloop/tinyloop.h"

namespace tinyloop {

nlohmann::ordered_json hf_tokenizer_json(const std::string& dir, int vocab_size, const std::vector<int32_t>& stop_ids,
                                         std::string* chat_template) {
    namespace fs = std::filesystem;
    const fs::path tok = fs::path(dir) / "tokenizer.json", cfg = fs::path(dir) / "tokenizer_config.json";
    if (!fs::exists(tok)) throw Error(ErrorCode::Io, tok.string() + ": missing (the model's tokenizer)");
    std::string chat;
    // Throws naming the file (its path, as given) and the field.
    TokenizerSpec spec = tokenizer_spec_from_hf(tok.string(), fs::exists(cfg) ? cfg.string() : "", &chat);
    spec.stop_ids = stop_ids;
    Tokenizer check;
    try {
        check.init(spec, vocab_size);
    } catch (const Error& e) {
        throw Error(ErrorCode::BadFile, tok.string() + ": " + e.what() + " (config.json vocab_size " +
                                            std::to_string(vocab_size) + ")");
    }
    if (chat_template) *chat_template = chat;
    return hf_tokenizer_to_json(spec);
}

}  // namespace tinyloop
