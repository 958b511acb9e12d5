// Deterministic beam search (GenerateConfig::beam_size >= 2), step for step Hugging Face's
// _beam_search: the processors see the log-softmax of each beam's logits (renormalised after them
// with renormalize_logits); the best 2 * beam_size continuations of all beams are taken; those of
// them that end (EOS, a stop sequence, max_tokens) and rank among the first beam_size join the
// finished hypotheses (the best beam_size kept, scored log_prob / len^length_penalty, len
// counting emitted tokens); the best beam_size that do not end go on. early_stopping decides when
// the search ends (HF's false / true / "never"). The best num_return_sequences finished
// hypotheses are returned. Sampling knobs (temperature, top-k, top-p, min-p, seed) are ignored.
// num_beam_groups >= 2 runs the group search of beam_groups.cpp instead, force_words the
// constrained search of beam_constrained.cpp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "decode/beam_search.h"

namespace tinyloop {

namespace beam {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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

}  // namespace

double rank(double logp, size_t len, float length_penalty) {
    return logp / std::pow(std::max<double>(1.0, static_cast<double>(len)), length_penalty);
}

std::vector<Cand> best_continuations(const Model& m, const LogitsPipeline& pipe, const GenerateConfig& c,
                                     const std::vector<int32_t>& prompt, const std::vector<Beam>& beams, int keep,
                                     const std::vector<float>* diversity, std::vector<std::vector<float>>* rows) {
    const int V = m.hp.vocab_size;
    std::vector<float> lp, z;
    std::vector<int32_t> idx(static_cast<size_t>(V));
    std::vector<Cand> cands;
    if (rows) rows->clear();
    for (int b = 0; b < static_cast<int>(beams.size()); ++b) {
        const Beam& bm = beams[static_cast<size_t>(b)];
        std::vector<int32_t> context = prompt;
        context.insert(context.end(), bm.tokens.begin(), bm.tokens.end());
        lp = bm.logits;
        mask_undecodable(lp.data(), V, m.tokenizer.n_ids());  // log-probabilities over the real ids
        log_normalize(lp);                                    // HF: processors see log-softmax scores
        pipe.process(lp.data(), context, bm.tokens, nullptr, z, diversity);  // no grammar with beams
        if (c.renormalize_logits) log_normalize(z);
        if (rows) rows->push_back(z);
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

void advance(const Model& m, std::vector<Beam>& beams, int prompt_len) {
    for (size_t i = 0; i < beams.size(); ++i) {
        Beam& nb = beams[i];
        bool shared = false;
        for (size_t j = i + 1; j < beams.size(); ++j) shared |= beams[j].seq == nb.seq;
        if (shared) nb.seq = nb.seq->fork();
        nb.seq->run(&nb.tokens.back(), 1, prompt_len + static_cast<int>(nb.tokens.size()) - 1, nullptr);
        nb.logits.resize(static_cast<size_t>(m.hp.vocab_size));
        nb.seq->last_logits(nb.logits.data());
    }
}

Search start_search(const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& c) {
    Search s{Clock::now(), resolve_loops(m, c.loops), prompt_result(prompt, prompt_len, c.max_tokens),
             StopPolicy::from(c)};
    s.res.stats.loops_used = s.loops;
    s.stops.max_time = 0.0;
    return s;
}

Beam prefill(const Executor& ex, const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& c,
             int loops) {
    Beam first;
    first.seq = ex.sequence({.loops = loops, .capacity = prompt_len + c.max_tokens, .window = c.cache_window,
                             .kv_cache = c.kv_cache});
    first.seq->run(prompt, prompt_len, 0, nullptr);
    first.logits.resize(static_cast<size_t>(m.hp.vocab_size));
    first.seq->last_logits(first.logits.data());
    return first;
}

void report(const Model& m, GenerateResult& res, const StopPolicy& stops, const GenerateConfig& c,
            const GenerateOptions& options, int loops, Clock::time_point t0, const std::vector<Hyp>& best) {
    // Each sequence like any decode, through the same emitter and stop order (after the search):
    // it ends at its last token (the search's EOS, stop sequence or max_tokens) or at a stop
    // string; the callbacks (the first sequence's only) can end it earlier.
    const size_t n = c.num_return_sequences > 1 ? std::min(best.size(), static_cast<size_t>(c.num_return_sequences)) : 1;
    const GenerateResult prompt_only = res;
    for (size_t i = 0; i < n; ++i) {
        GenerateResult scratch = prompt_only;
        GenerateResult& into = i == 0 ? res : scratch;
        const std::vector<int32_t> toks = i < best.size() ? best[i].tokens : std::vector<int32_t>{};
        StopPolicy sp = stops;
        sp.max_tokens = static_cast<int>(toks.size());
        const GenerateOptions none;
        const GenerateOptions& o = i == 0 ? options : none;
        TokenEmitter out(m, into, sp, o.on_token, o.observer, 0, t0);
        for (const int32_t tok : toks)
            if (!out.emit(tok, EmitInfo{.depth = loops})) break;
        out.finish(loops);
        if (c.num_return_sequences > 1)
            res.sequences.push_back({std::vector<int32_t>(into.tokens.begin() + into.prompt_len, into.tokens.end()),
                                     into.text, into.stats.stop_reason, i < best.size() ? best[i].score : 0.0});
    }
    res.stats.total_ms = ms_since(t0);
}

}  // namespace beam

namespace {

using namespace beam;

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

}  // namespace

GenerateResult decode_beam(const Executor& ex, const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& c,
                           const GenerateOptions& options) {
    if (c.num_beam_groups >= 2) return decode_group_beam(ex, m, prompt, prompt_len, c, options);
    if (!c.force_words.empty()) return decode_constrained_beam(ex, m, prompt, prompt_len, c, options);
    Search s = start_search(m, prompt, prompt_len, c);
    const auto t0 = s.t0;
    const int L = s.loops, B = c.beam_size;
    GenerateResult& res = s.res;
    const StopPolicy& stops = s.stops;
    if (c.max_tokens == 0) {
        report(m, res, stops, c, options, L, t0, {});
        return res;
    }

    std::vector<Beam> beams{prefill(ex, m, prompt, prompt_len, c, L)};
    res.stats.prefill_ms = ms_since(t0);

    std::vector<Hyp> finished;  // best first, at most B
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
            const bool ends = step + 1 == c.max_tokens || stops.token_stop(cd.tok, m.tokenizer, false, toks).has_value();
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
            nb.seq = parent.seq;  // forked in advance() if another child takes it too
            next.push_back(std::move(nb));
        }
        std::stable_sort(finished.begin(), finished.end(), [](const Hyp& x, const Hyp& y) { return x.score > y.score; });
        if (static_cast<int>(finished.size()) > B) finished.resize(static_cast<size_t>(B));
        beams = std::move(next);
        may_improve = may_improve && improvement_possible(c, finished, beams, step + 1);
        const bool full = static_cast<int>(finished.size()) == B;
        if (!may_improve || (full && c.early_stopping == EarlyStopping::WhenFull) || all_end) break;
        advance(m, beams, prompt_len);
    }
    if (finished.empty() && !beams.empty())  // every continuation was banned: the best live beam
        finished.push_back({beams.front().tokens, beams.front().logp, 0.0});
    report(m, res, stops, c, options, L, t0, finished);
    return res;
}

}  // namespace tinyloop
