#include "forward/forward.h"
#include "forward/executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

namespace tinyloop {

void Workspace::reserve(const HParams& hp, int n_tok) {
    const size_t e_floats = injects_input(hp) ? static_cast<size_t>(std::max(n_tok, max_tok)) * hp.d_model : 0;
    const size_t cat_floats = hp.loop_input == LoopInput::Adapter ? 2 * e_floats : 0;
    if (e.size() < e_floats || cat.size() < cat_floats) {  // apart: a workspace may serve models with and without injection
        try {
            e.resize(std::max(e.size(), e_floats));
            cat.resize(std::max(cat.size(), cat_floats));
            s0.resize(std::max(s0.size(), cat_floats / 2));
        } catch (const std::bad_alloc&) {
            throw Error(ErrorCode::OutOfMemory, "workspace: cannot allocate input injection for " +
                                                    std::to_string(n_tok) + " tokens");
        }
    }
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

namespace {

BlockScratch scratch_of(Workspace& ws);
LayerStack layers_of(const Model& m);

// splitmix64 (Steele, Lea, Flood 2014): the counter-based generator of FORMAT.md §1b.
uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

}  // namespace

void inject_input(const Model& m, int pass, float* x, const float* e, int n, Workspace& ws) {
    if (!injects_input(m.hp) || (m.hp.loop_input == LoopInput::Add && pass <= 1)) return;
    if (e == nullptr) throw Error(ErrorCode::Internal, "inject_input: the rows' prelude output is missing");
    ws.reserve(m.hp, n);
    CpuOps be(m.pool.get());
    begin_pass(be, m.hp, layers_of(m), scratch_of(ws), x, e, n, pass);
}

void initial_state(const HParams& hp, const int* pos, int n, float* out) {
    const int d = hp.d_model;
    const StateInit& si = hp.state_init;
    if (si.kind == StateInit::Kind::Zeros) {
        std::fill(out, out + static_cast<size_t>(n) * d, 0.0f);
        return;
    }
    // FORMAT.md §1b: z(seed, p, i) from attempt k = 0, 1, ... (counter c = ((p·d + i)·64 + k)):
    // b1 = splitmix64(seed ^ splitmix64(c)), b2 = splitmix64(b1); u1 = ((b1 >> 11) + 1)·2^-53,
    // u2 = (b2 >> 11)·2^-53; z = sqrt(−2 ln u1)·cos(2π u2); the first |z| <= 3 is taken (64
    // attempts, then 0). Computed in double, rounded once: the same bits everywhere.
    for (int t = 0; t < n; ++t)
        for (int i = 0; i < d; ++i) {
            double z = 0;
            for (uint64_t k = 0; k < 64; ++k) {
                const uint64_t c = ((static_cast<uint64_t>(pos[t]) * static_cast<uint64_t>(d) + static_cast<uint64_t>(i)) << 6) + k;
                const uint64_t b1 = splitmix64(si.seed ^ splitmix64(c));
                const uint64_t b2 = splitmix64(b1);
                const double u1 = static_cast<double>((b1 >> 11) + 1) * 0x1.0p-53;
                const double u2 = static_cast<double>(b2 >> 11) * 0x1.0p-53;
                const double v = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
                if (std::fabs(v) <= 3.0) {
                    z = v;
                    break;
                }
            }
            out[static_cast<size_t>(t) * d + i] = static_cast<float>(static_cast<double>(si.scale) * si.std * z);
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
    ws.row_kv.clear();
    for (int t = 0; t < n; ++t) {
        const int p = pos0 + t;
        ws.pos[t] = p;
        ws.row[t] = p;
        ws.kv_end[t] = p + 1;
        ws.kv_begin[t] = window > 0 ? std::max(0, p + 1 - window) : 0;
    }
}

namespace {

void set_kv_source(kern::AttentionArgs& at, const KVStorage& st, size_t base_row) {
    at.kv_stride = st.row;
    if (st.type == KVCacheType::F32) {
        at.k = st.k.data() + base_row * st.row;
        at.v = st.v.data() + base_row * st.row;
        return;
    }
    at.kq = st.kq.data() + base_row * st.row;
    at.vq = st.vq.data() + base_row * st.row;
    at.ks = st.ks.data() + base_row * st.kv_heads;
    at.vs = st.vs.data() + base_row * st.kv_heads;
    at.scale_stride = st.kv_heads;
}

// Attention of rows 0..n-1 (q in ws.q, out to ws.att) at execution layer `layer`. A contiguous
// cache of one sequence is read by ranges; paged caches and batched rows (ws.row_kv) by the list
// of storage rows of each query (the kernel gives a list the same bits as the range), one
// kernel call per run of rows that share a storage.
void attend_rows(const Model& m, KVCache& kv, int layer, Workspace& ws, const float* q, int n, float* out) {
    const HParams& hp = m.hp;
    const size_t H = static_cast<size_t>(hp.n_heads) * hp.head_dim;
    kern::AttentionArgs base;
    base.n_heads = hp.n_heads;
    base.n_kv_heads = hp.n_kv_heads;
    base.head_dim = hp.head_dim;
    if (ws.row_kv.empty() && !kv.paged() && !kv.shared()) {
        kern::AttentionArgs at = base;
        set_kv_source(at, kv.own, static_cast<size_t>(layer) * kv.capacity);
        at.q = q;
        at.n_tok = n;
        at.kv_begin = ws.kv_begin.data();
        at.kv_end = ws.kv_end.data();
        at.out = out;
        if (!ws.extra_offsets.empty()) {
            at.extra_rows = ws.extra_rows.data();
            at.extra_offsets = ws.extra_offsets.data();
        }
        kern::attention(at, m.pool.get());
        return;
    }
    auto cache_of = [&](int t) -> const KVCache& { return ws.row_kv.empty() ? kv : *ws.row_kv[static_cast<size_t>(t)]; };
    ws.pg_zero.assign(static_cast<size_t>(n), 0);
    for (int t0 = 0; t0 < n;) {
        const KVStorage* st = &cache_of(t0).storage();
        int t1 = t0 + 1;
        while (t1 < n && &cache_of(t1).storage() == st) ++t1;
        ws.pg_rows.clear();
        ws.pg_offsets.assign(1, 0);
        for (int t = t0; t < t1; ++t) {
            const KVCache& c = cache_of(t);
            for (int p = ws.kv_begin[t]; p < ws.kv_end[t]; ++p) ws.pg_rows.push_back(static_cast<int>(c.phys(layer, p)));
            if (!ws.extra_offsets.empty())
                for (int i = ws.extra_offsets[t]; i < ws.extra_offsets[t + 1]; ++i)
                    ws.pg_rows.push_back(static_cast<int>(c.phys(layer, ws.extra_rows[i])));
            ws.pg_offsets.push_back(static_cast<int>(ws.pg_rows.size()));
        }
        kern::AttentionArgs at = base;
        set_kv_source(at, *st, 0);
        at.q = q + static_cast<size_t>(t0) * H;
        at.n_tok = t1 - t0;
        at.kv_begin = ws.pg_zero.data();
        at.kv_end = ws.pg_zero.data();
        at.extra_rows = ws.pg_rows.data();
        at.extra_offsets = ws.pg_offsets.data();
        at.out = out + static_cast<size_t>(t0) * H;
        kern::attention(at, m.pool.get());
        t0 = t1;
    }
}

// The CPU's cache side of a block: keys/values into KVCache rows (ws.row, per row's own cache
// when batched), attention by ranges or storage-row lists (attend_rows).
class CpuCache final : public LayerCache {
public:
    CpuCache(const Model& m, KVCache& kv, Workspace& ws) : m_(m), kv_(kv), ws_(ws) {}
    void rope_store(int layer, float* q, float* k, const float* v, int n) override {
        const HParams& hp = m_.hp;
        const size_t Hkv = static_cast<size_t>(hp.n_kv_heads) * hp.head_dim;
        kern::rope(q, n, hp.n_heads, hp.head_dim, ws_.pos.data(), hp.rope_theta);
        kern::rope(k, n, hp.n_kv_heads, hp.head_dim, ws_.pos.data(), hp.rope_theta);
        for (int t = 0; t < n; ++t) {
            KVCache& c = ws_.row_kv.empty() ? kv_ : *ws_.row_kv[static_cast<size_t>(t)];
            c.store(layer, ws_.row[t], k + static_cast<size_t>(t) * Hkv, v + static_cast<size_t>(t) * Hkv);
        }
    }
    void attend(int layer, const float* q, int n, float* out) override { attend_rows(m_, kv_, layer, ws_, q, n, out); }

private:
    const Model& m_;
    KVCache& kv_;
    Workspace& ws_;
};

BlockScratch scratch_of(Workspace& ws) {
    return {ws.a.data(), ws.q.data(), ws.k.data(), ws.v.data(), ws.att.data(), ws.o.data(), ws.g.data(), ws.u.data(),
            ws.cat.data()};
}

LayerStack layers_of(const Model& m) { return {&m.embed, &m.pre, &m.loop, &m.coda, &m.adapter, m.final_norm}; }

// x ⊕= y after a branch whose output is in y ([n, d]; a is scratch), per the block's post norm.
void residual(BackendOps& be, const HParams& hp, PostNorm post, const float* g_post, float* x, float* y, float* a,
              int n) {
    const int d = hp.d_model;
    const size_t floats = static_cast<size_t>(n) * d;
    switch (post) {
        case PostNorm::None:
            be.add_inplace(x, y, floats);
            break;
        case PostNorm::Branch:
            be.rmsnorm(y, g_post, n, d, hp.norm_eps, a);
            be.add_inplace(x, a, floats);
            break;
        case PostNorm::Sum:
            be.add_inplace(x, y, floats);
            be.rmsnorm(x, g_post, n, d, hp.norm_eps, a);
            be.copy(x, a, floats * sizeof(float));
            break;
    }
}

}  // namespace

const BlockDesc& block_desc(BlockKind kind) {
    static const BlockDesc kPreNorm{PostNorm::None}, kBranch{PostNorm::Branch}, kSum{PostNorm::Sum};
    switch (kind) {
        case BlockKind::SandwichBranch:
            return kBranch;
        case BlockKind::SandwichSum:
            return kSum;
        case BlockKind::PreNorm:
            break;
    }
    return kPreNorm;
}

void block_forward(BackendOps& be, const HParams& hp, const LayerWeights& w, LayerCache& cache, int layer,
                   const BlockScratch& s, float* x, int n) {
    const int d = hp.d_model;
    const PostNorm post = block_desc(hp.block).post;
    be.rmsnorm(x, w.attn_norm, n, d, hp.norm_eps, s.a);
    be.matmul_qkv(w.wq, w.wk, w.wv, s.a, n, s.q, s.k, s.v);
    if (w.bq) {  // qk_bias (§1b): before RoPE
        be.add_rows(s.q, w.bq, n, w.wq.rows);
        be.add_rows(s.k, w.bk, n, w.wk.rows);
    }
    cache.rope_store(layer, s.q, s.k, s.v, n);
    cache.attend(layer, s.q, n, s.att);
    // The pre-norm block keeps its fused residual add (bit-identical to versions 1 and 2).
    if (post == PostNorm::None) be.matmul_add(w.wo, s.att, n, x, s.o);
    else {
        be.matmul(w.wo, s.att, n, s.o);
        residual(be, hp, post, w.attn_post_norm, x, s.o, s.a, n);
    }
    be.rmsnorm(x, w.mlp_norm, n, d, hp.norm_eps, s.a);
    be.matmul_swiglu(w.w_gate, w.w_up, s.a, n, s.g, s.u);
    if (post == PostNorm::None) be.matmul_add(w.w_down, s.g, n, x, s.o);
    else {
        be.matmul(w.w_down, s.g, n, s.o);
        residual(be, hp, post, w.mlp_post_norm, x, s.o, s.a, n);
    }
}

void begin_pass(BackendOps& be, const HParams& hp, const LayerStack& w, const BlockScratch& s, float* x,
                const float* e, int n, int pass) {
    const size_t floats = static_cast<size_t>(n) * hp.d_model;
    if (hp.loop_input == LoopInput::Add && pass > 1) be.add_inplace(x, e, floats);
    if (hp.loop_input == LoopInput::Adapter) {
        be.concat_rows(s.cat, x, e, n, hp.d_model, hp.d_model);
        be.matmul(*w.adapter, s.cat, n, x);
    }
}

void end_pass(BackendOps& be, const HParams& hp, const LayerStack& w, const BlockScratch& s, float* x, int n) {
    if (!hp.pass_norm) return;
    be.rmsnorm(x, w.final_norm, n, hp.d_model, hp.norm_eps, s.a);
    be.copy(x, s.a, static_cast<size_t>(n) * hp.d_model * sizeof(float));
}

void head_logits(BackendOps& be, const HParams& hp, const kern::WeightView& head, const float* final_norm,
                 const float* x, int n, float* a, float* out) {
    if (!readout_norms(hp)) {  // pass_norm without a coda: the head reads h_L directly (§1b)
        be.matmul(head, x, n, out);
        return;
    }
    be.rmsnorm(x, final_norm, n, hp.d_model, hp.norm_eps, a);
    be.matmul(head, a, n, out);
}

void propagated_kv(BackendOps& be, const HParams& hp, const LayerWeights& l, const float* x, const int* pos, float* a,
                   float* k, float* v) {
    be.rmsnorm(x, l.attn_norm, 1, hp.d_model, hp.norm_eps, a);
    be.matmul(l.wk, a, 1, k);
    be.matmul(l.wv, a, 1, v);
    if (l.bk) be.add_rows(k, l.bk, 1, l.wk.rows);  // qk_bias (§1b): before RoPE
    be.rope(k, 1, hp.n_kv_heads, hp.head_dim, pos, hp.rope_theta);
}

void loop_pass(BackendOps& be, const HParams& hp, const LayerStack& w, LayerCache& cache, const BlockScratch& s,
               float* x, const float* e, int n, int pass) {
    begin_pass(be, hp, w, s, x, e, n, pass);
    int layer = loop_layer_index(hp, pass, 0);
    for (const LayerWeights& l : *w.loop) block_forward(be, hp, l, cache, layer++, s, x, n);
    end_pass(be, hp, w, s, x, n);
}

void run_coda(BackendOps& be, const HParams& hp, const LayerStack& w, LayerCache& cache, const BlockScratch& s,
              float* x, int n) {
    if (!w.coda || w.coda->empty()) return;
    be.rmsnorm(x, w.final_norm, n, hp.d_model, hp.norm_eps, s.a);
    be.copy(x, s.a, static_cast<size_t>(n) * hp.d_model * sizeof(float));
    int layer = hp.n_pre_blocks;
    for (const LayerWeights& l : *w.coda) block_forward(be, hp, l, cache, layer++, s, x, n);
}

void run_layers(BackendOps& be, const HParams& hp, const LayerStack& w, LayerCache& cache, const BlockScratch& s,
                const int32_t* ids, float* x, float* e, int n, const PassPlan& plan) {
    const bool inject = injects_input(hp);
    const size_t floats = static_cast<size_t>(n) * hp.d_model;
    int layer = 0;
    if (plan.start_pass <= 1) {
        be.embedding(*w.embed, ids, n, x);
        if (hp.embed_scale != 1.0f) be.scale(x, hp.embed_scale, floats);
        for (const LayerWeights& l : *w.pre) block_forward(be, hp, l, cache, layer++, s, x, n);
        if (inject) be.copy(e, x, floats * sizeof(float));
        if (hp.loop_input == LoopInput::Adapter) {
            if (!plan.s0) throw Error(ErrorCode::Internal, "run_layers: loop_input adapter needs the initial state s0");
            be.copy(x, plan.s0, floats * sizeof(float));
        }
    }
    for (int pass = std::max(1, plan.start_pass); pass <= plan.loops; ++pass) {
        loop_pass(be, hp, w, cache, s, x, e, plan.pass_rows ? plan.pass_rows[pass] : n, pass);
        if (plan.after_pass && *plan.after_pass) (*plan.after_pass)(pass);
    }
    if (plan.readout) run_coda(be, hp, w, cache, s, x, n);
}

void run_prelude(const Model& m, KVCache& kv, Workspace& ws, const int32_t* ids, int n, float* x, float* e) {
    const HParams& hp = m.hp;
    ws.reserve(hp, n);
    CpuOps be(m.pool.get());
    CpuCache cache(m, kv, ws);
    const BlockScratch s = scratch_of(ws);
    const size_t floats = static_cast<size_t>(n) * hp.d_model;
    be.embedding(m.embed, ids, n, x);
    if (hp.embed_scale != 1.0f) be.scale(x, hp.embed_scale, floats);
    int layer = 0;
    for (const LayerWeights& l : m.pre) block_forward(be, hp, l, cache, layer++, s, x, n);
    if (injects_input(hp)) be.copy(e, x, floats * sizeof(float));
    if (hp.loop_input == LoopInput::Adapter) initial_state(hp, ws.pos.data(), n, x);
}

void run_pass(const Model& m, KVCache& kv, Workspace& ws, int pass, float* x, const float* e, int n) {
    const HParams& hp = m.hp;
    ws.reserve(hp, n);
    CpuOps be(m.pool.get());
    CpuCache cache(m, kv, ws);
    loop_pass(be, hp, layers_of(m), cache, scratch_of(ws), x, e, n, pass);
}

namespace {

// The cache side of a wave's loop block (forward_wave): rows at different passes share the
// block's weights, and row t's keys/values go to (and its query reads) the execution layer of its
// own pass at the loop layer j the block runs. Runs of rows at one pass attend in one kernel call.
class WaveCache final : public LayerCache {
public:
    WaveCache(const Model& m, KVCache& kv, Workspace& ws, const int* pass) : m_(m), kv_(kv), ws_(ws), pass_(pass) {}
    void rope_store(int j, float* q, float* k, const float* v, int n) override {
        const HParams& hp = m_.hp;
        const size_t Hkv = static_cast<size_t>(hp.n_kv_heads) * hp.head_dim;
        kern::rope(q, n, hp.n_heads, hp.head_dim, ws_.pos.data(), hp.rope_theta);
        kern::rope(k, n, hp.n_kv_heads, hp.head_dim, ws_.pos.data(), hp.rope_theta);
        for (int t = 0; t < n; ++t)
            kv_.store(loop_layer_index(hp, pass_[t], j), ws_.row[t], k + static_cast<size_t>(t) * Hkv,
                      v + static_cast<size_t>(t) * Hkv);
    }
    void attend(int j, const float* q, int n, float* out) override {
        const HParams& hp = m_.hp;
        const size_t H = static_cast<size_t>(hp.n_heads) * hp.head_dim;
        for (int t0 = 0; t0 < n;) {
            int t1 = t0 + 1;
            while (t1 < n && pass_[t1] == pass_[t0]) ++t1;
            kern::AttentionArgs at;
            at.n_heads = hp.n_heads;
            at.n_kv_heads = hp.n_kv_heads;
            at.head_dim = hp.head_dim;
            set_kv_source(at, kv_.own, static_cast<size_t>(loop_layer_index(hp, pass_[t0], j)) * kv_.capacity);
            at.q = q + static_cast<size_t>(t0) * H;
            at.n_tok = t1 - t0;
            at.kv_begin = ws_.kv_begin.data() + t0;
            at.kv_end = ws_.kv_end.data() + t0;
            at.out = out + static_cast<size_t>(t0) * H;
            kern::attention(at, m_.pool.get());
            t0 = t1;
        }
    }

private:
    const Model& m_;
    KVCache& kv_;
    Workspace& ws_;
    const int* pass_;
};

}  // namespace

void forward_wave(const Model& m, KVCache& kv, Workspace& ws, const WaveRows& r) {
    const HParams& hp = m.hp;
    const int n = r.n, d = hp.d_model;
    if (n < 1 || kv.paged() || kv.shared())
        throw Error(ErrorCode::Internal, "forward_wave: rows over an exact per-pass cache of one sequence");
    int fresh = n;  // rows [fresh, n) start at pass 1 (a suffix: passes are non-increasing)
    for (int t = 0; t < n; ++t) {
        if (r.pass[t] < 1 || (t > 0 && r.pass[t] > r.pass[t - 1]))
            throw Error(ErrorCode::Internal, "forward_wave: passes must be >= 1 and non-increasing");
        if (r.pass[t] == 1 && fresh == n) fresh = t;
    }
    ws.reserve(hp, n);
    const bool inject = injects_input(hp);
    if (fresh < n) {  // the new rows' embedding and prelude, their prelude outputs kept in e
        set_rows(ws, r.pos0 + fresh, n - fresh, r.window);
        run_prelude(m, kv, ws, r.tokens + fresh, n - fresh, r.x + static_cast<size_t>(fresh) * d,
                    inject ? r.e + static_cast<size_t>(fresh) * d : nullptr);
    }
    set_rows(ws, r.pos0, n, r.window);
    CpuOps be(m.pool.get());
    WaveCache cache(m, kv, ws, r.pass);
    const BlockScratch s = scratch_of(ws);
    const LayerStack w = layers_of(m);
    // begin_pass per run of rows that take the input alike (add: pass > 1 only; adapter: every pass)
    for (int t0 = 0; t0 < n;) {
        int t1 = t0 + 1;
        while (t1 < n && (r.pass[t1] > 1) == (r.pass[t0] > 1)) ++t1;
        const size_t off = static_cast<size_t>(t0) * d;
        begin_pass(be, hp, w, s, r.x + off, inject ? r.e + off : nullptr, t1 - t0, r.pass[t0]);
        t0 = t1;
    }
    int j = 0;
    for (const LayerWeights& l : m.loop) block_forward(be, hp, l, cache, j++, s, r.x, n);
    end_pass(be, hp, w, s, r.x, n);
}

const float* readout_rows(const Model& m, KVCache& kv, Workspace& ws, const float* h, int n, std::vector<float>& buf) {
    if (m.hp.n_coda_blocks == 0) return h;
    const size_t floats = static_cast<size_t>(n) * m.hp.d_model;
    buf.assign(h, h + floats);
    ws.reserve(m.hp, n);
    CpuOps be(m.pool.get());
    CpuCache cache(m, kv, ws);
    run_coda(be, m.hp, layers_of(m), cache, scratch_of(ws), buf.data(), n);
    return buf.data();
}

namespace {

// forward() with per-pass readouts on a coda model (§1b): the readout at pass l of a row reads
// the pass-l coda keys/values of every earlier row of the call, so each pass runs over all
// chunks before the coda runs over them (chunk by chunk, in order). The loop layers see the
// same keys/values as chunk by chunk (a pass reads only earlier rows and earlier layers), so the
// states are the bits of the plain forward; the last coda runs at `loops`, leaving r_L in out_h
// and the depth-`loops` coda keys/values in the cache.
void forward_pass_major(const Model& m, KVCache& kv, Workspace& ws, const ForwardArgs& args, std::vector<float>& out_h,
                        int chunk) {
    const HParams& hp = m.hp;
    const int d = hp.d_model;
    const bool inject = injects_input(hp);
    std::vector<float> e_all(inject ? static_cast<size_t>(args.n) * d : 0);
    std::vector<float> r(static_cast<size_t>(std::min(args.n, chunk)) * d);
    CpuOps be(m.pool.get());
    CpuCache cache(m, kv, ws);
    const BlockScratch s = scratch_of(ws);
    const LayerStack w = layers_of(m);
    auto each_chunk = [&](auto&& body) {
        for (int c0 = 0; c0 < args.n; c0 += chunk) {
            const int n = std::min(chunk, args.n - c0);
            set_rows(ws, args.pos0 + c0, n, args.window);
            body(c0, n, out_h.data() + static_cast<size_t>(c0) * d,
                 inject ? e_all.data() + static_cast<size_t>(c0) * d : nullptr);
        }
    };
    each_chunk([&](int c0, int n, float* x, float* e) {
        const size_t rows_bytes = static_cast<size_t>(n) * d * sizeof(float);
        if (args.start_pass > 1) {
            std::memcpy(x, args.h_in + static_cast<size_t>(c0) * d, rows_bytes);
            if (inject) std::memcpy(e, args.e_in + static_cast<size_t>(c0) * d, rows_bytes);
            return;
        }
        PassPlan plan;  // the prelude only (no pass: loops 0)
        plan.loops = 0;
        if (hp.loop_input == LoopInput::Adapter) {
            initial_state(hp, ws.pos.data(), n, ws.s0.data());
            plan.s0 = ws.s0.data();
        }
        run_layers(be, hp, w, cache, s, args.tokens + c0, x, e, n, plan);
        if (inject && args.out_e) std::memcpy(args.out_e + static_cast<size_t>(c0) * d, e, rows_bytes);
    });
    const int first = std::max(1, args.start_pass);
    for (int pass = first; pass <= args.loops; ++pass) {
        each_chunk([&](int c0, int n, float* x, float* e) {
            loop_pass(be, hp, w, cache, s, x, e, n, pass);
            if (args.on_pass && *args.on_pass) (*args.on_pass)(pass, c0, x, n);
        });
        each_chunk([&](int c0, int n, float* x, float*) {
            const size_t floats = static_cast<size_t>(n) * d;
            std::copy(x, x + floats, r.begin());
            run_coda(be, hp, w, cache, s, r.data(), n);
            (*args.on_readout)(pass, c0, r.data(), n);
            if (pass < args.loops) return;
            if (args.out_state) std::copy(x, x + floats, args.out_state + static_cast<size_t>(c0) * d);
            std::copy(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(floats), x);
        });
    }
    if (first > args.loops)  // nothing ran: the readout of the kept state
        each_chunk([&](int c0, int n, float* x, float*) {
            if (args.out_state) std::copy(x, x + static_cast<size_t>(n) * d, args.out_state + static_cast<size_t>(c0) * d);
            run_coda(be, hp, w, cache, s, x, n);
        });
}

}  // namespace

void forward(const Model& m, KVCache& kv, Workspace& ws, const ForwardArgs& args,
             std::vector<float>& out_h) {
    if (m.cuda && m.cuda_required) unsupported(ExecKind::Cuda, ExecOp::HostForward);
    const HParams& hp = m.hp;
    const int d = hp.d_model;
    if (args.n <= 0) return;
    if (args.loops < 1 || args.loops > hp.max_loops)
        throw Error(ErrorCode::InvalidArgument, "loops: " + std::to_string(args.loops) +
                                                    " is outside [1, " + std::to_string(hp.max_loops) + "]");
    const bool inject = injects_input(hp);
    const bool coda = hp.n_coda_blocks > 0;
    if (args.start_pass > 1 && (args.h_in == nullptr || args.start_pass > args.loops + 1 || (inject && !args.e_in)))
        throw Error(ErrorCode::Internal, "forward: depth upgrade needs h_in (and e_in when injecting) and start_pass <= loops + 1");
    if (kv.n_layers < exec_layers(hp, args.loops) || args.pos0 < 0 || args.pos0 + args.n > kv.capacity)
        throw Error(ErrorCode::Internal, "forward: KV cache too small for the request");

    const int chunk = std::max(1, m.prefill_chunk);
    ws.reserve(hp, std::min(args.n, chunk));
    out_h.resize(static_cast<size_t>(args.n) * d);
    const bool readouts = args.on_readout && *args.on_readout;
    // kv_sharing compress (FORMAT.md §1c): the prompt runs exactly, then folds into its slots.
    auto fold = [&] {
        if (kv.share.staged && args.pos0 + args.n >= kv.share.prompt) kv.fold_prompt();
    };
    if (coda && readouts) {
        forward_pass_major(m, kv, ws, args, out_h, chunk);
        fold();
        return;
    }

    CpuOps be(m.pool.get());
    CpuCache cache(m, kv, ws);
    const BlockScratch scratch = scratch_of(ws);
    for (int c0 = 0; c0 < args.n; c0 += chunk) {
        const int n = std::min(chunk, args.n - c0);
        float* x = out_h.data() + static_cast<size_t>(c0) * d;
        const size_t rows_bytes = static_cast<size_t>(n) * d * sizeof(float);
        set_rows(ws, args.pos0 + c0, n, args.window);
        if (args.start_pass > 1) {
            std::memcpy(x, args.h_in + static_cast<size_t>(c0) * d, rows_bytes);
            if (inject) std::memcpy(ws.e.data(), args.e_in + static_cast<size_t>(c0) * d, rows_bytes);
        }
        std::function<void(int)> after;
        if ((args.on_pass && *args.on_pass) || readouts)
            after = [&](int pass) {  // without a coda the readout input is the state itself
                if (args.on_pass && *args.on_pass) (*args.on_pass)(pass, c0, x, n);
                if (readouts) (*args.on_readout)(pass, c0, x, n);
            };
        PassPlan plan;
        plan.start_pass = args.start_pass;
        plan.loops = args.loops;
        plan.after_pass = after ? &after : nullptr;
        // With a coda and out_state, the coda runs below, after h_L is copied out.
        plan.readout = coda && !args.out_state;
        if (hp.loop_input == LoopInput::Adapter && args.start_pass <= 1) {
            initial_state(hp, ws.pos.data(), n, ws.s0.data());
            plan.s0 = ws.s0.data();
        }
        run_layers(be, hp, layers_of(m), cache, scratch, args.tokens + c0, x, ws.e.data(), n, plan);
        if (args.out_state) std::memcpy(args.out_state + static_cast<size_t>(c0) * d, x, rows_bytes);
        if (coda && args.out_state) run_coda(be, hp, layers_of(m), cache, scratch, x, n);
        if (inject && args.start_pass <= 1 && args.out_e)
            std::memcpy(args.out_e + static_cast<size_t>(c0) * d, ws.e.data(), rows_bytes);
    }
    fold();
}

void forward_batch(const Model& m, const BatchSeq* seqs, int n_seqs, Workspace& ws, std::vector<float>& out_h) {
    const HParams& hp = m.hp;
    const int d = hp.d_model;
    int total = 0, max_loops = 0;
    for (int s = 0; s < n_seqs; ++s) {
        const BatchSeq& q = seqs[s];
        if (q.n <= 0 || q.loops < 1 || q.loops > hp.max_loops || (s > 0 && q.loops > seqs[s - 1].loops) ||
            q.kv == nullptr || q.kv->n_layers < exec_layers(hp, q.loops) || q.pos0 < 0 || q.pos0 + q.n > q.kv->capacity)
            throw Error(ErrorCode::Internal, "forward_batch: bad sequence " + std::to_string(s));
        total += q.n;
        max_loops = std::max(max_loops, q.loops);
    }
    out_h.resize(static_cast<size_t>(total) * d);
    if (total == 0) return;
    ws.reserve(hp, total);
    ws.extra_offsets.clear();
    ws.row_kv.assign(static_cast<size_t>(total), nullptr);
    std::vector<int32_t> ids(static_cast<size_t>(total));
    std::vector<int> pass_rows(static_cast<size_t>(max_loops) + 1, 0);  // rows of sequences with loops >= l
    int t = 0;
    for (int s = 0; s < n_seqs; ++s) {
        const BatchSeq& q = seqs[s];
        for (int i = 0; i < q.n; ++i, ++t) {
            const int p = q.pos0 + i;
            ids[static_cast<size_t>(t)] = q.tokens[i];
            ws.pos[t] = p;
            ws.row[t] = p;
            ws.kv_end[t] = p + 1;
            ws.kv_begin[t] = q.window > 0 ? std::max(0, p + 1 - q.window) : 0;
            ws.row_kv[static_cast<size_t>(t)] = q.kv;
        }
        for (int l = 1; l <= q.loops; ++l) pass_rows[static_cast<size_t>(l)] = t;
    }
    // run_layers over every row, pass l over the rows of the sequences at least l deep (a prefix:
    // seqs sorted deepest first). §1b: each sequence's coda reads its own state after its own last
    // pass; one coda over every row after the deepest pass is that, since a shallower sequence's
    // rows still hold its h_{loops}, and its coda keys and values go to (and are read from) its own
    // cache. The cache's kv argument is only a fallback: rows name their own caches (ws.row_kv).
    CpuOps be(m.pool.get());
    CpuCache cache(m, *seqs[0].kv, ws);
    PassPlan plan;
    plan.loops = max_loops;
    plan.pass_rows = pass_rows.data();
    plan.readout = hp.n_coda_blocks > 0;
    if (hp.loop_input == LoopInput::Adapter) {
        initial_state(hp, ws.pos.data(), total, ws.s0.data());
        plan.s0 = ws.s0.data();
    }
    run_layers(be, hp, layers_of(m), cache, scratch_of(ws), ids.data(), out_h.data(), ws.e.data(), total, plan);
    ws.row_kv.clear();
}

void compute_logits(const Model& m, const float* h, int n, float* logits, Workspace& ws) {
    ws.reserve(m.hp, n);
    CpuOps be(m.pool.get());
    head_logits(be, m.hp, m.head, m.final_norm, h, n, ws.a.data(), logits);
}

}  // namespace tinyloop
