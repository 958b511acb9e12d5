// Self-speculative decoding: the draft is the model at draft_loops, the verifier the same model
// at verify_loops, and verification resumes from the draft's state (FORMAT.md §1).
#pragma once

#include "decode.h"

namespace tinyloop {

// Shared checks of SpeculativeConfig / TreeSpeculativeConfig fields.
void validate_spec_common(const Model& m, int prompt_len, int max_tokens, int draft_loops, int verify_loops,
                          int draft_ahead, float temperature);

}  // namespace tinyloop
