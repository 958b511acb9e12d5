// Self-speculative decoding: the draft is the model at draft_loops, the verifier the same model
// at verify_loops, and verification resumes from the draft's state (FORMAT.md §1).
#pragma once

#include <string>

#include "decode/decode.h"
#include "decode/emit.h"

namespace tinyloop {

// Shared checks of SpeculativeConfig / TreeSpeculativeConfig fields.
void validate_spec_common(const Model& m, int prompt_len, int max_tokens, int draft_loops, int verify_loops,
                          int draft_ahead, float temperature);

// The result a speculative mode starts from: the prompt, loops_used = the verify depth, and an
// acceptance histogram of hist_bins bins (0 .. most drafts accepted in a cycle).
GenerateResult speculative_result(const int32_t* prompt, int prompt_len, int max_tokens, int loops, int hist_bins);

// Counts one draft-verify cycle in the stats: drafted tokens (tree: nodes), those compared with
// the verifier, those accepted.
void count_cycle(GenerateStats& st, int drafted, int tested, int accepted);

// Lossless rejection sampling's draw after a rejection: from norm(max(0, p - q)); from p itself
// when p == q (the rejection then has probability 0; this keeps the draw valid).
int32_t draw_residual(const std::vector<float>& p, const std::vector<float>& q, Rng& rng);

}  // namespace tinyloop
