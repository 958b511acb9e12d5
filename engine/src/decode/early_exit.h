// Early exit while decoding (adaptive depth per token) with exact KV by state propagation
// (FORMAT.md §1): a position that stops at depth e < L writes, for every deeper pass, the keys
// and values computed from its frozen state h_e (h_e + e_p with input injection, §1a).
#pragma once

#include "forward/executor.h"

namespace tinyloop {

// The criterion's value between two successive passes (smaller = more stable for every
// criterion; LogitMargin reports -margin, ArgmaxStable 0 or 1). prev/cur are the states
// h_{l-1}, h_l; prev_logits/cur_logits their lens logits (only read by logit criteria).
float exit_signal(EarlyExitCriterion c, const float* prev_h, const float* cur_h, int d,
                  const float* prev_logits, const float* cur_logits, int vocab);
// The exit rule itself (exit_stable, exit_probe_at, exit_after_probe) is public: tinyloop.h.
bool criterion_needs_logits(EarlyExitCriterion c);

// Runs one token at position `pos` through the prelude and up to `loops` passes of `row` (an
// executor's one-row stepper, executor.h), exiting early when the policy (an
// effective_exit_policy) says so, and returns the depth e it exits at. The row then holds what
// the head reads at depth e (row.finish(): the state h_e, or with a coda, FORMAT.md §1b, the
// coda's output over h_e, the coda's keys/values of the position then being those of depth e).
// Keys/values of the passes after e are written by state propagation (row.propagate).
// `on_pass` sees the readout input of every pass that ran.
int early_exit_step(const Model& m, ExecRow& row, int32_t token, int pos, int loops, const EarlyExitPolicy& policy,
                    const PassHook* on_pass);

}  // namespace tinyloop
