// Self-speculation pipelined over depth: a wavefront over (token, pass), greedy or sampled.
//
// Every pass of a looped model reads the same weights, so rows at different passes can share one
// sweep of them. With draft depth D and verify depth V, the row of token x at position q reads
// its lens at pass D; the token drafted there, x', enters the next sweep as the row at q + 1,
// pass 1, while q goes on to pass D + 1. Row q + 1 at pass p attends to position q's pass-p
// keys/values, written D sweeps earlier, and those of earlier positions, so the rows in flight
// (at passes V, V - D, V - 2D, ...) all run in the one sweep (ExecSequence::run_wave):
//   - the oldest row reaches V: its logits give the token at q + 1, which is emitted (exactly
//     plain greedy's). When it equals the draft x' the row at q + 1 is already D.. passes deep
//     and goes on; else the rows from q + 1 on are dropped and the verifier's token starts at
//     q + 1, pass 1 (the dropped rows' keys/values are rewritten before anything reads them:
//     a row reads positions up to its own, at its own pass, after writing its own).
//   - the newest row reaches D: it drafts the next token, which starts one sweep later.
// At full acceptance a token leaves every D sweeps (plain decoding: every V), the sweep carrying
// floor((V - 1) / D) + 1 rows. The emitted tokens are the verify depth's greedy choices over keys
// and values computed from the emitted tokens, so the output equals plain greedy decoding at
// depth V (bit for bit with the CPU's row-invariant kernels).
//
// Sampling (temperature > 0): the draft at D is a draw from the draft's distribution q (the
// chain's pipeline: temperature, top-k, top-p), kept with its row; when the row before it reaches
// V, the draft is tested as the chain tests it (accept_sampled: accepted with probability
// min(1, p/q), else the token is drawn from norm(max(0, p - q))). A row with no draft behind it
// samples its next token from p. Every draft is tested against the prefix it was drawn after (a
// row's draft is only tested once every token before it was accepted), so the emitted tokens
// follow plain sampling's distribution at depth V.
#include "speculation/speculative.h"
#include "tinyloop/mode_rules.h"
#include "forward/executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "decode/sampling.h"
#include "decode/stop.h"

namespace tinyloop {

namespace {

using Clock = std::chrono::steady_clock;

// A row in flight: its token (at position pos0 + its index), the passes it has run and, sampling,
// the draft distribution its token was drawn from (empty for a verifier's token).
struct WaveRow {
    int32_t token = 0;
    int done = 0;
    std::vector<float> q;
};

}  // namespace

GenerateResult generate_pipelined_ex(Model* model, const int32_t* prompt, int prompt_len, const SpeculativeConfig& c,
                                     const GenerateOptions& options) {
    const auto t0 = Clock::now();
    const Model& m = checked(model);
    const std::unique_ptr<Executor> ex = run_executor(m, {ExecOp::PipelinedSpeculation});
    validate_spec_common(m, prompt_len, c.max_tokens, c.draft_loops, c.verify_loops, c.draft_ahead, c.temperature);
    const bool greedy = is_greedy(c.temperature);
    check_spec_sampling(c);
    if (options.lens)
        throw Error(ErrorCode::NotSupported, "pipelined speculation: the lens (GenerateOptions.lens) is not reported; "
                                             "use chain speculation or plain decoding for it");
    check_prompt_ids(m, prompt, prompt_len);
    DraftForcer forcer(m, options.forced_draft, prompt_len, greedy);

    const HParams& hp = m.hp;
    const int V = hp.vocab_size, d = hp.d_model;
    const int D = c.draft_loops, L = c.verify_loops;
    const int most = (L - 1) / D + 1;  // rows in flight at most

    GenerateResult res = speculative_result(prompt, prompt_len, c.max_tokens, L, 2);
    GenerateStats& st = res.stats;
    if (c.max_tokens == 0) {
        st.total_ms = ms_since(t0);
        return res;
    }
    // The last position whose row is needed: the row at q gives the token at q + 1, and the
    // last token may sit at prompt_len + max_tokens - 1.
    const int last_row_pos = prompt_len + c.max_tokens - 2;
    const std::unique_ptr<ExecSequence> seq = ex->sequence({.loops = L, .capacity = prompt_len + c.max_tokens});
    std::vector<float> logits(static_cast<size_t>(2) * V);

    seq->run(prompt, prompt_len, 0, nullptr);
    seq->last_logits(logits.data());
    st.prefill_ms = ms_since(t0);

    TokenEmitter out(m, res, StopPolicy{c.max_tokens, c.ignore_eos, {}, {}, 0.0}, options.on_token, options.observer, 0,
                     t0);
    SpecChooser choose(m, c);
    const TokenChoice first = choose(logits.data(), nullptr);
    bool done = !out.emit(first.token, EmitInfo{.prob = first.prob, .depth = L, .from_verifier = true});

    auto spawns = [&](int pos, int32_t tok) {  // whether a row for `tok` at `pos` is worth running
        return pos <= last_row_pos && !(m.tokenizer.is_stop(tok) && !c.ignore_eos);
    };
    std::vector<WaveRow> rows;
    int pos0 = prompt_len;  // position of rows[0]
    if (!done && spawns(pos0, first.token)) rows.push_back({first.token, 0, {}});
    std::vector<float> h(static_cast<size_t>(most) * d), e(injects_input(hp) ? h.size() : 0);
    std::vector<int32_t> tokens(static_cast<size_t>(most));
    std::vector<int> pass(static_cast<size_t>(most)), heads;
    auto drop_front = [&]() {  // the oldest row leaves: the others' states move up one row
        rows.erase(rows.begin());
        std::memmove(h.data(), h.data() + d, rows.size() * d * sizeof(float));
        if (!e.empty()) std::memmove(e.data(), e.data() + d, rows.size() * d * sizeof(float));
        ++pos0;
    };
    int verdicts = 0;
    while (!done && !rows.empty()) {
        const int n = static_cast<int>(rows.size());
        heads.clear();
        for (int t = 0; t < n; ++t) {
            tokens[t] = rows[t].token;
            pass[t] = rows[t].done + 1;
        }
        const bool verify = pass[0] == L;
        const bool draft = pass[n - 1] == D;  // only the newest row can be at the draft depth
        if (verify) heads.push_back(0);
        if (draft) heads.push_back(n - 1);
        const auto ts = Clock::now();
        seq->run_wave({.tokens = tokens.data(), .pass = pass.data(), .n = n, .pos0 = pos0, .h = h.data(),
                       .e = e.empty() ? nullptr : e.data(), .heads = heads.data(),
                       .n_heads = static_cast<int>(heads.size()), .logits = logits.data()});
        st.verify_ms += ms_since(ts);
        ++st.spec_sweeps;
        for (WaveRow& r : rows) ++r.done;
        bool drafted_row_alive = draft;
        if (verify) {
            const bool tested = n > 1;
            TokenChoice y;
            bool accepted = false;
            if (greedy || !tested) {  // greedy, or sampling with no draft to test: the verifier's own choice
                y = choose(logits.data(), nullptr);
                accepted = tested && rows[1].token == y.token;
            } else {
                const SampledVerdict v =
                    accept_sampled(choose.pipe, choose.rng, logits.data(), rows[1].token, rows[1].q, choose.z);
                y = {v.token, v.prob};
                accepted = v.accepted;
            }
            const std::vector<int32_t> proposed = tested ? std::vector<int32_t>{rows[1].token} : std::vector<int32_t>{};
            if (tested) count_cycle(st, 1, 1, accepted ? 1 : 0);
            done = !out.emit(y.token, EmitInfo{.prob = y.prob, .depth = L, .cycle = tested ? verdicts : -1,
                                               .drafted = tested ? &proposed : nullptr, .accepted = accepted ? 1 : 0,
                                               .from_verifier = !accepted});
            if (tested) ++verdicts;
            if (done) break;
            if (!accepted) {  // the rows after the oldest drafted from a wrong token: dropped
                if (n > 1 && draft) drafted_row_alive = false;
                rows.resize(1);
            }
            drop_front();
            if (rows.empty() && spawns(pos0, y.token)) rows.push_back({y.token, 0, {}});
        }
        if (drafted_row_alive) {
            const int q = pos0 + static_cast<int>(rows.size()) - 1;  // the drafting row's position
            std::vector<float> qd;
            int32_t x = choose(logits.data() + static_cast<size_t>(verify ? 1 : 0) * V, greedy ? nullptr : &qd).token;
            if (forcer.active()) x = forcer.draft(q + 1, x);
            if (spawns(q + 1, x)) rows.push_back({x, 0, std::move(qd)});
        }
    }
    out.finish(L);
    return res;
}

}  // namespace tinyloop
