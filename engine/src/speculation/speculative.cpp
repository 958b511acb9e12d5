// Chain self-speculation, greedy (exact) and stochastic (lossless rejection sampling,
// Leviathan et al. 2023, on the same filtered distributions the sampler draws from).
//
// One cycle, with x0 the last emitted token (not yet in the cache) at position p:
//   draft   x0..x_{K-1} one at a time through passes 1..D (their KV for those layers is final:
//           passes 1..D are identical at any depth), drafting x1..xK from the lens at D;
//   verify  rows p..p+K-1 resume from their draft states through passes D+1..V in one batch;
//   accept  the longest prefix the verifier agrees with, then the verifier's own token at the
//           first disagreement. Rows past the accepted ones are simply overwritten later.
// When all K drafts are accepted, xK becomes the next cycle's x0 (its passes are not wasted).
#include "speculation/speculative.h"
#include "tinyloop/mode_rules.h"
#include "forward/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "scoring/lens.h"
#include "decode/sampling.h"
#include "decode/stop.h"

namespace tinyloop {

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void bad(const std::string& m) { throw Error(ErrorCode::InvalidArgument, m); }


// The verifier's verdict on one cycle's drafts x[1 .. drafted] (row i of ver_logits follows x[i]).
struct ChainVerdict {
    int accepted = 0;
    int32_t correction = -1;  // the verifier's own token at the first disagreement; -1: none
    float corr_prob = 0;
    std::vector<float> accept_prob;
};

// Greedy: the longest prefix the verifier's argmax agrees with, then its own token. Sampling:
// x_{i+1} with probability min(1, p/q), else a draw from norm(max(0, p - q)).
ChainVerdict accept_chain(const Model& m, const LogitsPipeline& pipe, Rng& rng, const float* ver_logits,
                          const std::vector<int32_t>& x, int drafted, const std::vector<std::vector<float>>& q_probs) {
    const int V = m.hp.vocab_size;
    ChainVerdict v;
    v.accept_prob.assign(static_cast<size_t>(drafted), 0.0f);
    std::vector<float> z;
    for (int i = 0; i < drafted; ++i) {
        const float* row = ver_logits + static_cast<size_t>(i) * V;
        if (pipe.greedy()) {
            const TokenChoice y = greedy_choice(m, row);
            if (y.token == x[i + 1]) {
                v.accept_prob[i] = y.prob;
                ++v.accepted;
                continue;
            }
            v.correction = y.token;
            v.corr_prob = y.prob;
            break;
        }
        const SampledVerdict s = accept_sampled(pipe, rng, row, x[i + 1], q_probs[i], z);
        if (s.accepted) {
            v.accept_prob[i] = s.prob;
            ++v.accepted;
            continue;
        }
        v.correction = s.token;
        v.corr_prob = s.prob;
        break;
    }
    return v;
}

}  // namespace

GenerateConfig spec_sampling_config(const Model& m, const SpeculativeConfig& c) {
    GenerateConfig g;
    g.temperature = c.temperature;
    g.top_k = c.top_k > 0 ? c.top_k : m.hp.vocab_size;
    g.top_p = c.top_p;
    g.min_p = 0.0f;
    return g;
}

void check_spec_sampling(const SpeculativeConfig& c) {
    if (is_greedy(c.temperature)) return;
    if (c.top_k < 0) bad("top_k: " + std::to_string(c.top_k) + " must be >= 0 (0 = off)");
    if (!(c.top_p > 0.0f && c.top_p <= 1.0f)) bad("top_p: must be in (0, 1]");
}

SampledVerdict accept_sampled(const LogitsPipeline& pipe, Rng& rng, const float* ver_row, int32_t drafted,
                              const std::vector<float>& q, std::vector<float>& z) {
    pipe.process(ver_row, {}, {}, nullptr, z);
    const std::vector<float> pp = pipe.probs(z);
    const double ratio = q[static_cast<size_t>(drafted)] > 0 ? static_cast<double>(pp[static_cast<size_t>(drafted)]) / q[static_cast<size_t>(drafted)] : 0.0;
    SampledVerdict v;
    v.accepted = rng.uniform() < ratio;
    v.token = v.accepted ? drafted : draw_residual(pp, q, rng);
    v.prob = pp[static_cast<size_t>(v.token)];
    return v;
}

void count_cycle(GenerateStats& st, int drafted, int tested, int accepted) {
    st.spec_cycles++;
    st.spec_drafted += drafted;
    st.spec_tested += tested;
    st.spec_accepted += accepted;
    st.spec_accept_hist[static_cast<size_t>(accepted)]++;
}

int32_t draw_residual(const std::vector<float>& p, const std::vector<float>& q, Rng& rng) {
    std::vector<float> resid(p.size());
    double tot = 0;
    for (size_t j = 0; j < p.size(); ++j) tot += resid[j] = std::max(0.0f, p[j] - q[j]);
    if (tot <= 0) resid = p;
    return draw(resid, rng);
}

void validate_spec_common(const Model& m, int prompt_len, int max_tokens, int draft_loops, int verify_loops,
                          int draft_ahead, float temperature) {
    if (prompt_len < 1) bad("prompt_len: " + std::to_string(prompt_len) + " must be >= 1");
    if (max_tokens < 0) bad("max_tokens: " + std::to_string(max_tokens) + " must be >= 0");
    if (static_cast<long long>(prompt_len) + max_tokens > m.max_seq_len)
        bad("max_tokens: prompt_len + max_tokens = " + std::to_string(static_cast<long long>(prompt_len) + max_tokens) +
            " exceeds max_seq_len " + std::to_string(m.max_seq_len));
    check_speculation_depths(draft_loops, verify_loops, m.hp.max_loops);
    if (draft_ahead < 1 || draft_ahead > 32) bad("draft_ahead: " + std::to_string(draft_ahead) + " is outside [1, 32]");
    if (!std::isfinite(temperature) || temperature < 0) bad("temperature: must be a finite number >= 0");
}

DraftForcer::DraftForcer(const Model& m, const ForcedDraft* hook, int prompt_len, bool greedy)
    : hook_(hook), prompt_len_(prompt_len), n_ids_(std::min(m.hp.vocab_size, m.tokenizer.n_ids())),
      rng_(hook ? hook->seed : 0) {
    if (!hook) return;
    if (!greedy)
        throw Error(ErrorCode::NotSupported,
                    "forced_draft: a measurement hook of greedy speculation only (temperature must be 0)");
    if (!(hook->rate >= 0.0 && hook->rate <= 1.0))
        bad("forced_draft.rate: " + std::to_string(hook->rate) + " is outside [0, 1]");
    check_token_ids(hook->reference.data(), hook->reference.size(), n_ids_, "forced_draft.reference");
}

int32_t DraftForcer::reference_at(int pos) const {
    const long long i = static_cast<long long>(pos) - prompt_len_;
    if (!hook_ || i < 0 || i >= static_cast<long long>(hook_->reference.size())) return -1;
    return hook_->reference[static_cast<size_t>(i)];
}

bool DraftForcer::propose_reference(int pos) {
    if (reference_at(pos) < 0) return false;
    return rng_.uniform() < hook_->rate;
}

int32_t DraftForcer::other_than(int32_t avoid, int32_t own) const {
    if (own != avoid) return own;
    return static_cast<int32_t>((avoid + 1) % n_ids_);
}

int32_t DraftForcer::draft(int pos, int32_t own) {
    const int32_t ref = reference_at(pos);
    if (ref < 0) return own;
    return propose_reference(pos) ? ref : other_than(ref, own);
}

GenerateResult speculative_result(const int32_t* prompt, int prompt_len, int max_tokens, int loops, int hist_bins) {
    GenerateResult res = prompt_result(prompt, prompt_len, max_tokens);
    res.stats.loops_used = loops;
    res.stats.spec_accept_hist.assign(static_cast<size_t>(hist_bins), 0);
    return res;
}

GenerateResult generate_speculative_ex(Model* model, const int32_t* prompt, int prompt_len, const SpeculativeConfig& c,
                                       const GenerateOptions& options) {
    const auto t0 = Clock::now();
    const Model& m = checked(model);
    std::vector<ExecOp> needs{ExecOp::ChainSpeculation};
    if (options.lens) needs.push_back(ExecOp::PassReadouts);  // the passes' readouts of every row
    const std::unique_ptr<Executor> ex = run_executor(m, needs);
    validate_spec_common(m, prompt_len, c.max_tokens, c.draft_loops, c.verify_loops, c.draft_ahead, c.temperature);
    const bool greedy = is_greedy(c.temperature);
    check_spec_sampling(c);
    check_prompt_ids(m, prompt, prompt_len);
    if (options.lens && (options.lens_top_k < 1 || options.lens_top_k > 64))
        bad("lens_top_k: " + std::to_string(options.lens_top_k) + " is outside [1, 64]");

    DraftForcer forcer(m, options.forced_draft, prompt_len, greedy);

    const HParams& hp = m.hp;
    const int V = hp.vocab_size, d = hp.d_model;
    const int D = c.draft_loops, L = c.verify_loops, K = c.draft_ahead;

    GenerateResult res = speculative_result(prompt, prompt_len, c.max_tokens, L, K + 1);
    GenerateStats& st = res.stats;
    if (c.max_tokens == 0) {
        st.total_ms = ms_since(t0);
        return res;
    }

    const std::unique_ptr<ExecSequence> seq = ex->sequence({.loops = L, .capacity = prompt_len + c.max_tokens + K});
    std::vector<float> logits(static_cast<size_t>(V));
    std::vector<float> pass_states;  // lens: [L, d] of one row
    if (options.lens) pass_states.assign(static_cast<size_t>(L) * d, 0.0f);
    PassHook hook = options.lens ? last_row_hook(pass_states, d) : PassHook{};

    // Prefill at the verify depth; its last row gives the first token.
    seq->run(prompt, prompt_len, 0, options.lens ? &hook : nullptr);
    seq->last_logits(logits.data());
    st.prefill_ms = ms_since(t0);

    SpecChooser choose(m, c);
    TokenEmitter out(m, res, StopPolicy{c.max_tokens, c.ignore_eos, {}, {}, 0.0}, options.on_token,
                     options.observer, options.lens ? options.lens_top_k : 0, t0);
    // The first token, from the prefill.
    const TokenChoice first = choose(logits.data(), nullptr);
    bool done = !out.emit(first.token, EmitInfo{.prob = first.prob, .depth = L,
                                                .lens_states = options.lens ? pass_states.data() : nullptr,
                                                .from_verifier = true});

    std::vector<float> draft_h(static_cast<size_t>(K) * d);       // states after pass D per drafted row
    std::vector<float> draft_e(injects_input(hp) ? static_cast<size_t>(K) * d : 0);  // their prelude outputs (§1a)
    std::vector<std::vector<float>> q_probs(static_cast<size_t>(K));  // stochastic: draft distributions
    std::vector<float> ver_logits(static_cast<size_t>(K) * V), one(static_cast<size_t>(V));
    std::vector<std::vector<float>> row_states;  // lens: per verified row, its [L, d] readout inputs
    int cycle = 0;
    while (!done) {
        const int p = static_cast<int>(res.tokens.size()) - 1;  // position of x0
        const int remaining = c.max_tokens - st.tokens_emitted;
        const int k = std::min(K, remaining);  // never draft past the emission cap
        std::vector<int32_t> x(static_cast<size_t>(k) + 1);
        x[0] = res.tokens.back();
        if (options.lens) row_states.assign(static_cast<size_t>(k), std::vector<float>(static_cast<size_t>(L) * d));

        // Draft.
        auto td = Clock::now();
        int drafted = 0;
        for (int i = 0; i < k; ++i) {
            PassHook rh = options.lens ? last_row_hook(row_states[i], d) : PassHook{};
            // Passes 1..D; the row's state h_D (and prelude output) kept to resume from. §1b: with
            // a coda the logits are the draft's readout at D (its coda keys/values, of depth D,
            // are rewritten at L by the verification).
            seq->run_passes({.tokens = &x[i], .n = 1, .pos0 = p + i, .first = 1, .last = D,
                             .out_h = draft_h.data() + static_cast<size_t>(i) * d,
                             .out_e = injects_input(hp) ? draft_e.data() + static_cast<size_t>(i) * d : nullptr,
                             .on_readout = options.lens ? &rh : nullptr});
            seq->logits(0, 1, one.data());
            x[i + 1] = choose(one.data(), &q_probs[i]).token;
            if (forcer.active()) x[i + 1] = forcer.draft(p + i + 1, x[i + 1]);
            ++drafted;
            if (m.tokenizer.is_stop(x[i + 1]) && !c.ignore_eos) break;  // nothing to draft past EOS
        }
        st.draft_ms += ms_since(td);

        // Verify rows p .. p+drafted-1 from their draft states.
        auto tv = Clock::now();
        {
            PassHook rh;
            if (options.lens)
                rh = [&](int pass, int row0, const float* xs, int n) {
                    for (int r = 0; r < n; ++r)
                        std::copy(xs + static_cast<size_t>(r) * d, xs + static_cast<size_t>(r + 1) * d,
                                  row_states[row0 + r].begin() + static_cast<size_t>(pass - 1) * d);
                };
            seq->run_passes({.tokens = x.data(), .n = drafted, .pos0 = p, .first = D + 1, .last = L,
                             .h_in = draft_h.data(), .e_in = draft_e.data(), .on_readout = options.lens ? &rh : nullptr});
            seq->logits(0, drafted, ver_logits.data());
        }
        st.verify_ms += ms_since(tv);

        const ChainVerdict v = accept_chain(m, choose.pipe, choose.rng, ver_logits.data(), x, drafted, q_probs);
        const int a = v.accepted;
        count_cycle(st, drafted, drafted, a);

        const std::vector<int32_t> drafted_tokens(x.begin() + 1, x.begin() + 1 + drafted);
        EmitInfo info{.depth = L, .cycle = cycle, .drafted = &drafted_tokens, .accepted = a};
        for (int i = 0; i < a && !done; ++i) {
            info.prob = v.accept_prob[i];
            info.lens_states = options.lens ? row_states[i].data() : nullptr;
            done = !out.emit(x[i + 1], info);
        }
        if (!done && v.correction >= 0) {
            info.prob = v.corr_prob;
            info.lens_states = options.lens ? row_states[a].data() : nullptr;
            info.from_verifier = true;
            done = !out.emit(v.correction, info);
        }
        ++cycle;
    }
    out.finish(L);
    return res;
}

}  // namespace tinyloop
