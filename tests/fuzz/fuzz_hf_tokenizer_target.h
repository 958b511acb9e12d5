// The body of the hf_tokenizer fuzz target (tests/fuzz/fuzz_hf_tokenizer.cpp), shared with the
// regression replay (tests/hardening/test_fuzz_regressions.cpp). Input: an op byte, then
//   op 0 / 1: text encoded by the Huginn-style test tokenizer (tests/data/hf_tokenizers/huginn)
//             with special tokens parsed (0) or as text (1): every id in range, the bytes
//             decode back exactly (invalid UTF-8 included, FORMAT.md §3b rule 1);
//   op 2:     a tokenizer.json read by tokenizer_spec_from_hf: refused with tinyloop::Error, or
//             read, and then a fixed text round-trips through it.
// A hang (a catastrophic pattern) is a finding too: libFuzzer's -timeout catches it.
#pragma once

#include "fuzz_targets.h"

#ifndef TL_SOURCE_DIR
#error "TL_SOURCE_DIR must name the source tree (tests/data/hf_tokenizers)"
#endif

namespace tlfuzz {

inline const tinyloop::StandaloneTokenizer& hf_test_tokenizer() {
    static const tinyloop::StandaloneTokenizer tok(tinyloop::tokenizer_spec_from_hf(
        std::string(TL_SOURCE_DIR) + "/tests/data/hf_tokenizers/huginn/tokenizer.json"));
    return tok;
}

inline void hf_round_trip(const tinyloop::StandaloneTokenizer& tok, std::string_view text, bool special) {
    const std::vector<int32_t> ids = tok.encode(text, special);
    for (int32_t id : ids)
        if (id < 0 || id >= tok.n_ids()) fail("hf encode: id out of range", std::to_string(id));
    if (tok.decode(ids) != text) fail("hf encode/decode round trip differs", escaped(text.substr(0, 200)));
}

inline int fuzz_hf_tokenizer(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const int op = data[0] % 3;
    const std::string_view payload(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
        if (op < 2) {
            hf_round_trip(hf_test_tokenizer(), payload, op == 0);
        } else {
            const std::string path = scratch_dir() + "/tokenizer.json";
            {
                std::ofstream f(path, std::ios::binary | std::ios::trunc);
                f.write(payload.data(), static_cast<std::streamsize>(payload.size()));
            }
            const tinyloop::StandaloneTokenizer tok(tinyloop::tokenizer_spec_from_hf(path));
            hf_round_trip(tok, "Hello, world! 123 caf\xc3\xa9 \xf0\x9f\x98\x80\n\n  x\xff", true);
        }
    } catch (const tinyloop::Error&) {
        // Refusing an input is allowed.
    }
    return 0;
}

}  // namespace tlfuzz
