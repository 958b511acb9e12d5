// The grammar fuzz target's body (see fuzz_targets.h): engine-internal, since parse_grammar and
// the matcher are declared in engine/src/grammar/grammar.h until tinyloop.h has them.
#pragma once

#include "fuzz_targets.h"
#include "grammar/grammar.h"
#include "model/model.h"

namespace tlfuzz {

// The input is a grammar, optionally followed by a NUL byte and a sample text. When the grammar
// parses, a matcher over the shared model's tokenizer walks the sample and a few allowed tokens;
// can_accept_bytes must agree with accept_bytes, and every token allowed() offers must be accepted.
inline int fuzz_grammar(const uint8_t* data, size_t size) {
    const std::string all(reinterpret_cast<const char*>(data), size);
    const size_t nul = all.find('\0');
    const std::string text = all.substr(0, nul);
    const std::string sample = nul == std::string::npos ? std::string() : all.substr(nul + 1);
    tinyloop::Grammar* g = nullptr;
    try {
        g = tinyloop::parse_grammar(text);
    } catch (const tinyloop::Error& e) {
        if (e.code() != tinyloop::ErrorCode::InvalidArgument) fail("parse_grammar: unexpected error code", e.what());
        if (std::string(e.what()).rfind("grammar:", 0) != 0) fail("parse_grammar: message without location", e.what());
        return 0;
    }
    if (!g) fail("parse_grammar returned null");
    try {
        const tinyloop::Model* m = shared_model();
        tinyloop::GrammarMatcher mt(*g, m->tokenizer);
        for (size_t i = 0; i < sample.size() && i < 64; ++i) {
            const std::string_view b(sample.data() + i, 1);
            const bool can = mt.can_accept_bytes(b);
            const bool did = mt.accept_bytes(b);
            if (can != did) fail("can_accept_bytes disagrees with accept_bytes");
            if (!did) break;
        }
        std::vector<char> mask;
        for (int step = 0; step < 4; ++step) {
            mt.allowed(mask);
            if (static_cast<int>(mask.size()) != m->tokenizer.n_ids()) fail("allowed: mask size");
            int32_t pick = -1;
            for (size_t id = 0; id < mask.size(); ++id)
                if (mask[id]) {
                    pick = static_cast<int32_t>(id);
                    if ((sample.size() + step + id) % 3 == 0) break;
                }
            if (pick < 0) break;
            if (pick == m->tokenizer.eos_id()) {
                if (!mt.complete()) fail("allowed: EOS offered before the sentence is complete");
                break;
            }
            mt.accept(pick);  // must not throw: allowed() said so
        }
    } catch (const tinyloop::Error& e) {
        fail("matcher threw on an allowed path", e.what());
    }
    tinyloop::free_grammar(g);
    return 0;
}

}  // namespace tlfuzz
