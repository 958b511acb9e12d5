// A writer for GGUF version 3, the file format of llama.cpp (ggml/docs/gguf.md in its source):
// key/value metadata, tensor descriptions, then the tensor data, each tensor aligned to 32
// bytes. Only what `tinyloop export-gguf` writes: f32, f16, bf16, Q8_0 and Q4_0 tensors (the Q
// blocks encoded exactly as ggml's reference quantize_row_q8_0_ref / quantize_row_q4_0_ref).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tinyloop::cli::gguf {

// ggml_type values.
enum class TensorType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, BF16 = 30 };

// Values per block of a quantized type (1 for f32/f16/bf16) and bytes per block.
int block_values(TensorType t);
int block_bytes(TensorType t);
const char* type_name(TensorType t);  // "f32", "f16", "bf16", "q8_0", "q4_0"

// IEEE binary16 bits of x, rounded to nearest even (overflow to inf, NaN kept).
uint16_t f32_to_f16(float x);
// bfloat16 bits of x (the top half of its binary32), rounded to nearest even as ggml's
// ggml_compute_fp32_to_bf16 does (NaN kept quiet); a bf16 model's values pass through exactly.
uint16_t f32_to_bf16(float x);

// n values (a multiple of block_values(t)) stored as t.
std::vector<uint8_t> encode(const float* x, size_t n, TensorType t);

class Writer {
public:
    void add_string(const std::string& key, const std::string& value);
    void add_u32(const std::string& key, uint32_t value);
    void add_i32(const std::string& key, int32_t value);
    void add_f32(const std::string& key, float value);
    void add_bool(const std::string& key, bool value);
    void add_string_array(const std::string& key, const std::vector<std::string>& values);
    void add_i32_array(const std::string& key, const std::vector<int32_t>& values);

    // A tensor of `rows` x `cols` values (rows = 1 for a vector), row-major; ggml's ne[0] is
    // cols. Its bytes come from `data` when write() reaches it.
    void add_tensor(const std::string& name, int64_t rows, int64_t cols, TensorType type,
                    std::function<std::vector<uint8_t>()> data);

    // Writes the file (replacing it); returns its size. Throws tinyloop::Error(Io) naming the
    // path when it cannot be written, Internal when a tensor's data has the wrong size.
    uint64_t write(const std::string& path) const;

private:
    struct Tensor {
        std::string name;
        int64_t rows = 0, cols = 0;
        TensorType type = TensorType::F32;
        uint64_t bytes = 0, offset = 0;
        std::function<std::vector<uint8_t>()> data;
    };
    void begin(const std::string& key, uint32_t value_type);  // a pair's key and value type

    std::string kv_;  // the encoded key/value pairs
    uint64_t kv_count_ = 0;
    std::vector<Tensor> tensors_;
    uint64_t data_bytes_ = 0;
};

}  // namespace tinyloop::cli::gguf
