// Replays every input kept in tests/fuzz/regressions/<target>/ (crashes and sanitizer reports the
// fuzzers found, after their fix) through the same target body the fuzzer runs
// (tests/fuzz/fuzz_targets.h), in the ordinary and the sanitizer builds. A regression aborts or
// reports here exactly as it did under libFuzzer. The preset target needs Qt and is replayed by
// the fuzzer binary itself (fuzz_preset tests/fuzz/regressions/preset/*).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_targets.h"
#include "fuzz/fuzz_safetensors_target.h"
#include "fuzz/fuzz_hf_tokenizer_target.h"
#if __has_include("grammar/grammar.h")
#include "fuzz/fuzz_grammar_target.h"
#define TL_HAVE_GRAMMAR 1
#endif

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> inputs(const std::string& target) {
    std::vector<fs::path> out;
    const fs::path dir = fs::path(TL_SOURCE_DIR) / "tests/fuzz/regressions" / target;
    if (fs::exists(dir))
        for (const auto& e : fs::directory_iterator(dir))
            if (e.is_regular_file() && e.path().filename().string()[0] != '.') out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

void replay(const std::string& target, int (*body)(const uint8_t*, size_t)) {
    int n = 0;
    for (const auto& p : inputs(target)) {
        SCOPED_TRACE(p.string());
        std::ifstream f(p, std::ios::binary);
        const std::string bytes(std::istreambuf_iterator<char>(f), {});
        tlfuzz::fail_throws = true;
        try {
            EXPECT_EQ(body(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
        } catch (const std::exception& e) {
            ADD_FAILURE() << e.what();
        }
        ++n;
    }
    std::printf("[ replayed ] %d %s input(s)\n", n, target.c_str());
    // A directory that lost its inputs (or a target pointed at the wrong one) must not pass.
    EXPECT_GT(n, 0) << "no inputs under tests/fuzz/regressions/" << target << ": a replay of nothing proves nothing";
}

TEST(FuzzRegressions, Loader) { replay("loader", tlfuzz::fuzz_loader); }
TEST(FuzzRegressions, Tokenizer) { replay("tokenizer", tlfuzz::fuzz_tokenizer); }
TEST(FuzzRegressions, Safetensors) { replay("safetensors", tlfuzz::fuzz_safetensors); }
TEST(FuzzRegressions, HfTokenizer) { replay("hf_tokenizer", tlfuzz::fuzz_hf_tokenizer); }
#ifdef TL_HAVE_GRAMMAR
TEST(FuzzRegressions, Grammar) { replay("grammar", tlfuzz::fuzz_grammar); }
#endif

}  // namespace
