// hf_tokenizer.h, until the hf_byte_bpe tokenizer (FORMAT.md §3) is part of the engine: a
// checkpoint's tokenizer cannot be stored yet, so the import is refused naming the file.
#include "import/hf_tokenizer.h"

#include <filesystem>

#include "tinyloop/tinyloop.h"

namespace tinyloop {

nlohmann::ordered_json hf_tokenizer_json(const std::string& dir, int /*vocab_size*/, std::string* /*chat_template*/) {
    const std::string path = (std::filesystem::path(dir) / "tokenizer.json").string();
    throw Error(ErrorCode::NotSupported,
                path + ": Hugging Face byte-level BPE tokenizers (hf_byte_bpe) are not in this build");
}

}  // namespace tinyloop
