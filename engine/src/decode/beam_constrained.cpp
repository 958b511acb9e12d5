// Constrained beam search (GenerateConfig::force_words, Hugging Face's force_words_ids), step for
// step HF 4.x's _constrained_beam_search with its ConstrainedBeamSearchScorer (transformers 5
// moved it to a Hub repository). Each step: the processors see the log-softmax scores as in
// plain beam search and the best 2 x beam_size continuations of all beams are taken; an ending
// one (EOS, a stop sequence) of rank < beam_size joins the finished hypotheses only when it
// fulfils every entry of force_words (prompt included, as HF tracks constraints over the whole
// sequence); the best beam_size others are the step's candidates. To them come, for every beam
// that has not fulfilled them all, its continuations by each id that makes progress (a sequence
// already among the candidates is not added twice). Each candidate's bank is how far it is
// through force_words; the candidates are ranked by bank x 100 + score (in float32, as HF),
// then taken round-robin across banks (the best of each bank, then the second best of each, ...)
// and the first beam_size go on. The search ends when beam_size hypotheses are finished and
// early_stopping says so (HF's is_done with the best continuation's score) or at max_tokens,
// when the live beams that fulfil force_words join the hypotheses (and, if fewer of them than
// num_return_sequences, all the others too). Sequences are scored log_prob / len^length_penalty.
//
// HF quirks kept so that the outputs agree token for token: a broken entry goes back to the end
// of the pending ones without trying the breaking token again, and the progress of an entry of
// several alternatives is shared (one Python list) among the continuations of one beam within a
// step, so the later ones start from what the earlier ones matched.
#include <algorithm>
#include <numeric>

#include "decode/beam_constraints.h"
#include "decode/beam_search.h"

namespace tinyloop {

namespace {

using namespace beam;

std::vector<int32_t> extended(const std::vector<int32_t>& toks, int32_t t) {
    std::vector<int32_t> out = toks;
    out.push_back(t);
    return out;
}

// HF's BeamHypotheses: at most `size` kept, in the order they came; a full list takes a better
// one and drops its worst (among equal scores the earliest).
struct Hypotheses {
    size_t size;
    std::vector<Hyp> list;
    double worst = 1e9;

    void add(std::vector<int32_t> toks, double logp, size_t len, float length_penalty) {
        const double score = rank(logp, len, length_penalty);
        if (list.size() >= size && !(score > worst)) return;
        list.push_back({std::move(toks), logp, score});
        if (list.size() <= size) {
            worst = std::min(worst, score);
            return;
        }
        const auto lowest = std::min_element(list.begin(), list.end(), [](const Hyp& x, const Hyp& y) { return x.score < y.score; });
        list.erase(lowest);
        worst = std::min_element(list.begin(), list.end(), [](const Hyp& x, const Hyp& y) { return x.score < y.score; })->score;
    }

    // HF's is_done, with the step's best continuation `best_logp` at `emitted` tokens.
    bool done(const GenerateConfig& c, double best_logp, int emitted) const {
        if (list.size() < size) return false;
        if (c.early_stopping == EarlyStopping::WhenFull) return true;
        const bool at_max = c.early_stopping == EarlyStopping::Never && c.length_penalty > 0;
        return worst >= rank(best_logp, static_cast<size_t>(at_max ? c.max_tokens : emitted), c.length_penalty);
    }

    // Best first (HF sorts ascending and pops the last: among equal scores the later comes first).
    std::vector<Hyp> best_first() const {
        std::vector<Hyp> out = list;
        std::stable_sort(out.begin(), out.end(), [](const Hyp& x, const Hyp& y) { return x.score < y.score; });
        std::reverse(out.begin(), out.end());
        return out;
    }
};

bool fulfils(const ForcedWords& words, const std::vector<int32_t>& prompt, const std::vector<int32_t>& toks) {
    ConstraintState s(words);
    s.reset(prompt, toks);
    return s.completed();
}

// HF's step_sentence_constraint: `top` (the best non-ending continuations) plus every beam's
// progress-making continuations, ranked by bank and score and taken round-robin across banks.
std::vector<Cand> by_banks(const ForcedWords& words, const std::vector<int32_t>& prompt, const std::vector<Beam>& beams,
                           const std::vector<std::vector<float>>& rows, std::vector<Cand> top, size_t keep) {
    std::vector<std::vector<int32_t>> seqs;
    std::vector<ConstraintState> states;
    for (const Cand& cd : top) {
        seqs.push_back(extended(beams[static_cast<size_t>(cd.beam)].tokens, cd.tok));
        states.emplace_back(words);
        states.back().reset(prompt, seqs.back());
    }
    const size_t n_top = top.size();
    for (size_t b = 0; b < beams.size(); ++b) {
        ConstraintState at(words);
        at.reset(prompt, beams[b].tokens);
        if (at.completed()) continue;
        std::vector<int32_t> shared = at.in_progress() ? at.in_progress()->seq : std::vector<int32_t>{};
        std::vector<size_t> sharing;  // states whose in-progress entry is HF's one shared list
        for (const int32_t t : at.advance()) {
            ConstraintState next = at;
            const bool had = next.in_progress() != nullptr;
            if (had) next.in_progress()->seq = shared;
            const bool stepped = next.add(t);
            if (had && stepped) shared.push_back(t);
            std::vector<int32_t> seq = extended(beams[b].tokens, t);
            if (std::find(seqs.begin(), seqs.end(), seq) != seqs.end()) continue;
            if (had && stepped && next.in_progress()) sharing.push_back(states.size());
            seqs.push_back(std::move(seq));
            states.push_back(std::move(next));
            top.push_back({beams[b].logp + static_cast<double>(rows[b][static_cast<size_t>(t)]), static_cast<int>(b), t});
        }
        for (const size_t i : sharing) states[i].in_progress()->seq = shared;
    }
    if (top.size() == n_top) return top;

    std::vector<int> banks;
    std::vector<float> zipped;  // HF: all_banks * 100 + all_scores, in float32
    for (size_t i = 0; i < top.size(); ++i) {
        banks.push_back(states[i].bank());
        zipped.push_back(static_cast<float>(banks.back() * 100) + static_cast<float>(top[i].logp));
    }
    std::vector<size_t> order(top.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return zipped[x] > zipped[y]; });
    std::vector<int> increments;  // the rank of each within its run of equal banks
    int counter = -1, run_bank = banks[order[0]];
    for (const size_t i : order) {
        counter = banks[i] == run_bank ? counter + 1 : 0;
        run_bank = banks[i];
        increments.push_back(counter);
    }
    std::vector<size_t> by_increment(order.size());
    std::iota(by_increment.begin(), by_increment.end(), 0);
    std::stable_sort(by_increment.begin(), by_increment.end(),
                     [&](size_t x, size_t y) { return increments[x] < increments[y]; });
    std::vector<Cand> out;
    for (size_t k = 0; k < by_increment.size() && out.size() < keep; ++k) out.push_back(top[order[by_increment[k]]]);
    return out;
}

}  // namespace

GenerateResult decode_constrained_beam(const Executor& ex, const Model& m, const int32_t* prompt, int prompt_len,
                                       const GenerateConfig& c, const GenerateOptions& options) {
    Search s = start_search(m, prompt, prompt_len, c);
    const int L = s.loops, B = c.beam_size;
    std::vector<Beam> beams;  // none with max_tokens 0: the result is the prompt alone
    if (c.max_tokens > 0) {
        beams.push_back(prefill(ex, m, prompt, prompt_len, c, L));
        s.res.stats.prefill_ms = std::chrono::duration<double, std::milli>(Clock::now() - s.t0).count();
    }

    const ForcedWords& words = c.force_words;
    const LogitsPipeline pipe(m, c);
    const std::vector<int32_t> prompt_ids(prompt, prompt + prompt_len);
    Hypotheses hyps{static_cast<size_t>(B), {}};
    std::vector<std::vector<float>> rows;
    bool done = false;
    for (int step = 0; step < c.max_tokens && !beams.empty(); ++step) {
        const std::vector<Cand> cands = best_continuations(m, pipe, c, prompt_ids, beams, 2 * B, nullptr, &rows);
        std::vector<Cand> top;
        for (size_t i = 0; i < cands.size() && static_cast<int>(top.size()) < B; ++i) {
            const Cand& cd = cands[i];
            std::vector<int32_t> toks = extended(beams[static_cast<size_t>(cd.beam)].tokens, cd.tok);
            if (!s.stops.token_stop(cd.tok, m.tokenizer, false, toks).has_value()) {
                top.push_back(cd);
            } else if (static_cast<int>(i) < B && fulfils(words, prompt_ids, toks)) {
                hyps.add(std::move(toks), cd.logp, static_cast<size_t>(step + 1), c.length_penalty);
            }
        }
        std::vector<Beam> next;
        for (const Cand& cd : by_banks(words, prompt_ids, beams, rows, std::move(top), static_cast<size_t>(B))) {
            const Beam& parent = beams[static_cast<size_t>(cd.beam)];
            next.push_back({extended(parent.tokens, cd.tok), cd.logp, parent.seq, {}});
        }
        beams = std::move(next);
        done = !cands.empty() && hyps.done(c, cands.front().logp, step + 1);
        if (done || step + 1 == c.max_tokens) break;
        advance(m, beams, prompt_len);
    }
    if (!done) {  // HF's finalize: the live beams that fulfil force_words, then (if too few) the others
        std::vector<bool> taken(beams.size(), false);
        int n = 0;
        for (size_t b = 0; b < beams.size(); ++b)
            if (fulfils(words, prompt_ids, beams[b].tokens)) {
                hyps.add(beams[b].tokens, beams[b].logp, beams[b].tokens.size(), c.length_penalty);
                taken[b] = true;
                ++n;
            }
        if (n < c.num_return_sequences)
            for (size_t b = 0; b < beams.size(); ++b)
                if (!taken[b]) hyps.add(beams[b].tokens, beams[b].logp, beams[b].tokens.size(), c.length_penalty);
    }
    report(m, s.res, s.stops, c, options, L, s.t0, hyps.best_first());
    return s.res;
}

}  // namespace tinyloop
