#include "forward.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace tinyloop {

void KVCache::allocate(int layers, int positions, int row_floats) {
    n_layers = layers;
    capacity = positions;
    row = row_floats;
    const size_t n = static_cast<size_t>(layers) * static_cast<size_t>(positions) * row_floats;
    try {
        k.assign(n, 0.0f);
        v.assign(n, 0.0f);
    } catch (const std::bad_alloc&) {
        throw Error(ErrorCode::OutOfMemory,
                    "KV cache: cannot allocate " + std::to_string(2 * n * sizeof(float)) +
                        " bytes for " + std::to_string(layers) + " layers x " +
                        std::to_string(positions) + " positions");
    }
}

void Workspace::reserve(const HParams& hp, int n_tok) {
    if (n_tok <= max_tok) return;
    max_tok = n_tok;
    const size_t n = static_cast<size_t>(n_tok);
    const size_t H = static_cast<size_t>(hp.n_heads) * hp.head_dim;
    const size_t Hkv = static_cast<size_t>(hp.n_kv_heads) * hp.head_dim;
    try {
        h.resize(n * hp.d_model);
        a.resize(n * hp.d_model);
        q.resize(n * H);
        k.resize(n * Hkv);
        v.resize(n * Hkv);
        att.resize(n * H);
        o.resize(n * hp.d_model);
        g.resize(n * hp.d_ff);
        u.resize(n * hp.d_ff);
        pos.resize(n);
        row.resize(n);
        kv_begin.resize(n);
        kv_end.resize(n);
    } catch (const std::bad_alloc&) {
        throw Error(ErrorCode::OutOfMemory, "workspace: cannot allocate activations for " +
                                                std::to_string(n_tok) + " tokens");
    }
}

PassHook last_row_hook(std::vector<float>& states, int d) {
    return [&states, d](int pass, int, const float* x, int n) {
        std::copy(x + static_cast<size_t>(n - 1) * d, x + static_cast<size_t>(n) * d,
                  states.begin() + static_cast<size_t>(pass - 1) * d);
    };
}

void set_rows(Workspace& ws, int pos0, int n, int window) {
    ws.extra_offsets.clear();
    for (int t = 0; t < n; ++t) {
        const int p = pos0 + t;
        ws.pos[t] = p;
        ws.row[t] = p;
        ws.kv_end[t] = p + 1;
        ws.kv_begin[t] = window > 0 ? std::max(0, p + 1 - window) : 0;
    }
}

void run_block(const Model& m, const LayerWeights& w, KVCache& kv, int layer, Workspace& ws,
               float* x, int n) {
    const HParams& hp = m.hp;
    const int d = hp.d_model;
    const int Hkv = hp.n_kv_heads * hp.head_dim;
    kern::ThreadPool* pool = m.pool.get();

    kern::rmsnorm(x, w.attn_norm, n, d, hp.norm_eps, ws.a.data());
    kern::matmul(w.wq, ws.a.data(), n, ws.q.data(), pool);
    kern::matmul(w.wk, ws.a.data(), n, ws.k.data(), pool);
    kern::matmul(w.wv, ws.a.data(), n, ws.v.data(), pool);
    kern::rope(ws.q.data(), n, hp.n_heads, hp.head_dim, ws.pos.data(), hp.rope_theta);
    kern::rope(ws.k.data(), n, hp.n_kv_heads, hp.head_dim, ws.pos.data(), hp.rope_theta);
    for (int t = 0; t < n; ++t) {
        std::memcpy(kv.k_at(layer, ws.row[t]), ws.k.data() + static_cast<size_t>(t) * Hkv, Hkv * sizeof(float));
        std::memcpy(kv.v_at(layer, ws.row[t]), ws.v.data() + static_cast<size_t>(t) * Hkv, Hkv * sizeof(float));
    }
    kern::AttentionArgs at;
    at.q = ws.q.data();
    at.n_tok = n;
    at.n_heads = hp.n_heads;
    at.n_kv_heads = hp.n_kv_heads;
    at.head_dim = hp.head_dim;
    at.k = kv.k_layer(layer);
    at.v = kv.v_layer(layer);
    at.kv_stride = Hkv;
    at.kv_begin = ws.kv_begin.data();
    at.kv_end = ws.kv_end.data();
    at.out = ws.att.data();
    if (!ws.extra_offsets.empty()) {
        at.extra_rows = ws.extra_rows.data();
        at.extra_offsets = ws.extra_offsets.data();
    }
    kern::attention(at, pool);
    kern::matmul(w.wo, ws.att.data(), n, ws.o.data(), pool);
    kern::add_inplace(x, ws.o.data(), static_cast<size_t>(n) * d);

    kern::rmsnorm(x, w.mlp_norm, n, d, hp.norm_eps, ws.a.data());
    kern::matmul(w.w_gate, ws.a.data(), n, ws.g.data(), pool);
    kern::matmul(w.w_up, ws.a.data(), n, ws.u.data(), pool);
    kern::silu_mul(ws.g.data(), ws.u.data(), ws.g.data(), static_cast<size_t>(n) * hp.d_ff);
    kern::matmul(w.w_down, ws.g.data(), n, ws.o.data(), pool);
    kern::add_inplace(x, ws.o.data(), static_cast<size_t>(n) * d);
}

void forward(const Model& m, KVCache& kv, Workspace& ws, const ForwardArgs& args,
             std::vector<float>& out_h) {
    const HParams& hp = m.hp;
    const int d = hp.d_model;
    if (args.n <= 0) return;
    if (args.loops < 1 || args.loops > hp.max_loops)
        throw Error(ErrorCode::InvalidArgument, "loops: " + std::to_string(args.loops) +
                                                    " is outside [1, " + std::to_string(hp.max_loops) + "]");
    if (args.start_pass > 1 && (args.h_in == nullptr || args.start_pass > args.loops + 1))
        throw Error(ErrorCode::Internal, "forward: depth upgrade needs h_in and start_pass <= loops + 1");
    if (kv.n_layers < exec_layers(hp, args.loops) || args.pos0 < 0 || args.pos0 + args.n > kv.capacity)
        throw Error(ErrorCode::Internal, "forward: KV cache too small for the request");

    const int chunk = std::max(1, m.prefill_chunk);
    ws.reserve(hp, std::min(args.n, chunk));
    out_h.resize(static_cast<size_t>(args.n) * d);

    for (int c0 = 0; c0 < args.n; c0 += chunk) {
        const int n = std::min(chunk, args.n - c0);
        float* x = out_h.data() + static_cast<size_t>(c0) * d;
        set_rows(ws, args.pos0 + c0, n, args.window);
        int layer;
        if (args.start_pass <= 1) {
            for (int t = 0; t < n; ++t)
                kern::dequant_row(m.embed, args.tokens[c0 + t], x + static_cast<size_t>(t) * d);
            layer = 0;
            for (const LayerWeights& w : m.pre) run_block(m, w, kv, layer++, ws, x, n);
        } else {
            std::memcpy(x, args.h_in + static_cast<size_t>(c0) * d, static_cast<size_t>(n) * d * sizeof(float));
            layer = exec_layers(hp, args.start_pass - 1);
        }
        for (int pass = std::max(1, args.start_pass); pass <= args.loops; ++pass) {
            for (const LayerWeights& w : m.loop) run_block(m, w, kv, layer++, ws, x, n);
            if (args.on_pass && *args.on_pass) (*args.on_pass)(pass, c0, x, n);
        }
    }
}

void compute_logits(const Model& m, const float* h, int n, float* logits, Workspace& ws) {
    ws.reserve(m.hp, n);
    kern::rmsnorm(h, m.final_norm, n, m.hp.d_model, m.hp.norm_eps, ws.a.data());
    kern::matmul(m.head, ws.a.data(), n, logits, m.pool.get());
}

}  // namespace tinyloop
