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
#include "speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "lens.h"
#include "sampling.h"
#include "stop.h"

namespace tinyloop {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

[[noreturn]] void bad(const std::string& m) { throw Error(ErrorCode::InvalidArgument, m); }

// The probabilities the sampler draws from (temperature > 0), after masking undecodable ids.
std::vector<float> filtered(const Model& m, const float* logits, float temperature, int top_k, float top_p) {
    const int V = m.hp.vocab_size;
    std::vector<float> z(logits, logits + V);
    mask_undecodable(z.data(), V, m.tokenizer.n_ids());
    return sampling_probs(z.data(), V, temperature, top_k > 0 ? top_k : V, top_p, 0.0f);
}

int32_t greedy_pick(const Model& m, const float* logits) {
    const int V = m.hp.vocab_size;
    const int n = std::min(V, m.tokenizer.n_ids());
    return argmax(logits, n);
}

}  // namespace

void validate_spec_common(const Model& m, int prompt_len, int max_tokens, int draft_loops, int verify_loops,
                          int draft_ahead, float temperature) {
    if (prompt_len < 1) bad("prompt_len: " + std::to_string(prompt_len) + " must be >= 1");
    if (max_tokens < 0) bad("max_tokens: " + std::to_string(max_tokens) + " must be >= 0");
    if (static_cast<long long>(prompt_len) + max_tokens > m.max_seq_len)
        bad("max_tokens: prompt_len + max_tokens = " + std::to_string(static_cast<long long>(prompt_len) + max_tokens) +
            " exceeds max_seq_len " + std::to_string(m.max_seq_len));
    if (verify_loops < 2 || verify_loops > m.hp.max_loops)
        bad("verify_loops: " + std::to_string(verify_loops) + " is outside [2, " + std::to_string(m.hp.max_loops) + "]");
    if (draft_loops < 1 || draft_loops >= verify_loops)
        bad("draft_loops: " + std::to_string(draft_loops) + " is outside [1, verify_loops - 1 = " +
            std::to_string(verify_loops - 1) + "]");
    if (draft_ahead < 1 || draft_ahead > 32) bad("draft_ahead: " + std::to_string(draft_ahead) + " is outside [1, 32]");
    if (!std::isfinite(temperature) || temperature < 0) bad("temperature: must be a finite number >= 0");
}

SpecEmitter::SpecEmitter(const Model& m, GenerateResult& res, const GenerateOptions& options, int loops,
                         SpecStopPolicy policy, Clock::time_point t0)
    : m_(m), res_(res), options_(options), loops_(loops), policy_(std::move(policy)), t0_(t0),
      text_(m, policy_.stop_strings) {}

bool SpecEmitter::emit(int32_t tok, float prob, int cycle, const std::vector<int32_t>& drafted, int accepted,
                       bool from_verifier, const std::vector<float>* lens_states, bool dead_end,
                       bool grammar_at_end) {
    GenerateStats& st = res_.stats;
    const int position = static_cast<int>(res_.tokens.size());
    res_.tokens.push_back(tok);
    emitted_.push_back(tok);
    st.tokens_emitted = static_cast<int>(emitted_.size());
    st.depth_per_token.push_back(loops_);
    if (st.tokens_emitted == 1) {
        t_first_ = Clock::now();
        st.first_token_ms = ms_since(t0_);
    }
    bool stop = true;
    const bool stop_hit = text_.push(tok);
    const SpecStopPolicy& p = policy_;
    if (tok == m_.tokenizer.eos_id() && (!p.ignore_eos || grammar_at_end)) st.stop_reason = StopReason::EOS;
    else if (tail_matches(emitted_, p.stop_sequences)) st.stop_reason = StopReason::STOP_SEQUENCE;
    else if (stop_hit) st.stop_reason = StopReason::STOP_STRING;
    else if (st.tokens_emitted == p.max_tokens) st.stop_reason = StopReason::MAX_TOKENS;
    else if (dead_end) st.stop_reason = StopReason::GRAMMAR_DEAD_END;
    else if (p.max_time > 0 && ms_since(t0_) >= p.max_time * 1000.0) st.stop_reason = StopReason::MAX_TIME;
    else stop = false;
    bool keep = true;
    if (options_.on_token) keep = options_.on_token(tok, position);
    if (options_.observer) {
        TokenEvent ev;
        ev.token = tok;
        ev.position = position;
        ev.index = st.tokens_emitted - 1;
        ev.piece = text_.take(stop);
        ev.depth = loops_;
        ev.prob = prob;
        ev.cycle = cycle;
        ev.drafted = drafted;
        ev.accepted = accepted;
        ev.from_verifier = from_verifier;
        if (options_.lens && lens_states) {
            const int V = m_.hp.vocab_size, d = m_.hp.d_model;
            lens_logits_.resize(static_cast<size_t>(V));
            for (int l = 1; l <= loops_; ++l) {
                compute_logits(m_, lens_states->data() + static_cast<size_t>(l - 1) * d, 1, lens_logits_.data(), ws_);
                ev.lens.push_back(lens_entry(lens_logits_.data(), V, l, options_.lens_top_k, tok));
            }
        }
        keep = options_.observer(ev) && keep;
    }
    if (stop) return false;
    if (!keep) {
        st.stop_reason = StopReason::CALLBACK_ABORT;
        return false;
    }
    return true;
}

GenerateResult generate_speculative_ex(Model* model, const int32_t* prompt, int prompt_len, const SpeculativeConfig& c,
                                       const GenerateOptions& options) {
    const auto t0 = Clock::now();
    const Model& m = checked(model);
    validate_spec_common(m, prompt_len, c.max_tokens, c.draft_loops, c.verify_loops, c.draft_ahead, c.temperature);
    const bool greedy = is_greedy(c.temperature);
    if (!greedy) {
        if (c.top_k < 0) bad("top_k: " + std::to_string(c.top_k) + " must be >= 0 (0 = off)");
        if (!(c.top_p > 0.0f && c.top_p <= 1.0f)) bad("top_p: must be in (0, 1]");
    }
    check_prompt_ids(m, prompt, prompt_len);
    if (options.lens && (options.lens_top_k < 1 || options.lens_top_k > 64))
        bad("lens_top_k: " + std::to_string(options.lens_top_k) + " is outside [1, 64]");

    const HParams& hp = m.hp;
    const int V = hp.vocab_size, d = hp.d_model;
    const int D = c.draft_loops, L = c.verify_loops, K = c.draft_ahead;

    GenerateResult res;
    res.prompt_len = prompt_len;
    res.tokens.assign(prompt, prompt + prompt_len);
    GenerateStats& st = res.stats;
    st.prompt_tokens = prompt_len;
    st.loops_used = L;
    st.spec_accept_hist.assign(static_cast<size_t>(K) + 1, 0);
    st.stop_reason = StopReason::MAX_TOKENS;
    if (c.max_tokens == 0) {
        st.total_ms = ms_since(t0);
        return res;
    }

    KVCache kv;
    kv.allocate(exec_layers(hp, L), prompt_len + c.max_tokens + K, hp.n_kv_heads * hp.head_dim);
    Workspace ws;
    std::vector<float> h, logits(static_cast<size_t>(V));
    std::vector<float> pass_states;  // lens: [L, d] of one row
    if (options.lens) pass_states.assign(static_cast<size_t>(L) * d, 0.0f);
    PassHook hook = options.lens ? last_row_hook(pass_states, d) : PassHook{};

    // Prefill at the verify depth; its last row gives the first token.
    {
        ForwardArgs fa;
        fa.tokens = prompt;
        fa.n = prompt_len;
        fa.loops = L;
        fa.on_pass = options.lens ? &hook : nullptr;
        forward(m, kv, ws, fa, h);
        compute_logits(m, h.data() + static_cast<size_t>(prompt_len - 1) * d, 1, logits.data(), ws);
    }
    st.prefill_ms = ms_since(t0);

    Rng rng(c.seed);
    SpecEmitter out(m, res, options, L, SpecStopPolicy{c.max_tokens, c.ignore_eos, {}, {}, 0.0}, t0);
    bool done = false;

    // The first token, from the prefill.
    {
        int32_t tok;
        float prob;
        if (greedy) {
            tok = greedy_pick(m, logits.data());
            prob = softmax_prob(logits.data(), V, tok);
        } else {
            auto p = filtered(m, logits.data(), c.temperature, c.top_k, c.top_p);
            tok = draw(p, rng);
            prob = p[tok];
        }
        done = !out.emit(tok, prob, -1, {}, 0, true, options.lens ? &pass_states : nullptr);
    }

    std::vector<float> draft_h(static_cast<size_t>(K) * d);       // states after pass D per drafted row
    std::vector<float> draft_e(injects_input(hp) ? static_cast<size_t>(K) * d : 0);  // their prelude outputs (§1a)
    std::vector<std::vector<float>> q_probs(static_cast<size_t>(K));  // stochastic: draft distributions
    std::vector<float> ver_h, ver_logits(static_cast<size_t>(K) * V), one(static_cast<size_t>(V));
    std::vector<std::vector<float>> row_states;  // lens: per verified row, its [L, d] states
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
            ForwardArgs fa;
            fa.tokens = &x[i];
            fa.n = 1;
            fa.pos0 = p + i;
            fa.loops = D;
            if (injects_input(hp)) fa.out_e = draft_e.data() + static_cast<size_t>(i) * d;
            PassHook rh = options.lens ? last_row_hook(row_states[i], d) : PassHook{};
            fa.on_pass = options.lens ? &rh : nullptr;
            forward(m, kv, ws, fa, h);
            std::copy(h.begin(), h.end(), draft_h.begin() + static_cast<size_t>(i) * d);
            compute_logits(m, h.data(), 1, one.data(), ws);
            if (greedy) {
                x[i + 1] = greedy_pick(m, one.data());
            } else {
                q_probs[i] = filtered(m, one.data(), c.temperature, c.top_k, c.top_p);
                x[i + 1] = draw(q_probs[i], rng);
            }
            ++drafted;
            if (x[i + 1] == m.tokenizer.eos_id() && !c.ignore_eos) break;  // nothing to draft past EOS
        }
        st.draft_ms += ms_since(td);

        // Verify rows p .. p+drafted-1 from their draft states.
        auto tv = Clock::now();
        {
            ForwardArgs fa;
            fa.tokens = x.data();
            fa.n = drafted;
            fa.pos0 = p;
            fa.loops = L;
            fa.start_pass = D + 1;
            fa.h_in = draft_h.data();
            fa.e_in = draft_e.data();
            PassHook rh;
            if (options.lens)
                rh = [&](int pass, int row0, const float* xs, int n) {
                    for (int r = 0; r < n; ++r)
                        std::copy(xs + static_cast<size_t>(r) * d, xs + static_cast<size_t>(r + 1) * d,
                                  row_states[row0 + r].begin() + static_cast<size_t>(pass - 1) * d);
                };
            fa.on_pass = options.lens ? &rh : nullptr;
            forward(m, kv, ws, fa, ver_h);
            compute_logits(m, ver_h.data(), drafted, ver_logits.data(), ws);
        }
        st.verify_ms += ms_since(tv);

        // Accept.
        int a = 0;
        int32_t correction = -1;
        float corr_prob = 0;
        std::vector<float> accept_prob(static_cast<size_t>(drafted), 0.0f);
        for (int i = 0; i < drafted; ++i) {
            const float* row = ver_logits.data() + static_cast<size_t>(i) * V;
            if (greedy) {
                const int32_t y = greedy_pick(m, row);
                if (y == x[i + 1]) {
                    accept_prob[i] = softmax_prob(row, V, y);
                    ++a;
                    continue;
                }
                correction = y;
                corr_prob = softmax_prob(row, V, y);
                break;
            }
            const std::vector<float> pp = filtered(m, row, c.temperature, c.top_k, c.top_p);
            const int32_t xi = x[i + 1];
            const double ratio = q_probs[i][xi] > 0 ? static_cast<double>(pp[xi]) / q_probs[i][xi] : 0.0;
            if (rng.uniform() < ratio) {
                accept_prob[i] = pp[xi];
                ++a;
                continue;
            }
            std::vector<float> resid(static_cast<size_t>(V));
            double tot = 0;
            for (int j = 0; j < V; ++j) tot += resid[j] = std::max(0.0f, pp[j] - q_probs[i][j]);
            if (tot <= 0) resid = pp;  // p == q: rejection has probability 0; keep a valid draw
            correction = draw(resid, rng);
            corr_prob = pp[correction];
            break;
        }
        st.spec_cycles++;
        st.spec_drafted += drafted;
        st.spec_tested += drafted;
        st.spec_accepted += a;
        st.spec_accept_hist[static_cast<size_t>(a)]++;

        const std::vector<int32_t> drafted_tokens(x.begin() + 1, x.begin() + 1 + drafted);
        for (int i = 0; i < a && !done; ++i)
            done = !out.emit(x[i + 1], accept_prob[i], cycle, drafted_tokens, a, false,
                             options.lens ? &row_states[i] : nullptr);
        if (!done && correction >= 0)
            done = !out.emit(correction, corr_prob, cycle, drafted_tokens, a, true,
                             options.lens ? &row_states[a] : nullptr);
        ++cycle;
    }
    st.decode_ms = ms_since(out.first_token_time());
    res.text = out.text();
    st.total_ms = ms_since(t0);
    return res;
}

std::vector<int32_t> generate_speculative(Model* model, const int32_t* prompt, int prompt_len,
                                          const SpeculativeConfig& config) {
    return generate_speculative_ex(model, prompt, prompt_len, config).tokens;
}

}  // namespace tinyloop
