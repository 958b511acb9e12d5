// Reading Hugging Face safetensors checkpoints: one `model.safetensors` or the shards a
// `model.safetensors.index.json` names, memory-mapped, validated before any byte is used.
//
// The file format (huggingface/safetensors): u64 little-endian N, N bytes of JSON
// {"NAME": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"k": "v"}}, then the data, offsets relative to its start.
// Only the dtypes a published checkpoint stores weights in are read: BF16, F16, F32; any
// other is refused by name. Every refusal is Error(BadFile) "FILE: field: problem, allowed ...",
// never a crash: the header length, its size (at most 16 MiB), its JSON nesting, duplicate
// names, unknown fields, shapes that disagree with the byte range, ranges past the data or
// overlapping each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "text/json_depth.h"

namespace tinyloop {

enum class StDType { BF16, F16, F32 };
const char* st_dtype_name(StDType t);  // "BF16", "F16", "F32"
int st_dtype_bytes(StDType t);         // 2, 2, 4

// One tensor of a checkpoint: where its bytes lie inside the mapping of its file.
struct StTensor {
    std::string name;
    StDType dtype = StDType::F32;
    std::vector<int64_t> shape;
    uint64_t numel = 0;
    const uint8_t* data = nullptr;  // numel * st_dtype_bytes(dtype) bytes, maybe unaligned
    uint64_t bytes = 0;
    std::string file;               // the path it came from, for messages
};

// The largest header accepted. A published checkpoint's header is a few hundred bytes per
// tensor (Huginn's 4 shards: ~20 KB); 16 MiB is ~100k tensors.
constexpr uint64_t kMaxSafetensorsHeader = uint64_t{16} << 20;

// Parses one safetensors image held in memory (`label` names it in messages). The returned
// tensors point into [p, p + n). Throws Error(BadFile).
std::vector<StTensor> parse_safetensors(const uint8_t* p, size_t n, const std::string& label);

// A read-only memory mapping of a whole file (Error(Io) when it cannot be opened).
class MappedFile {
public:
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }
    // Tells the kernel the pages under [p, p + n) are not needed again, so a streamed
    // conversion does not keep the whole checkpoint resident.
    void release(const uint8_t* p, size_t n) const;

private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// Every tensor of a checkpoint folder: `model.safetensors.index.json` and its shards when the
// index exists, else `model.safetensors`. A name in two shards, a shard the index does not
// name, a tensor a shard holds but the index does not list (or the other way) is refused.
class SafetensorsSet {
public:
    explicit SafetensorsSet(const std::string& dir);
    const StTensor* find(const std::string& name) const;  // nullptr when absent
    const std::map<std::string, StTensor>& tensors() const { return tensors_; }
    // Drops the pages of `t` from memory once it has been converted.
    void release(const StTensor& t) const;

private:
    std::vector<std::unique_ptr<MappedFile>> files_;
    std::map<std::string, StTensor> tensors_;
    std::map<std::string, const MappedFile*> file_of_;
};

// The values of `t` as f32 (exact for all three dtypes); out holds t.numel floats.
void st_to_f32(const StTensor& t, float* out);

}  // namespace tinyloop
