// KV storage (f32 / INT8), contiguous caches and the page pool of the batching engine.
#include "forward/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <new>

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
    type = t;
    kv_heads = n_kv_heads;
    head_dim = dim;
    row = n_kv_heads * dim;
    rows = n_rows;
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

size_t KVStorage::row_bytes() const {
    if (type == KVCacheType::F32) return 2 * static_cast<size_t>(row) * sizeof(float);
    return 2 * (static_cast<size_t>(row) + static_cast<size_t>(kv_heads) * sizeof(float));
}

void KVCache::allocate(int layers, int positions, int row_floats) {
    n_layers = layers;
    capacity = positions;
    row = row_floats;
    pool = nullptr;
    page_size = 0;
    pages.clear();
    own.allocate(KVCacheType::F32, static_cast<size_t>(layers) * static_cast<size_t>(positions), 1, row_floats);
}

void KVCache::allocate(const HParams& hp, int layers, int positions, KVCacheType type) {
    n_layers = layers;
    capacity = positions;
    row = hp.n_kv_heads * hp.head_dim;
    pool = nullptr;
    page_size = 0;
    pages.clear();
    own.allocate(type, static_cast<size_t>(layers) * static_cast<size_t>(positions), hp.n_kv_heads, hp.head_dim);
}

KVStorage& KVCache::storage() { return pool ? pool->storage : own; }
const KVStorage& KVCache::storage() const { return pool ? pool->storage : own; }

size_t KVCache::bytes() const {
    if (!paged()) return own.bytes();
    const size_t held = static_cast<size_t>(std::count_if(pages.begin(), pages.end(), [](int p) { return p >= 0; }));
    return held * pool->page_bytes();
}

void KVPagePool::allocate(const HParams& hp, KVCacheType type, int pages, int positions_per_page) {
    page_size = positions_per_page;
    n_pages = pages;
    storage.allocate(type, static_cast<size_t>(pages) * static_cast<size_t>(positions_per_page), hp.n_kv_heads,
                     hp.head_dim);
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
