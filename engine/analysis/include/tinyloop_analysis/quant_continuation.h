// The tokens the quantization-across-depth view reads with both files: the prompt and, when
// asked, the first file's greedy continuation, decoded through the engine's one entry
// (tinyloop::run_decode), so the view runs no decode of its own. No Qt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <tinyloop/tinyloop.h>

namespace tinyloop::analysis {

// The prompt's token ids followed by `model`'s greedy continuation of at most `max_tokens`
// tokens (0 = the prompt alone) at depth `loops` (0 = the model's default_loops). Throws
// tinyloop::Error(InvalidArgument) naming "prompt" when it tokenizes to nothing, "max_tokens"
// when negative; the engine's own refusals (loops out of range) name their field.
std::vector<int32_t> quant_comparison_tokens(Model* model, const std::string& prompt, int max_tokens, int loops);

}  // namespace tinyloop::analysis
