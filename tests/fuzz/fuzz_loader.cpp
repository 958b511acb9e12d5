// libFuzzer entry point for the loader target; the body is tlfuzz::fuzz_loader in fuzz_targets.h.
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return tlfuzz::fuzz_loader(data, size);
}
