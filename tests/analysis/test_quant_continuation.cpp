// The tokens the quantization view compares (quant_comparison_tokens): the prompt alone at
// max_tokens 0; else the prompt and the greedy continuation, token for token what the engine's
// generate gives at that depth; bad input refused naming the field.
#include <tinyloop_analysis/quant_continuation.h>

#include "test_util.h"
#include <gtest/gtest.h>

#include "analysis_test_util.h"

using namespace tinyloop::analysis;
using namespace analysis_test;

TEST(QuantContinuation, PromptThenGreedyContinuation) {
    tinyloop::Model* m = bundled();
    const std::vector<int32_t> prompt = tinyloop::tokenize(m, kPrompt);
    EXPECT_EQ(quant_comparison_tokens(m, kPrompt, 0, 3), prompt);
    tinyloop::GenerateConfig c;
    c.max_tokens = 6;
    c.loops = 3;
    const std::vector<int32_t> want = tinyloop::generate_ex(m, prompt.data(), static_cast<int>(prompt.size()), c).tokens;
    const std::vector<int32_t> got = quant_comparison_tokens(m, kPrompt, 6, 3);
    EXPECT_EQ(got, want);
    ASSERT_GT(got.size(), prompt.size());
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), got.begin()));
    // the depth reaches the decode: depth 1's continuation is depth 1's
    EXPECT_EQ(quant_comparison_tokens(m, kPrompt, 6, 1),
              tinyloop::generate_ex(m, prompt.data(), static_cast<int>(prompt.size()),
                                    [] { tinyloop::GenerateConfig k; k.max_tokens = 6; k.loops = 1; return k; }()).tokens);
}

// The message of what `f` throws ("" when it returns).
template <class F>
static std::string refusalOf(F f) {
    try {
        f();
    } catch (const tinyloop::Error& e) {
        return e.what();
    }
    return "";
}

TEST(QuantContinuation, RefusesNamingTheField) {
    tinyloop::Model* m = bundled();
    EXPECT_EQ(refusalOf([&] { quant_comparison_tokens(m, "", 4, 0); }).rfind("prompt:", 0), 0u);
    EXPECT_EQ(refusalOf([&] { quant_comparison_tokens(m, kPrompt, -1, 0); }).rfind("max_tokens:", 0), 0u);
    EXPECT_NE(refusalOf([&] { quant_comparison_tokens(m, kPrompt, 4, 100000); }).find("loops"), std::string::npos);
}
