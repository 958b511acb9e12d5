// Draft-model speculative decoding (seed 002's SpeculativeDecodingBackend; Leviathan et al. 2023).
//
// One cycle, with x0 the last emitted token (in neither cache yet) at position p:
//   draft   the draft model runs its pending tokens (x0, plus the previous cycle's last draft
//           when that one was accepted and never run) and then x1..x_{k-1} one at a time,
//           proposing x1..xk, each from its logits after the full logits pipeline;
//   verify  the target runs x0..xk (k+1 rows, positions p..p+k) in one batched forward: row i
//           is the target's distribution for x_{i+1}, row k the bonus token's;
//   accept  greedy: the longest prefix the target's argmax agrees with, then the target's own
//           token; sampling: x_{i+1} with probability min(1, p/q), else a draw from
//           norm(max(0, p - q)) and the cycle ends; all accepted: the bonus drawn from row k.
// Rollback: both caches are addressed by position and a row attends only to earlier positions,
// so rejected rows are simply forgotten (the draft's valid length is cut back to the accepted
// tokens, the target's to x0..xa) and overwritten by the next cycle.
//
// Greedy exactness rests on batch invariance (docs/ARCHITECTURE.md, Numerics): the target's rows in
// the verify batch equal its one-token decode bit for bit, and the logits pipeline sees the
// same context, so every argmax is plain greedy's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "decode.h"
#include "grammar.h"
#include "lens.h"
#include "sampling.h"
#include "speculative.h"
#include "stop.h"

namespace tinyloop {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

[[noreturn]] void bad(const std::string& m) { throw Error(ErrorCode::InvalidArgument, m); }

// Why the draft cannot stand in for the target's vocabulary; empty when it can.
std::string vocabulary_mismatch(const Model& t, const Model& d) {
    if (t.hp.vocab_size != d.hp.vocab_size)
        return "vocab_size " + std::to_string(d.hp.vocab_size) + " differs from the target's " +
               std::to_string(t.hp.vocab_size);
    const TokenizerSpec &a = t.tokenizer_spec, &b = d.tokenizer_spec;
    if (a.type != b.type || a.pretokenizer != b.pretokenizer)
        return "tokenizer type/pretokenizer \"" + b.type + "\"/\"" + b.pretokenizer + "\" differs from the target's \"" +
               a.type + "\"/\"" + a.pretokenizer + "\"";
    if (a.merges.size() != b.merges.size())
        return "tokenizer has " + std::to_string(b.merges.size()) + " merges, the target's " +
               std::to_string(a.merges.size());
    for (size_t i = 0; i < a.merges.size(); ++i)
        if (a.merges[i] != b.merges[i]) return "tokenizer.merges[" + std::to_string(i) + "] differs from the target's";
    if (a.special_tokens != b.special_tokens) return "tokenizer special tokens differ from the target's";
    if (a.eos_id != b.eos_id)
        return "eos_id " + std::to_string(b.eos_id) + " differs from the target's " + std::to_string(a.eos_id);
    if (a.bos_id != b.bos_id)
        return "bos_id " + std::to_string(b.bos_id) + " differs from the target's " + std::to_string(a.bos_id);
    return {};
}

// The logits pipeline of decode(), in its order: penalties over `ctx` (prompt + output) and
// `em` (output), bias, n-gram and bad-word bans, the undecodable-id mask, the grammar's mask.
void pipeline(const Model& m, const GenerateConfig& c, const float* logits, const std::vector<int32_t>& ctx,
              const std::vector<int32_t>& em, const std::vector<char>* gmask, std::vector<float>& z) {
    const int V = m.hp.vocab_size;
    z.assign(logits, logits + V);
    apply_repetition_penalty(z.data(), V, ctx, c.repetition_penalty);
    apply_frequency_presence(z.data(), V, em, c.frequency_penalty, c.presence_penalty);
    apply_logit_bias(z.data(), V, c.logit_bias);
    ban_repeated_ngrams(z.data(), V, ctx, c.no_repeat_ngram_size);
    ban_bad_words(z.data(), V, ctx, c.bad_words);
    mask_undecodable(z.data(), V, m.tokenizer.n_ids());
    if (gmask)
        for (size_t j = 0; j < gmask->size(); ++j)
            if (!(*gmask)[j]) z[j] = -std::numeric_limits<float>::infinity();
}

bool any_allowed(const std::vector<char>& mask) { return std::find(mask.begin(), mask.end(), 1) != mask.end(); }

}  // namespace

GenerateResult draft_speculative_generate_ex(Model* target, Model* draft, const int32_t* prompt, int prompt_len,
                                             const GenerateConfig& c, const DraftSpeculativeConfig& sc,
                                             const GenerateOptions& options) {
    const auto t0 = Clock::now();
    const Model& tm = checked(target);
    if (!draft) bad("draft: the draft model must not be null");
    const Model& dm = *draft;
    validate_config(&tm, prompt_len, c);
    const std::string why = vocabulary_mismatch(tm, dm);
    if (!why.empty()) bad("draft: the draft model's vocabulary does not match the target's: " + why);
    if (sc.gamma < 1 || sc.gamma > 32) bad("gamma: " + std::to_string(sc.gamma) + " is outside [1, 32]");
    if (sc.draft_loops < 0 || sc.draft_loops > dm.hp.max_loops)
        bad("draft_loops: " + std::to_string(sc.draft_loops) + " is outside [1, " + std::to_string(dm.hp.max_loops) +
            "] (the draft's max_loops; 0 = its default_loops, " + std::to_string(dm.hp.default_loops) + ")");
    if (static_cast<long long>(prompt_len) + c.max_tokens > dm.max_seq_len)
        bad("max_tokens: prompt_len + max_tokens = " + std::to_string(static_cast<long long>(prompt_len) + c.max_tokens) +
            " exceeds the draft model's max_seq_len " + std::to_string(dm.max_seq_len));
    if (c.beam_size >= 2)
        throw Error(ErrorCode::NotSupported, "beam_size: draft-model speculation decodes one sequence (0 or 1)");
    if (c.early_exit_patience > 0)
        throw Error(ErrorCode::NotSupported,
                    "early_exit_patience: early exit does not combine with draft-model speculation (0)");
    check_prompt_ids(tm, prompt, prompt_len);
    if (options.lens && (options.lens_top_k < 1 || options.lens_top_k > 64))
        bad("lens_top_k: " + std::to_string(options.lens_top_k) + " is outside [1, 64]");

    const HParams& hp = tm.hp;
    const int V = hp.vocab_size, d = hp.d_model;
    const int LT = c.loops > 0 ? c.loops : hp.default_loops;
    const int LD = sc.draft_loops > 0 ? sc.draft_loops : dm.hp.default_loops;
    const int G = sc.gamma;
    const bool greedy = is_greedy(c.temperature);
    const int n_pick = std::min(V, tm.tokenizer.n_ids());  // greedy never picks a masked id

    GenerateResult res;
    res.prompt_len = prompt_len;
    res.tokens.assign(prompt, prompt + prompt_len);
    res.tokens.reserve(static_cast<size_t>(prompt_len) + c.max_tokens);
    GenerateStats& st = res.stats;
    st.prompt_tokens = prompt_len;
    st.loops_used = LT;
    st.spec_accept_hist.assign(static_cast<size_t>(G) + 1, 0);
    st.stop_reason = StopReason::MAX_TOKENS;
    if (c.max_tokens == 0) {
        st.total_ms = ms_since(t0);
        return res;
    }

    // Grammar: `gm` follows the emitted tokens, `cur_mask` is what it allows next.
    std::optional<GrammarMatcher> gm;
    std::vector<char> cur_mask;
    if (c.grammar) {
        gm.emplace(*c.grammar, tm.tokenizer);
        gm->allowed(cur_mask);
        if (!any_allowed(cur_mask)) {
            st.stop_reason = StopReason::GRAMMAR_DEAD_END;
            st.total_ms = ms_since(t0);
            return res;
        }
    }

    // Row capacity: the target's furthest row is x_k at p + k <= prompt_len + max_tokens - 2.
    const int cap = prompt_len + c.max_tokens;
    KVCache tkv, dkv;
    tkv.allocate(hp, exec_layers(hp, LT), cap, c.kv_cache);
    dkv.allocate(dm.hp, exec_layers(dm.hp, LD), cap, c.kv_cache);
    st.kv_cache_bytes = tkv.bytes() + dkv.bytes();
    Workspace tws, dws;
    std::vector<float> h, logits(static_cast<size_t>(V));
    std::vector<float> pass_states;  // lens: the prefill's last row, [LT, d]
    if (options.lens) pass_states.assign(static_cast<size_t>(LT) * d, 0.0f);
    PassHook hook = options.lens ? last_row_hook(pass_states, d) : PassHook{};

    // Prefill both models; the target's last row gives the first token.
    {
        ForwardArgs fa;
        fa.tokens = prompt;
        fa.n = prompt_len;
        fa.loops = LT;
        fa.window = c.cache_window;
        fa.on_pass = options.lens ? &hook : nullptr;
        forward(tm, tkv, tws, fa, h);
        compute_logits(tm, h.data() + static_cast<size_t>(prompt_len - 1) * d, 1, logits.data(), tws);
        ForwardArgs da;
        da.tokens = prompt;
        da.n = prompt_len;
        da.loops = LD;
        da.window = c.cache_window;
        forward(dm, dkv, dws, da, h);
    }
    int d_valid = prompt_len;  // draft cache rows [0, d_valid) hold res.tokens' keys/values
    st.prefill_ms = ms_since(t0);

    Rng rng(c.sample_seed);
    SpecEmitter out(tm, res, options, LT, SpecStopPolicy{c.max_tokens, c.ignore_eos, c.stop_sequences, c.stop_strings, c.max_time},
                    t0);
    std::vector<int32_t> ctx(res.tokens), em;  // what the pipeline sees: committed + drafted so far
    std::vector<float> z;
    bool done = false;

    // Picks a token from processed logits `z` (greedy or a draw from the sampling distribution);
    // `probs` receives the sampling distribution when sampling.
    auto pick = [&](std::vector<float>& probs, float& prob) -> int32_t {
        if (greedy) {
            const int32_t t = argmax(z.data(), n_pick);
            prob = softmax_prob(z.data(), V, t);
            return t;
        }
        probs = sampling_probs(z.data(), V, c.temperature, c.top_k, c.top_p, c.min_p);
        const int32_t t = draw(probs, rng);
        prob = probs[static_cast<size_t>(t)];
        return t;
    };

    // The first token, from the target's prefill.
    {
        pipeline(tm, c, logits.data(), ctx, em, gm ? &cur_mask : nullptr, z);
        std::vector<float> pp;
        float prob = 0;
        const int32_t tok = pick(pp, prob);
        bool dead = false;
        if (gm) {
            gm->accept(tok);
            gm->allowed(cur_mask);
            dead = !any_allowed(cur_mask);
        }
        done = !out.emit(tok, prob, -1, {}, 0, true, options.lens ? &pass_states : nullptr, dead, gm && gm->at_end());
        ctx.push_back(tok);
        em.push_back(tok);
    }

    std::vector<std::vector<float>> q(static_cast<size_t>(G));     // sampling: the draft's distributions
    std::vector<std::vector<char>> masks(static_cast<size_t>(G) + 1);  // grammar: allowed after x1..xi
    std::vector<float> tver_h, tver_logits(static_cast<size_t>(G + 1) * V), dlog(static_cast<size_t>(V));
    std::vector<std::vector<float>> row_states;  // lens: per verified row, [LT, d]
    int cycle = 0;
    while (!done) {
        const int committed = static_cast<int>(res.tokens.size());
        const int p = committed - 1;  // position of x0
        const int remaining = c.max_tokens - static_cast<int>(out.emitted().size());
        const int k = std::min(G, remaining - 1);  // k drafts + the target's token never pass the cap
        std::vector<int32_t> x(static_cast<size_t>(k) + 1);
        x[0] = res.tokens.back();
        if (gm) masks[0] = cur_mask;

        // Draft.
        const auto td = Clock::now();
        int drafted = 0;
        std::optional<GrammarMatcher> sgm;
        if (gm && k > 0) sgm.emplace(*gm);
        for (int i = 0; i < k; ++i) {
            ForwardArgs fa;
            if (i == 0) {  // the pending tokens: res.tokens[d_valid .. p]
                fa.tokens = res.tokens.data() + d_valid;
                fa.n = p - d_valid + 1;
                fa.pos0 = d_valid;
            } else {
                fa.tokens = &x[static_cast<size_t>(i)];
                fa.n = 1;
                fa.pos0 = p + i;
            }
            fa.loops = LD;
            fa.window = c.cache_window;
            forward(dm, dkv, dws, fa, h);
            compute_logits(dm, h.data() + static_cast<size_t>(fa.n - 1) * dm.hp.d_model, 1, dlog.data(), dws);
            pipeline(dm, c, dlog.data(), ctx, em, gm ? &masks[static_cast<size_t>(i)] : nullptr, z);
            int32_t t;
            if (greedy) {
                t = argmax(z.data(), n_pick);
            } else {
                q[static_cast<size_t>(i)] = sampling_probs(z.data(), V, c.temperature, c.top_k, c.top_p, c.min_p);
                t = draw(q[static_cast<size_t>(i)], rng);
            }
            x[static_cast<size_t>(i) + 1] = t;
            ctx.push_back(t);
            em.push_back(t);
            ++drafted;
            if (sgm) {
                sgm->accept(t);
                sgm->allowed(masks[static_cast<size_t>(i) + 1]);
                if (!any_allowed(masks[static_cast<size_t>(i) + 1])) break;  // nothing can follow it
            }
            if (t == tm.tokenizer.eos_id() && (!c.ignore_eos || (sgm && sgm->at_end()))) break;
        }
        if (drafted > 0) d_valid = p + drafted;  // x0 .. x_{drafted-1} are in the draft cache now
        st.draft_ms += ms_since(td);
        ctx.resize(static_cast<size_t>(committed));
        em.resize(out.emitted().size());

        // Verify x0 .. x_drafted in one batch.
        const auto tv = Clock::now();
        const int rows = drafted + 1;
        if (options.lens) row_states.assign(static_cast<size_t>(rows), std::vector<float>(static_cast<size_t>(LT) * d));
        {
            ForwardArgs fa;
            fa.tokens = x.data();
            fa.n = rows;
            fa.pos0 = p;
            fa.loops = LT;
            fa.window = c.cache_window;
            PassHook rh;
            if (options.lens)
                rh = [&](int pass, int row0, const float* xs, int n) {
                    for (int r = 0; r < n; ++r)
                        std::copy(xs + static_cast<size_t>(r) * d, xs + static_cast<size_t>(r + 1) * d,
                                  row_states[static_cast<size_t>(row0 + r)].begin() + static_cast<size_t>(pass - 1) * d);
                };
            fa.on_pass = options.lens ? &rh : nullptr;
            forward(tm, tkv, tws, fa, tver_h);
            compute_logits(tm, tver_h.data(), rows, tver_logits.data(), tws);
        }

        // Accept.
        int a = 0;
        int32_t last = -1;  // the target's own token: the correction, or the bonus when all pass
        float last_prob = 0;
        std::vector<float> accept_prob(static_cast<size_t>(drafted), 0.0f), pp;
        for (int i = 0; i <= drafted; ++i) {
            const float* row = tver_logits.data() + static_cast<size_t>(i) * V;
            pipeline(tm, c, row, ctx, em, gm ? &masks[static_cast<size_t>(i)] : nullptr, z);
            if (i == drafted) {  // every draft accepted: the bonus token from the target's row
                last = pick(pp, last_prob);
                break;
            }
            const int32_t xi = x[static_cast<size_t>(i) + 1];
            if (greedy) {
                const int32_t y = argmax(z.data(), n_pick);
                if (y != xi) {
                    last = y;
                    last_prob = softmax_prob(z.data(), V, y);
                    break;
                }
                accept_prob[static_cast<size_t>(i)] = softmax_prob(z.data(), V, y);
            } else {
                pp = sampling_probs(z.data(), V, c.temperature, c.top_k, c.top_p, c.min_p);
                const std::vector<float>& qi = q[static_cast<size_t>(i)];
                const double ratio = qi[xi] > 0 ? static_cast<double>(pp[xi]) / qi[xi] : 0.0;
                if (!(rng.uniform() < ratio)) {
                    std::vector<float> resid(static_cast<size_t>(V));
                    double tot = 0;
                    for (int j = 0; j < V; ++j) tot += resid[j] = std::max(0.0f, pp[j] - qi[j]);
                    if (tot <= 0) resid = pp;  // p == q: rejection has probability 0; keep a valid draw
                    last = draw(resid, rng);
                    last_prob = pp[static_cast<size_t>(last)];
                    break;
                }
                accept_prob[static_cast<size_t>(i)] = pp[xi];
            }
            ++a;
            ctx.push_back(xi);
            em.push_back(xi);
        }
        st.verify_ms += ms_since(tv);
        if (drafted > 0) {
            st.spec_cycles++;
            st.spec_drafted += drafted;
            st.spec_tested += drafted;
            st.spec_accepted += a;
            st.spec_accept_hist[static_cast<size_t>(a)]++;
        }
        // The draft's cache keeps only the accepted rows: x0 .. x_a (x_drafted was never run).
        if (drafted > 0) d_valid = p + std::min(a + 1, drafted);

        // Emit the accepted drafts, then the target's token.
        const std::vector<int32_t> drafted_tokens(x.begin() + 1, x.begin() + 1 + drafted);
        const int this_cycle = drafted > 0 ? cycle : -1;
        for (int i = 0; i < a && !done; ++i) {
            const int32_t t = x[static_cast<size_t>(i) + 1];
            bool dead = false;
            if (gm) {
                gm->accept(t);
                dead = !any_allowed(masks[static_cast<size_t>(i) + 1]);
            }
            done = !out.emit(t, accept_prob[static_cast<size_t>(i)], this_cycle, drafted_tokens, a, false,
                             options.lens ? &row_states[static_cast<size_t>(i)] : nullptr, dead, gm && gm->at_end());
        }
        if (!done) {
            bool dead = false;
            if (gm) {
                gm->accept(last);
                gm->allowed(cur_mask);
                dead = !any_allowed(cur_mask);
            }
            done = !out.emit(last, last_prob, this_cycle, drafted_tokens, a, true,
                             options.lens ? &row_states[static_cast<size_t>(a)] : nullptr, dead, gm && gm->at_end());
            ctx.push_back(last);
            em.push_back(last);
        }
        if (drafted > 0) ++cycle;
    }
    if (st.tokens_emitted > 0) st.decode_ms = ms_since(out.first_token_time());
    res.text = out.text();
    st.total_ms = ms_since(t0);
    return res;
}

GenerateResult draft_speculative_generate(Model* target, Model* draft, const int32_t* prompt, int prompt_len,
                                          const GenerateConfig& config, const DraftSpeculativeConfig& spec) {
    return draft_speculative_generate_ex(target, draft, prompt, prompt_len, config, spec);
}

}  // namespace tinyloop
