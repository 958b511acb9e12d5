// Tree self-speculation (greedy), grown best-first. One cycle, root x0 = the last emitted token
// at position p:
//   draft   draft_ahead steps; each runs one node through passes 1..D with a tree attention mask
//           (committed rows, then its ancestors, then itself) and adds its K_branches best
//           children (by the draft lens) to the tree as candidates. Step 1 runs the root; every
//           later step runs the candidate whose path the verifier most likely accepts: the
//           product along it of each token's estimated acceptance (AcceptanceEstimate, from the
//           draft's probability and rank, learned as the call goes), so the tree follows the
//           draft's first choice while that pays and branches where it does not.
//           K_branches = 1 is exactly chain speculation. A candidate EOS is not expanded.
//   verify  every run node resumes from its draft state (and, with input injection, its prelude
//           output) through passes D+1..V in one batch, same mask; the verifier's argmax at
//           each run node picks the child to follow;
//   accept  the longest path whose tokens the verifier agrees with, then the verifier's own
//           token where it stops agreeing. Accepted nodes' keys/values move from the scratch
//           rows to their real rows; an accepted candidate that never ran becomes the next root.
// Why best-first and not the full K^depth tree: a verified row costs a row's compute here (a
// CPU, a small model), so the full tree spends K + K^2 + .. + K^depth rows for about one more
// accepted token and loses to the chain (0.4-0.9x of it measured); best-first runs as many rows
// as the chain (draft_ahead), placed where acceptance is likeliest.
// Non-root nodes live in scratch cache rows after the sequence's capacity.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include "scoring/lens.h"
#include "forward/executor.h"
#include "decode/sampling.h"
#include "speculation/speculative.h"
#include "decode/stop.h"

namespace tinyloop {

namespace {

using Clock = std::chrono::steady_clock;

struct Node {
    int32_t token = 0;
    int parent = -1;
    int level = 0;
    int row = 0;                 // cache row
    std::vector<int> children;   // filled when the node runs
    int rank = 0;                // 0: the draft's first choice at its parent, 1: any other
    double draft_p = 1.0;        // the draft's probability of this token at its parent
    double value = 1.0;          // estimated probability that the verifier accepts the path to here
    int32_t verify = -1;         // the verifier's argmax at this node
};

// How often the verifier accepted a candidate, by its rank (first choice or not) and its draft
// probability (5 bins), learned within the call. A bin starts from two pseudo-observations at
// the draft's own probability; a looped model's shallow draft is usually under-confident (its
// first choice wins far more often than its probability says), so the counts soon take over.
class AcceptanceEstimate {
public:
    double operator()(int rank, double p) const {
        const int b = bin(p);
        return (hits_[rank][b] + kPrior * p) / (seen_[rank][b] + kPrior);
    }
    void observe(int rank, double p, bool accepted) {
        const int b = bin(p);
        seen_[rank][b] += 1.0;
        hits_[rank][b] += accepted ? 1.0 : 0.0;
    }

private:
    static constexpr double kPrior = 2.0;
    static int bin(double p) { return std::clamp(static_cast<int>(p * 5.0), 0, 4); }
    double hits_[2][5] = {}, seen_[2][5] = {};
};

// The rows of the given nodes for the executor (RowLayout): each at position p + its level, in
// its cache row, attending the committed rows and the root's row p, then its ancestors' rows and
// its own.
RowLayout tree_rows(const std::vector<Node>& nodes, const std::vector<int>& which, int p) {
    const int n = static_cast<int>(which.size());
    RowLayout lay;
    lay.extra_offsets.assign(1, 0);
    for (int t = 0; t < n; ++t) {
        const Node& nd = nodes[static_cast<size_t>(which[t])];
        lay.pos.push_back(p + nd.level);
        lay.cache_row.push_back(nd.row);
        lay.visible_end.push_back(p + 1);  // committed rows and the root's row p
        std::vector<int> chain;
        for (int x = which[t]; x > 0; x = nodes[static_cast<size_t>(x)].parent) chain.push_back(nodes[static_cast<size_t>(x)].row);
        lay.extra_rows.insert(lay.extra_rows.end(), chain.rbegin(), chain.rend());
        lay.extra_offsets.push_back(static_cast<int>(lay.extra_rows.size()));
    }
    return lay;
}

// The k best ids of one row of draft logits (ties: the lower id first, as argmax; a NaN ranks
// last) and their probabilities under the draft's softmax over the decodable ids.
void top_children(const Model& m, const float* logits, int k, std::vector<int32_t>& out, std::vector<double>& prob) {
    const int n = std::min(m.hp.vocab_size, m.tokenizer.n_ids());
    auto key = [&](int32_t i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
    std::vector<int32_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    k = std::min(k, n);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
    out.assign(idx.begin(), idx.begin() + k);
    const double top = key(out[0]);
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(key(i)) - top);
    prob.resize(out.size());
    for (size_t j = 0; j < out.size(); ++j)
        prob[j] = std::isfinite(top) && sum > 0 ? std::exp(static_cast<double>(key(out[j])) - top) / sum : 0.0;
}

// ForcedDraft on one run node's candidates at position `pos` (kids: the draft's K + 1 best): the
// reference token is the first candidate when its coin says so and no candidate otherwise, so
// the verifier's agreement at this node happens with the hook's rate.
void force_children(DraftForcer& forcer, int pos, int K, std::vector<int32_t>& kids, std::vector<double>& prob) {
    const int32_t ref = forcer.reference_at(pos);
    if (ref < 0) {
        if (static_cast<int>(kids.size()) > K) {
            kids.resize(static_cast<size_t>(K));
            prob.resize(static_cast<size_t>(K));
        }
        return;
    }
    const bool take = forcer.propose_reference(pos);
    std::vector<int32_t> k2;
    std::vector<double> p2;
    if (take) {
        k2.push_back(ref);
        p2.push_back(prob.empty() ? 1.0 : prob[0]);
    }
    for (size_t j = 0; j < kids.size() && static_cast<int>(k2.size()) < K; ++j) {
        if (kids[j] == ref) continue;
        k2.push_back(kids[j]);
        p2.push_back(prob[j]);
    }
    if (k2.empty()) {  // a one-id vocabulary's only candidate was the reference
        k2.push_back(forcer.other_than(ref, ref));
        p2.push_back(0.0);
    }
    kids = std::move(k2);
    prob = std::move(p2);
}

}  // namespace

GenerateResult generate_tree_speculative_ex(Model* model, const int32_t* prompt, int prompt_len,
                                            const TreeSpeculativeConfig& c, const GenerateOptions& options) {
    const auto t0 = Clock::now();
    const Model& m = checked(model);
    const std::unique_ptr<Executor> ex = run_executor(m, {ExecOp::TreeSpeculation});
    validate_spec_common(m, prompt_len, c.max_tokens, c.draft_loops, c.verify_loops, 1, c.temperature);
    if (c.draft_ahead < 1 || c.draft_ahead > 8)
        throw Error(ErrorCode::InvalidArgument, "draft_ahead: " + std::to_string(c.draft_ahead) + " is outside [1, 8] (tree: nodes run per cycle)");
    if (c.K_branches < 1 || c.K_branches > 8)
        throw Error(ErrorCode::InvalidArgument, "K_branches: " + std::to_string(c.K_branches) + " is outside [1, 8]");
    const int tree_nodes = 1 + c.draft_ahead * c.K_branches;  // the root and every run node's candidates
    if (!is_greedy(c.temperature))
        throw Error(ErrorCode::NotSupported, "temperature: tree speculation is greedy only; use generate_speculative for "
                                             "lossless sampling");
    check_prompt_ids(m, prompt, prompt_len);

    DraftForcer forcer(m, options.forced_draft, prompt_len, true);

    const HParams& hp = m.hp;
    const int V = hp.vocab_size, d = hp.d_model;
    const int D = c.draft_loops, L = c.verify_loops, depth = c.draft_ahead, K = c.K_branches;
    GenerateResult res = speculative_result(prompt, prompt_len, c.max_tokens, L, depth + 1);
    GenerateStats& st = res.stats;
    if (c.max_tokens == 0) {
        st.total_ms = ms_since(t0);
        return res;
    }

    const int capacity = prompt_len + c.max_tokens + 1;
    // Non-root nodes run in scratch rows after the sequence's own positions.
    const std::unique_ptr<ExecSequence> seq = ex->sequence({.loops = L, .capacity = capacity + tree_nodes});
    std::vector<float> logits(static_cast<size_t>(V));
    seq->run(prompt, prompt_len, 0, nullptr);
    seq->last_logits(logits.data());
    st.prefill_ms = ms_since(t0);

    TokenEmitter out(m, res, StopPolicy{c.max_tokens, c.ignore_eos, {}, {}, 0.0}, options.on_token,
                     options.observer, options.lens ? options.lens_top_k : 0, t0);
    const TokenChoice first = greedy_choice(m, logits.data());
    bool done = !out.emit(first.token, EmitInfo{.prob = first.prob, .depth = L, .from_verifier = true});
    std::vector<float> all_logits;
    std::vector<int32_t> kids;
    std::vector<double> kid_p;
    AcceptanceEstimate estimate;
    int cycle = 0;
    while (!done) {
        const int p = static_cast<int>(res.tokens.size()) - 1;
        // Never run more nodes than the tokens still allowed: a path through s run nodes emits
        // at most s tokens.
        const int steps = std::min(depth, c.max_tokens - st.tokens_emitted);
        std::vector<Node> nodes(1);
        nodes[0].token = res.tokens.back();
        nodes[0].row = p;
        std::vector<float> hd;          // draft states of the run nodes, in run order
        std::vector<float> ed;          // input injection: their prelude outputs, in the same order
        std::vector<float> one_h(static_cast<size_t>(d)), one_e(injects_input(hp) ? static_cast<size_t>(d) : 0);
        std::vector<int> runnable;      // the run nodes, in run order
        std::vector<int> frontier;      // candidates not run yet

        const auto td = Clock::now();
        for (int step = 0, at = 0; step < steps; ++step) {
            if (step > 0) {
                // The candidate whose path the verifier most likely accepts (ties: the earlier one).
                auto best = frontier.end();
                for (auto it = frontier.begin(); it != frontier.end(); ++it)
                    if (best == frontier.end() || nodes[static_cast<size_t>(*it)].value > nodes[static_cast<size_t>(*best)].value)
                        best = it;
                if (best == frontier.end()) break;  // nothing left worth expanding (only EOS)
                at = *best;
                frontier.erase(best);
            }
            const int32_t tok = nodes[static_cast<size_t>(at)].token;
            const RowLayout lay = tree_rows(nodes, {at}, p);
            seq->run_passes({.tokens = &tok, .n = 1, .first = 1, .last = D, .out_h = one_h.data(),
                             .out_e = one_e.empty() ? nullptr : one_e.data(), .layout = &lay});
            ed.insert(ed.end(), one_e.begin(), one_e.end());
            seq->logits(0, 1, logits.data());
            hd.insert(hd.end(), one_h.begin(), one_h.end());
            runnable.push_back(at);
            top_children(m, logits.data(), forcer.active() ? K + 1 : K, kids, kid_p);
            if (forcer.active()) force_children(forcer, p + nodes[static_cast<size_t>(at)].level + 1, K, kids, kid_p);
            for (size_t j = 0; j < kids.size(); ++j) {
                Node ch;
                ch.token = kids[j];
                ch.parent = at;
                ch.level = nodes[static_cast<size_t>(at)].level + 1;
                ch.rank = j == 0 ? 0 : 1;
                ch.draft_p = kid_p[j];
                ch.value = nodes[static_cast<size_t>(at)].value * estimate(ch.rank, ch.draft_p);
                ch.row = capacity + static_cast<int>(nodes.size()) - 1;
                nodes[static_cast<size_t>(at)].children.push_back(static_cast<int>(nodes.size()));
                if (!m.tokenizer.is_stop(ch.token) || c.ignore_eos) frontier.push_back(static_cast<int>(nodes.size()));
                nodes.push_back(ch);
            }
        }
        st.draft_ms += ms_since(td);

        const auto tv = Clock::now();
        const RowLayout lay = tree_rows(nodes, runnable, p);
        const int n_run = static_cast<int>(runnable.size());
        seq->run_passes({.n = n_run, .first = D + 1, .last = L, .h_in = hd.data(), .e_in = ed.data(), .layout = &lay});
        all_logits.resize(runnable.size() * static_cast<size_t>(V));
        seq->logits(0, n_run, all_logits.data());
        for (size_t i = 0; i < runnable.size(); ++i) {
            Node& nd = nodes[static_cast<size_t>(runnable[i])];
            nd.verify = argmax(all_logits.data() + i * V, std::min(V, m.tokenizer.n_ids()));
            for (int ch : nd.children) {
                const Node& cn = nodes[static_cast<size_t>(ch)];
                estimate.observe(cn.rank, cn.draft_p, cn.token == nd.verify);
            }
        }
        st.verify_ms += ms_since(tv);

        // Walk the tree.
        std::vector<int> path;
        int at = 0;
        int32_t correction = -1;
        while (true) {
            const Node& nd = nodes[static_cast<size_t>(at)];
            if (nd.children.empty()) break;  // a leaf: fully accepted
            int next = -1;
            for (int ch : nd.children)
                if (nodes[static_cast<size_t>(ch)].token == nd.verify) next = ch;
            if (next < 0) {
                correction = nd.verify;
                break;
            }
            path.push_back(next);
            at = next;
        }
        const int a = static_cast<int>(path.size());
        count_cycle(st, static_cast<int>(nodes.size()) - 1, a + (correction >= 0 ? 1 : 0), a);

        // Accepted nodes that ran move to their real rows (an accepted candidate that never ran
        // ends the path and is the next root).
        for (int i = 0; i < a; ++i) {
            const Node& nd = nodes[static_cast<size_t>(path[i])];
            if (nd.children.empty()) break;
            seq->copy_position(nd.row, p + nd.level);
        }
        std::vector<int32_t> path_tokens;
        for (int x : path) path_tokens.push_back(nodes[static_cast<size_t>(x)].token);
        if (correction >= 0) path_tokens.push_back(correction);
        EmitInfo info{.depth = L, .cycle = cycle, .drafted = &path_tokens, .accepted = a};
        for (int i = 0; i < a && !done; ++i) done = !out.emit(path_tokens[i], info);
        info.from_verifier = true;
        if (!done && correction >= 0) done = !out.emit(correction, info);
        ++cycle;
    }
    out.finish(L);
    return res;
}

}  // namespace tinyloop
