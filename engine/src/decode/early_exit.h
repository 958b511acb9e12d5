// Early exit while decoding (adaptive depth per token) with exact KV by state propagation
// (FORMAT.md §1): a position that stops at depth e < L writes, for every deeper pass, the keys
// and values computed from its frozen state h_e (h_e + e_p with input injection, §1a).
#pragma once

#include <vector>

#include "forward/executor.h"

namespace tinyloop {

// The criterion's value between two successive passes (smaller = more stable for every
// criterion; LogitMargin reports -margin, ArgmaxStable 0 or 1). prev/cur are the states
// h_{l-1}, h_l; prev_logits/cur_logits their lens logits (only read by logit criteria).
float exit_signal(EarlyExitCriterion c, const float* prev_h, const float* cur_h, int d,
                  const float* prev_logits, const float* cur_logits, int vocab);
// The exit rule itself (exit_stable, exit_probe_at, exit_after_probe) is public: tinyloop.h.
bool criterion_needs_logits(EarlyExitCriterion c);

// The exit gate's λ = σ(exit_gate.w · h + exit_gate.b) of a state h (hparams.exit_gate, FORMAT.md
// §1b): the sum in double, in the order exit_gate_per_pass (scoring/lens.cpp) adds it.
double exit_gate_lambda(const Model& m, const float* h);

// The exit gate of one row, pass by pass: what TokenEvent::exit_gate / exit_gate_cdf report.
struct GateTrace {
    std::vector<double> lambda;  // [pass - 1]: λ of every pass that ran
    void clear() { lambda.clear(); }
    // λ of pass `pass` (1-based). A pass reported again replaces its value: a chunked prefill
    // reports the passes of each chunk's last row, the prompt's own last row last.
    void at(int pass, double l);
    // The event's fields: λ_t, and 1 − Π_{j≤t}(1 − λ_j) multiplied in pass order in double, the
    // product the gate criteria compare with q (early_exit_step).
    void to_event(std::vector<float>& lam, std::vector<float>& cdf) const;
};
// An on_state hook (PassRun::on_state) that records in `trace` the gate of the last row it sees.
PassHook gate_trace_hook(const Model& m, GateTrace& trace);

// Runs one token at position `pos` through the prelude and up to `loops` passes of `row` (an
// executor's one-row stepper, executor.h), exiting early when the policy (an
// effective_exit_policy) says so, and returns the depth e it exits at. The row then holds what
// the head reads at depth e (row.finish(): the state h_e, or with a coda, FORMAT.md §1b, the
// coda's output over h_e, the coda's keys/values of the position then being those of depth e).
// Keys/values of the passes after e are written by state propagation (row.propagate).
// `on_pass` sees the readout input of every pass that ran; `gate` (a model with the exit gate)
// receives the gate of every pass that ran (under gate_select: every pass).
int early_exit_step(const Model& m, ExecRow& row, int32_t token, int pos, int loops, const EarlyExitPolicy& policy,
                    const PassHook* on_pass, GateTrace* gate = nullptr);

}  // namespace tinyloop
