// Logit-lens readouts: head · RMSNorm(h_l, final_norm) at any pass l (FORMAT.md §1).
#pragma once

#include <vector>

#include "forward/forward.h"

namespace tinyloop {

// Fills a LensDepth from one row of logits: top-k ids/probs (softmax, temperature 1), the
// probability of `emitted` and the entropy in nats.
LensDepth lens_entry(const float* logits, int vocab, int depth, int top_k, int32_t emitted);

// Lowest index of the maximum.
int32_t argmax_of(const float* logits, int vocab);

}  // namespace tinyloop
