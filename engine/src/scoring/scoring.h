// Shared pieces of the scoring family.
#pragma once

#include "forward/executor.h"

namespace tinyloop {

void check_score_tokens(const Model& m, const int32_t* tokens, int n, int min_n);

// Runs tokens at depth `loops` on executor `ex` (one that runs PassStates) and returns every
// pass's states: [loops][n][d]. With `readouts` the readout inputs instead (what compute_logits
// reads: the states, or with a coda the coda's output at each pass, FORMAT.md §1b: at pass l the
// logits of a whole run at depth l).
std::vector<float> all_pass_states(const Executor& ex, const Model& m, const int32_t* tokens, int n, int loops,
                                   bool readouts = false);

// log-softmax value of `id` in one row (double precision).
double row_logprob(const float* row, int vocab, int32_t id);

}  // namespace tinyloop
