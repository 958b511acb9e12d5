#include "tinyloop_analysis/quant_continuation.h"

namespace tinyloop::analysis {

std::vector<int32_t> quant_comparison_tokens(Model* model, const std::string& prompt, int max_tokens, int loops) {
    if (max_tokens < 0)
        throw Error(ErrorCode::InvalidArgument, "max_tokens: " + std::to_string(max_tokens) + " is negative (0 = the prompt alone)");
    std::vector<int32_t> ids = tokenize(model, prompt);
    if (ids.empty()) throw Error(ErrorCode::InvalidArgument, "prompt: empty (type one in the workbench)");
    if (max_tokens == 0) return ids;
    RunSpec spec;
    spec.mode = DecodeMode::Greedy;
    spec.config.max_tokens = max_tokens;
    spec.config.loops = loops;
    // generate_ex's tokens are the prompt and its continuation: both files read all of them.
    return run_decode(model, ids.data(), static_cast<int>(ids.size()), spec).tokens;
}

}  // namespace tinyloop::analysis
