// Tree self-speculation (greedy). One cycle, root x0 = the last emitted token at position p:
//   draft   level by level: every node of a level runs through passes 1..D in one batch with a
//           tree attention mask (committed rows, then its ancestors, then itself); its draft
//           lens proposes its K_branches best children; leaves (level draft_ahead) are not run;
//   verify  every non-leaf node resumes from its draft state (and, with input injection, its
//           prelude output) through passes D+1..V in one
//           batch, same mask; the verifier's argmax at each node picks the child to follow;
//   accept  the longest path whose tokens the verifier agrees with, then the verifier's own
//           token where it stops agreeing. Accepted nodes' keys/values move from the scratch
//           rows to their real rows; a fully accepted leaf becomes the next root.
// Non-root nodes live in scratch cache rows after the sequence's capacity.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "scoring/lens.h"
#include "decode/sampling.h"
#include "speculation/speculative.h"
#include "decode/stop.h"

namespace tinyloop {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct Node {
    int32_t token = 0;
    int parent = -1;
    int level = 0;
    int row = 0;                 // cache row
    std::vector<int> children;
    int32_t verify = -1;         // the verifier's argmax at this node
};

// Runs the given nodes through passes start_pass..loops (prelude too when start_pass == 1).
// `input` holds the nodes' prelude outputs for input injection (FORMAT.md §1a): filled by a
// call that runs the prelude, read by one that resumes (untouched without injection).
void tree_forward(const Model& m, KVCache& kv, Workspace& ws, const std::vector<Node>& nodes,
                  const std::vector<int>& which, int p, int start_pass, int loops, std::vector<float>& h,
                  std::vector<float>& input) {
    const HParams& hp = m.hp;
    const int n = static_cast<int>(which.size()), d = hp.d_model;
    ws.reserve(hp, n);
    ws.extra_rows.clear();
    ws.extra_offsets.assign(1, 0);
    for (int t = 0; t < n; ++t) {
        const Node& nd = nodes[static_cast<size_t>(which[t])];
        ws.pos[t] = p + nd.level;
        ws.row[t] = nd.row;
        ws.kv_begin[t] = 0;
        ws.kv_end[t] = p + 1;  // committed rows and the root's row p
        std::vector<int> chain;
        for (int x = which[t]; x > 0; x = nodes[static_cast<size_t>(x)].parent) chain.push_back(nodes[static_cast<size_t>(x)].row);
        if (which[t] == 0) ws.kv_end[t] = p + 1;  // the root: its own row closes the range
        ws.extra_rows.insert(ws.extra_rows.end(), chain.rbegin(), chain.rend());
        ws.extra_offsets.push_back(static_cast<int>(ws.extra_rows.size()));
    }
    int layer;
    if (start_pass <= 1) {
        h.resize(static_cast<size_t>(n) * d);
        for (int t = 0; t < n; ++t)
            kern::dequant_row(m.embed, nodes[static_cast<size_t>(which[t])].token, h.data() + static_cast<size_t>(t) * d);
        layer = 0;
        for (const LayerWeights& w : m.pre) run_block(m, w, kv, layer++, ws, h.data(), n);
        if (injects_input(hp)) input.assign(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(n) * d);
    } else {
        layer = exec_layers(hp, start_pass - 1);
    }
    for (int pass = std::max(1, start_pass); pass <= loops; ++pass) {
        inject_input(m, pass, h.data(), input.data(), n);
        for (const LayerWeights& w : m.loop) run_block(m, w, kv, layer++, ws, h.data(), n);
    }
    ws.extra_offsets.clear();
}

void top_children(const Model& m, const float* logits, int k, std::vector<int32_t>& out) {
    const int n = std::min(m.hp.vocab_size, m.tokenizer.n_ids());
    std::vector<int32_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    k = std::min(k, n);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    out.assign(idx.begin(), idx.begin() + k);
}

}  // namespace

GenerateResult generate_tree_speculative_ex(Model* model, const int32_t* prompt, int prompt_len,
                                            const TreeSpeculativeConfig& c, const GenerateOptions& options) {
    require_cpu_backend(checked(model), "tree self-speculation");
    const auto t0 = Clock::now();
    const Model& m = checked(model);
    validate_spec_common(m, prompt_len, c.max_tokens, c.draft_loops, c.verify_loops, 1, c.temperature);
    if (c.draft_ahead < 1 || c.draft_ahead > 8)
        throw Error(ErrorCode::InvalidArgument, "draft_ahead: " + std::to_string(c.draft_ahead) + " is outside [1, 8] (tree depth)");
    if (c.K_branches < 1 || c.K_branches > 8)
        throw Error(ErrorCode::InvalidArgument, "K_branches: " + std::to_string(c.K_branches) + " is outside [1, 8]");
    long long tree_nodes = 1, level_nodes = 1;
    for (int l = 1; l <= c.draft_ahead; ++l) tree_nodes += level_nodes *= c.K_branches;
    if (tree_nodes > 1024)
        throw Error(ErrorCode::InvalidArgument, "K_branches: a tree of K_branches^1 + .. + K_branches^draft_ahead = " +
                                                    std::to_string(tree_nodes - 1) + " nodes exceeds 1023; lower K_branches or draft_ahead");
    if (!is_greedy(c.temperature))
        throw Error(ErrorCode::NotSupported, "temperature: tree speculation is greedy only; use generate_speculative for "
                                             "lossless sampling");
    check_prompt_ids(m, prompt, prompt_len);

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
    KVCache kv;
    kv.allocate(exec_layers(hp, L), capacity + static_cast<int>(tree_nodes), hp.n_kv_heads * hp.head_dim);
    Workspace ws;
    std::vector<float> h, logits(static_cast<size_t>(V));
    {
        ForwardArgs fa;
        fa.tokens = prompt;
        fa.n = prompt_len;
        fa.loops = L;
        forward(m, kv, ws, fa, h);
        compute_logits(m, h.data() + static_cast<size_t>(prompt_len - 1) * d, 1, logits.data(), ws);
    }
    st.prefill_ms = ms_since(t0);

    TokenEmitter out(m, res, StopPolicy{c.max_tokens, c.ignore_eos, {}, {}, 0.0}, options.on_token,
                     options.observer, options.lens ? options.lens_top_k : 0, t0);
    const TokenChoice first = greedy_choice(m, logits.data());
    bool done = !out.emit(first.token, EmitInfo{.prob = first.prob, .depth = L, .from_verifier = true});
    std::vector<float> hv, all_logits;
    std::vector<int32_t> kids;
    const size_t row_floats = static_cast<size_t>(kv.row);
    int cycle = 0;
    while (!done) {
        const int p = static_cast<int>(res.tokens.size()) - 1;
        // Never draft deeper than the tokens still allowed.
        const int tree_depth = std::min(depth, c.max_tokens - st.tokens_emitted);
        std::vector<Node> nodes(1);
        nodes[0].token = res.tokens.back();
        nodes[0].row = p;
        std::vector<float> hd;          // draft states of the non-leaf nodes, in node order
        std::vector<float> ed, level_e;  // input injection: their prelude outputs, in the same order
        std::vector<int> runnable;      // non-leaf nodes
        std::vector<int> level = {0};

        const auto td = Clock::now();
        for (int lv = 0; lv < tree_depth; ++lv) {
            tree_forward(m, kv, ws, nodes, level, p, 1, D, h, level_e);
            ed.insert(ed.end(), level_e.begin(), level_e.end());
            all_logits.resize(level.size() * static_cast<size_t>(V));
            compute_logits(m, h.data(), static_cast<int>(level.size()), all_logits.data(), ws);
            hd.insert(hd.end(), h.begin(), h.begin() + static_cast<std::ptrdiff_t>(level.size()) * d);
            runnable.insert(runnable.end(), level.begin(), level.end());
            std::vector<int> next;
            for (size_t i = 0; i < level.size(); ++i) {
                top_children(m, all_logits.data() + i * V, K, kids);
                for (int32_t tk : kids) {
                    Node ch;
                    ch.token = tk;
                    ch.parent = level[i];
                    ch.level = lv + 1;
                    ch.row = capacity + static_cast<int>(nodes.size()) - 1;
                    nodes[static_cast<size_t>(level[i])].children.push_back(static_cast<int>(nodes.size()));
                    next.push_back(static_cast<int>(nodes.size()));
                    nodes.push_back(ch);
                }
            }
            level.swap(next);
        }
        st.draft_ms += ms_since(td);

        const auto tv = Clock::now();
        tree_forward(m, kv, ws, nodes, runnable, p, D + 1, L, hd, ed);
        all_logits.resize(runnable.size() * static_cast<size_t>(V));
        compute_logits(m, hd.data(), static_cast<int>(runnable.size()), all_logits.data(), ws);
        for (size_t i = 0; i < runnable.size(); ++i)
            nodes[static_cast<size_t>(runnable[i])].verify =
                argmax(all_logits.data() + i * V, std::min(V, m.tokenizer.n_ids()));
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

        // Accepted nodes that ran move to their real rows (a fully accepted leaf never ran).
        for (int i = 0; i < a; ++i) {
            const Node& nd = nodes[static_cast<size_t>(path[i])];
            if (nd.level >= tree_depth) break;
            for (int e = 0; e < kv.n_layers; ++e) {
                std::memcpy(kv.k_at(e, p + nd.level), kv.k_at(e, nd.row), row_floats * sizeof(float));
                std::memcpy(kv.v_at(e, p + nd.level), kv.v_at(e, nd.row), row_floats * sizeof(float));
            }
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
