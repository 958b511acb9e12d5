// KV storage (f32 / INT8), contiguous caches and the page pool of the batching engine.
#include "forward/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "kernels/kernels.h"

namespace tinyloop {

const char* kv_cache_type_name(KVCacheType t) {
    switch (t) {
        case KVCacheType::F32: return "f32";
        case KVCacheType::Int8: return "int8";
    }
    return "?";
}

KVCacheType parse_kv_cache_type(const std::string& name) {
    if (name == "f32") return KVCacheType::F32;
    if (name == "int8") return KVCacheType::Int8;
    throw Error(ErrorCode::InvalidArgument, "kv_cache: '" + name + "' is not one of f32, int8");
}

void KVStorage::allocate(KVCacheType t, size_t n_rows, int n_kv_heads, int dim) {
    describe(t, n_rows, n_kv_heads, dim);
    const size_t n = n_rows * static_cast<size_t>(row);
    try {
        if (t == KVCacheType::F32) {
            k.assign(n, 0.0f);
            v.assign(n, 0.0f);
            kq.clear();
            vq.clear();
            ks.clear();
            vs.clear();
        } else {
            kq.assign(n, 0);
            vq.assign(n, 0);
            ks.assign(n_rows * static_cast<size_t>(n_kv_heads), 0.0f);
            vs.assign(n_rows * static_cast<size_t>(n_kv_heads), 0.0f);
            k.clear();
            v.clear();
        }
    } catch (const std::bad_alloc&) {
        throw Error(ErrorCode::OutOfMemory, "KV cache: cannot allocate " + std::to_string(n_rows * row_bytes()) +
                                                " bytes (" + kv_cache_type_name(t) + ") for " +
                                                std::to_string(n_rows) + " rows");
    }
}

void KVStorage::describe(KVCacheType t, size_t n_rows, int n_kv_heads, int dim) {
    type = t;
    kv_heads = n_kv_heads;
    head_dim = dim;
    row = n_kv_heads * dim;
    rows = n_rows;
}

void KVStorage::store(size_t r, const float* key, const float* val) {
    const size_t off = r * static_cast<size_t>(row);
    if (type == KVCacheType::F32) {
        std::memcpy(k.data() + off, key, static_cast<size_t>(row) * sizeof(float));
        std::memcpy(v.data() + off, val, static_cast<size_t>(row) * sizeof(float));
        return;
    }
    const size_t so = r * static_cast<size_t>(kv_heads);
    kern::quantize_kv_row(key, kv_heads, head_dim, kq.data() + off, ks.data() + so);
    kern::quantize_kv_row(val, kv_heads, head_dim, vq.data() + off, vs.data() + so);
}

void KVStorage::copy_row(size_t dst, size_t src) {
    const size_t R = static_cast<size_t>(row), H = static_cast<size_t>(kv_heads);
    if (type == KVCacheType::F32) {
        std::memcpy(k.data() + dst * R, k.data() + src * R, R * sizeof(float));
        std::memcpy(v.data() + dst * R, v.data() + src * R, R * sizeof(float));
        return;
    }
    std::memcpy(kq.data() + dst * R, kq.data() + src * R, R);
    std::memcpy(vq.data() + dst * R, vq.data() + src * R, R);
    std::memcpy(ks.data() + dst * H, ks.data() + src * H, H * sizeof(float));
    std::memcpy(vs.data() + dst * H, vs.data() + src * H, H * sizeof(float));
}

void KVStorage::truncate(size_t n_rows) {
    if (n_rows >= rows) return;
    const size_t R = static_cast<size_t>(row), H = static_cast<size_t>(kv_heads);
    auto shrink = [](auto& vec, size_t n) {
        if (vec.empty()) return;
        vec.resize(n);
        vec.shrink_to_fit();
    };
    shrink(k, n_rows * R);
    shrink(v, n_rows * R);
    shrink(kq, n_rows * R);
    shrink(vq, n_rows * R);
    shrink(ks, n_rows * H);
    shrink(vs, n_rows * H);
    rows = n_rows;
}

size_t KVStorage::row_bytes() const {
    if (type == KVCacheType::F32) return 2 * static_cast<size_t>(row) * sizeof(float);
    return 2 * (static_cast<size_t>(row) + static_cast<size_t>(kv_heads) * sizeof(float));
}

namespace {

// A cache's geometry with its own contiguous storage (not paged) and the given layout: what every
// allocate form sets before it sizes `own`.
void own_geometry(KVCache& c, int layers, int positions, int row, KVShareLayout share) {
    c.share = std::move(share);
    c.n_layers = layers;
    c.capacity = positions;
    c.row = row;
    c.pool = nullptr;
    c.page_size = 0;
    c.pages.clear();
}

}  // namespace

void KVCache::allocate(int layers, int positions, int row_floats) {
    own_geometry(*this, layers, positions, row_floats, KVShareLayout{});
    own.allocate(KVCacheType::F32, static_cast<size_t>(layers) * static_cast<size_t>(positions), 1, row_floats);
}

void KVCache::allocate(const HParams& hp, int layers, int positions, KVCacheType type) {
    own_geometry(*this, layers, positions, hp.n_kv_heads * hp.head_dim, KVShareLayout{});
    own.allocate(type, static_cast<size_t>(layers) * static_cast<size_t>(positions), hp.n_kv_heads, hp.head_dim);
}

std::string kv_sharing_name(const KVSharing& s) {
    switch (s.mode) {
        case KVSharing::Mode::PerPass: return "per-pass";
        case KVSharing::Mode::LastPass: return "last-pass";
        case KVSharing::Mode::LatestM4: return "latest-m4";
        case KVSharing::Mode::Compress: return "compress-s" + std::to_string(s.k);
    }
    return "?";
}

KVSharing parse_kv_sharing(const std::string& name) {
    KVSharing s;
    if (name == "per-pass") return s;
    if (name == "last-pass") s.mode = KVSharing::Mode::LastPass;
    else if (name == "latest-m4") s.mode = KVSharing::Mode::LatestM4;
    else if (name.rfind("compress-s", 0) == 0 && name.size() > 10 && name.size() <= 14 &&
             std::all_of(name.begin() + 10, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        s.mode = KVSharing::Mode::Compress;
        s.k = std::stoi(name.substr(10));
        if (s.k < 1 || s.k > 1024)
            throw Error(ErrorCode::InvalidArgument,
                        "kv_sharing: compress-s" + name.substr(10) + ": k = " + std::to_string(s.k) + " is outside [1, 1024]");
    } else
        throw Error(ErrorCode::InvalidArgument, "kv_sharing: '" + name +
                                                    "' is not one of per-pass, last-pass, latest-m4, compress-s{k} "
                                                    "with k in [1, 1024]");
    return s;
}

namespace {

// The layout of a shared cache (KVShareLayout's comment), without its storage.
KVShareLayout share_layout(const HParams& hp, int layers, int positions, const KVSharing& sharing, int prompt) {
    KVShareLayout L;
    L.mode = sharing.mode;
    L.k = sharing.k;
    L.fixed = hp.n_pre_blocks + hp.n_coda_blocks;
    L.n_loop = hp.n_loop_layers;
    const int loop_entries = layers - L.fixed;
    L.prompt = std::clamp(prompt, 0, positions);
    switch (sharing.mode) {
        case KVSharing::Mode::PerPass:
        case KVSharing::Mode::LatestM4:
            L.prompt = 0;
            break;
        case KVSharing::Mode::LastPass:
            L.compact_from = L.prompt;
            L.compact = L.fixed + std::min(L.n_loop, loop_entries);
            break;
        case KVSharing::Mode::Compress:
            L.compact_from = 0;
            L.compact = L.fixed + std::min(sharing.k, loop_entries);
            // k >= the loop entries: a slot per entry, nothing is overwritten, nothing to stage
            if (sharing.k >= loop_entries) L.prompt = 0;
            L.staged = L.prompt > 0;
            break;
    }
    return L;
}

size_t layout_rows(const KVShareLayout& L, int layers, int positions) {
    if (L.mode == KVSharing::Mode::PerPass || L.mode == KVSharing::Mode::LatestM4)
        return static_cast<size_t>(layers) * static_cast<size_t>(positions);
    const size_t compact = static_cast<size_t>(L.compact) * static_cast<size_t>(positions - L.compact_from);
    const bool per_pass = L.mode == KVSharing::Mode::LastPass || L.staged;
    return compact + (per_pass ? static_cast<size_t>(layers) * static_cast<size_t>(L.prompt) : 0);
}

}  // namespace

void KVCache::allocate_shared(const HParams& hp, int layers, int positions, KVCacheType type, const KVSharing& sharing,
                              int prompt) {
    own_geometry(*this, layers, positions, hp.n_kv_heads * hp.head_dim, share_layout(hp, layers, positions, sharing, prompt));
    if (share.mode == KVSharing::Mode::LatestM4) share.depth.assign(static_cast<size_t>(positions), 0);
    own.allocate(type, layout_rows(share, layers, positions), hp.n_kv_heads, hp.head_dim);
}

size_t KVCache::shared_phys(int layer, int pos) const {
    const KVShareLayout& L = share;
    if (L.mode == KVSharing::Mode::LatestM4) {
        const int e = L.depth[static_cast<size_t>(pos)];
        if (e > 0 && layer >= L.fixed) {
            const int s = layer - L.fixed;
            if (s / L.n_loop + 1 > e) layer = L.fixed + (e - 1) * L.n_loop + s % L.n_loop;  // pass e, same loop layer
        }
        return static_cast<size_t>(layer) * capacity + pos;
    }
    const size_t span = static_cast<size_t>(capacity - L.compact_from);
    if (pos < L.prompt && (L.mode == KVSharing::Mode::LastPass || L.staged))
        return static_cast<size_t>(L.compact) * span + static_cast<size_t>(layer) * L.prompt + pos;
    int slot = layer;
    if (layer >= L.fixed) {
        const int s = layer - L.fixed;
        slot = L.fixed + (L.mode == KVSharing::Mode::LastPass ? s % L.n_loop : s % L.k);
    }
    return static_cast<size_t>(slot) * span + static_cast<size_t>(pos - L.compact_from);
}

void KVCache::fold_prompt() {
    if (!share.staged) return;
    const int loop_entries = n_layers - share.fixed;
    const size_t span = static_cast<size_t>(capacity);  // compact_from = 0
    const size_t base = static_cast<size_t>(share.compact) * span;
    for (int slot = 0; slot < share.compact; ++slot) {
        // The slot's last writer: a fixed layer itself, else the latest loop entry s ≡ slot (mod k).
        int layer = slot;
        if (slot >= share.fixed) {
            const int r = slot - share.fixed;
            const int s = r + ((loop_entries - 1 - r) / share.k) * share.k;
            layer = share.fixed + s;
        }
        for (int p = 0; p < share.prompt; ++p)
            own.copy_row(static_cast<size_t>(slot) * span + p, base + static_cast<size_t>(layer) * share.prompt + p);
    }
    share.staged = false;
    own.truncate(base);
}

bool KVCache::takes_propagation(int pos, int e) {
    switch (share.mode) {
        case KVSharing::Mode::LatestM4:
            share.depth[static_cast<size_t>(pos)] = e;
            return false;
        case KVSharing::Mode::Compress: return false;
        default: return true;
    }
}

KVStorage& KVCache::storage() { return pool ? pool->storage : own; }
const KVStorage& KVCache::storage() const { return pool ? pool->storage : own; }

size_t KVCache::bytes() const {
    if (!paged()) return own.bytes();
    const size_t held = static_cast<size_t>(std::count_if(pages.begin(), pages.end(), [](int p) { return p >= 0; }));
    return held * pool->page_bytes();
}

void KVPagePool::allocate(const HParams& hp, KVCacheType type, int pages, int positions_per_page, bool host) {
    page_size = positions_per_page;
    n_pages = pages;
    host_storage = host;
    const size_t rows = static_cast<size_t>(pages) * static_cast<size_t>(positions_per_page);
    if (host) storage.allocate(type, rows, hp.n_kv_heads, hp.head_dim);
    else {
        storage = KVStorage{};  // no host rows
        storage.describe(type, rows, hp.n_kv_heads, hp.head_dim);
    }
    free_list.clear();
    for (int p = pages - 1; p >= 0; --p) free_list.push_back(p);  // page 0 handed out first
}

void KVPagePool::attach(KVCache& kv, int layers, int positions) {
    kv.own = KVStorage{};
    kv.n_layers = layers;
    kv.capacity = positions;
    kv.row = storage.row;
    kv.pool = this;
    kv.page_size = page_size;
    kv.blocks = (positions + page_size - 1) / page_size;
    kv.pages.assign(static_cast<size_t>(layers) * kv.blocks, -1);
}

void KVPagePool::ensure(KVCache& kv, int end) {
    const int nb = std::min(kv.blocks, (end + page_size - 1) / page_size);
    for (int e = 0; e < kv.n_layers; ++e) {
        for (int b = 0; b < nb; ++b) {
            int& pg = kv.pages[static_cast<size_t>(e) * kv.blocks + b];
            if (pg >= 0) continue;
            if (free_list.empty())
                throw Error(ErrorCode::OutOfMemory, "kv_pages: the KV page pool (" + std::to_string(n_pages) +
                                                        " pages) is exhausted");
            pg = free_list.back();
            free_list.pop_back();
        }
    }
}

void KVPagePool::release(KVCache& kv) {
    for (int& pg : kv.pages) {
        if (pg >= 0) free_list.push_back(pg);
        pg = -1;
    }
}

}  // namespace tinyloop
