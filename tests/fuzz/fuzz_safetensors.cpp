// libFuzzer entry point for the safetensors reader; the body is tlfuzz::fuzz_safetensors in
// fuzz_safetensors_target.h.
#include "fuzz_safetensors_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return tlfuzz::fuzz_safetensors(data, size);
}
