// Deterministic beam search (GenerateConfig::beam_size >= 2), step for step Hugging Face's
// _beam_search: the processors see the log-softmax of each beam's logits (renormalised after them
// with renormalize_logits); the best 2 * beam_size continuations of all beams are taken; those of
// them that end (EOS, a stop sequence, max_tokens) and rank among the first beam_size join the
// finished hypotheses (the best beam_size kept, scored log_prob / len^length_penalty, len
// counting emitted tokens); the best beam_size that do not end go on. early_stopping decides when
// the search ends (HF's false / true / "never"). Sampling knobs (temperature, top-k, top-p, min-p,
// seed) are ignored.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "decode/decode.h"
#include "decode/emit.h"

namespace tinyloop {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Beam {
    std::vector<int32_t> tokens;  // emitted so far
    double logp = 0;
    std::shared_ptr<KVCache> kv;  // shared until it has to diverge
    std::vector<float> logits;    // next-token logits
};

struct Hyp {
    std::vector<int32_t> tokens;
    double logp = 0;
    double score = 0;
};

struct Cand {
    double logp;
    int beam;
    int32_t tok;
};

double rank(double logp, size_t len, float length_penalty) {
    return logp / std::pow(std::max<double>(1.0, static_cast<double>(len)), length_penalty);
}

// x -= logsumexp(x), in place (a row that is all -inf stays so).
void log_normalize(std::vector<float>& x) {
    float mx = kNegInf;
    for (float v : x) mx = std::max(mx, v);
    if (mx == kNegInf) return;
    double s = 0;
    for (float v : x) s += std::exp(static_cast<double>(v) - mx);
    const float lse = mx + static_cast<float>(std::log(s));
    for (float& v : x) v -= lse;
}

// The best `keep` continuations of every beam (HF's top-k over beams x vocabulary), best first;
// ties go to the lower beam, then the lower id.
std::vector<Cand> best_continuations(const Model& m, const LogitsPipeline& pipe, const GenerateConfig& c,
                                     const std::vector<int32_t>& prompt, const std::vector<Beam>& beams, int keep) {
    const int V = m.hp.vocab_size;
    std::vector<float> lp, z;
    std::vector<int32_t> idx(static_cast<size_t>(V));
    std::vector<Cand> cands;
    for (int b = 0; b < static_cast<int>(beams.size()); ++b) {
        const Beam& bm = beams[static_cast<size_t>(b)];
        std::vector<int32_t> context = prompt;
        context.insert(context.end(), bm.tokens.begin(), bm.tokens.end());
        lp = bm.logits;
        mask_undecodable(lp.data(), V, m.tokenizer.n_ids());  // log-probabilities over the real ids
        log_normalize(lp);                                    // HF: processors see log-softmax scores
        pipe.process(lp.data(), context, bm.tokens, nullptr, z);  // no grammar with beams
        if (c.renormalize_logits) log_normalize(z);
        for (int i = 0; i < V; ++i) idx[static_cast<size_t>(i)] = i;
        const int k = std::min(keep, V);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                          [&](int32_t x, int32_t y) { return z[x] > z[y] || (z[x] == z[y] && x < y); });
        for (int i = 0; i < k; ++i)
            if (z[idx[i]] > kNegInf) cands.push_back({bm.logp + static_cast<double>(z[idx[i]]), b, idx[i]});
    }
    std::stable_sort(cands.begin(), cands.end(), [](const Cand& x, const Cand& y) { return x.logp > y.logp; });
    if (static_cast<int>(cands.size()) > keep) cands.resize(static_cast<size_t>(keep));
    return cands;
}

// Whether a live beam may still beat the worst of beam_size finished hypotheses (HF's
// _check_early_stop_heuristic): the best live beam scored at its current length, or at
// max_tokens under early_stopping "never" with a positive length_penalty.
bool improvement_possible(const GenerateConfig& c, const std::vector<Hyp>& finished, const std::vector<Beam>& beams,
                          int emitted) {
    if (static_cast<int>(finished.size()) < c.beam_size) return true;
    if (beams.empty()) return false;
    const bool at_max = c.early_stopping == EarlyStopping::Never && c.length_penalty > 0;
    const double best_live = rank(beams.front().logp, static_cast<size_t>(at_max ? c.max_tokens : emitted), c.length_penalty);
    return best_live > finished.back().score;
}

// Advances every beam by its new token; a cache shared by several children is copied for all
// but the last one to take it.
void advance(const Model& m, std::vector<Beam>& beams, int prompt_len, int loops, int window, Workspace& ws,
             std::vector<float>& h) {
    for (size_t i = 0; i < beams.size(); ++i) {
        Beam& nb = beams[i];
        bool shared = false;
        for (size_t j = i + 1; j < beams.size(); ++j) shared |= beams[j].kv == nb.kv;
        if (shared) nb.kv = std::make_shared<KVCache>(*nb.kv);
        ForwardArgs f1;
        f1.tokens = &nb.tokens.back();
        f1.n = 1;
        f1.pos0 = prompt_len + static_cast<int>(nb.tokens.size()) - 1;
        f1.loops = loops;
        f1.window = window;
        forward(m, *nb.kv, ws, f1, h);
        nb.logits.resize(static_cast<size_t>(m.hp.vocab_size));
        compute_logits(m, h.data(), 1, nb.logits.data(), ws);
    }
}

}  // namespace

GenerateResult decode_beam(const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& c,
                           const GenerateOptions& options) {
    const auto t0 = Clock::now();
    const HParams& hp = m.hp;
    const int V = hp.vocab_size, d = hp.d_model;
    const int L = c.loops > 0 ? c.loops : hp.default_loops;
    const int B = c.beam_size;
    GenerateResult res = prompt_result(prompt, prompt_len, c.max_tokens);
    GenerateStats& st = res.stats;
    st.loops_used = L;
    if (c.max_tokens == 0) {
        st.total_ms = ms_since(t0);
        return res;
    }

    Workspace ws;
    std::vector<float> h;
    auto first = std::make_shared<KVCache>();
    first->allocate(hp, exec_layers(hp, L), prompt_len + c.max_tokens, c.kv_cache);
    ForwardArgs fa;
    fa.tokens = prompt;
    fa.n = prompt_len;
    fa.loops = L;
    fa.window = c.cache_window;
    forward(m, *first, ws, fa, h);
    std::vector<Beam> beams(1);
    beams[0].kv = first;
    beams[0].logits.resize(static_cast<size_t>(V));
    compute_logits(m, h.data() + static_cast<size_t>(prompt_len - 1) * d, 1, beams[0].logits.data(), ws);
    st.prefill_ms = ms_since(t0);

    std::vector<Hyp> finished;  // best first, at most B
    const int32_t eos = m.tokenizer.eos_id();
    StopPolicy stops = StopPolicy::from(c);
    stops.max_time = 0.0;  // the search has no clock
    const LogitsPipeline pipe(m, c);
    const std::vector<int32_t> prompt_ids(prompt, prompt + prompt_len);
    bool may_improve = true;
    for (int step = 0; step < c.max_tokens && !beams.empty(); ++step) {
        const std::vector<Cand> cands = best_continuations(m, pipe, c, prompt_ids, beams, 2 * B);
        std::vector<Beam> next;
        bool all_end = true;
        for (size_t i = 0; i < cands.size(); ++i) {
            const Cand& cd = cands[i];
            const Beam& parent = beams[static_cast<size_t>(cd.beam)];
            std::vector<int32_t> toks = parent.tokens;
            toks.push_back(cd.tok);
            const bool ends = step + 1 == c.max_tokens || stops.token_stop(cd.tok, eos, false, toks).has_value();
            all_end &= ends;
            if (ends) {  // only the first B candidates may join the finished hypotheses
                const bool full = static_cast<int>(finished.size()) == B && c.early_stopping == EarlyStopping::WhenFull;
                if (static_cast<int>(i) < B && may_improve && !full)
                    finished.push_back({std::move(toks), cd.logp, rank(cd.logp, static_cast<size_t>(step + 1), c.length_penalty)});
                continue;
            }
            if (static_cast<int>(next.size()) == B) continue;
            Beam nb;
            nb.tokens = std::move(toks);
            nb.logp = cd.logp;
            nb.kv = parent.kv;  // copied in advance() if another child takes it too
            next.push_back(std::move(nb));
        }
        std::stable_sort(finished.begin(), finished.end(), [](const Hyp& x, const Hyp& y) { return x.score > y.score; });
        if (static_cast<int>(finished.size()) > B) finished.resize(static_cast<size_t>(B));
        beams = std::move(next);
        may_improve = may_improve && improvement_possible(c, finished, beams, step + 1);
        const bool full = static_cast<int>(finished.size()) == B;
        if (!may_improve || (full && c.early_stopping == EarlyStopping::WhenFull) || all_end) break;
        advance(m, beams, prompt_len, L, c.cache_window, ws, h);
    }
    if (finished.empty() && !beams.empty())  // every continuation was banned: the best live beam
        finished.push_back({beams.front().tokens, beams.front().logp, 0.0});
    const Hyp* best = finished.empty() ? nullptr : &finished.front();

    // Report the winner like any decode, through the same emitter and stop order (after the
    // search): it ends at its last token (the search's EOS, stop sequence or max_tokens) or at a
    // stop string; the callbacks can end it earlier.
    std::vector<int32_t> winner = best ? best->tokens : std::vector<int32_t>{};
    stops.max_tokens = static_cast<int>(winner.size());
    TokenEmitter out(m, res, stops, options.on_token, options.observer, 0, t0);
    for (const int32_t tok : winner)
        if (!out.emit(tok, EmitInfo{.depth = L})) break;
    out.finish(L);
    return res;
}

}  // namespace tinyloop
