// What only the CUDA back end has (cuda_forward.h): the weights resident in device memory, a
// session's device KV cache and buffers, and the decode step captured as a CUDA graph. The
// model's math is forward.cpp's run_layers / block_forward on CudaOps (cuda_backend.h), whose
// fused ops (q/k/v in one launch, the residual adds in the products, SwiGLU in the gate/up
// product) and this file's cache side (RoPE + the cache writes in one launch) make 8 launches
// per layer in the decode step. The fast step (CudaSessionOptions::fast, cuda_fast_path.h) makes
// 5 (fuse: the norms folded into their products, q/k/v + RoPE + the cache writes in one launch;
// with split attention too, its combine folded into the wo product), the same run_layers
// issuing them: CudaOps defers what it can fuse and this file's cache side takes the deferred
// q/k/v product and defers the attention's combine.
#ifdef TINYLOOP_HAVE_CUDA

#include "forward/cuda_forward.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "forward/cuda_backend.h"
#include "kernels/cuda/device_helpers.h"
#include "forward/forward.h"
#include "forward/executor.h"

namespace tinyloop {

namespace kc = kern::cuda;

// ---- CudaWeights -----------------------------------------------------------------------------

CudaWeights::CudaWeights(const Model& m, int device) : m_(&m), device_(device) {
    with_cuda_errors("cuda weights", [&] {
        // A context for the upload only (a stream and 256 pinned bytes, no cuBLAS): kept, it
        // would hold memory that no session uses.
        kc::Context upload(device);
        file_ = kc::DeviceBuffer(upload, m.file.size());
        upload.upload(file_.get(), m.file.data(), m.file.size());
    });
    const uint8_t* host0 = m.file.data();
    const size_t size = m.file.size();
    uint8_t* dev0 = static_cast<uint8_t*>(file_.get());
    auto rebase = [&](const void* p) -> const uint8_t* {
        if (!p) return nullptr;
        const uint8_t* b = static_cast<const uint8_t*>(p);
        if (b < host0 || b >= host0 + size)
            throw Error(ErrorCode::Internal, "cuda weights: a tensor does not point into the model file's bytes");
        return dev0 + (b - host0);
    };
    auto view = [&](const kern::WeightView& w) {
        kern::WeightView d = w;
        d.data = rebase(w.data);
        d.scales = reinterpret_cast<const uint16_t*>(rebase(w.scales));
        d.zeros = reinterpret_cast<const uint16_t*>(rebase(w.zeros));
        return d;
    };
    auto layer = [&](const LayerWeights& l) {
        LayerWeights d;
        d.attn_norm = reinterpret_cast<const float*>(rebase(l.attn_norm));
        d.mlp_norm = reinterpret_cast<const float*>(rebase(l.mlp_norm));
        d.wq = view(l.wq);
        d.wk = view(l.wk);
        d.wv = view(l.wv);
        d.wo = view(l.wo);
        d.w_gate = view(l.w_gate);
        d.w_up = view(l.w_up);
        d.w_down = view(l.w_down);
        // FORMAT.md §1b (null where the block kind does not use them)
        d.attn_post_norm = reinterpret_cast<const float*>(rebase(l.attn_post_norm));
        d.mlp_post_norm = reinterpret_cast<const float*>(rebase(l.mlp_post_norm));
        d.bq = reinterpret_cast<const float*>(rebase(l.bq));
        d.bk = reinterpret_cast<const float*>(rebase(l.bk));
        return d;
    };
    embed = view(m.embed);
    head = view(m.head);
    final_norm = reinterpret_cast<const float*>(rebase(m.final_norm));
    for (const LayerWeights& l : m.pre) pre.push_back(layer(l));
    for (const LayerWeights& l : m.loop) loop.push_back(layer(l));
    for (const LayerWeights& l : m.coda) coda.push_back(layer(l));
    if (m.hp.loop_input == LoopInput::Adapter) {
        adapter = view(m.adapter);
        // §1b's initial state of every position the model's context has, [max_seq_len, d]: a
        // row is gathered by position (an f32 "embedding" indexed by the rows' positions), on
        // the device and inside a captured step. The host's generator computes it once here,
        // so the device's s0 is the CPU's bits. A zero state needs no table (the session's s0 rows stay zero).
        if (m.hp.state_init.kind != StateInit::Kind::Zeros) {
            const int n = m.max_seq_len, d = m.hp.d_model;
            std::vector<int> positions(static_cast<size_t>(n));
            for (int p = 0; p < n; ++p) positions[static_cast<size_t>(p)] = p;
            std::vector<float> tab(static_cast<size_t>(n) * d);
            initial_state(m.hp, positions.data(), n, tab.data());
            with_cuda_errors("cuda weights", [&] {
                kc::Context upload(device);
                s0_table_ = kc::DeviceBuffer(upload, tab.size() * sizeof(float));
                upload.upload(s0_table_.get(), tab.data(), tab.size() * sizeof(float));
            });
            s0_table.type = kern::WType::F32;
            s0_table.rows = n;
            s0_table.cols = d;
            s0_table.data = static_cast<const uint8_t*>(s0_table_.get());
        }
    }
}

LayerStack CudaWeights::stack() const {
    const bool adapt = m_->hp.loop_input == LoopInput::Adapter;
    return LayerStack{&embed, &pre, &loop, &coda, adapt ? &adapter : nullptr, final_norm};
}

void cuda_head(CudaOps& ops, const CudaWeights& w, const float* x, int n, float* a, float* out) {
    head_logits(ops, w.model().hp, w.head, w.final_norm, x, n, a, out);
}

const float* cuda_initial_rows(CudaOps& ops, const CudaWeights& w, const int* pos, int n, float* s0) {
    const HParams& hp = w.model().hp;
    if (hp.loop_input != LoopInput::Adapter) return nullptr;
    if (hp.state_init.kind != StateInit::Kind::Zeros) ops.embedding(w.s0_table, pos, n, s0);
    return s0;
}


CudaWeights::~CudaWeights() {
    idle_.reset();  // before session_bytes, which its ByteShare gives back to
}

size_t CudaWeights::device_bytes() const { return file_.size() + s0_table_.size(); }

// ---- CudaSession -----------------------------------------------------------------------------

void CudaRowBuffers::allocate(kc::Context& ctx, const HParams& hp, size_t R) {
    const size_t d = hp.d_model, H = size_t(hp.n_heads) * hp.head_dim, ff = hp.d_ff, F = sizeof(float);
    const size_t kv_row = size_t(hp.n_kv_heads) * hp.head_dim;
    h = kc::DeviceBuffer(ctx, R * d * F);
    a = kc::DeviceBuffer(ctx, R * d * F);
    q = kc::DeviceBuffer(ctx, R * H * F);
    kk = kc::DeviceBuffer(ctx, R * kv_row * F);
    vv = kc::DeviceBuffer(ctx, R * kv_row * F);
    att = kc::DeviceBuffer(ctx, R * H * F);
    o_ = kc::DeviceBuffer(ctx, R * d * F);
    g = kc::DeviceBuffer(ctx, R * ff * F);
    u = kc::DeviceBuffer(ctx, R * ff * F);
    if (injects_input(hp)) e_in = kc::DeviceBuffer(ctx, R * d * F);
    if (hp.loop_input == LoopInput::Adapter) {
        cat = kc::DeviceBuffer(ctx, R * 2 * d * F);
        s0 = kc::DeviceBuffer(ctx, R * d * F);
        if (hp.state_init.kind == StateInit::Kind::Zeros) {  // §1b's zero state: written once, only read
            const std::vector<float> zeros(R * d, 0.0f);
            ctx.upload(s0.get(), zeros.data(), zeros.size() * F);
        }
    }
}

size_t CudaRowBuffers::bytes() const {
    size_t n = 0;
    for (const kc::DeviceBuffer* b : {&h, &a, &q, &kk, &vv, &att, &o_, &g, &u, &e_in, &cat, &s0}) n += b->size();
    return n;
}

struct CudaSession::Impl : CudaRowBuffers {
    const CudaWeights& w;
    const HParams& hp;
    CudaSessionOptions o;
    int rows = 0;  // workspace rows (prefill chunk)
    int layers = 0, kv_row = 0, n_valid = 0;
    kc::Context ctx;
    kc::DeviceBuffer k, v;                                // [layers, cache_rows, kv_row] (f32 cache)
    kc::DeviceBuffer kq, vq, ks, vs;                      // INT8 cache: codes as k/v, scales [layers, cache_rows, kv_heads]
    bool int8 = false;
    int cache_rows = 0;                                   // capacity + scratch_rows
    kc::DeviceBuffer logits, scratch;                     // (the rows' activations: CudaRowBuffers)
    kc::DeviceBuffer ids, pos, kvb, kve, chosen;          // [rows] ints (chosen: [1])
    kc::DeviceBuffer crow, extra_rows, extra_offsets;      // forward_rows only
    kc::DeviceBuffer rope_tab;                            // RoPE cos/sin [max_seq_len, head_dim/2, 2]
    kc::DeviceBuffer partial;                             // fast.split_attention: the splits' states
    kc::DeviceBuffer row_in, row_out;                     // the row stepper: a host row [d] in, its logits [vocab]
    int row_pos = -1;                                     // the row stepper's position (-1: none begun)
    int passes_n = 0;                                     // rows of the last run_passes (their states in h)
    bool head_stale = false;  // run_passes left states whose head last_logits has not computed
    int splits = 0;                                       // attention splits per (row, head)
    bool pdl = false;                                     // fast.pdl on a device that has it (sm_90+)
    bool logits_pinned = false;  // the context's staged floats hold the last row's logits (last_logits)
    const int* store_at = nullptr;     // cache rows of the current rows (nullptr: their positions)
    const int* d_extra_rows = nullptr; // tree extras of the current rows (nullptr: none)
    const int* d_extra_offsets = nullptr;
    CudaOps ops;                       // the back end's ops on ctx's stream
    kc::Graph step;
    bool primed = false;   // the device's ids/pos/kv range already hold the next step's input
    int32_t primed_token = -1;
    int last_row = 0;      // the logits buffer's row of the most recent token (last_logits)
    kc::ByteShare share;   // this session's part of w.session_bytes

    Impl(const CudaWeights& w_, const CudaSessionOptions& opt)
        : w(w_), hp(w_.model().hp), o(opt), ctx(w_.device()), ops(ctx), share(w_.session_bytes) {
        const Model& m = w.model();
        rows = std::max(1, m.prefill_chunk);
        layers = exec_layers(hp, o.loops);
        kv_row = hp.n_kv_heads * hp.head_dim;
        n_valid = m.tokenizer.n_ids();
        const size_t d = hp.d_model, V = hp.vocab_size;
        const size_t R = rows, F = sizeof(float);
        cache_rows = o.capacity + o.scratch_rows;
        int8 = o.kv_cache == KVCacheType::Int8;
        if (int8) {
            kq = kc::DeviceBuffer(ctx, size_t(layers) * cache_rows * kv_row);
            vq = kc::DeviceBuffer(ctx, size_t(layers) * cache_rows * kv_row);
            ks = kc::DeviceBuffer(ctx, size_t(layers) * cache_rows * hp.n_kv_heads * F);
            vs = kc::DeviceBuffer(ctx, size_t(layers) * cache_rows * hp.n_kv_heads * F);
        } else {
            k = kc::DeviceBuffer(ctx, size_t(layers) * cache_rows * kv_row * F);
            v = kc::DeviceBuffer(ctx, size_t(layers) * cache_rows * kv_row * F);
        }
        allocate(ctx, hp, R);
        logits = kc::DeviceBuffer(ctx, R * V * F);
        row_in = kc::DeviceBuffer(ctx, d * F);
        row_out = kc::DeviceBuffer(ctx, V * F);
        ids = kc::DeviceBuffer(ctx, R * sizeof(int));
        pos = kc::DeviceBuffer(ctx, R * sizeof(int));
        kvb = kc::DeviceBuffer(ctx, R * sizeof(int));
        kve = kc::DeviceBuffer(ctx, R * sizeof(int));
        chosen = kc::DeviceBuffer(ctx, sizeof(int));
        {  // every position a row may have (forward_rows checks them against max_seq_len)
            const std::vector<float> tab = kc::rope_table(m.max_seq_len, hp.head_dim, hp.rope_theta);
            rope_tab = kc::DeviceBuffer(ctx, tab.size() * sizeof(float));
            ctx.upload(rope_tab.get(), tab.data(), tab.size() * sizeof(float));
        }
        pdl = o.fast.pdl && ctx.compute_capability() >= 90;
        ops.set_fast(o.fast.fuse, false, pdl);  // the session's cache side runs the split attention
        if (o.fast.split_attention) {
            splits = kc::attention_splits(hp.n_heads);
            partial = kc::DeviceBuffer(ctx, kc::attention_split_floats(rows, hp.n_heads, hp.head_dim, splits) * F);
        }
        if (o.fast.pinned_logits) ctx.reserve_staged_floats(V);
        // fast.persist: the fused launches recorded as phases of one cooperative kernel
        if (o.fast.persist && o.fast.fuse) kc::set_persist(ctx, true);
        if (o.gemm_min_tokens <= rows) {  // cuBLAS needs f32 operands: scratch for the largest
            size_t s = 0;
            auto need = [&](const kern::WeightView& W) { s = std::max(s, kc::gemm_scratch_bytes(W)); };
            for (const auto* set : {&w.pre, &w.loop, &w.coda})
                for (const LayerWeights& l : *set)
                    for (const auto* W : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) need(*W);
            need(w.head);
            if (hp.loop_input == LoopInput::Adapter) need(w.adapter);
            scratch = kc::DeviceBuffer(ctx, s);
            ops.use_gemm(scratch.f32(), o.gemm_min_tokens);
        }
    }

    // RoPE and the cache writes of n rows into execution layer `layer`: the rows' positions (and
    // store_at's cache rows) from row r0 of the session's buffers on (the reference kernels; the
    // fused one-row path is Cache::rope_store's).
    void rope_store_rows(int layer, float* q, float* k, const float* v, int n, int r0) {
        const int* p = pos.i32() + r0;
        const int* rows = (store_at ? store_at : pos.i32()) + r0;
        ops.flush();
        if (int8) {
            kc::rope_store_int8(ctx, q, k, v, n, hp.n_heads, hp.n_kv_heads, hp.head_dim, p, rope_tab.f32(),
                                kq_layer(layer), vq_layer(layer), ks_layer(layer), vs_layer(layer), rows);
            return;
        }
        kc::rope_store(ctx, q, k, v, n, hp.n_heads, hp.n_kv_heads, hp.head_dim, p, rope_tab.f32(), k_layer(layer),
                       v_layer(layer), rows);
    }
    // Attention of n rows over execution layer `layer`, their ranges (and tree extras) from row r0
    // of the session's buffers on. defer: a one-row split attention's combine may be deferred into
    // the wo product (fast.fuse).
    void attend_rows(int layer, const float* q, int n, float* out, int r0, bool defer) {
        kern::AttentionArgs at;
        at.q = q;
        at.n_tok = n;
        at.n_heads = hp.n_heads;
        at.n_kv_heads = hp.n_kv_heads;
        at.head_dim = hp.head_dim;
        if (int8) {
            at.kq = kq_layer(layer);
            at.vq = vq_layer(layer);
            at.ks = ks_layer(layer);
            at.vs = vs_layer(layer);
            at.scale_stride = hp.n_kv_heads;
        } else {
            at.k = k_layer(layer);
            at.v = v_layer(layer);
        }
        at.kv_stride = kv_row;
        at.kv_begin = kvb.i32() + r0;
        at.kv_end = kve.i32() + r0;
        at.out = out;
        at.extra_rows = d_extra_rows;
        at.extra_offsets = d_extra_offsets ? d_extra_offsets + r0 : nullptr;
        ops.flush();
        if (defer && o.fast.split_attention && o.fast.fuse && n == 1) {
            // the combine deferred into the wo product that reads `out` (one launch less)
            const kc::SplitPartials sp =
                kc::attention_split_partials(ctx, at, splits, partial.f32(), partial.size() / sizeof(float), pdl);
            ops.defer_combine(sp, out);
        } else if (o.fast.split_attention) {
            kc::attention_split(ctx, at, splits, partial.f32(), partial.size() / sizeof(float), pdl);
        } else {
            kc::attention(ctx, at);
        }
    }

    // The session's cache side of a block: RoPE and the K/V writes in one launch (at the rows'
    // positions, or store_at for verification rows), attention over the device cache.
    class Cache final : public LayerCache {
    public:
        explicit Cache(Impl& s) : s_(s) {}
        void rope_store(int layer, float* q, float* k, const float* v, int n) override {
            const HParams& hp = s_.hp;
            CudaOps::PendingQkv p;
            if (!s_.int8 && s_.ops.take_qkv(q, k, v, hp.n_heads, hp.n_kv_heads, hp.head_dim, &p)) {  // fast.fuse, one row
                kc::fast_qkv_rope_store(s_.ctx, p.norm, p.wq, p.wk, p.wv, p.x, hp.n_heads, hp.n_kv_heads, hp.head_dim,
                                        // v: the session's own buffer, which the deferred product writes
                                        s_.pos.i32(), s_.rope_tab.f32(), q, k, const_cast<float*>(v), s_.k_layer(layer),
                                        s_.v_layer(layer), s_.store_at ? s_.store_at : s_.pos.i32(), s_.pdl);
                return;
            }
            s_.rope_store_rows(layer, q, k, v, n, 0);
        }
        void attend(int layer, const float* q, int n, float* out) override { s_.attend_rows(layer, q, n, out, 0, true); }

    private:
        Impl& s_;
    };

    // The cache side of a wavefront's loop block (run_wave): rows at different passes share the
    // block's weights; row t's keys/values go to (and its query reads) the execution layer of its
    // own pass at the loop layer j the block runs. Runs of rows at one pass in one launch each.
    class WaveCache final : public LayerCache {
    public:
        WaveCache(Impl& s, const int* pass, int n) : s_(s), pass_(pass), n_(n) {}
        void rope_store(int j, float* q, float* k, const float* v, int n) override {
            const size_t H = size_t(s_.hp.n_heads) * s_.hp.head_dim, KV = size_t(s_.kv_row);
            each_run(n, [&](int t0, int t1) {
                s_.rope_store_rows(loop_layer_index(s_.hp, pass_[t0], j), q + t0 * H, k + t0 * KV, v + t0 * KV, t1 - t0, t0);
            });
        }
        void attend(int j, const float* q, int n, float* out) override {
            const size_t H = size_t(s_.hp.n_heads) * s_.hp.head_dim;
            each_run(n, [&](int t0, int t1) {
                s_.attend_rows(loop_layer_index(s_.hp, pass_[t0], j), q + t0 * H, t1 - t0, out + t0 * H, t0, false);
            });
        }

    private:
        template <class F>
        void each_run(int n, const F& f) const {
            if (n != n_) throw Error(ErrorCode::Internal, "wave cache: a block over other rows than the wave's");
            for (int t0 = 0; t0 < n;) {
                int t1 = t0 + 1;
                while (t1 < n && pass_[t1] == pass_[t0]) ++t1;
                f(t0, t1);
                t0 = t1;
            }
        }
        Impl& s_;
        const int* pass_;  // host memory
        int n_;
    };

    float* k_layer(int layer) const { return k.f32() + size_t(layer) * cache_rows * kv_row; }
    float* v_layer(int layer) const { return v.f32() + size_t(layer) * cache_rows * kv_row; }
    int8_t* kq_layer(int layer) const { return static_cast<int8_t*>(kq.get()) + size_t(layer) * cache_rows * kv_row; }
    int8_t* vq_layer(int layer) const { return static_cast<int8_t*>(vq.get()) + size_t(layer) * cache_rows * kv_row; }
    float* ks_layer(int layer) const { return ks.f32() + size_t(layer) * cache_rows * hp.n_kv_heads; }
    float* vs_layer(int layer) const { return vs.f32() + size_t(layer) * cache_rows * hp.n_kv_heads; }
    // Rows [from, from + n) of layer e of `src` (a session on the same weights with this one's
    // cache type) copied to rows [to, to + n) of this one's layer e: f32 rows, or INT8 codes and
    // their scales.
    void copy_rows(const Impl& src, int e, int from, int to, int n) {
        if (n <= 0) return;
        if (src.int8 != int8) throw Error(ErrorCode::Internal, "copy rows: caches of two types (f32 and INT8)");
        if (!int8) {
            const size_t bytes = size_t(n) * kv_row * sizeof(float);
            ctx.copy(k_layer(e) + size_t(to) * kv_row, src.k_layer(e) + size_t(from) * kv_row, bytes);
            ctx.copy(v_layer(e) + size_t(to) * kv_row, src.v_layer(e) + size_t(from) * kv_row, bytes);
            return;
        }
        const size_t codes = size_t(n) * kv_row, scales = size_t(n) * hp.n_kv_heads * sizeof(float);
        ctx.copy(kq_layer(e) + size_t(to) * kv_row, src.kq_layer(e) + size_t(from) * kv_row, codes);
        ctx.copy(vq_layer(e) + size_t(to) * kv_row, src.vq_layer(e) + size_t(from) * kv_row, codes);
        ctx.copy(ks_layer(e) + size_t(to) * hp.n_kv_heads, src.ks_layer(e) + size_t(from) * hp.n_kv_heads, scales);
        ctx.copy(vs_layer(e) + size_t(to) * hp.n_kv_heads, src.vs_layer(e) + size_t(from) * hp.n_kv_heads, scales);
    }

    // The initial state of the n rows set up in pos (loop_input adapter, §1b; else null): the
    // seeded table's rows gathered by position on the device, or the zero rows.
    const float* initial_rows(int n) { return cuda_initial_rows(ops, w, pos.i32(), n, s0.f32()); }

    // Embedding and every layer at depth loops for the n rows set up in ids/pos/kvb/kve, then a
    // coda model's coda over the last pass's states (their keys and values those of depth loops,
    // FORMAT.md §1b; h then holds the readouts the head reads): the one forward (run_layers) on the
    // device.
    void rows_forward(int n) {
        Cache cache(*this);
        PassPlan plan;
        plan.loops = o.loops;
        plan.s0 = initial_rows(n);
        plan.readout = hp.n_coda_blocks > 0;
        run_layers(ops, hp, w.stack(), cache, block_scratch(), ids.i32(), h.f32(), e_in.f32(), n, plan);
    }

    // The head over n rows of x into out [n, vocab]: the final norm, then the head (compute_logits:
    // without it where pass_norm already normed the state and no coda follows, §1b).
    void head(const float* x, int n, float* out) { cuda_head(ops, w, x, n, a.f32(), out); }

    // Logits of rows [r0, r0 + n) into logits[0..n), and the greedy choice of the last into chosen.
    void head_rows(int r0, int n) {
        head(h.f32() + size_t(r0) * hp.d_model, n, logits.f32());
        last_row = n - 1;
        ops.argmax(logits.f32() + size_t(n - 1) * hp.vocab_size, 1, hp.vocab_size, n_valid, chosen.i32());
    }

    // The row stepper's pieces: run_layers' own parts (forward.h) over row 0.
    void row_prelude() {
        Cache cache(*this);
        PassPlan plan;
        plan.loops = 0;  // the embedding and the prelude (and an adapter model's initial state) only
        plan.s0 = initial_rows(1);
        run_layers(ops, hp, w.stack(), cache, block_scratch(), ids.i32(), h.f32(), e_in.f32(), 1, plan);
    }
    void row_pass(int pass) {
        Cache cache(*this);
        loop_pass(ops, hp, w.stack(), cache, block_scratch(), h.f32(), e_in.f32(), 1, pass);
    }
    // FORMAT.md §1a/§1b (propagate_exited_state): the frozen state as a deeper pass takes it in
    // (+ e with "add", adapter·[h; e] with "adapter": begin_pass of pass exited+1), then each loop
    // layer's keys (+ bk with qk_bias) and values of it, RoPE'd at the row's position, into
    // passes exited+1..
    void row_propagate(int exited, int to) {
        const int d = hp.d_model;
        float* x = row_in.f32();
        ops.copy(x, h.f32(), size_t(d) * sizeof(float));
        begin_pass(ops, hp, w.stack(), block_scratch(), x, e_in.f32(), 1, exited + 1);
        for (int j = 0; j < hp.n_loop_layers; ++j) {
            propagated_kv(ops, hp, w.loop[size_t(j)], x, pos.i32(), a.f32(), kk.f32(), vv.f32());
            for (int p = exited + 1; p <= to; ++p) {
                const size_t at = size_t(row_pos) * kv_row;
                const int layer = loop_layer_index(hp, p, j);
                if (int8) {  // quantized into the layer's row pos[0] = row_pos (no rotation: done above)
                    ops.flush();
                    kc::rope_store_int8(ctx, nullptr, kk.f32(), vv.f32(), 1, 0, hp.n_kv_heads, hp.head_dim, pos.i32(),
                                        nullptr, kq_layer(layer), vq_layer(layer), ks_layer(layer), vs_layer(layer),
                                        pos.i32());
                    continue;
                }
                ops.copy(k_layer(layer) + at, kk.f32(), size_t(kv_row) * sizeof(float));
                ops.copy(v_layer(layer) + at, vv.f32(), size_t(kv_row) * sizeof(float));
            }
        }
    }
    // Passes first..last over the n rows set up in ids/pos/kvb/kve (and a layout's cache rows):
    // with first > 1 from h_in / e_in (host, [n, d]); the states to out_h / out_e.
    void pass_rows(int n, int first, int last, const float* h_in, const float* e_in_host, float* out_h, float* out_e,
                   const PassHook* hook = nullptr, int hook_row0 = 0) {
        const bool inject = injects_input(hp);
        const size_t bytes = size_t(n) * hp.d_model * sizeof(float);
        if (first > 1) {
            ctx.upload(h.get(), h_in, bytes);
            if (inject) ctx.upload(e_in.get(), e_in_host, bytes);
        }
        Cache cache(*this);
        PassPlan plan;
        plan.start_pass = first;
        plan.loops = last;
        // the hook sees the rows' states after every pass (downloaded: one sync per pass)
        std::vector<float> seen;
        const std::function<void(int)> after = [&](int pass) {
            ops.synchronize();
            seen.resize(size_t(n) * hp.d_model);
            ctx.download(seen.data(), h.get(), bytes);
            (*hook)(pass, hook_row0, seen.data(), n);
        };
        if (hook && *hook) plan.after_pass = &after;
        if (first <= 1) plan.s0 = initial_rows(n);
        run_layers(ops, hp, w.stack(), cache, block_scratch(), ids.i32(), h.f32(), e_in.f32(), n, plan);
        ops.synchronize();
        if (out_h) ctx.download(out_h, h.get(), bytes);
        if (out_e && inject && first <= 1) ctx.download(out_e, e_in.get(), bytes);
    }
    // The calls that stop, read out or resume between passes hold a state the head reads directly:
    // not on a coda model (exec_supports_together keeps such calls on the CPU).
    void no_coda(const char* call) const {
        if (hp.n_coda_blocks > 0)
            throw Error(ErrorCode::Internal, std::string(call) +
                                                 ": a coda model's calls between passes are the CPU's (exec_supports_together)");
    }

    // n rows at positions pos0.. for `call`: n within the prefill chunk, the positions within the
    // capacity (Error(InvalidArgument) naming them).
    void check_row_range(const char* call, int n, int pos0) const {
        if (n < 1 || n > rows)
            throw Error(ErrorCode::InvalidArgument, std::string(call) + ": n " + std::to_string(n) + " is outside [1, " +
                                                        std::to_string(rows) + "] (the prefill chunk)");
        if (pos0 < 0 || pos0 + n > o.capacity)
            throw Error(ErrorCode::InvalidArgument, std::string(call) + ": positions " + std::to_string(pos0) + ".." +
                                                        std::to_string(pos0 + n - 1) + " are outside [0, " +
                                                        std::to_string(o.capacity) + ")");
    }
    // The batch-invariant kernels (never cuBLAS) while it lives: a row's bits alone or in a batch.
    struct ForcedKernels {
        explicit ForcedKernels(Impl& s) : s_(s) { s_.ops.force_kernels(true); }
        ~ForcedKernels() { s_.ops.force_kernels(false); }
        ForcedKernels(const ForcedKernels&) = delete;
        ForcedKernels& operator=(const ForcedKernels&) = delete;
        Impl& s_;
    };

    // run_passes' pass range and, when resuming, the rows' states: Error(InvalidArgument) naming them.
    void check_passes(int first, int last, const float* h_in, const float* e_in_host) const {
        no_coda("run_passes");
        if (first < 1 || last < first || last > o.loops)
            throw Error(ErrorCode::InvalidArgument, "run_passes: passes " + std::to_string(first) + ".." +
                                                        std::to_string(last) + " are outside [1, " +
                                                        std::to_string(o.loops) + "] (the session's loops)");
        const bool inject = injects_input(hp);
        if (first > 1 && (!h_in || (inject && !e_in_host)))
            throw Error(ErrorCode::InvalidArgument, "run_passes: resuming at pass " + std::to_string(first) +
                                                        " needs the rows' states (h_in" + (inject ? ", e_in)" : ")"));
    }

    void set_rows(const int32_t* tokens, int pos0, int n) {
        std::vector<int> p(n), b(n), e(n);
        for (int t = 0; t < n; ++t) {
            p[t] = pos0 + t;
            e[t] = p[t] + 1;
            b[t] = o.window > 0 ? std::max(0, e[t] - o.window) : 0;
        }
        if (tokens) ctx.upload(ids.get(), tokens, size_t(n) * sizeof(int));  // none: rows resumed from states
        ctx.upload(pos.get(), p.data(), size_t(n) * sizeof(int));
        ctx.upload(kvb.get(), b.data(), size_t(n) * sizeof(int));
        ctx.upload(kve.get(), e.data(), size_t(n) * sizeof(int));
    }

    // The decode step as issued (and captured): one row from ids[0] at pos[0].
    void issue_step() {
        rows_forward(1);
        head_rows(0, 1);
        // fast.pinned_logits: the row's logits to pinned host memory inside the step, so the host
        // pipeline reads them after the step's one synchronisation
        if (o.fast.pinned_logits) ctx.stage_floats(logits.f32(), size_t(hp.vocab_size));
        ctx.stage_ints(chosen.i32(), 1);
        kc::advance(ctx, chosen.i32(), ids.i32(), pos.i32(), kvb.i32(), kve.i32(), o.window);
    }
};

namespace {
// An INT8 cache runs the reference step: the fused kernels (fuse, split, persist; pdl with them)
// write and read f32 rows.
void reference_step_for_int8(CudaSessionOptions& o) {
    if (o.kv_cache == KVCacheType::Int8) o.fast.fuse = o.fast.split_attention = o.fast.persist = o.fast.pdl = false;
}
}  // namespace

CudaSession::CudaSession(const CudaWeights& w, const CudaSessionOptions& opt) {
    CudaSessionOptions o = opt;
    o.loops = resolve_loops(w.model(), o.loops);  // 0: the model's default depth; the range checked
    if (o.capacity == 0) o.capacity = w.model().max_seq_len;
    if (o.capacity < 1 || o.capacity > w.model().max_seq_len)
        throw Error(ErrorCode::InvalidArgument, "capacity: " + std::to_string(o.capacity) + " is outside [1, " +
                                                    std::to_string(w.model().max_seq_len) + "]");
    if (o.window < 0) throw Error(ErrorCode::InvalidArgument, "window: must be >= 0");
    if (o.scratch_rows < 0 || o.scratch_rows > 1024)
        throw Error(ErrorCode::InvalidArgument, "scratch_rows: " + std::to_string(o.scratch_rows) + " is outside [0, 1024]");
    if (o.kv_cache != KVCacheType::F32 && o.kv_cache != KVCacheType::Int8)
        throw Error(ErrorCode::InvalidArgument, "kv_cache: " + std::to_string(static_cast<int>(o.kv_cache)) +
                                                    " is not one of f32 (0), int8 (1)");
    reference_step_for_int8(o);
    with_cuda_errors("cuda session", [&] { impl_ = std::make_unique<Impl>(w, o); });
    account();
}

CudaSession::~CudaSession() = default;  // Impl's ByteShare gives back exactly what it holds

void CudaSession::account() { impl_->share.hold(device_bytes()); }

const CudaSessionOptions& CudaSession::options() const { return impl_->o; }

size_t CudaSession::step_nodes() const {
    return with_cuda_errors("cuda step nodes", [&] { return impl_->step.nodes(); });
}

size_t CudaSession::device_bytes() const {
    const Impl& s = *impl_;
    size_t n = 0;
    for (const kc::DeviceBuffer* b : {&s.k, &s.v, &s.kq, &s.vq, &s.ks, &s.vs, &s.logits, &s.scratch, &s.ids, &s.pos, &s.kvb, &s.kve, &s.chosen, &s.crow, &s.extra_rows,
                                      &s.extra_offsets, &s.rope_tab, &s.partial, &s.row_in, &s.row_out})
        n += b->size();
    return n + s.bytes() + s.ctx.device_bytes();  // s.bytes(): the rows' activations (CudaRowBuffers)
}

int32_t CudaSession::prefill(const int32_t* tokens, int n, std::vector<float>* logits) {
    Impl& s = *impl_;
    if (n < 1) throw Error(ErrorCode::InvalidArgument, "n: " + std::to_string(n) + " must be >= 1");
    if (pos_ + n > s.o.capacity)
        throw Error(ErrorCode::InvalidArgument, "prefill: positions " + std::to_string(pos_) + " + " + std::to_string(n) +
                                                    " exceed the session's capacity " + std::to_string(s.o.capacity));
    const int V = s.hp.vocab_size;
    if (logits) logits->assign(size_t(n) * V, 0.0f);
    return with_cuda_errors("cuda prefill", [&] {
        for (int c0 = 0; c0 < n; c0 += s.rows) {
            const int m = std::min(s.rows, n - c0);
            s.set_rows(tokens + c0, pos_ + c0, m);
            s.rows_forward(m);
            if (logits) {
                s.head_rows(0, m);
                s.ctx.download(logits->data() + size_t(c0) * V, s.logits.get(), size_t(m) * V * sizeof(float));
            } else if (c0 + m == n) {
                s.head_rows(m - 1, 1);
            }
        }
        s.ctx.stage_ints(s.chosen.i32(), 1);
        s.ctx.synchronize();
        pos_ += n;
        s.head_stale = false;
        s.primed = false;
        s.logits_pinned = false;
        account();  // the first cuBLAS chunk created the context's handle
        return static_cast<int32_t>(s.ctx.staged()[0]);
    });
}

int32_t CudaSession::decode(int32_t token) {
    Impl& s = *impl_;
    if (pos_ + 1 > s.o.capacity)
        throw Error(ErrorCode::InvalidArgument, "decode: position " + std::to_string(pos_) +
                                                    " is past the session's capacity " + std::to_string(s.o.capacity));
    return with_cuda_errors("cuda decode", [&] {
        if (!s.primed || s.primed_token != token) s.set_rows(&token, pos_, 1);
        if (s.o.use_graph) {
            if (s.step.empty()) {
                s.ctx.begin_capture();
                try {
                    s.issue_step();
                } catch (...) {
                    try {
                        s.ctx.end_capture();
                    } catch (...) {
                    }
                    throw;
                }
                s.step = s.ctx.end_capture();
            }
            s.ctx.launch(s.step);
        } else {
            s.issue_step();
        }
        s.ctx.synchronize();
        const int32_t next = s.ctx.staged()[0];
        s.last_row = 0;  // a replayed graph ran head_rows(0, 1) without the host seeing it
        s.head_stale = false;
        s.logits_pinned = s.o.fast.pinned_logits;
        pos_ += 1;
        s.primed = true;
        s.primed_token = next;
        return next;
    });
}

std::vector<float> CudaSession::last_logits() {
    Impl& s = *impl_;
    std::vector<float> out(size_t(s.hp.vocab_size));
    if (s.head_stale) {  // after run_passes: the head of its last row
        with_cuda_errors("cuda logits", [&] { s.head_rows(s.passes_n - 1, 1); });
        s.head_stale = false;
    }
    if (s.logits_pinned) {  // the decode step copied them inside its graph, and the host synced since
        const float* p = s.ctx.staged_floats();
        std::copy(p, p + out.size(), out.begin());
        return out;
    }
    with_cuda_errors("cuda logits", [&] {
        s.ctx.download(out.data(), s.logits.f32() + size_t(s.last_row) * out.size(), out.size() * sizeof(float));
    });
    return out;
}

void CudaSession::row_begin(int32_t token, int pos) {
    Impl& s = *impl_;
    s.no_coda("row_begin");
    if (pos < 0 || pos >= s.o.capacity)
        throw Error(ErrorCode::InvalidArgument, "row pos: " + std::to_string(pos) + " is outside [0, " +
                                                    std::to_string(s.o.capacity) + ")");
    with_cuda_errors("cuda row", [&] {
        s.set_rows(&token, pos, 1);
        s.row_pos = pos;
        s.primed = false;
        s.logits_pinned = false;
        s.row_prelude();
    });
}

void CudaSession::row_pass(int pass) {
    Impl& s = *impl_;
    if (s.row_pos < 0) throw Error(ErrorCode::Internal, "row_pass: no row begun");
    if (pass < 1 || pass > s.o.loops)
        throw Error(ErrorCode::InvalidArgument, "pass: " + std::to_string(pass) + " is outside [1, " +
                                                    std::to_string(s.o.loops) + "] (the session's loops)");
    with_cuda_errors("cuda row pass", [&] { s.row_pass(pass); });
}

void CudaSession::row_state(float* h) {
    Impl& s = *impl_;
    with_cuda_errors("cuda row state", [&] {
        s.ops.synchronize();
        s.ctx.download(h, s.h.f32(), size_t(s.hp.d_model) * sizeof(float));
    });
}

void CudaSession::row_set_state(const float* h) {
    Impl& s = *impl_;
    with_cuda_errors("cuda row state", [&] {
        s.ops.synchronize();
        s.ctx.upload(s.h.f32(), h, size_t(s.hp.d_model) * sizeof(float));
    });
}

void CudaSession::row_logits(const float* r, float* out) {
    Impl& s = *impl_;
    const int d = s.hp.d_model, V = s.hp.vocab_size;
    with_cuda_errors("cuda row logits", [&] {
        s.ops.synchronize();
        s.ctx.upload(s.row_in.get(), r, size_t(d) * sizeof(float));
        s.head(s.row_in.f32(), 1, s.row_out.f32());  // not the logits buffer: last_logits stays
        s.ops.synchronize();
        s.ctx.download(out, s.row_out.f32(), size_t(V) * sizeof(float));
    });
}

void CudaSession::row_propagate(int exited, int loops) {
    Impl& s = *impl_;
    if (s.row_pos < 0) throw Error(ErrorCode::Internal, "row_propagate: no row begun");
    if (exited >= loops) return;
    if (exited < 1 || loops > s.o.loops)
        throw Error(ErrorCode::InvalidArgument, "propagate: passes " + std::to_string(exited + 1) + ".." +
                                                    std::to_string(loops) + " are outside [2, " +
                                                    std::to_string(s.o.loops) + "]");
    with_cuda_errors("cuda row propagate", [&] { s.row_propagate(exited, loops); });
}

void CudaSession::row_finish() {
    Impl& s = *impl_;
    if (s.row_pos < 0) throw Error(ErrorCode::Internal, "row_finish: no row begun");
    with_cuda_errors("cuda row finish", [&] {
        s.head_rows(0, 1);
        s.ops.synchronize();
    });
    pos_ = s.row_pos + 1;
    s.row_pos = -1;
    s.head_stale = false;
    s.primed = false;
    s.logits_pinned = false;
}

void CudaSession::run_passes(const int32_t* tokens, int n, int pos0, int first, int last, const float* h_in,
                             const float* e_in, float* out_h, float* out_e, const PassHook* hook, int hook_row0) {
    Impl& s = *impl_;
    s.check_row_range("run_passes", n, pos0);
    s.check_passes(first, last, h_in, e_in);
    with_cuda_errors("cuda run_passes", [&] {
        s.ops.synchronize();
        s.set_rows(tokens, pos0, n);
        const Impl::ForcedKernels kernels(s);  // as laid-out rows
        s.pass_rows(n, first, last, h_in, e_in, out_h, out_e, hook, hook_row0);
    });
    s.passes_n = n;
    s.head_stale = true;
    pos_ = pos0 + n;
    s.primed = false;
    s.logits_pinned = false;
}

void CudaSession::rows_logits(int row0, int n, float* out) {
    Impl& s = *impl_;
    if (row0 < 0 || n < 1 || row0 + n > s.passes_n)
        throw Error(ErrorCode::InvalidArgument, "logits: rows " + std::to_string(row0) + ".." +
                                                    std::to_string(row0 + n - 1) + " are outside the last run's 0.." +
                                                    std::to_string(s.passes_n - 1));
    with_cuda_errors("cuda rows logits", [&] {
        s.head_rows(row0, n);
        s.ops.synchronize();
        s.ctx.download(out, s.logits.get(), size_t(n) * s.hp.vocab_size * sizeof(float));
    });
    // head_rows left the last of these rows as last_logits' row; the run's own last row is
    // what last_logits gives (computed again when asked for)
    s.head_stale = row0 + n != s.passes_n;
}

void CudaSession::run_wave(const int32_t* tokens, const int* pass, int n, int pos0, float* h, float* e,
                           const int* heads, int n_heads, float* logits) {
    Impl& s = *impl_;
    const HParams& hp = s.hp;
    const int d = hp.d_model, V = hp.vocab_size;
    s.no_coda("run_wave");
    s.check_row_range("run_wave", n, pos0);
    int fresh = n;  // rows [fresh, n) start at pass 1 (a suffix: passes are non-increasing)
    for (int t = 0; t < n; ++t) {
        if (pass[t] < 1 || pass[t] > s.o.loops || (t > 0 && pass[t] > pass[t - 1]))
            throw Error(ErrorCode::InvalidArgument, "run_wave: pass[" + std::to_string(t) + "] " + std::to_string(pass[t]) +
                                                        ": passes must be in [1, " + std::to_string(s.o.loops) +
                                                        "] and non-increasing");
        if (pass[t] == 1 && fresh == n) fresh = t;
    }
    if (n_heads < 0 || n_heads > n)
        throw Error(ErrorCode::InvalidArgument, "run_wave: n_heads " + std::to_string(n_heads) + " is outside [0, n]");
    for (int i = 0; i < n_heads; ++i)
        if (heads[i] < 0 || heads[i] >= n)
            throw Error(ErrorCode::InvalidArgument, "run_wave: heads[" + std::to_string(i) + "] is outside [0, n)");
    const bool inject = injects_input(hp);
    if (!h || (inject && !e) || (fresh < n && !tokens) || (n_heads > 0 && !logits))
        throw Error(ErrorCode::InvalidArgument, "run_wave: h, e (an injecting model), tokens (rows at pass 1) and "
                                                "logits (heads) are required");
    with_cuda_errors("cuda run_wave", [&] {
        s.ops.synchronize();
        const Impl::ForcedKernels kernels(s);  // a row's bits alone or in a wave
        const size_t row_bytes = size_t(d) * sizeof(float);
        float* x = s.h.f32();
        float* ev = inject ? s.e_in.f32() : nullptr;
        if (fresh > 0) {  // the rows in flight: their states (and prelude outputs) from the host
            s.ctx.upload(x, h, size_t(fresh) * row_bytes);
            if (inject) s.ctx.upload(ev, e, size_t(fresh) * row_bytes);
        }
        if (fresh < n) {  // the new rows' embedding and prelude (an adapter model's initial state), at rows fresh..
            s.set_rows(tokens + fresh, pos0 + fresh, n - fresh);
            Impl::Cache cache(s);
            PassPlan plan;
            plan.loops = 0;
            plan.s0 = s.initial_rows(n - fresh);
            run_layers(s.ops, hp, s.w.stack(), cache, s.block_scratch(), s.ids.i32(), x + size_t(fresh) * d,
                       ev ? ev + size_t(fresh) * d : nullptr, n - fresh, plan);
            s.ops.synchronize();
        }
        s.set_rows(nullptr, pos0, n);  // every row's position and range
        const LayerStack st = s.w.stack();
        const BlockScratch sc = s.block_scratch();
        // begin_pass per run of rows that take the input alike (add: pass > 1 only; adapter: every pass)
        for (int t0 = 0; t0 < n;) {
            int t1 = t0 + 1;
            while (t1 < n && (pass[t1] > 1) == (pass[t0] > 1)) ++t1;
            begin_pass(s.ops, hp, st, sc, x + size_t(t0) * d, ev ? ev + size_t(t0) * d : nullptr, t1 - t0, pass[t0]);
            t0 = t1;
        }
        Impl::WaveCache cache(s, pass, n);
        int j = 0;
        for (const LayerWeights& l : s.w.loop) block_forward(s.ops, hp, l, cache, j++, sc, x, n);
        end_pass(s.ops, hp, st, sc, x, n);
        for (int i = 0; i < n_heads; ++i) s.head(x + size_t(heads[i]) * d, 1, s.logits.f32() + size_t(i) * V);
        s.ops.synchronize();
        s.ctx.download(h, x, size_t(n) * row_bytes);
        if (inject) s.ctx.download(e, ev, size_t(n) * row_bytes);
        if (n_heads > 0) s.ctx.download(logits, s.logits.get(), size_t(n_heads) * V * sizeof(float));
    });
    s.last_row = n_heads > 0 ? n_heads - 1 : 0;
    s.head_stale = false;
    s.primed = false;
    s.logits_pinned = false;
    pos_ = pos0 + n;
}

void CudaSession::set_pos(int p) {
    Impl& s = *impl_;
    if (p < 0 || p > s.o.capacity)
        throw Error(ErrorCode::InvalidArgument, "pos: " + std::to_string(p) + " is outside [0, " +
                                                    std::to_string(s.o.capacity) + "]");
    pos_ = p;
    s.primed = false;
    s.logits_pinned = false;
}

namespace {

// Laid-out rows (CudaRows) checked against the session: n within the chunk, every cache row,
// range end and extra row within the cache's rows (capacity + scratch), positions within the
// model's context. Throws Error(InvalidArgument) naming the field.
int check_rows(const CudaRows& r, int max_n, int cache_rows, int max_seq_len, bool need_tokens) {
    if (r.n < 1 || r.n > max_n)
        throw Error(ErrorCode::InvalidArgument, "rows.n: " + std::to_string(r.n) + " is outside [1, " +
                                                    std::to_string(max_n) + "] (the prefill chunk)");
    if ((need_tokens && !r.tokens) || !r.positions || !r.kv_begin || !r.kv_end)
        throw Error(ErrorCode::InvalidArgument, std::string("rows: ") + (need_tokens ? "tokens, " : "") +
                                                    "positions, kv_begin and kv_end are required");
    const int n = r.n, cap = cache_rows;
    for (int t = 0; t < n; ++t) {
        const int row = r.cache_rows ? r.cache_rows[t] : r.positions[t];
        if (row < 0 || row >= cap || r.positions[t] < 0 || r.positions[t] >= max_seq_len || r.kv_begin[t] < 0 ||
            r.kv_end[t] > cap || r.kv_begin[t] > r.kv_end[t])
            throw Error(ErrorCode::InvalidArgument, "rows[" + std::to_string(t) + "]: a cache row or range is outside [0, " +
                                                        std::to_string(cap) + ") or the position outside [0, max_seq_len " +
                                                        std::to_string(max_seq_len) + ")");
    }
    int n_extra = 0;
    if (r.extra_offsets) {
        if (!r.extra_rows && r.extra_offsets[n] > 0)
            throw Error(ErrorCode::InvalidArgument, "rows.extra_rows: required with extra_offsets");
        n_extra = r.extra_offsets[n];
        for (int t = 0; t < n; ++t)
            if (r.extra_offsets[t] < 0 || r.extra_offsets[t] > r.extra_offsets[t + 1])
                throw Error(ErrorCode::InvalidArgument, "rows.extra_offsets: must be non-decreasing from 0");
        for (int i = 0; i < n_extra; ++i)
            if (r.extra_rows[i] < 0 || r.extra_rows[i] >= cap)
                throw Error(ErrorCode::InvalidArgument, "rows.extra_rows[" + std::to_string(i) + "]: outside [0, " +
                                                            std::to_string(cap) + ")");
    }
    return n_extra;
}

}  // namespace

// The rows' ids (when given), positions, ranges, cache rows and extras on the device, the
// cache side set to them (store_at, extras) and the batch-invariant kernels forced until the
// returned guard goes (forward_rows' bits: a row gives what it gives as a decode step).
struct CudaSession::LaidOut {
    Impl& s;
    LaidOut(Impl& s_, const CudaRows& r, int n_extra) : s(s_) {
        const int n = r.n;
        std::vector<int> crow(r.cache_rows ? r.cache_rows : r.positions, (r.cache_rows ? r.cache_rows : r.positions) + n);
        if (s.crow.size() < size_t(s.rows) * sizeof(int)) s.crow = kc::DeviceBuffer(s.ctx, size_t(s.rows) * sizeof(int));
        if (r.tokens) s.ctx.upload(s.ids.get(), r.tokens, size_t(n) * sizeof(int));
        s.ctx.upload(s.pos.get(), r.positions, size_t(n) * sizeof(int));
        s.ctx.upload(s.kvb.get(), r.kv_begin, size_t(n) * sizeof(int));
        s.ctx.upload(s.kve.get(), r.kv_end, size_t(n) * sizeof(int));
        s.ctx.upload(s.crow.get(), crow.data(), size_t(n) * sizeof(int));
        if (r.extra_offsets) {
            if (s.extra_offsets.size() < size_t(n + 1) * sizeof(int))
                s.extra_offsets = kc::DeviceBuffer(s.ctx, size_t(s.rows + 1) * sizeof(int));
            if (s.extra_rows.size() < size_t(std::max(n_extra, 1)) * sizeof(int))
                s.extra_rows = kc::DeviceBuffer(s.ctx, size_t(std::max(n_extra, 1)) * sizeof(int));
            s.ctx.upload(s.extra_offsets.get(), r.extra_offsets, size_t(n + 1) * sizeof(int));
            s.ctx.upload(s.extra_rows.get(), r.extra_rows, size_t(n_extra) * sizeof(int));
            s.d_extra_rows = s.extra_rows.i32();
            s.d_extra_offsets = s.extra_offsets.i32();
        }
        s.store_at = s.crow.i32();
        s.ops.force_kernels(true);
    }
    ~LaidOut() {
        s.store_at = nullptr;
        s.d_extra_rows = s.d_extra_offsets = nullptr;
        s.ops.force_kernels(false);
    }
};

void CudaSession::forward_rows(const CudaRows& r, std::vector<float>& logits) {
    Impl& s = *impl_;
    const int n_extra = check_rows(r, s.rows, s.cache_rows, s.w.model().max_seq_len, true);
    const int n = r.n;
    const int V = s.hp.vocab_size;
    logits.assign(size_t(n) * V, 0.0f);
    with_cuda_errors("cuda forward_rows", [&] {
        LaidOut lay(s, r, n_extra);
        s.rows_forward(n);
        s.head_rows(0, n);
        s.ctx.download(logits.data(), s.logits.get(), logits.size() * sizeof(float));
        s.primed = false;
        s.logits_pinned = false;
    });
    s.head_stale = false;
    account();  // the verification buffers may have grown
}

void CudaSession::run_passes(const CudaRows& r, int first, int last, const float* h_in, const float* e_in,
                             float* out_h, float* out_e) {
    Impl& s = *impl_;
    const int n_extra = check_rows(r, s.rows, s.cache_rows, s.w.model().max_seq_len, first <= 1);
    s.check_passes(first, last, h_in, e_in);
    const int n = r.n;
    with_cuda_errors("cuda run_passes", [&] {
        s.ops.synchronize();
        LaidOut lay(s, r, n_extra);
        s.pass_rows(n, first, last, h_in, e_in, out_h, out_e);
    });
    s.passes_n = n;
    s.head_stale = true;
    s.primed = false;
    s.logits_pinned = false;
    account();
}

void CudaSession::import_prefix(const CudaSession& src_session, int n) {
    Impl& s = *impl_;
    Impl& src = *src_session.impl_;
    if (&src.w != &s.w) throw Error(ErrorCode::Internal, "import_prefix: a session on other weights");
    s.no_coda("import_prefix");
    if (n < 0 || n > s.o.capacity || n > src.o.capacity)
        throw Error(ErrorCode::InvalidArgument, "import_prefix: n " + std::to_string(n) + " is outside [0, " +
                                                    std::to_string(std::min(s.o.capacity, src.o.capacity)) + "]");
    if (src.layers < s.layers)
        throw Error(ErrorCode::Internal, "import_prefix: the source holds " + std::to_string(src.layers) +
                                             " layers, this sequence needs " + std::to_string(s.layers));
    with_cuda_errors("cuda import_prefix", [&] {
        src.ops.synchronize();  // the source's stream idle before this one reads its memory
        s.ops.synchronize();
        for (int e = 0; e < s.layers && n > 0; ++e) s.copy_rows(src, e, 0, 0, n);
        s.ctx.synchronize();
    });
    pos_ = n;
    s.primed = false;
    s.logits_pinned = false;
    s.head_stale = false;
}

void CudaSession::set_last_state(const float* h) {
    Impl& s = *impl_;
    s.no_coda("set_last_state");
    with_cuda_errors("cuda set_last_state", [&] {
        s.ops.synchronize();
        s.ctx.upload(s.h.get(), h, size_t(s.hp.d_model) * sizeof(float));
        s.head_rows(0, 1);
        s.ops.synchronize();
    });
    s.head_stale = false;
    s.logits_pinned = false;
}

void CudaSession::set_last_logits(const float* logits) {
    Impl& s = *impl_;
    with_cuda_errors("cuda set_last_logits", [&] {
        s.ops.synchronize();
        s.ctx.upload(s.logits.get(), logits, size_t(s.hp.vocab_size) * sizeof(float));
    });
    s.last_row = 0;
    s.head_stale = false;
    s.logits_pinned = false;
    s.primed = false;
}

void CudaSession::copy_position(int from, int to) {
    Impl& s = *impl_;
    if (from < 0 || from >= s.cache_rows || to < 0 || to >= s.cache_rows)
        throw Error(ErrorCode::InvalidArgument, "copy_position: rows " + std::to_string(from) + " -> " +
                                                    std::to_string(to) + " are outside [0, " +
                                                    std::to_string(s.cache_rows) + ")");
    with_cuda_errors("cuda copy_position", [&] {
        s.ops.synchronize();
        for (int e = 0; e < s.layers; ++e) s.copy_rows(s, e, from, to, 1);
    });
}

CudaSessionLease::CudaSessionLease(const CudaWeights& w, const CudaSessionOptions& opt)
    : w_(w), uncaught_(std::uncaught_exceptions()) {
    const Model& m = w.model();
    CudaSessionOptions o = opt;
    o.loops = resolve_loops(m, o.loops);
    if (o.capacity == 0) o.capacity = m.max_seq_len;
    reference_step_for_int8(o);  // as the session resolves it, so a kept INT8 session fits
    {
        std::lock_guard<std::mutex> lock(w.pool_mu_);
        if (w.idle_) {
            const CudaSessionOptions& k = w.idle_->options();
            if (k.loops == o.loops && k.window == o.window && k.gemm_min_tokens == o.gemm_min_tokens &&
                k.use_graph == o.use_graph && k.fast == o.fast && k.kv_cache == o.kv_cache && k.capacity >= o.capacity &&
                k.scratch_rows >= o.scratch_rows) {
                s_ = std::move(w.idle_);
                reused_ = true;
            } else {
                w.idle_.reset();  // unfit: its memory goes before the new session takes its own
            }
        }
    }
    if (s_) s_->set_pos(0);
    else s_ = std::make_unique<CudaSession>(w, o);
}

CudaSessionLease::~CudaSessionLease() {
    if (!s_ || std::uncaught_exceptions() > uncaught_) return;  // a session after an error is not kept
    std::unique_ptr<CudaSession> old;
    std::lock_guard<std::mutex> lock(w_.pool_mu_);
    old = std::move(w_.idle_);
    w_.idle_ = std::move(s_);
}

std::shared_ptr<const CudaWeights> upload_weights(const Model& m, int device) {
    return std::make_shared<const CudaWeights>(m, device);
}

size_t cuda_model_bytes(const CudaWeights& w) { return w.device_bytes() + w.session_bytes.load(); }

namespace {

// The CUDA executor's one-row stepper (executor.h ExecRow): the session's row_* calls; the state
// is brought to host memory only when asked for (state()), once per change.
class CudaRow final : public ExecRow {
public:
    CudaRow(CudaSession& s, int d) : s_(s), h_(size_t(d)) {}
    void begin(int32_t token, int pos) override {
        s_.row_begin(token, pos);
        held_ = false;
    }
    void pass(int pass) override {
        s_.row_pass(pass);
        held_ = false;
    }
    const float* state() override {
        if (!held_) s_.row_state(h_.data());
        held_ = true;
        return h_.data();
    }
    void set_state(const float* h) override {
        s_.row_set_state(h);
        if (h != h_.data()) std::copy(h, h + h_.size(), h_.begin());
        held_ = true;
    }
    // Not on a coda model (exec_supports_together): the readout input is the state itself.
    const float* readout(const float* h) override { return h; }
    void logits(const float* r, float* out) override { s_.row_logits(r, out); }
    void propagate(int exited, int loops) override { s_.row_propagate(exited, loops); }
    void finish() override { s_.row_finish(); }

private:
    CudaSession& s_;
    std::vector<float> h_;
    bool held_ = false;  // h_ holds the device's state
};

// The CUDA executor's sequence (executor.h): a device session; a run of one row at the session's
// position is its captured decode step, any other run a prefill from pos0; row() steps one row a
// pass at a time (early exit).
class CudaSequence final : public ExecSequence {
public:
    CudaSequence(const CudaWeights& w, const SequenceSpec& spec) : CudaSequence(w, options(spec, w.model().max_seq_len)) {}
    // The kept session when it fits: no set-up, no capture.
    CudaSequence(const CudaWeights& w, const CudaSessionOptions& o)
        : w_(w), hp_(w.model().hp), o_(o), s_(w, o_), chunk_(std::max(1, w.model().prefill_chunk)) {}
    size_t cache_bytes() const override {  // keys and values (INT8: codes and a scale per kv head)
        const size_t row = o_.kv_cache == KVCacheType::Int8
                               ? size_t(hp_.n_kv_heads) * hp_.head_dim + size_t(hp_.n_kv_heads) * sizeof(float)
                               : size_t(hp_.n_kv_heads) * hp_.head_dim * sizeof(float);
        return size_t(2) * exec_layers(hp_, o_.loops) * (o_.capacity + o_.scratch_rows) * row;
    }
    int capacity() const override { return o_.capacity; }
    void run(const int32_t* tokens, int n, int pos0, const PassHook* on_readout) override {
        if (on_readout && *on_readout) {  // the readouts after every pass: the rows pass by pass, no graph
            chunked(tokens, n, pos0, 1, o_.loops, nullptr, nullptr, nullptr, nullptr, on_readout);
            return;
        }
        if (n == 1 && pos0 == s_->pos() && pos0 > 0) {
            s_->decode(tokens[0]);  // the device's own greedy pick is not used: the host pipeline decides
            return;
        }
        if (pos0 != s_->pos()) s_->set_pos(pos0);
        s_->prefill(tokens, n);
    }
    void last_logits(float* out) override {
        const std::vector<float> l = s_->last_logits();
        std::copy(l.begin(), l.end(), out);
    }
    // Chain self-speculation's draft (passes 1..D of one row) and verification (passes D+1..L of
    // the drafted rows from their states). Not the tree's laid-out rows, nor per-pass hooks.
    void run_passes(const PassRun& r) override {
        const int last = r.last > 0 ? r.last : o_.loops;
        // without a coda (a coda model's calls between passes are the CPU's) a row's readout is
        // its state: one hook sees both when both are asked for
        PassHook both;
        const PassHook* hook = r.on_readout && *r.on_readout ? r.on_readout : r.on_state;
        if (r.on_readout && *r.on_readout && r.on_state && *r.on_state) {
            both = [&](int pass, int row0, const float* h, int n) {
                (*r.on_readout)(pass, row0, h, n);
                (*r.on_state)(pass, row0, h, n);
            };
            hook = &both;
        }
        if (!r.layout) {
            chunked(r.tokens, r.n, r.pos0, r.first, last, r.h_in, r.e_in, r.out_h, r.out_e, hook);
            return;
        }
        if (hook && *hook) unsupported(ExecKind::Cuda, ExecOp::PassReadouts);  // laid-out rows report none (executor.h)
        // tree rows: each its position, cache row, visible rows [0, visible_end) and extras
        const RowLayout& lay = *r.layout;
        if (int(lay.pos.size()) != r.n || int(lay.cache_row.size()) != r.n || int(lay.visible_end.size()) != r.n ||
            int(lay.extra_offsets.size()) != r.n + 1)
            throw Error(ErrorCode::Internal, "run_passes: a row layout needs n positions, rows, ends and n + 1 offsets");
        const std::vector<int> begin(size_t(r.n), 0);
        CudaRows rows;
        rows.tokens = r.tokens;
        rows.n = r.n;
        rows.positions = lay.pos.data();
        rows.cache_rows = lay.cache_row.data();
        rows.kv_begin = begin.data();
        rows.kv_end = lay.visible_end.data();
        rows.extra_rows = lay.extra_rows.data();
        rows.extra_offsets = lay.extra_offsets.data();
        s_->run_passes(rows, r.first, last, r.h_in, r.e_in, r.out_h, r.out_e);
    }
    void logits(int row0, int n, float* out) override {
        if (row0 < base_)
            throw Error(ErrorCode::Internal, "logits: rows before the last chunk of a run (" + std::to_string(row0) +
                                                 " < " + std::to_string(base_) + ")");
        s_->rows_logits(row0 - base_, n, out);
    }
    void copy_position(int from, int to) override { s_->copy_position(from, to); }
    // Pipelined self-speculation's sweep (CudaSession::run_wave).
    void run_wave(const WaveRun& r) override {
        s_->run_wave(r.tokens, r.pass, r.n, r.pos0, r.h, r.e, r.heads, r.n_heads, r.logits);
        base_ = 0;
    }
    void import_prefix(const ExecSequence& src, int n) override {
        const auto* c = dynamic_cast<const CudaSequence*>(&src);
        if (!c) throw Error(ErrorCode::Internal, "import_prefix: a sequence of another back end");
        s_->import_prefix(*c->s_, n);
    }
    void set_last_state(const float* h) override { s_->set_last_state(h); }
    // A beam of its own (beam search): a session on the same weights with every position of this
    // one's cache copied in and its last logits, so the two decode apart from here.
    std::unique_ptr<ExecSequence> fork() const override {
        const std::vector<float> last = s_->last_logits();
        auto f = std::make_unique<CudaSequence>(w_, o_);
        f->s_->import_prefix(*s_, s_->pos());
        f->s_->set_last_logits(last.data());
        f->base_ = base_;
        return f;
    }
    ExecRow& row(int window) override {
        if (window != o_.window)
            throw Error(ErrorCode::Internal, "row: window " + std::to_string(window) + ", the sequence's is " +
                                                 std::to_string(o_.window));
        if (!row_) row_ = std::make_unique<CudaRow>(*s_, hp_.d_model);
        return *row_;
    }

private:
    // run_passes over rows in chunks of the session's prefill chunk (a prefix cache's whole
    // prompt), each chunk all passes first..last, the hook told each chunk's first row.
    void chunked(const int32_t* tokens, int n, int pos0, int first, int last, const float* h_in, const float* e_in,
                 float* out_h, float* out_e, const PassHook* hook) {
        const int chunk = chunk_;
        const size_t d = size_t(hp_.d_model);
        for (int c0 = 0; c0 < n; c0 += chunk) {
            const int m = std::min(chunk, n - c0);
            const size_t off = size_t(c0) * d;
            s_->run_passes(tokens ? tokens + c0 : nullptr, m, pos0 + c0, first, last, h_in ? h_in + off : nullptr,
                           e_in ? e_in + off : nullptr, out_h ? out_h + off : nullptr, out_e ? out_e + off : nullptr,
                           hook, c0);
            base_ = c0;
        }
    }
    // The capacity at most the model's context (the RoPE table holds max_seq_len positions); the
    // rows a call asks for past it are scratch rows (tree speculation's candidates follow the
    // sequence's own rows; chain speculation's drafting room is never written past the context).
    static CudaSessionOptions options(const SequenceSpec& spec, int max_seq_len) {
        CudaSessionOptions o;
        o.kv_cache = spec.kv_cache;
        o.loops = spec.loops;
        o.capacity = std::min(spec.capacity, max_seq_len);
        o.scratch_rows = std::min(spec.capacity - o.capacity, 1024);
        o.window = spec.window;
        o.fast = cuda_fast_from_env();
        return o;
    }
    const CudaWeights& w_;
    const HParams& hp_;
    CudaSessionOptions o_;
    CudaSessionLease s_;
    std::unique_ptr<CudaRow> row_;
    int chunk_;     // rows per run_passes call (the session's workspace rows)
    int base_ = 0;  // the row of the last run whose state is the session's row 0 (chunked runs)
};

class CudaExecutor final : public Executor {
public:
    explicit CudaExecutor(const Model& m) : m_(m) {}
    ExecKind kind() const override { return ExecKind::Cuda; }
    std::unique_ptr<ExecSequence> sequence(const SequenceSpec& spec) const override {
        return std::make_unique<CudaSequence>(*m_.cuda, spec);
    }
    // The sequence's prefill on the device at depth `loops` (f32 KV cache; prefill chunks of >= 64
    // rows through cuBLAS), every row's logits downloaded.
    std::vector<float> sequence_logits(const int32_t* tokens, int n, int loops, KVCacheType kv_cache) const override {
        CudaSessionOptions o;
        o.kv_cache = kv_cache;
        o.loops = loops;
        o.capacity = n;
        o.fast = cuda_fast_from_env();
        CudaSessionLease s(*m_.cuda, o);
        std::vector<float> logits;
        s->prefill(tokens, n, &logits);
        return logits;
    }
    // The batch engine's run over device pools (cuda_batch.cpp).
    std::unique_ptr<ExecBatch> batch() const override { return make_cuda_batch(*m_.cuda); }

private:
    const Model& m_;
};

}  // namespace

std::unique_ptr<Executor> make_cuda_executor(const Model& m) {
    if (!m.cuda) throw Error(ErrorCode::Internal, "make_cuda_executor: the model's weights are not on the device");
    return std::make_unique<CudaExecutor>(m);
}

}  // namespace tinyloop

#endif  // TINYLOOP_HAVE_CUDA
