// score_with_consistency_escalation: cheap depth first, deeper only where the model is unsure.
// Escalation deepens the existing state (FORMAT.md §1, loop-depth upgrade): the prompt is never
// recomputed from the embedding.
#include <algorithm>
#include <cmath>

#include "forward/executor.h"
#include "scoring/lens.h"
#include "scoring/scoring.h"

namespace tinyloop {

namespace {

bool crosses(const EscalationConfig& c, const float* row, const float* prev_row, int V) {
    switch (c.signal) {
        case EscalationSignal::Entropy: {
            const LensDepth e = lens_entry(row, V, 0, 1, -1);
            return e.entropy > c.threshold;
        }
        case EscalationSignal::Margin: {
            const LensDepth e = lens_entry(row, V, 0, 2, -1);
            return e.top_probs[0] - (e.top_probs.size() > 1 ? e.top_probs[1] : 0.0f) < c.threshold;
        }
        case EscalationSignal::Disagreement:
            return prev_row != nullptr && argmax_of(row, V) != argmax_of(prev_row, V);
    }
    return false;
}

}  // namespace

EscalationResult score_with_consistency_escalation(Model* model, const int32_t* tokens, int n,
                                                   const EscalationConfig& c) {
    const Model& m = checked(model);
    check_score_tokens(m, tokens, n, 2);
    if (c.depths.empty()) throw Error(ErrorCode::InvalidArgument, "depths: must hold at least one depth");
    for (size_t i = 0; i < c.depths.size(); ++i) {
        const int dpt = c.depths[i];
        if (dpt < 1 || dpt > m.hp.max_loops)
            throw Error(ErrorCode::InvalidArgument, "depths[" + std::to_string(i) + "]: " + std::to_string(dpt) +
                                                        " is outside [1, " + std::to_string(m.hp.max_loops) + "]");
        if (i > 0 && dpt <= c.depths[i - 1])
            throw Error(ErrorCode::InvalidArgument, "depths[" + std::to_string(i) + "]: depths must increase");
    }
    if (!std::isfinite(c.threshold) || (c.signal == EscalationSignal::Entropy && c.threshold <= 0) ||
        (c.signal == EscalationSignal::Margin && (c.threshold <= 0 || c.threshold > 1)))
        throw Error(ErrorCode::InvalidArgument, "threshold: " + std::to_string(c.threshold) +
                                                    " is outside the range of its signal ((0, inf) for entropy, (0, 1] for margin)");

    const HParams& hp = m.hp;
    const int V = hp.vocab_size;
    const int d = hp.d_model;
    const int deepest = c.depths.back();
    // The call's one back end (executor.h). One that cannot keep states between calls (the
    // device) runs each rung as its own sequence_logits (the state after pass l is the final state
    // of an l-pass run, so the logits are the CPU's); passes_run counts the passes it ran.
    const std::unique_ptr<Executor> ex = run_executor(m, {ExecOp::SequenceLogits});
    const bool on_device = !ex->supports(ExecOp::PassStates);
    KVCache kv;
    if (!on_device) kv.allocate(exec_layers(hp, deepest), n, hp.n_kv_heads * hp.head_dim);
    Workspace ws;
    std::vector<float> h, h_prev_pass(on_device ? 0 : static_cast<size_t>(n) * d);
    const bool coda = hp.n_coda_blocks > 0;
    std::vector<float> state;  // with a coda: the states h_reached (h holds the readouts)
    std::vector<float> input(injects_input(hp) && !on_device ? static_cast<size_t>(n) * d : 0);  // prelude outputs (§1a)
    // Keep the state one pass before the rung (for the disagreement signal).
    int want_pass = 0;
    PassHook hook = [&](int pass, int row0, const float* x, int rows) {
        if (pass == want_pass)
            std::copy(x, x + static_cast<size_t>(rows) * d, h_prev_pass.begin() + static_cast<size_t>(row0) * d);
    };

    EscalationResult r;
    r.token_logprobs.assign(static_cast<size_t>(n - 1), 0.0f);
    r.depth_used.assign(static_cast<size_t>(n - 1), 0);
    r.escalated.assign(static_cast<size_t>(n - 1), 0);
    std::vector<int> active(static_cast<size_t>(n - 1));
    for (int i = 0; i < n - 1; ++i) active[i] = i;
    std::vector<float> rows, logits, prev_logits;
    int reached = 0;
    auto gather = [&](const std::vector<float>& all, std::vector<float>& out) {
        out.resize(active.size() * static_cast<size_t>(V));
        for (size_t a = 0; a < active.size(); ++a)
            std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(active[a]) * V, V,
                        out.begin() + static_cast<std::ptrdiff_t>(a) * V);
    };
    for (size_t k = 0; k < c.depths.size() && !active.empty(); ++k) {
        const int depth = c.depths[k];
        const bool need_prev = c.signal == EscalationSignal::Disagreement && depth > 1;
        if (on_device) {
            gather(ex->sequence_logits(tokens, n, depth, KVCacheType::F32), logits);
            r.passes_run += static_cast<long long>(depth) * n;
            if (need_prev) {
                gather(ex->sequence_logits(tokens, n, depth - 1, KVCacheType::F32), prev_logits);
                r.passes_run += static_cast<long long>(depth - 1) * n;
            }
            reached = depth;
        } else {
            want_pass = depth - 1;
            ForwardArgs fa;
            fa.tokens = tokens;
            fa.n = n;
            fa.loops = depth;
            // The readout input (the state, or with a coda the coda's output, FORMAT.md §1b) of the
            // pass before the rung; with a coda h holds readouts and `state` the states to resume.
            fa.on_readout = need_prev ? &hook : nullptr;
            std::vector<float> h_in;
            if (reached == 0 && injects_input(hp)) fa.out_e = input.data();
            if (reached > 0) {
                h_in = coda ? state : h;
                fa.start_pass = reached + 1;
                fa.h_in = h_in.data();
                fa.e_in = input.data();
                if (want_pass == reached) h_prev_pass = h;  // the pass before the rung ran earlier
            }
            if (coda) {
                state.resize(static_cast<size_t>(n) * d);
                fa.out_state = state.data();
            }
            forward(m, kv, ws, fa, h);
            r.passes_run += static_cast<long long>(depth - reached) * n;
            reached = depth;

            // Logits of the active positions only (batch-invariant: the same bits as all rows).
            const int na = static_cast<int>(active.size());
            rows.resize(static_cast<size_t>(na) * d);
            for (int a = 0; a < na; ++a)
                std::copy_n(h.begin() + static_cast<size_t>(active[a]) * d, d, rows.begin() + static_cast<size_t>(a) * d);
            logits.resize(static_cast<size_t>(na) * V);
            compute_logits(m, rows.data(), na, logits.data(), ws);
            if (need_prev) {
                for (int a = 0; a < na; ++a)
                    std::copy_n(h_prev_pass.begin() + static_cast<size_t>(active[a]) * d, d,
                                rows.begin() + static_cast<size_t>(a) * d);
                prev_logits.resize(static_cast<size_t>(na) * V);
                compute_logits(m, rows.data(), na, prev_logits.data(), ws);
            }
        }
        const int na = static_cast<int>(active.size());
        std::vector<int> next;
        for (int a = 0; a < na; ++a) {
            const int i = active[a];
            const float* row = logits.data() + static_cast<size_t>(a) * V;
            r.token_logprobs[i] = static_cast<float>(row_logprob(row, V, tokens[i + 1]));
            r.depth_used[i] = depth;
            if (k > 0) r.escalated[i] = 1;
            if (k + 1 < c.depths.size() &&
                crosses(c, row, need_prev ? prev_logits.data() + static_cast<size_t>(a) * V : nullptr, V))
                next.push_back(i);
        }
        active.swap(next);
    }
    r.deepest = reached;
    for (float lp : r.token_logprobs) r.total_nll -= lp;
    r.perplexity = std::exp(r.total_nll / (n - 1));
    return r;
}

}  // namespace tinyloop
