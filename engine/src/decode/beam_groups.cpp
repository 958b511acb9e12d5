// Diverse beam search (num_beam_groups >= 2), step for step Hugging Face 4.x's
// _group_beam_search with its BeamSearchScorer (transformers 5 moved it to a Hub repository):
// beam_size / num_beam_groups beams per group, each group a beam search of its own over the same
// steps. Group g, in order, sees the log-softmax scores through the processors with
// diversity_penalty x (how many beams of groups 0..g-1 chose the id at this step) subtracted after
// the logit bias (HammingDiversityLogitsProcessor); it takes its best 2 x group_size
// continuations; an ending one (EOS, a stop sequence) of rank < group_size joins the group's
// finished hypotheses (the best group_size kept, scored log_prob / len^length_penalty); the best
// group_size others go on. A group is done when it holds group_size hypotheses and
// (early_stopping true) at once, (false) when its best continuation scored at the current length
// cannot beat its worst hypothesis, ("never") the same at max_tokens when length_penalty > 0; a
// done group stops (its beams count as EOS choices for the groups after it, as HF's padding
// does). The search ends when every group is done or at max_tokens, when each unfinished group's
// live beams join its hypotheses; the best of all groups' hypotheses are returned.
#include <algorithm>
#include <iterator>

#include "decode/beam_search.h"

namespace tinyloop {

namespace {

using namespace beam;

struct Group {
    std::vector<Beam> beams;
    std::vector<Hyp> hyps;  // best first, at most group_size
    bool done = false;
};

// HF's BeamHypotheses.add: keep the best `size`.
void add_hyp(std::vector<Hyp>& hyps, Hyp h, int size) {
    hyps.push_back(std::move(h));
    std::stable_sort(hyps.begin(), hyps.end(), [](const Hyp& x, const Hyp& y) { return x.score > y.score; });
    if (static_cast<int>(hyps.size()) > size) hyps.resize(static_cast<size_t>(size));
}

// HF's BeamHypotheses.is_done, with the group's best continuation `best_logp` at `emitted` tokens.
bool group_done(const GenerateConfig& c, const std::vector<Hyp>& hyps, int size, double best_logp, int emitted) {
    if (static_cast<int>(hyps.size()) < size) return false;
    if (c.early_stopping == EarlyStopping::WhenFull) return true;
    const bool at_max = c.early_stopping == EarlyStopping::Never && c.length_penalty > 0;
    return hyps.back().score >= rank(best_logp, static_cast<size_t>(at_max ? c.max_tokens : emitted), c.length_penalty);
}

// One step of one group: its continuations (with `diversity` subtracted) become hypotheses and
// the next beams; returns the ids its next beams took.
void step_group(const Model& m, const LogitsPipeline& pipe, const GenerateConfig& c, const StopPolicy& stops,
                const std::vector<int32_t>& prompt, Group& g, int size, int step, const std::vector<float>* diversity,
                std::vector<int32_t>& chosen) {
    const std::vector<Cand> cands = best_continuations(m, pipe, c, prompt, g.beams, 2 * size, diversity);
    std::vector<Beam> next;
    for (size_t i = 0; i < cands.size() && static_cast<int>(next.size()) < size; ++i) {
        const Cand& cd = cands[i];
        const Beam& parent = g.beams[static_cast<size_t>(cd.beam)];
        std::vector<int32_t> toks = parent.tokens;
        toks.push_back(cd.tok);
        if (stops.token_stop(cd.tok, m.tokenizer, false, toks).has_value()) {
            if (static_cast<int>(i) < size)
                add_hyp(g.hyps, {std::move(toks), cd.logp, rank(cd.logp, static_cast<size_t>(step + 1), c.length_penalty)}, size);
            continue;
        }
        chosen.push_back(cd.tok);
        next.push_back({std::move(toks), cd.logp, parent.seq, {}});
    }
    g.beams = std::move(next);
    g.done = g.beams.empty() || (!cands.empty() && group_done(c, g.hyps, size, cands.front().logp, step + 1));
}

}  // namespace

GenerateResult decode_group_beam(const Executor& ex, const Model& m, const int32_t* prompt, int prompt_len,
                                 const GenerateConfig& c, const GenerateOptions& options) {
    Search s = start_search(m, prompt, prompt_len, c);
    const auto t0 = s.t0;
    const int L = s.loops, G = c.num_beam_groups, size = c.beam_size / c.num_beam_groups, V = m.hp.vocab_size;
    GenerateResult& res = s.res;
    if (c.max_tokens == 0) {
        report(m, res, s.stops, c, options, L, t0, {});
        return res;
    }

    const Beam first = prefill(ex, m, prompt, prompt_len, c, L);
    res.stats.prefill_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::vector<Group> groups(static_cast<size_t>(G));
    for (Group& g : groups) g.beams = {first};  // every group starts from the prompt (HF: -1e9 on the copies)

    const LogitsPipeline pipe(m, c);
    const std::vector<int32_t> prompt_ids(prompt, prompt + prompt_len);
    const int32_t eos = m.tokenizer.eos_id();
    std::vector<float> diversity;
    for (int step = 0; step < c.max_tokens; ++step) {
        std::vector<int32_t> chosen;  // ids the earlier groups' beams took at this step
        for (Group& g : groups) {
            if (g.done) {  // HF pads a done group's beams with EOS, which the later groups count
                chosen.insert(chosen.end(), static_cast<size_t>(size), eos);
                continue;
            }
            const bool penalise = c.diversity_penalty > 0 && !chosen.empty();
            if (penalise) {
                diversity.assign(static_cast<size_t>(V), 0.0f);
                for (const int32_t t : chosen)
                    if (t >= 0 && t < V) diversity[static_cast<size_t>(t)] += c.diversity_penalty;
            }
            step_group(m, pipe, c, s.stops, prompt_ids, g, size, step, penalise ? &diversity : nullptr, chosen);
        }
        const bool all_done = std::all_of(groups.begin(), groups.end(), [](const Group& g) { return g.done; });
        if (all_done || step + 1 == c.max_tokens) break;
        // Groups share caches too (every group starts from the prompt's): advance all live beams
        // together, so that a cache another beam still needs is copied first.
        std::vector<Beam> live;
        for (Group& g : groups)
            if (!g.done) std::move(g.beams.begin(), g.beams.end(), std::back_inserter(live));
        advance(m, live, prompt_len);
        auto it = live.begin();
        for (Group& g : groups)
            if (!g.done)
                for (Beam& b : g.beams) b = std::move(*it++);
    }
    // HF's finalize: an unfinished group's live beams join its hypotheses; then the best of all.
    std::vector<Hyp> all;
    for (Group& g : groups) {
        if (!g.done)
            for (Beam& b : g.beams)
                add_hyp(g.hyps, {b.tokens, b.logp, rank(b.logp, b.tokens.size(), c.length_penalty)}, size);
        all.insert(all.end(), g.hyps.begin(), g.hyps.end());
    }
    // HF sorts ascending and pops the last: among equal scores the later group's comes first.
    std::stable_sort(all.begin(), all.end(), [](const Hyp& x, const Hyp& y) { return x.score < y.score; });
    std::reverse(all.begin(), all.end());
    report(m, res, s.stops, c, options, L, t0, all);
    return res;
}

}  // namespace tinyloop
