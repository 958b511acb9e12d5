// The safetensors fuzz target's body (see fuzz_targets.h): engine-internal, since the reader is
// declared in engine/src/import/safetensors.h. The input is a whole .safetensors file.
#pragma once

#include "fuzz_targets.h"
#include "import/safetensors.h"

namespace tlfuzz {

// Any input may be refused with Error(BadFile) whose message starts with the file's label; an
// accepted one must describe tensors that lie inside the input, with byte counts matching their
// shapes, and every tensor must convert to f32 (ASan sees a read outside the input).
inline int fuzz_safetensors(const uint8_t* data, size_t size) {
    std::vector<tinyloop::StTensor> ts;
    try {
        ts = tinyloop::parse_safetensors(data, size, "in.safetensors");
    } catch (const tinyloop::Error& e) {
        if (e.code() != tinyloop::ErrorCode::BadFile) fail("parse_safetensors: unexpected error code", e.what());
        if (std::string(e.what()).rfind("in.safetensors: ", 0) != 0) fail("parse_safetensors: message without the file", e.what());
        return 0;
    }
    std::vector<float> out;
    for (const tinyloop::StTensor& t : ts) {
        if (t.data < data || t.data + t.bytes > data + size || t.bytes != t.numel * tinyloop::st_dtype_bytes(t.dtype))
            fail("parse_safetensors: a tensor outside the input or with a wrong byte count", t.name.c_str());
        if (t.numel > (size_t{1} << 24)) continue;  // cannot happen (bytes lie in the input); bounds the work anyway
        out.resize(t.numel);
        tinyloop::st_to_f32(t, out.data());
    }
    return 0;
}

}  // namespace tlfuzz
