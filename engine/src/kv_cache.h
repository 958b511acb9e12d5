// The per-call KV cache: one key and one value row per (execution layer, position)
// (FORMAT.md §1, "Execution layers and the KV cache").
#pragma once

#include <cstddef>
#include <vector>

#include "tinyloop/tinyloop.h"

namespace tinyloop {

struct KVCache {
    int n_layers = 0;   // execution layers: n_pre_blocks + loops * n_loop_layers
    int capacity = 0;   // positions
    int row = 0;        // floats per position per layer: n_kv_heads * head_dim
    std::vector<float> k, v;

    // Throws Error(OutOfMemory) when the allocation fails, naming the size.
    void allocate(int layers, int positions, int row_floats);
    float* k_at(int layer, int pos) { return k.data() + (static_cast<size_t>(layer) * capacity + pos) * row; }
    float* v_at(int layer, int pos) { return v.data() + (static_cast<size_t>(layer) * capacity + pos) * row; }
    const float* k_layer(int layer) const { return k.data() + static_cast<size_t>(layer) * capacity * row; }
    const float* v_layer(int layer) const { return v.data() + static_cast<size_t>(layer) * capacity * row; }
    size_t bytes() const { return (k.size() + v.size()) * sizeof(float); }
};

}  // namespace tinyloop
