// Deterministic beam search (GenerateConfig::beam_size >= 2). Hypotheses are ranked by
// log_prob / max(1, len)^length_penalty (the seed's rule); len counts emitted tokens.
// Sampling knobs (temperature, top-k, top-p, min-p, seed) are ignored; the logits processors
// that change scores (repetition/frequency/presence penalties, logit bias) still apply.
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

double rank(double logp, size_t len, float length_penalty) {
    return logp / std::pow(std::max<double>(1.0, static_cast<double>(len)), length_penalty);
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

    std::vector<Hyp> finished;
    const int32_t eos = m.tokenizer.eos_id();
    StopPolicy stops = StopPolicy::from(c);
    stops.max_time = 0.0;  // the search has no clock
    const LogitsPipeline pipe(m, c);
    std::vector<float> z(static_cast<size_t>(V));
    for (int step = 0; step < c.max_tokens && !beams.empty(); ++step) {
        struct Cand {
            double logp;
            int beam;
            int32_t tok;
        };
        std::vector<Cand> cands;
        for (int b = 0; b < static_cast<int>(beams.size()); ++b) {
            Beam& bm = beams[static_cast<size_t>(b)];
            std::vector<int32_t> context(prompt, prompt + prompt_len);
            context.insert(context.end(), bm.tokens.begin(), bm.tokens.end());
            pipe.process(bm.logits.data(), context, bm.tokens, nullptr, z);  // no grammar with beams
            float mx = -std::numeric_limits<float>::infinity();
            for (float x : z) mx = std::max(mx, x);
            double s = 0;
            for (float x : z) s += std::exp(static_cast<double>(x) - mx);
            const double lse = mx + std::log(s);
            std::vector<int32_t> idx(static_cast<size_t>(V));
            for (int i = 0; i < V; ++i) idx[i] = i;
            const int k = std::min(B, V);
            std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                              [&](int32_t x, int32_t y) { return z[x] > z[y] || (z[x] == z[y] && x < y); });
            for (int i = 0; i < k; ++i)
                if (z[idx[i]] > -std::numeric_limits<float>::infinity())
                    cands.push_back({bm.logp + (static_cast<double>(z[idx[i]]) - lse), b, idx[i]});
        }
        std::stable_sort(cands.begin(), cands.end(), [](const Cand& x, const Cand& y) { return x.logp > y.logp; });
        std::vector<Beam> next;
        for (const Cand& cd : cands) {
            if (static_cast<int>(next.size()) == B) break;
            const Beam& parent = beams[static_cast<size_t>(cd.beam)];
            std::vector<int32_t> toks = parent.tokens;
            toks.push_back(cd.tok);
            if (stops.token_stop(cd.tok, eos, false, toks)) {  // EOS or a stop sequence ends it
                finished.push_back({toks, cd.logp, rank(cd.logp, toks.size(), c.length_penalty)});
                continue;
            }
            Beam nb;
            nb.tokens = std::move(toks);
            nb.logp = cd.logp;
            nb.kv = parent.kv;  // copied below if another child already took it
            nb.logits.resize(static_cast<size_t>(V));
            next.push_back(std::move(nb));
        }
        // Advance every surviving beam by its new token; a cache shared by several children is
        // copied for all but the last one to take it.
        if (step + 1 < c.max_tokens) {
            for (size_t i = 0; i < next.size(); ++i) {
                Beam& nb = next[i];
                bool shared = false;
                for (size_t j = i + 1; j < next.size(); ++j) shared |= next[j].kv == nb.kv;
                if (shared) nb.kv = std::make_shared<KVCache>(*nb.kv);
                const int pos = prompt_len + static_cast<int>(nb.tokens.size()) - 1;
                ForwardArgs f1;
                f1.tokens = &nb.tokens.back();
                f1.n = 1;
                f1.pos0 = pos;
                f1.loops = L;
                f1.window = c.cache_window;
                forward(m, *nb.kv, ws, f1, h);
                compute_logits(m, h.data(), 1, nb.logits.data(), ws);
            }
        }
        beams = std::move(next);
        // Done when B hypotheses have finished and no live beam can still beat the worst of them
        // (a live beam's log-probability only falls; its rank is bounded by the current one when
        // length_penalty <= 0, and by its value at max_tokens otherwise).
        if (static_cast<int>(finished.size()) >= B && !beams.empty()) {
            std::sort(finished.begin(), finished.end(), [](const Hyp& x, const Hyp& y) { return x.score > y.score; });
            finished.resize(static_cast<size_t>(B));
            double best_live = -std::numeric_limits<double>::infinity();
            for (const Beam& bm : beams) {
                const size_t len = c.length_penalty > 0 ? static_cast<size_t>(c.max_tokens) : bm.tokens.size();
                best_live = std::max(best_live, rank(bm.logp, len, c.length_penalty));
            }
            if (best_live <= finished.back().score) beams.clear();
        }
    }
    for (const Beam& bm : beams) finished.push_back({bm.tokens, bm.logp, rank(bm.logp, bm.tokens.size(), c.length_penalty)});
    const Hyp* best = nullptr;
    for (const Hyp& hy : finished)
        if (!best || hy.score > best->score) best = &hy;

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
