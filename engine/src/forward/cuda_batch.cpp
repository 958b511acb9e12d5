// The batch engine on the device (cuda_forward.h make_cuda_batch; executor.h ExecBatch): the
// CPU's forward_batch on CudaOps. Every sequence's rows of a step go through the same passes in
// one run_layers (the products see every row; pass p runs the rows of the sequences at least p
// deep, a prefix, PassPlan::pass_rows), each row's keys and values into its own sequence's pages
// and its attention over them. The pools' rows live here, in device memory laid out as the host
// pool's storage (page p holds storage rows [p * page_size, (p + 1) * page_size), for whichever
// (layer, block) of whichever sequence it was given); the engine's KVPagePool keeps only that
// bookkeeping (each sequence's page table), which a step uploads. Per layer one small launch (kern::cuda::paged_rows) expands them
// into each row's store row and attention list: the rows of its range in the range's order, so
// the attention (kern::cuda::attention over a list) gives the bits of a lone session's range.
// The products are the batch-invariant kernels (never cuBLAS): a sequence's rows give the bits
// they give alone, so a request's tokens are the device's greedy decoding of it by the reference
// step (where that prefill ran the same kernels: chunks under gemm_min_tokens rows).
//
// Early exit's one-row stepper (row()) runs the same pieces over one sequence's pages. Not on a
// coda model (exec_supports_together keeps such an engine on the CPU): a state is its readout.
#ifdef TINYLOOP_HAVE_CUDA

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <vector>

#include "forward/cuda_backend.h"
#include "forward/cuda_forward.h"
#include "forward/executor.h"
#include "forward/forward.h"
#include "kernels/cuda/byte_share.h"
#include "kernels/cuda/device_helpers.h"

namespace tinyloop {

namespace kc = kern::cuda;

namespace {

[[noreturn]] void bad(const std::string& what) { throw Error(ErrorCode::Internal, "cuda batch: " + what); }

// A pool's rows in device memory: f32 keys/values, or INT8 codes with one scale per (row, kv
// head) (the host storage's layout; zeroed at allocation as the host's are).
struct DevicePool {
    bool int8 = false;
    int page_size = 0;
    kc::DeviceBuffer k, v, kq, vq, ks, vs;
    size_t bytes() const { return k.size() + v.size() + kq.size() + vq.size() + ks.size() + vs.size(); }
};

class CudaBatch;

// Early exit's stepper over one sequence's pages (executor.h ExecRow): row 0 of the batch's
// buffers.
class CudaPagedRow final : public ExecRow {
public:
    CudaPagedRow(CudaBatch& b, KVCache& kv, int window, int d) : b_(b), kv_(kv), window_(window), h_(size_t(d)) {}
    void begin(int32_t token, int pos) override;
    void pass(int pass) override;
    const float* state() override;
    void set_state(const float* h) override;
    const float* readout(const float* h) override { return h; }  // no coda on the device's batch
    void logits(const float* r, float* out) override;
    void propagate(int exited, int loops) override;
    void finish() override;

private:
    CudaBatch& b_;
    KVCache& kv_;
    int window_;
    int pos_ = -1;
    std::vector<float> h_;
    bool held_ = false;  // h_ holds the device's state
};

class CudaBatch final : public ExecBatch {
public:
    explicit CudaBatch(const CudaWeights& w)
        : w_(w), hp_(w.model().hp), ctx_(w.device()), ops_(ctx_), share_(w.session_bytes) {
        // run() has no coda readout: such a model's engine is the CPU's (exec_supports_together)
        if (hp_.n_coda_blocks > 0) bad("a model with coda blocks");
        kv_row_ = hp_.n_kv_heads * hp_.head_dim;
        const std::vector<float> tab = kc::rope_table(w.model().max_seq_len, hp_.head_dim, hp_.rope_theta);
        rope_tab_ = kc::DeviceBuffer(ctx_, tab.size() * sizeof(float));
        ctx_.upload(rope_tab_.get(), tab.data(), tab.size() * sizeof(float));
        row_in_ = kc::DeviceBuffer(ctx_, size_t(hp_.d_model) * sizeof(float));
        row_out_ = kc::DeviceBuffer(ctx_, size_t(hp_.vocab_size) * sizeof(float));
        account();
    }

    bool pages_on_host() const override { return false; }

    void adopt(const KVPagePool& pool) override {
        if (pool.host_storage) bad("a pool with host rows");
        const size_t rows = pool.storage.rows;
        if (rows > size_t(INT_MAX))
            throw Error(ErrorCode::InvalidArgument,
                        "kv_pages: " + std::to_string(pool.n_pages) + " pages of " + std::to_string(pool.page_size) +
                            " positions are " + std::to_string(rows) + " rows, over the CUDA batch's " +
                            std::to_string(INT_MAX));
        DevicePool p;
        p.int8 = pool.storage.type == KVCacheType::Int8;
        p.page_size = pool.page_size;
        with_cuda_errors("cuda batch pool", [&] {
            auto buf = [&](size_t bytes) {
                kc::DeviceBuffer b(ctx_, bytes);
                ctx_.memset(b.get(), 0, bytes);
                return b;
            };
            if (p.int8) {
                p.kq = buf(rows * kv_row_);
                p.vq = buf(rows * kv_row_);
                p.ks = buf(rows * hp_.n_kv_heads * sizeof(float));
                p.vs = buf(rows * hp_.n_kv_heads * sizeof(float));
            } else {
                p.k = buf(rows * kv_row_ * sizeof(float));
                p.v = buf(rows * kv_row_ * sizeof(float));
            }
        });
        pools_[&pool] = std::move(p);
        account();
    }

    void run(const BatchPart* parts, int n, float* out) override {
        if (n < 1) bad("no parts");
        const int d = hp_.d_model, V = hp_.vocab_size;
        Plan pl;
        std::vector<int> pass_rows(size_t(hp_.max_loops) + 1, 0);
        int k = 0;
        for (int i = 0; i < n; ++i) {
            const BatchSeq& q = parts[i].rows;
            if (q.n < 1 || q.loops < 1 || q.loops > hp_.max_loops || (i > 0 && q.loops > parts[i - 1].rows.loops) ||
                !q.kv || q.tokens == nullptr)
                bad("part " + std::to_string(i) + " (rows, depth or order)");
            const int t0 = int(pl.ids.size());
            for (int j = 0; j < q.n; ++j) add_row(pl, *q.kv, q.loops, q.tokens[j], q.pos0 + j, q.window);
            for (int l = 1; l <= q.loops; ++l) pass_rows[size_t(l)] = t0 + q.n;
            k += parts[i].logits ? 1 : 0;
        }
        const int T = int(pl.ids.size());
        with_cuda_errors("cuda batch", [&] {
            upload(pl, k);
            PagedCache cache(*this);
            PassPlan plan;
            plan.loops = parts[0].rows.loops;
            plan.s0 = cuda_initial_rows(ops_, w_, pos(), T, rb_.s0.f32());
            plan.pass_rows = pass_rows.data();
            run_layers(ops_, hp_, w_.stack(), cache, scratch(), ids(), rb_.h.f32(), rb_.e_in.f32(), T, plan);
            if (k > 0) {  // the wanted last rows, gathered, through the head
                int at = 0, r = 0;
                for (int i = 0; i < n; ++i) {
                    at += parts[i].rows.n;
                    if (!parts[i].logits) continue;
                    ops_.copy(hrows_.f32() + size_t(r++) * d, rb_.h.f32() + size_t(at - 1) * d, size_t(d) * sizeof(float));
                }
                cuda_head(ops_, w_, hrows_.f32(), k, rb_.a.f32(), logits_.f32());
            }
            ops_.synchronize();
            if (k > 0) ctx_.download(out, logits_.f32(), size_t(k) * V * sizeof(float));
        });
    }

    ExecRow& row(KVCache& kv, int window) override {
        row_ = std::make_unique<CudaPagedRow>(*this, kv, window, hp_.d_model);
        return *row_;
    }

    // The head over the row stepper's state (row 0), as the CPU batch's last_logits.
    void last_logits(float* out) override {
        with_cuda_errors("cuda batch logits", [&] {
            cuda_head(ops_, w_, rb_.h.f32(), 1, rb_.a.f32(), row_out_.f32());
            ops_.synchronize();
            ctx_.download(out, row_out_.f32(), size_t(hp_.vocab_size) * sizeof(float));
        });
    }

private:
    friend class CudaPagedRow;

    // A step's rows on the host, uploaded at once: row t's token, position, attention range start,
    // the offset of its list (off[t], n + 1 entries), its page table's offset in `tables` and
    // blocks per layer, and its pool.
    struct Plan {
        std::vector<int> ids, pos, begin, off{0}, table_at, blocks, tables;
        std::vector<const DevicePool*> pool;
        std::map<const KVCache*, int> table_of;  // each cache's table once
        int page_size = 0;
    };

    // Row t of a step: the checks the CPU's forward_batch makes, and that its position has a page
    // in every layer (the CPU trusts it; earlier positions were checked when they ran), then its
    // fields.
    void add_row(Plan& pl, const KVCache& kv, int loops, int32_t token, int p, int window) {
        auto it = kv.pool ? pools_.find(kv.pool) : pools_.end();
        if (it == pools_.end()) bad("a cache outside the batch's pools");
        const DevicePool& dp = it->second;
        if (kv.n_layers < exec_layers(hp_, loops) || p < 0 || p >= kv.capacity || p >= w_.model().max_seq_len)
            bad("position " + std::to_string(p) + " or depth " + std::to_string(loops) + " outside the cache");
        if (pl.page_size == 0) pl.page_size = dp.page_size;
        if (dp.page_size != pl.page_size || kv.page_size != dp.page_size) bad("caches of two page sizes");
        auto [at, fresh] = pl.table_of.emplace(&kv, int(pl.tables.size()));
        if (fresh) pl.tables.insert(pl.tables.end(), kv.pages.begin(), kv.pages.end());
        const int layers = exec_layers(hp_, loops), block = p / kv.page_size;
        for (int e = 0; e < layers; ++e)
            if (kv.pages[size_t(e) * kv.blocks + block] < 0) bad("position " + std::to_string(p) + " has no page");
        const int b0 = window > 0 ? std::max(0, p + 1 - window) : 0;
        pl.ids.push_back(token);
        pl.pos.push_back(p);
        pl.begin.push_back(b0);
        pl.off.push_back(pl.off.back() + (p + 1 - b0));
        pl.table_at.push_back(at->second);
        pl.blocks.push_back(kv.blocks);
        pl.pool.push_back(&dp);
    }

    // The plan's arrays to the device (buffers grown as needed) in one upload, its tables in a
    // second; the per-layer lists are expanded from them by PagedCache.
    void upload(const Plan& pl, int heads) {
        const int T = int(pl.ids.size());
        grow(T, pl.off.back(), pl.tables.size(), heads);
        std::vector<int> meta;
        meta.reserve(size_t(7) * cap_ + 1);
        auto put = [&](const std::vector<int>& a, size_t n) {
            meta.insert(meta.end(), a.begin(), a.begin() + std::ptrdiff_t(n));
            meta.resize(meta.size() + (cap_ + 1 - n), 0);  // each array at a fixed offset of cap + 1
        };
        put(pl.ids, T);
        put(pl.pos, T);
        put(pl.begin, T);
        put(std::vector<int>(size_t(T), 0), T);  // the attention's empty ranges (the rows are its lists)
        put(pl.off, T + 1);
        put(pl.table_at, T);
        put(pl.blocks, T);
        ctx_.upload(meta_.get(), meta.data(), meta.size() * sizeof(int));
        ctx_.upload(tables_.get(), pl.tables.data(), pl.tables.size() * sizeof(int));
        pool_ = pl.pool;
        page_size_ = pl.page_size;
        expanded_layer_ = -1;
    }
    const int* field(int i) const { return meta_.i32() + size_t(i) * (cap_ + 1); }
    const int* ids() const { return field(0); }
    const int* pos() const { return field(1); }
    const int* begins() const { return field(2); }
    const int* zeros() const { return field(3); }
    const int* offs() const { return field(4); }
    const int* table_at() const { return field(5); }
    const int* blocks() const { return field(6); }

    // Buffers for `rows` rows, `listed` list entries, `tables` page-table entries and `heads` rows
    // through the head (grown, never shrunk); the weights' session_bytes follow.
    void grow(int rows, int listed, size_t tables, int heads) {
        if (rows > cap_) {
            const int R = std::max(rows, 2 * cap_);
            cap_ = 0;  // a failed allocation leaves no buffer claiming the new size
            rb_.allocate(ctx_, hp_, size_t(R));
            meta_ = kc::DeviceBuffer(ctx_, (size_t(7) * (R + 1)) * sizeof(int));
            dst_ = kc::DeviceBuffer(ctx_, size_t(R) * sizeof(int));
            cap_ = R;
        }
        if (heads > heads_cap_) {
            const int K = std::max(heads, 2 * heads_cap_);
            heads_cap_ = 0;
            hrows_ = kc::DeviceBuffer(ctx_, size_t(K) * hp_.d_model * sizeof(float));
            logits_ = kc::DeviceBuffer(ctx_, size_t(K) * hp_.vocab_size * sizeof(float));
            heads_cap_ = K;
        }
        if (size_t(listed) * sizeof(int) > list_.size()) list_ = kc::DeviceBuffer(ctx_, size_t(listed) * 2 * sizeof(int));
        if (tables * sizeof(int) > tables_.size()) tables_ = kc::DeviceBuffer(ctx_, tables * 2 * sizeof(int));
        account();
    }

    void account() {
        size_t n = ctx_.device_bytes();
        n += rb_.bytes();
        for (const kc::DeviceBuffer* b : {&hrows_, &logits_, &meta_, &dst_, &list_, &tables_, &rope_tab_, &row_in_, &row_out_})
            n += b->size();
        for (const auto& [pool, p] : pools_) n += p.bytes();
        share_.hold(n);
    }

    BlockScratch scratch() const { return rb_.block_scratch(); }

    // The store rows (dst) and attention lists of rows [0, n) at execution layer `layer`, once per
    // layer (rope_store and attend of a block both read them).
    void expand(int layer, int n) {
        ops_.flush();  // the kernels below read what the ops wrote (nothing is deferred without fuse)
        if (layer == expanded_layer_ && n <= expanded_n_) return;
        kc::paged_rows(ctx_, tables_.i32(), table_at(), blocks(), page_size_, layer, pos(), begins(), offs(), n, dst_.i32(),
                       list_.i32());
        expanded_layer_ = layer;
        expanded_n_ = n;
    }

    // Runs of consecutive rows in one pool (a step may hold f32 and INT8 requests): f(t0, t1, pool).
    template <class F>
    void each_pool_run(int n, const F& f) const {
        for (int t0 = 0; t0 < n;) {
            int t1 = t0 + 1;
            while (t1 < n && pool_[size_t(t1)] == pool_[size_t(t0)]) ++t1;
            f(t0, t1, *pool_[size_t(t0)]);
            t0 = t1;
        }
    }

    // The batch's cache side of a block: each row's keys and values into its own pages, its
    // attention over its list.
    class PagedCache final : public LayerCache {
    public:
        explicit PagedCache(CudaBatch& b) : b_(b) {}
        void rope_store(int layer, float* q, float* k, const float* v, int n) override {
            const HParams& hp = b_.hp_;
            const size_t H = size_t(hp.n_heads) * hp.head_dim, KV = size_t(b_.kv_row_);
            b_.expand(layer, n);
            b_.each_pool_run(n, [&](int t0, int t1, const DevicePool& p) {
                const int* at = b_.pos() + t0;
                const int* rows = b_.dst_.i32() + t0;
                if (p.int8)
                    kc::rope_store_int8(b_.ctx_, q + t0 * H, k + t0 * KV, v + t0 * KV, t1 - t0, hp.n_heads, hp.n_kv_heads,
                                        hp.head_dim, at, b_.rope_tab_.f32(), static_cast<int8_t*>(p.kq.get()),
                                        static_cast<int8_t*>(p.vq.get()), p.ks.f32(), p.vs.f32(), rows);
                else
                    kc::rope_store(b_.ctx_, q + t0 * H, k + t0 * KV, v + t0 * KV, t1 - t0, hp.n_heads, hp.n_kv_heads,
                                   hp.head_dim, at, b_.rope_tab_.f32(), p.k.f32(), p.v.f32(), rows);
            });
        }
        void attend(int layer, const float* q, int n, float* out) override {
            const HParams& hp = b_.hp_;
            const size_t H = size_t(hp.n_heads) * hp.head_dim;
            b_.expand(layer, n);
            b_.each_pool_run(n, [&](int t0, int t1, const DevicePool& p) {
                kern::AttentionArgs at;
                at.q = q + t0 * H;
                at.n_tok = t1 - t0;
                at.n_heads = hp.n_heads;
                at.n_kv_heads = hp.n_kv_heads;
                at.head_dim = hp.head_dim;
                if (p.int8) {
                    at.kq = static_cast<const int8_t*>(p.kq.get());
                    at.vq = static_cast<const int8_t*>(p.vq.get());
                    at.ks = p.ks.f32();
                    at.vs = p.vs.f32();
                    at.scale_stride = hp.n_kv_heads;
                } else {
                    at.k = p.k.f32();
                    at.v = p.v.f32();
                }
                at.kv_stride = b_.kv_row_;
                at.kv_begin = b_.zeros() + t0;  // empty ranges: the rows are the lists (absolute offsets)
                at.kv_end = b_.zeros() + t0;
                at.extra_rows = b_.list_.i32();
                at.extra_offsets = b_.offs() + t0;
                at.out = out + t0 * H;
                kc::attention(b_.ctx_, at);
            });
        }

    private:
        CudaBatch& b_;
    };

    const CudaWeights& w_;
    const HParams& hp_;
    int kv_row_ = 0;
    kc::Context ctx_;
    CudaOps ops_;
    kc::ByteShare share_;
    std::map<const KVPagePool*, DevicePool> pools_;
    int cap_ = 0;        // rows the buffers hold
    int heads_cap_ = 0;  // rows hrows_ and logits_ hold
    CudaRowBuffers rb_;  // the rows' activations
    kc::DeviceBuffer hrows_, logits_;
    kc::DeviceBuffer meta_, dst_, list_, tables_, rope_tab_, row_in_, row_out_;
    std::vector<const DevicePool*> pool_;  // the uploaded rows' pools
    int page_size_ = 0;
    int expanded_layer_ = -1, expanded_n_ = 0;
    std::unique_ptr<CudaPagedRow> row_;
};

void CudaPagedRow::begin(int32_t token, int pos) {
    CudaBatch& b = b_;
    if (pos < 0 || pos >= kv_.capacity)
        throw Error(ErrorCode::InvalidArgument,
                    "row pos: " + std::to_string(pos) + " is outside [0, " + std::to_string(kv_.capacity) + ")");
    // the row's depth is what its cache holds: every pass a step may run
    const int loops = (kv_.n_layers - b.hp_.n_pre_blocks - b.hp_.n_coda_blocks) / std::max(1, b.hp_.n_loop_layers);
    CudaBatch::Plan pl;
    b.add_row(pl, kv_, std::max(1, loops), token, pos, window_);
    with_cuda_errors("cuda batch row", [&] {
        b.upload(pl, 0);
        CudaBatch::PagedCache cache(b);
        PassPlan plan;
        plan.loops = 0;  // the embedding and the prelude (and an adapter model's initial state) only
        plan.s0 = cuda_initial_rows(b.ops_, b.w_, b.pos(), 1, b.rb_.s0.f32());
        run_layers(b.ops_, b.hp_, b.w_.stack(), cache, b.scratch(), b.ids(), b.rb_.h.f32(), b.rb_.e_in.f32(), 1, plan);
    });
    pos_ = pos;
    held_ = false;
}

void CudaPagedRow::pass(int pass) {
    CudaBatch& b = b_;
    const HParams& hp = b.hp_;
    if (pos_ < 0) throw Error(ErrorCode::Internal, "row pass: no row begun");
    if (pass < 1 || loop_layer_index(hp, pass, hp.n_loop_layers - 1) >= kv_.n_layers)
        throw Error(ErrorCode::InvalidArgument, "pass: " + std::to_string(pass) + " is past the sequence's cache");
    with_cuda_errors("cuda batch row pass", [&] {
        CudaBatch::PagedCache cache(b);
        loop_pass(b.ops_, hp, b.w_.stack(), cache, b.scratch(), b.rb_.h.f32(), b.rb_.e_in.f32(), 1, pass);
    });
    held_ = false;
}

const float* CudaPagedRow::state() {
    if (!held_)
        with_cuda_errors("cuda batch row state", [&] {
            b_.ops_.synchronize();
            b_.ctx_.download(h_.data(), b_.rb_.h.f32(), h_.size() * sizeof(float));
        });
    held_ = true;
    return h_.data();
}

void CudaPagedRow::set_state(const float* h) {
    with_cuda_errors("cuda batch row state", [&] {
        b_.ops_.synchronize();
        b_.ctx_.upload(b_.rb_.h.f32(), h, h_.size() * sizeof(float));
    });
    if (h != h_.data()) std::copy(h, h + h_.size(), h_.begin());
    held_ = true;
}

void CudaPagedRow::logits(const float* r, float* out) {
    CudaBatch& b = b_;
    with_cuda_errors("cuda batch row logits", [&] {
        b.ops_.synchronize();
        b.ctx_.upload(b.row_in_.get(), r, h_.size() * sizeof(float));
        cuda_head(b.ops_, b.w_, b.row_in_.f32(), 1, b.rb_.a.f32(), b.row_out_.f32());
        b.ops_.synchronize();
        b.ctx_.download(out, b.row_out_.f32(), size_t(b.hp_.vocab_size) * sizeof(float));
    });
}

// FORMAT.md §1's state propagation into the row's pages (the session's row_propagate): the frozen
// state as pass exited+1 takes it in, then each loop layer's keys and values of it into passes
// exited+1 .. loops.
void CudaPagedRow::propagate(int exited, int loops) {
    CudaBatch& b = b_;
    const HParams& hp = b.hp_;
    if (pos_ < 0) throw Error(ErrorCode::Internal, "row propagate: no row begun");
    if (exited >= loops) return;
    if (exited < 1 || loop_layer_index(hp, loops, hp.n_loop_layers - 1) >= kv_.n_layers)
        throw Error(ErrorCode::InvalidArgument, "propagate: passes " + std::to_string(exited + 1) + ".." +
                                                    std::to_string(loops) + " are outside the sequence's cache");
    with_cuda_errors("cuda batch row propagate", [&] {
        const DevicePool& p = *b.pool_[0];
        float* x = b.row_in_.f32();
        b.ops_.copy(x, b.rb_.h.f32(), h_.size() * sizeof(float));
        begin_pass(b.ops_, hp, b.w_.stack(), b.scratch(), x, b.rb_.e_in.f32(), 1, exited + 1);
        for (int j = 0; j < hp.n_loop_layers; ++j) {
            propagated_kv(b.ops_, hp, b.w_.loop[size_t(j)], x, b.pos(), b.rb_.a.f32(), b.rb_.kk.f32(), b.rb_.vv.f32());
            for (int pass = exited + 1; pass <= loops; ++pass) {
                b.expand(loop_layer_index(hp, pass, j), 1);  // flushes the ops
                if (p.int8) {  // quantized (no rotation: done above)
                    kc::rope_store_int8(b.ctx_, nullptr, b.rb_.kk.f32(), b.rb_.vv.f32(), 1, 0, hp.n_kv_heads, hp.head_dim,
                                        b.pos(), nullptr, static_cast<int8_t*>(p.kq.get()),
                                        static_cast<int8_t*>(p.vq.get()), p.ks.f32(), p.vs.f32(), b.dst_.i32());
                    continue;
                }
                kc::store_rows(b.ctx_, b.rb_.kk.f32(), 1, b.kv_row_, p.k.f32(), b.dst_.i32());
                kc::store_rows(b.ctx_, b.rb_.vv.f32(), 1, b.kv_row_, p.v.f32(), b.dst_.i32());
            }
        }
    });
}

// The row's state is what last_logits() reads (its head); nothing is left to run.
void CudaPagedRow::finish() {
    if (pos_ < 0) throw Error(ErrorCode::Internal, "row finish: no row begun");
    pos_ = -1;
}

}  // namespace

std::unique_ptr<ExecBatch> make_cuda_batch(const CudaWeights& w) {
    return with_cuda_errors("cuda batch", [&]() -> std::unique_ptr<ExecBatch> { return std::make_unique<CudaBatch>(w); });
}

}  // namespace tinyloop

#endif  // TINYLOOP_HAVE_CUDA
