// libFuzzer entry point for the hf_tokenizer target; the body is tlfuzz::fuzz_hf_tokenizer in
// fuzz_hf_tokenizer_target.h.
#include "fuzz_hf_tokenizer_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return tlfuzz::fuzz_hf_tokenizer(data, size);
}
