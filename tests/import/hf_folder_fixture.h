// A minimal Hugging Face checkpoint folder written by the tests themselves (no Python needed):
// an Ouro-shaped config.json and model.safetensors (F32 or BF16), to be corrupted one field at
// a time by the safetensors and import-refusal tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tlimport {

namespace fs = std::filesystem;

struct StEntry {
    std::string name;
    std::string dtype;  // "F32", "BF16", "F16", or anything else for hostile cases
    std::vector<int64_t> shape;
    std::string bytes;  // the raw data
};

// Safetensors bytes: u64 header length, header JSON (or `raw_header`), data in entry order.
inline std::string safetensors_bytes(const std::vector<StEntry>& entries, const std::string& raw_header = "") {
    nlohmann::ordered_json h;
    uint64_t off = 0;
    std::string data;
    for (const auto& e : entries) {
        h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
        off += e.bytes.size();
        data += e.bytes;
    }
    h["__metadata__"] = {{"format", "pt"}};
    const std::string hs = raw_header.empty() ? h.dump() : raw_header;
    std::string out(8, '\0');
    const uint64_t n = hs.size();
    std::memcpy(&out[0], &n, 8);
    return out + hs + data;
}

inline std::string f32_bytes(const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// n deterministic values (a simple LCG), scale s, plus `offset`.
inline std::vector<float> pseudo(size_t n, uint32_t seed, float s = 0.1f, float offset = 0.0f) {
    std::vector<float> v(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto& f : v) {
        x = x * 1664525u + 1013904223u;
        f = offset + s * (static_cast<float>(x >> 8) / 16777216.0f - 0.5f);
    }
    return v;
}

inline void spit(const fs::path& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A tiny Ouro: vocab 256, d 32, 2 heads of 16, ff 64, 1 layer, 2 steps.
inline nlohmann::json tiny_ouro_config() {
    return {{"architectures", {"OuroForCausalLM"}}, {"model_type", "ouro"}, {"vocab_size", 256},
            {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 1},
            {"num_attention_heads", 2}, {"num_key_value_heads", 2}, {"head_dim", 16},
            {"hidden_act", "silu"}, {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-6},
            {"rope_theta", 1000000.0}, {"rope_scaling", nullptr}, {"tie_word_embeddings", false},
            {"total_ut_steps", 2}, {"early_exit_threshold", 1.0}, {"use_sliding_window", false},
            {"sliding_window", nullptr}, {"layer_types", {"full_attention"}}, {"attention_dropout", 0.0},
            {"torch_dtype", "float32"}, {"bos_token_id", 0}, {"eos_token_id", 0}};
}

inline std::vector<StEntry> tiny_ouro_tensors() {
    std::vector<StEntry> t;
    uint32_t seed = 1;
    auto mat = [&](const std::string& n, int64_t r, int64_t c) {
        t.push_back({n, "F32", {r, c}, f32_bytes(pseudo(static_cast<size_t>(r * c), seed++))});
    };
    auto vec = [&](const std::string& n, int64_t d) {
        t.push_back({n, "F32", {d}, f32_bytes(pseudo(static_cast<size_t>(d), seed++, 0.1f, 1.0f))});
    };
    mat("model.embed_tokens.weight", 256, 32);
    const std::string p = "model.layers.0.";
    for (const char* n : {"input_layernorm", "input_layernorm_2", "post_attention_layernorm", "post_attention_layernorm_2"})
        vec(p + n + ".weight", 32);
    for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"}) mat(p + "self_attn." + n + ".weight", 32, 32);
    mat(p + "mlp.gate_proj.weight", 64, 32);
    mat(p + "mlp.up_proj.weight", 64, 32);
    mat(p + "mlp.down_proj.weight", 32, 64);
    vec("model.norm.weight", 32);
    mat("model.early_exit_gate.weight", 1, 32);
    t.push_back({"model.early_exit_gate.bias", "F32", {1}, f32_bytes({0.25f})});
    mat("lm_head.weight", 256, 32);
    return t;
}

// Writes config.json and model.safetensors into a fresh `dir`.
inline void write_tiny_ouro(const fs::path& dir, const nlohmann::json& config, const std::vector<StEntry>& tensors) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << config.dump(2);
    spit(dir / "model.safetensors", safetensors_bytes(tensors));
}

}  // namespace tlimport
