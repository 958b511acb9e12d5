// libFuzzer entry point for the tokenizer target; the body is tlfuzz::fuzz_tokenizer in fuzz_targets.h.
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return tlfuzz::fuzz_tokenizer(data, size);
}
