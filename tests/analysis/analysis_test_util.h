// Shared by the tinyloop_analysis tests: the bundled model (loaded once per test program), a plain
// generation to compare against, and a substring check for error messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <tinyloop/tinyloop.h>

namespace analysis_test {

inline const std::string kF32 = TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-f32.tinyloop";
inline const std::string kQ8 = TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-q8.tinyloop";
inline const std::string kQ4 = TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-q4.tinyloop";
// A prompt whose greedy continuation is long enough for every analysis.
inline const char* const kPrompt = "And God said, Let there be light: and there was";

// The bundled f32 model, loaded on first use and kept for the program's life (the engine is
// thread-safe, the tests only read it).
inline tinyloop::Model* bundled() {
    static tinyloop::Model* m = tinyloop::load_model(kF32);
    return m;
}

inline tinyloop::GenerateResult plain(tinyloop::Model* m, const std::vector<int32_t>& prompt,
                                      const tinyloop::GenerateConfig& c) {
    return tinyloop::generate_ex(m, prompt.data(), static_cast<int>(prompt.size()), c);
}

inline std::vector<int32_t> continuationOf(const tinyloop::GenerateResult& r) {
    return {r.tokens.begin() + r.prompt_len, r.tokens.end()};
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace analysis_test
