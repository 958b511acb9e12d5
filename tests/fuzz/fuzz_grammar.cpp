// libFuzzer entry point for the grammar target; the body is tlfuzz::fuzz_grammar in fuzz_grammar_target.h.
#include "fuzz_grammar_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return tlfuzz::fuzz_grammar(data, size);
}
