// The loaded model: immutable weights plus what describes them. Internal to the engine.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "tinyloop/tinyloop.h"
#include "text/tokenizer.h"

namespace tinyloop {

class CudaWeights;  // cuda_forward.h: the weights resident on the device (CUDA builds only)

struct LayerWeights {
    const float* attn_norm = nullptr;  // [d]
    const float* mlp_norm = nullptr;   // [d]
    kern::WeightView wq, wk, wv, wo, w_gate, w_up, w_down;
    // FORMAT.md §1b (null when the model's hparams do not use them):
    const float* attn_post_norm = nullptr;  // [d], sandwich blocks
    const float* mlp_post_norm = nullptr;   // [d], sandwich blocks
    const float* bq = nullptr;              // [n_heads*hd], qk_bias
    const float* bk = nullptr;              // [n_kv_heads*hd], qk_bias
};

// 64-byte aligned owned bytes (the whole file as read).
struct AlignedBuffer {
    AlignedBuffer() = default;
    explicit AlignedBuffer(size_t n);
    ~AlignedBuffer();
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;
    AlignedBuffer(AlignedBuffer&& other) noexcept;             // leaves `other` empty
    AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;  // frees the old bytes
    uint8_t* data() { return ptr_; }
    const uint8_t* data() const { return ptr_; }
    size_t size() const { return size_; }

private:
    uint8_t* ptr_ = nullptr;
    size_t size_ = 0;
};

struct Model {
    std::string path;
    HParams hp;
    TokenizerSpec tokenizer_spec;
    Tokenizer tokenizer;
    std::string metadata_json;
    Recommendation recommended;  // metadata "recommended" (FORMAT.md §2), checked at load
    std::vector<TensorInfo> tensor_infos;
    uint64_t file_bytes = 0;

    AlignedBuffer file;  // the file's bytes; every WeightView points into it
    // Q8/Q4 matrices repacked into row panels for the CPU's int8 kernel (kern::i8_pack_panels),
    // built at load where this CPU uses them; WeightView::panels points into it. Also the F32/BF16
    // matrices in float panels (kern::f32_pack_panels) unless TINYLOOP_F32_PANELS=0; WeightView::fpanels.
    AlignedBuffer panels;

    kern::WeightView embed;      // [vocab, d]
    kern::WeightView head;       // [vocab, d]; == embed when tied
    const float* final_norm = nullptr;
    std::vector<LayerWeights> pre;   // n_pre_blocks
    std::vector<LayerWeights> loop;  // n_loop_layers
    std::vector<LayerWeights> coda;  // n_coda_blocks (§1b)
    kern::WeightView adapter;        // [d, 2d] when loop_input is adapter (§1b)
    const float* exit_gate_w = nullptr;  // [d] when exit_gate (§1b)
    const float* exit_gate_b = nullptr;  // [1]

    // Runtime settings chosen at load.
    int max_seq_len = 0;
    int prefill_chunk = 64;
    std::unique_ptr<kern::ThreadPool> pool;
    std::string backend = "cpu";
    std::string backend_note;
    // backend "cuda": the weights resident on the device; decode runs there (cuda_forward.cpp).
    std::shared_ptr<const CudaWeights> cuda;
    // The user asked for CUDA (backend cuda, not auto): calls not routed to the device are refused
    // rather than run on the CPU.
    bool cuda_required = false;

    const kern::WeightView* find_tensor(const std::string& name) const;
    std::vector<std::pair<std::string, kern::WeightView>> views;  // every matrix/vector by name
};

// A call's depth: 0 -> the model's default_loops; else checked against [1, max_loops] (an
// InvalidArgument naming "loops" and the range). On this floor so that every room above
// (decoding, caches, scoring, speculation) resolves it the same way.
int resolve_loops(const Model& m, int loops);

// Checks a model pointer handed in by a caller.
inline const Model& checked(const Model* m) {
    if (!m) throw Error(ErrorCode::InvalidArgument, "model: must not be null");
    return *m;
}

}  // namespace tinyloop
