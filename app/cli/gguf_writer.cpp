// GGUF version 3 writer (see gguf_writer.h).
#include "gguf_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "tinyloop/tinyloop.h"

namespace tinyloop::cli::gguf {

namespace {

constexpr uint64_t kAlignment = 32;  // general.alignment's default

// gguf_type values of the key/value section.
enum ValueType : uint32_t {
    kInt32 = 5,
    kUint32 = 4,
    kFloat32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
};

template <class T>
void put(std::string& out, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out += s;
}

uint64_t align_up(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

void encode_q8_0(const float* x, uint8_t* out) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(out, &dh, 2);
    for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[j] * id)));
}

void encode_q4_0(const float* x, uint8_t* out) {
    float amax = 0, max = 0;  // the value of largest magnitude, with its sign
    for (int j = 0; j < 32; ++j)
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    const float d = max / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(out, &dh, 2);
    for (int j = 0; j < 16; ++j) {
        const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
        const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[16 + j] * id + 8.5f)));
        out[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
    }
}

}  // namespace

int block_values(TensorType t) { return t == TensorType::Q8_0 || t == TensorType::Q4_0 ? 32 : 1; }

int block_bytes(TensorType t) {
    switch (t) {
        case TensorType::F32: return 4;
        case TensorType::F16: return 2;
        case TensorType::BF16: return 2;
        case TensorType::Q8_0: return 34;
        case TensorType::Q4_0: return 18;
    }
    return 0;
}

const char* type_name(TensorType t) {
    switch (t) {
        case TensorType::F32: return "f32";
        case TensorType::F16: return "f16";
        case TensorType::BF16: return "bf16";
        case TensorType::Q8_0: return "q8_0";
        case TensorType::Q4_0: return "q4_0";
    }
    return "?";
}

uint16_t f32_to_f16(float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    const uint32_t sign = (b >> 16) & 0x8000u;
    const uint32_t abs = b & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
    if (abs < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
        float a;
        std::memcpy(&a, &abs, 4);
        // a * 2^24 is the subnormal's integer mantissa; nearbyint rounds half to even.
        return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
    }
    const uint32_t mant = abs & 0x1fffu;  // the 13 bits dropped
    uint32_t h = (abs - 0x38000000u) >> 13;  // rebias the exponent 127 -> 15
    if (mant > 0x1000u || (mant == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
}

uint16_t f32_to_bf16(float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 64u);  // NaN
    return static_cast<uint16_t>((b + (0x7fffu + ((b >> 16) & 1u))) >> 16);
}

std::vector<uint8_t> encode(const float* x, size_t n, TensorType t) {
    const size_t bv = static_cast<size_t>(block_values(t));
    if (n % bv != 0)
        throw Error(ErrorCode::Internal, std::string("gguf: ") + std::to_string(n) +
                                             " values are not whole blocks of " + type_name(t));
    std::vector<uint8_t> out(n / bv * static_cast<size_t>(block_bytes(t)));
    switch (t) {
        case TensorType::F32: std::memcpy(out.data(), x, n * 4); break;
        case TensorType::F16:
            for (size_t i = 0; i < n; ++i) {
                const uint16_t h = f32_to_f16(x[i]);
                std::memcpy(out.data() + 2 * i, &h, 2);
            }
            break;
        case TensorType::BF16:
            for (size_t i = 0; i < n; ++i) {
                const uint16_t h = f32_to_bf16(x[i]);
                std::memcpy(out.data() + 2 * i, &h, 2);
            }
            break;
        case TensorType::Q8_0:
            for (size_t b = 0; b < n / 32; ++b) encode_q8_0(x + 32 * b, out.data() + 34 * b);
            break;
        case TensorType::Q4_0:
            for (size_t b = 0; b < n / 32; ++b) encode_q4_0(x + 32 * b, out.data() + 18 * b);
            break;
    }
    return out;
}

void Writer::begin(const std::string& key, uint32_t value_type) {
    put_string(kv_, key);
    put<uint32_t>(kv_, value_type);
    ++kv_count_;
}

void Writer::add_string(const std::string& key, const std::string& value) {
    begin(key, kString);
    put_string(kv_, value);
}

void Writer::add_u32(const std::string& key, uint32_t value) {
    begin(key, kUint32);
    put<uint32_t>(kv_, value);
}

void Writer::add_i32(const std::string& key, int32_t value) {
    begin(key, kInt32);
    put<int32_t>(kv_, value);
}

void Writer::add_f32(const std::string& key, float value) {
    begin(key, kFloat32);
    put<float>(kv_, value);
}

void Writer::add_bool(const std::string& key, bool value) {
    begin(key, kBool);
    put<uint8_t>(kv_, value ? 1 : 0);
}

void Writer::add_string_array(const std::string& key, const std::vector<std::string>& values) {
    begin(key, kArray);
    put<uint32_t>(kv_, kString);
    put<uint64_t>(kv_, values.size());
    for (const auto& v : values) put_string(kv_, v);
}

void Writer::add_i32_array(const std::string& key, const std::vector<int32_t>& values) {
    begin(key, kArray);
    put<uint32_t>(kv_, kInt32);
    put<uint64_t>(kv_, values.size());
    for (int32_t v : values) put<int32_t>(kv_, v);
}

void Writer::add_tensor(const std::string& name, int64_t rows, int64_t cols, TensorType type,
                        std::function<std::vector<uint8_t>()> data) {
    Tensor t;
    t.name = name;
    t.rows = rows;
    t.cols = cols;
    t.type = type;
    t.bytes = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) / block_values(type) * block_bytes(type);
    t.offset = data_bytes_;
    t.data = std::move(data);
    data_bytes_ = align_up(data_bytes_ + t.bytes);
    tensors_.push_back(std::move(t));
}

uint64_t Writer::write(const std::string& path) const {
    std::string head;
    head += "GGUF";
    put<uint32_t>(head, 3);
    put<uint64_t>(head, tensors_.size());
    put<uint64_t>(head, kv_count_);
    head += kv_;
    for (const Tensor& t : tensors_) {
        put_string(head, t.name);
        const bool vector = t.rows == 1;
        put<uint32_t>(head, vector ? 1 : 2);
        put<uint64_t>(head, static_cast<uint64_t>(t.cols));
        if (!vector) put<uint64_t>(head, static_cast<uint64_t>(t.rows));
        put<uint32_t>(head, static_cast<uint32_t>(t.type));
        put<uint64_t>(head, t.offset);
    }
    head.resize(align_up(head.size()), '\0');

    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(ErrorCode::Io, "cannot open '" + path + "' for writing: " + std::strerror(errno));
    f.write(head.data(), static_cast<std::streamsize>(head.size()));
    const std::string pad(kAlignment, '\0');
    for (const Tensor& t : tensors_) {
        const std::vector<uint8_t> bytes = t.data();
        if (bytes.size() != t.bytes)
            throw Error(ErrorCode::Internal, "gguf: tensor " + t.name + " has " + std::to_string(bytes.size()) +
                                                 " bytes, expected " + std::to_string(t.bytes));
        f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        f.write(pad.data(), static_cast<std::streamsize>(align_up(t.bytes) - t.bytes));
    }
    f.flush();
    if (!f) throw Error(ErrorCode::Io, "cannot write '" + path + "': " + std::strerror(errno));
    return head.size() + data_bytes_;
}

}  // namespace tinyloop::cli::gguf
