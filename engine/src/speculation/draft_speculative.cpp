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

#include "decode/decode.h"
#include "forward/executor.h"
#include "grammar/grammar.h"
#include "scoring/lens.h"
#include "decode/sampling.h"
#include "speculation/speculative.h"
#include "decode/stop.h"

namespace tinyloop {

namespace {

using Clock = std::chrono::steady_clock;

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
    // hf_byte_bpe (FORMAT.md §3b): the ids depend on the strings, pre-tokenizer and added tokens too.
    auto same_steps = [](const HfPreStep& x, const HfPreStep& y) {
        return x.kind == y.kind && x.pattern == y.pattern && x.behavior == y.behavior && x.invert == y.invert &&
               x.individual_digits == y.individual_digits && x.add_prefix_space == y.add_prefix_space &&
               x.use_regex == y.use_regex;
    };
    auto same_added = [](const HfAddedToken& x, const HfAddedToken& y) {
        return x.id == y.id && x.content == y.content && x.special == y.special && x.normalized == y.normalized;
    };
    if (a.vocab != b.vocab || a.prefix_ids != b.prefix_ids || a.suffix_ids != b.suffix_ids ||
        a.ignore_merges != b.ignore_merges ||
        !std::equal(a.hf_pre.begin(), a.hf_pre.end(), b.hf_pre.begin(), b.hf_pre.end(), same_steps) ||
        !std::equal(a.added_tokens.begin(), a.added_tokens.end(), b.added_tokens.begin(), b.added_tokens.end(),
                    same_added))
        return "tokenizer vocab, pre-tokenizer, added tokens or post-processor differ from the target's";
    if (a.eos_id != b.eos_id)
        return "eos_id " + std::to_string(b.eos_id) + " differs from the target's " + std::to_string(a.eos_id);
    if (a.bos_id != b.bos_id)
        return "bos_id " + std::to_string(b.bos_id) + " differs from the target's " + std::to_string(a.bos_id);
    return {};
}

void check_draft_run(const Model& tm, const Model* draft, const int32_t* prompt, int prompt_len,
                     const GenerateConfig& c, const DraftSpeculativeConfig& sc, const GenerateOptions& options) {
    if (!draft) bad("draft: the draft model must not be null");
    const Model& dm = *draft;
    validate_config(&tm, prompt_len, c);
    if (!c.kv_sharing.exact())
        throw Error(ErrorCode::NotSupported, "kv_sharing: draft-model speculation keeps per-pass keys and values "
                                             "(use kv_sharing per-pass)");
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
    if (c.num_return_sequences > 1)
        throw Error(ErrorCode::NotSupported, "num_return_sequences: draft-model speculation returns one output (use 1)");
    if (c.early_exit.patience > 0)
        throw Error(ErrorCode::NotSupported,
                    "early_exit_patience: early exit does not combine with draft-model speculation (0)");
    check_prompt_ids(tm, prompt, prompt_len);
    if (options.lens && (options.lens_top_k < 1 || options.lens_top_k > 64))
        bad("lens_top_k: " + std::to_string(options.lens_top_k) + " is outside [1, 64]");
}

// One draft-model speculative run: both models' caches and the target's per-token path (`dec`:
// its logits pipeline, grammar and emitter). The vocabularies match, so the target's pipeline
// processes the draft's logits too.
class DraftRun {
public:
    DraftRun(const Model& tm, const Model& dm, const GenerateConfig& c, const DraftSpeculativeConfig& sc,
             const GenerateOptions& options, GenerateResult& res, Clock::time_point t0)
        : tm(tm), dm(dm), c(c), options(options), res(res), st(res.stats),
          LT(resolve_loops(tm, c.loops)), LD(resolve_loops(dm, sc.draft_loops)),
          G(sc.gamma), V(tm.hp.vocab_size), d(tm.hp.d_model),
          dec(tm, c, res, options.on_token, options.observer, options.lens ? options.lens_top_k : 0, t0) {}

    // Both models run the prompt; the target's last row gives the first token.
    void prefill(const Executor& tex, const Executor& dex, const int32_t* prompt, int prompt_len);
    // The first token, from the target's prefill. False when generation stops.
    bool first_token();
    // One cycle: draft, verify, accept, emit. False when generation stops.
    bool cycle();

    const Model& tm;
    const Model& dm;
    const GenerateConfig& c;
    const GenerateOptions& options;
    GenerateResult& res;
    GenerateStats& st;
    const int LT, LD, G, V, d;
    TokenDecoder dec;

private:
    // The target's verdict on a cycle's drafts.
    struct Verdict {
        int accepted = 0;
        int32_t last = -1;  // the target's own token: the correction, or the bonus when all pass
        float last_prob = 0;
        std::vector<float> accept_prob;
    };
    int draft(int p, int k, std::vector<int32_t>& x);
    void verify(int p, const std::vector<int32_t>& x, int rows);
    Verdict accept(const std::vector<int32_t>& x, int drafted);
    bool emit(const std::vector<int32_t>& x, int drafted, const Verdict& v);

    std::unique_ptr<ExecSequence> tseq, dseq;  // the target's and the draft's sequences
    std::vector<float> logits, pass_states;  // pass_states: lens, the prefill's last row, [LT, d]
    PassHook hook;
    int d_valid = 0;  // draft cache rows [0, d_valid) hold res.tokens' keys/values
    std::vector<int32_t> ctx, em;  // what the pipeline sees: committed + drafted so far
    std::vector<float> z;
    std::vector<std::vector<float>> q;                  // sampling: the draft's distributions
    std::vector<std::vector<char>> masks;               // grammar: allowed after x1..xi
    std::vector<float> tver_logits, dlog;
    std::vector<std::vector<float>> row_states;  // lens: per verified row, [LT, d]
    int n_cycle = 0;
};

void DraftRun::prefill(const Executor& tex, const Executor& dex, const int32_t* prompt, int prompt_len) {
    // Row capacity: the target's furthest row is x_k at p + k <= prompt_len + max_tokens - 2.
    const int cap = prompt_len + c.max_tokens;
    tseq = tex.sequence({.loops = LT, .capacity = cap, .window = c.cache_window, .kv_cache = c.kv_cache});
    dseq = dex.sequence({.loops = LD, .capacity = cap, .window = c.cache_window, .kv_cache = c.kv_cache});
    st.kv_cache_bytes = tseq->cache_bytes() + dseq->cache_bytes();
    logits.assign(static_cast<size_t>(V), 0.0f);
    if (options.lens) pass_states.assign(static_cast<size_t>(LT) * d, 0.0f);
    hook = options.lens ? last_row_hook(pass_states, d) : PassHook{};

    // Prefill both models; the target's last row gives the first token.
    tseq->run(prompt, prompt_len, 0, options.lens ? &hook : nullptr);
    tseq->last_logits(logits.data());
    dseq->run(prompt, prompt_len, 0, nullptr);
    d_valid = prompt_len;
    ctx = res.tokens;
    q.resize(static_cast<size_t>(G));
    masks.resize(static_cast<size_t>(G) + 1);
    tver_logits.resize(static_cast<size_t>(G + 1) * V);
    dlog.resize(static_cast<size_t>(V));
}

bool DraftRun::first_token() {
    const bool more = dec.step(logits.data(), {.depth = LT, .lens_states = options.lens ? pass_states.data() : nullptr,
                                               .from_verifier = true});
    ctx.push_back(res.tokens.back());
    em.push_back(res.tokens.back());
    return more;
}

// Drafts up to k tokens after x0 = x[0] (at position p) into x[1..]; returns how many.
int DraftRun::draft(int p, int k, std::vector<int32_t>& x) {
    const GrammarGate& gm = dec.grammar;
    if (gm.active()) masks[0] = *gm.mask();
    int drafted = 0;
    std::optional<GrammarMatcher> sgm;
    if (gm.active() && k > 0) sgm.emplace(*gm.matcher());
    for (int i = 0; i < k; ++i) {
        if (i == 0)  // the pending tokens: res.tokens[d_valid .. p]
            dseq->run(res.tokens.data() + d_valid, p - d_valid + 1, d_valid, nullptr);
        else
            dseq->run(&x[static_cast<size_t>(i)], 1, p + i, nullptr);
        dseq->last_logits(dlog.data());
        dec.pipeline.process(dlog.data(), ctx, em, gm.active() ? &masks[static_cast<size_t>(i)] : nullptr, z);
        const int32_t t = dec.pipeline.pick(z, dec.rng, &q[static_cast<size_t>(i)]).token;
        x[static_cast<size_t>(i) + 1] = t;
        ctx.push_back(t);
        em.push_back(t);
        ++drafted;
        if (sgm) {
            sgm->accept(t);
            sgm->allowed(masks[static_cast<size_t>(i) + 1]);
            if (!any_allowed(masks[static_cast<size_t>(i) + 1])) break;  // nothing can follow it
        }
        if (tm.tokenizer.is_stop(t) && (!c.ignore_eos || (sgm && sgm->at_end()))) break;
    }
    if (drafted > 0) d_valid = p + drafted;  // x0 .. x_{drafted-1} are in the draft cache now
    return drafted;
}

// The target runs x0 .. x_{rows-1} (positions p ..) in one batch into tver_logits.
void DraftRun::verify(int p, const std::vector<int32_t>& x, int rows) {
    if (options.lens) row_states.assign(static_cast<size_t>(rows), std::vector<float>(static_cast<size_t>(LT) * d));
    {
        PassHook rh;
        if (options.lens)
            rh = [&](int pass, int row0, const float* xs, int n) {
                for (int r = 0; r < n; ++r)
                    std::copy(xs + static_cast<size_t>(r) * d, xs + static_cast<size_t>(r + 1) * d,
                              row_states[static_cast<size_t>(row0 + r)].begin() + static_cast<size_t>(pass - 1) * d);
            };
        tseq->run_passes({.tokens = x.data(), .n = rows, .pos0 = p, .on_readout = options.lens ? &rh : nullptr});
        tseq->logits(0, rows, tver_logits.data());
    }
}

// Greedy: the longest prefix the target's argmax agrees with, then its own token; sampling:
// x_{i+1} with probability min(1, p/q), else a draw from norm(max(0, p - q)); all accepted: the
// bonus from the last row.
DraftRun::Verdict DraftRun::accept(const std::vector<int32_t>& x, int drafted) {
    Verdict v;
    v.accept_prob.assign(static_cast<size_t>(drafted), 0.0f);
    std::vector<float> pp;
    const LogitsPipeline& pipe = dec.pipeline;
    for (int i = 0; i <= drafted; ++i) {
        const float* row = tver_logits.data() + static_cast<size_t>(i) * V;
        pipe.process(row, ctx, em, dec.grammar.active() ? &masks[static_cast<size_t>(i)] : nullptr, z);
        if (i == drafted) {  // every draft accepted: the bonus token from the target's row
            const TokenChoice bonus = pipe.pick(z, dec.rng, &pp);
            v.last = bonus.token;
            v.last_prob = bonus.prob;
            break;
        }
        const int32_t xi = x[static_cast<size_t>(i) + 1];
        if (pipe.greedy()) {
            const TokenChoice y = greedy_choice(tm, z.data());
            if (y.token != xi) {
                v.last = y.token;
                v.last_prob = y.prob;
                break;
            }
            v.accept_prob[static_cast<size_t>(i)] = y.prob;
        } else {
            pp = pipe.probs(z);
            const std::vector<float>& qi = q[static_cast<size_t>(i)];
            const double ratio = qi[xi] > 0 ? static_cast<double>(pp[xi]) / qi[xi] : 0.0;
            if (!(dec.rng.uniform() < ratio)) {
                v.last = draw_residual(pp, qi, dec.rng);
                v.last_prob = pp[static_cast<size_t>(v.last)];
                break;
            }
            v.accept_prob[static_cast<size_t>(i)] = pp[xi];
        }
        ++v.accepted;
        ctx.push_back(xi);
        em.push_back(xi);
    }
    return v;
}

// Emits the accepted drafts, then the target's token. False when generation stops.
bool DraftRun::emit(const std::vector<int32_t>& x, int drafted, const Verdict& v) {
    const int a = v.accepted;
    const std::vector<int32_t> drafted_tokens(x.begin() + 1, x.begin() + 1 + drafted);
    GrammarGate& gm = dec.grammar;
    EmitInfo info{.depth = LT, .cycle = drafted > 0 ? n_cycle : -1, .drafted = &drafted_tokens, .accepted = a};
    for (int i = 0; i < a; ++i) {
        const int32_t t = x[static_cast<size_t>(i) + 1];
        info.prob = v.accept_prob[static_cast<size_t>(i)];
        info.dead_end = gm.accept_known(t, masks[static_cast<size_t>(i) + 1]);
        info.grammar_at_end = gm.at_end();
        info.lens_states = options.lens ? row_states[static_cast<size_t>(i)].data() : nullptr;
        if (!dec.out.emit(t, info)) return false;
    }
    info.prob = v.last_prob;
    info.dead_end = gm.accept(v.last);
    info.grammar_at_end = gm.at_end();
    info.lens_states = options.lens ? row_states[static_cast<size_t>(a)].data() : nullptr;
    info.from_verifier = true;
    const bool more = dec.out.emit(v.last, info);
    ctx.push_back(v.last);
    em.push_back(v.last);
    return more;
}

bool DraftRun::cycle() {
    const int committed = static_cast<int>(res.tokens.size());
    const int p = committed - 1;  // position of x0
    const int remaining = c.max_tokens - static_cast<int>(dec.out.emitted().size());
    const int k = std::min(G, remaining - 1);  // k drafts + the target's token never pass the cap
    std::vector<int32_t> x(static_cast<size_t>(k) + 1);
    x[0] = res.tokens.back();

    const auto td = Clock::now();
    const int drafted = draft(p, k, x);
    st.draft_ms += ms_since(td);
    ctx.resize(static_cast<size_t>(committed));
    em.resize(dec.out.emitted().size());

    // Verify x0 .. x_drafted in one batch.
    const auto tv = Clock::now();
    verify(p, x, drafted + 1);
    const Verdict v = accept(x, drafted);
    st.verify_ms += ms_since(tv);
    const int a = v.accepted;
    if (drafted > 0) count_cycle(st, drafted, drafted, a);
    // The draft's cache keeps only the accepted rows: x0 .. x_a (x_drafted was never run).
    if (drafted > 0) d_valid = p + std::min(a + 1, drafted);
    const bool more = emit(x, drafted, v);
    if (drafted > 0) ++n_cycle;
    return more;
}

}  // namespace

GenerateResult draft_speculative_generate_ex(Model* target, Model* draft, const int32_t* prompt, int prompt_len,
                                             const GenerateConfig& c, const DraftSpeculativeConfig& sc,
                                             const GenerateOptions& options) {
    const auto t0 = Clock::now();
    const Model& tm = checked(target);
    std::vector<ExecOp> needs{ExecOp::DraftSpeculation};
    if (c.kv_cache != KVCacheType::F32) needs.push_back(ExecOp::Int8Cache);
    const std::unique_ptr<Executor> tex = run_executor(tm, needs);
    check_draft_run(tm, draft, prompt, prompt_len, c, sc, options);
    // The draft model on the same kind of back end as the target: one back end for the call.
    const std::unique_ptr<Executor> dex = run_executor(*draft, needs);
    if (dex->kind() != tex->kind())
        throw Error(ErrorCode::NotSupported, std::string("draft: the draft model runs on the ") + dex->name() +
                                                 " back end and the target on the " + tex->name() +
                                                 "; load both with the same backend");

    const int LT = resolve_loops(tm, c.loops);
    GenerateResult res = speculative_result(prompt, prompt_len, c.max_tokens, LT, sc.gamma + 1);
    GenerateStats& st = res.stats;
    DraftRun run(tm, *draft, c, sc, options, res, t0);
    if (c.max_tokens == 0) {
        st.total_ms = ms_since(t0);
        return res;
    }
    // Grammar: `dec.grammar` follows the emitted tokens and knows what it allows next.
    if (run.dec.grammar.dead()) {
        st.stop_reason = StopReason::GRAMMAR_DEAD_END;
        st.total_ms = ms_since(t0);
        return res;
    }

    run.prefill(*tex, *dex, prompt, prompt_len);
    st.prefill_ms = ms_since(t0);
    bool more = run.first_token();
    while (more) more = run.cycle();
    run.dec.out.finish(run.LT);
    return res;
}

GenerateResult draft_speculative_generate(Model* target, Model* draft, const int32_t* prompt, int prompt_len,
                                          const GenerateConfig& config, const DraftSpeculativeConfig& spec) {
    return draft_speculative_generate_ex(target, draft, prompt, prompt_len, config, spec);
}

}  // namespace tinyloop
