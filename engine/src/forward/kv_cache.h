// The per-call KV cache: one key and one value row per (execution layer, position)
// (FORMAT.md §1, "Execution layers and the KV cache").
//
// Rows live in a KVStorage, as f32 or as INT8 codes with one scale per (row, kv head) (the
// quantized cache of Hugging Face: symmetric, per head and per position). A KVCache either owns
// a contiguous storage (row = layer * capacity + pos) or is a paged view into a shared pool
// (KVPagePool): pages of page_size positions of one execution layer, looked up in its page table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tinyloop/tinyloop.h"

namespace tinyloop {

struct KVStorage {
    KVCacheType type = KVCacheType::F32;
    int row = 0;       // floats per row: kv_heads * head_dim
    int kv_heads = 0;
    int head_dim = 0;
    size_t rows = 0;
    std::vector<float> k, v;     // F32: [rows][row]
    std::vector<int8_t> kq, vq;  // Int8: [rows][row]
    std::vector<float> ks, vs;   // Int8: [rows][kv_heads]

    // Throws Error(OutOfMemory) naming the size when the allocation fails.
    void allocate(KVCacheType t, size_t n_rows, int n_kv_heads, int dim);
    // The shape only (type, rows, heads; bytes() as allocate's, which starts with it), the
    // vectors untouched: on an empty storage, rows that live elsewhere (a device batch's page
    // pool, ExecBatch::pages_on_host).
    void describe(KVCacheType t, size_t n_rows, int n_kv_heads, int dim);
    // Writes one row's key and value ([kv_heads, head_dim] each), quantizing for Int8.
    void store(size_t r, const float* key, const float* val);
    void copy_row(size_t dst, size_t src);
    // Keeps rows [0, n_rows) and returns the memory of the rest.
    void truncate(size_t n_rows);
    size_t row_bytes() const;  // both key and value, scales included
    size_t bytes() const { return rows * row_bytes(); }
};

// Where a KVCache with kv_sharing other than per-pass puts (layer, pos) (FORMAT.md §1c). Storage
// rows: first the compact region, `compact` slots for positions compact_from .. capacity-1
// (row = slot * (capacity - compact_from) + pos - compact_from), then the per-pass region,
// n_layers rows for each position below `prompt` (row = compact rows + layer * prompt + pos):
//   LastPass: compact_from = prompt; slot = layer below `fixed`, else fixed + loop layer j.
//   Compress: compact_from = 0; slot = layer below `fixed`, else fixed + s mod k (s the loop
//             entry (pass-1)*n_loop + j); the per-pass region is `staged` until fold_prompt().
//   LatestM4: the per-pass layout (no compact region); `depth` holds each position's exit pass
//             (0 = every pass), and a loop layer of a deeper pass maps to that pass's.
struct KVShareLayout {
    KVSharing::Mode mode = KVSharing::Mode::PerPass;
    int k = 0;
    int fixed = 0;         // prelude + coda layers: one entry each in every mode
    int n_loop = 0;        // loop layers per pass
    int prompt = 0;        // positions with a per-pass region
    int compact_from = 0;  // first position of the compact region
    int compact = 0;       // slots per compact position
    bool staged = false;   // Compress: the prompt's per-pass rows are still in use
    std::vector<int> depth;  // LatestM4: exit pass per position, 0 = every pass
};

struct KVCache {
    int n_layers = 0;   // execution layers: n_pre_blocks + loops * n_loop_layers
    int capacity = 0;   // positions
    int row = 0;        // floats per position per layer: n_kv_heads * head_dim
    KVStorage own;      // contiguous storage (unused when paged)
    // Paged view: rows come from `pool`'s storage; pages[layer * blocks + pos / page_size] is the
    // pool page holding (layer, pos), -1 while not yet taken.
    struct KVPagePool* pool = nullptr;
    int page_size = 0;
    int blocks = 0;
    std::vector<int> pages;

    KVShareLayout share;  // mode PerPass: the plain layouts above

    // Contiguous f32 cache (as before the INT8 and paged layouts). Throws Error(OutOfMemory).
    void allocate(int layers, int positions, int row_floats);
    // Contiguous cache of any type for the model's kv heads.
    void allocate(const HParams& hp, int layers, int positions, KVCacheType type);
    // A cache whose loop entries are shared across passes as `sharing` says (FORMAT.md §1c);
    // `prompt` positions are computed exactly (per-pass rows: kept by last-pass, folded by
    // compress once the prompt is in). PerPass is the contiguous cache above.
    void allocate_shared(const HParams& hp, int layers, int positions, KVCacheType type, const KVSharing& sharing,
                         int prompt);

    bool paged() const { return page_size > 0; }
    // Whether rows go through the sharing layout (attention then reads by storage-row lists).
    bool shared() const { return share.mode != KVSharing::Mode::PerPass; }
    // Compress: once every prompt position is in (their rows exact, per pass), moves each prompt
    // position's latest entry of every ring slot into the slot and frees the per-pass rows.
    void fold_prompt();
    // Early exit at pass e of position pos (state propagation asks first): false when the layout
    // does not take propagated entries (LatestM4 records e and reads pass e instead; Compress keeps
    // the slots the position's computed passes wrote, as Huginn does), true to propagate.
    bool takes_propagation(int pos, int e);
    KVStorage& storage();
    const KVStorage& storage() const;
    KVCacheType type() const { return storage().type; }
    // Storage row of (layer, pos).
    size_t phys(int layer, int pos) const {
        if (share.mode != KVSharing::Mode::PerPass) return shared_phys(layer, pos);
        if (page_size == 0) return static_cast<size_t>(layer) * capacity + pos;
        const int pg = pages[static_cast<size_t>(layer) * blocks + pos / page_size];
        return static_cast<size_t>(pg) * page_size + pos % page_size;
    }
    void store(int layer, int pos, const float* key, const float* val) { storage().store(phys(layer, pos), key, val); }
    void copy_row(int layer, int dst_pos, int src_pos) { storage().copy_row(phys(layer, dst_pos), phys(layer, src_pos)); }

    // F32 only: direct row pointers (k_layer/v_layer: contiguous caches only).
    float* k_at(int layer, int pos) { return storage().k.data() + phys(layer, pos) * row; }
    float* v_at(int layer, int pos) { return storage().v.data() + phys(layer, pos) * row; }
    const float* k_layer(int layer) const { return own.k.data() + static_cast<size_t>(layer) * capacity * row; }
    const float* v_layer(int layer) const { return own.v.data() + static_cast<size_t>(layer) * capacity * row; }
    // Bytes this cache holds: its storage, or its pages when paged.
    size_t bytes() const;

private:
    size_t shared_phys(int layer, int pos) const;
};


// A shared pool of KV pages for the continuous-batching engine: page p holds storage rows
// [p * page_size, (p + 1) * page_size). Not thread-safe: one engine step at a time uses it.
// With host_storage false the pool is the page bookkeeping only (storage described, not
// allocated): the rows live on the back end that runs the batch (a device batch's own memory).
struct KVPagePool {
    int page_size = 0;
    int n_pages = 0;
    bool host_storage = true;
    KVStorage storage;
    std::vector<int> free_list;

    void allocate(const HParams& hp, KVCacheType type, int pages, int positions_per_page, bool host = true);
    int n_free() const { return static_cast<int>(free_list.size()); }
    size_t page_bytes() const { return static_cast<size_t>(page_size) * storage.row_bytes(); }
    // Makes `kv` a paged view for `layers` execution layers and up to `positions` positions; it
    // takes no page yet.
    void attach(KVCache& kv, int layers, int positions);
    // Takes pages so that positions [0, end) of every layer have one. Throws Error(OutOfMemory)
    // when the pool runs dry (the engine reserves pages before admitting, so it never does).
    void ensure(KVCache& kv, int end);
    // Returns every page the cache holds.
    void release(KVCache& kv);
};

// Pages a sequence of `positions` positions needs at `layers` execution layers.
inline int pages_needed(int layers, int positions, int page_size) {
    return layers * ((positions + page_size - 1) / page_size);
}

}  // namespace tinyloop
