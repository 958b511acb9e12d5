// Safetensors checkpoints (safetensors.h): parsing and validating headers, mapping files,
// resolving sharded folders.
#include "import/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "kernels/kernels.h"
#include "tinyloop/tinyloop.h"

namespace tinyloop {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kMaxDepth = 8;            // a valid header nests 3 deep
constexpr int kMaxRank = 8;
constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 20;

[[noreturn]] void bad(const std::string& label, const std::string& msg) {
    throw Error(ErrorCode::BadFile, label + ": " + msg);
}

// A value for a message: at most 60 characters of its JSON.
std::string brief(const json& v) {
    std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Parses JSON text, refusing duplicate keys of the top-level object (nlohmann would keep the
// last silently) and nesting deeper than kMaxDepth.
json parse_json_checked(const uint8_t* p, size_t n, const std::string& label, const std::string& what,
                        bool check_top_duplicates) {
    const size_t depth = json_nesting_depth(p, n);
    if (depth > kMaxDepth)
        bad(label, what + ": JSON nested " + std::to_string(depth) + " levels deep, allowed at most " +
                       std::to_string(kMaxDepth));
    std::set<std::string> seen;
    auto cb = [&](int d, json::parse_event_t ev, json& parsed) {
        if (check_top_duplicates && ev == json::parse_event_t::key && d == 1) {
            const std::string k = parsed.get<std::string>();
            if (!seen.insert(k).second) bad(label, what + ": \"" + k + "\" appears twice, allowed once");
        }
        return true;
    };
    try {
        return json::parse(p, p + n, cb);
    } catch (const json::exception& e) {
        bad(label, what + ": invalid JSON: " + e.what());
    }
}

bool parse_dtype(const std::string& s, StDType& out) {
    if (s == "BF16") out = StDType::BF16;
    else if (s == "F16") out = StDType::F16;
    else if (s == "F32") out = StDType::F32;
    else return false;
    return true;
}

uint64_t get_u64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

}  // namespace

const char* st_dtype_name(StDType t) {
    switch (t) {
        case StDType::BF16: return "BF16";
        case StDType::F16: return "F16";
        case StDType::F32: return "F32";
    }
    return "?";
}

int st_dtype_bytes(StDType t) { return t == StDType::F32 ? 4 : 2; }

std::vector<StTensor> parse_safetensors(const uint8_t* p, size_t n, const std::string& label) {
    if (n < 8) bad(label, "file is " + std::to_string(n) + " bytes, shorter than the 8-byte header length");
    const uint64_t hlen = get_u64(p);
    if (hlen > kMaxSafetensorsHeader)
        bad(label, "header length: " + std::to_string(hlen) + " bytes, allowed at most " +
                       std::to_string(kMaxSafetensorsHeader) + " (16 MiB)");
    if (hlen > n - 8)
        bad(label, "header length: " + std::to_string(hlen) + " bytes runs past the end of the file (" +
                       std::to_string(n) + " bytes)");
    if (hlen < 2) bad(label, "header length: " + std::to_string(hlen) + ", allowed at least 2 (a JSON object)");
    const json h = parse_json_checked(p + 8, static_cast<size_t>(hlen), label, "header", true);
    if (!h.is_object()) bad(label, "header: " + brief(h) + ", allowed a JSON object");
    const uint8_t* data = p + 8 + hlen;
    const uint64_t data_bytes = n - 8 - hlen;

    std::vector<StTensor> out;
    for (const auto& [name, v] : h.items()) {
        const std::string f = "header." + name;
        if (name == "__metadata__") {
            if (!v.is_object()) bad(label, f + ": " + brief(v) + ", allowed an object of strings");
            for (const auto& [k, s] : v.items())
                if (!s.is_string()) bad(label, f + "." + k + ": " + brief(s) + ", allowed a string");
            continue;
        }
        if (name.empty()) bad(label, "header: a tensor with an empty name");
        if (!v.is_object()) bad(label, f + ": " + brief(v) + ", allowed an object {dtype, shape, data_offsets}");
        for (const auto& [k, x] : v.items())
            if (k != "dtype" && k != "shape" && k != "data_offsets")
                bad(label, f + "." + k + ": unknown field, allowed dtype, shape, data_offsets");
        StTensor t;
        t.name = name;
        t.file = label;
        const auto dt = v.find("dtype");
        if (dt == v.end() || !dt->is_string()) bad(label, f + ".dtype: missing or not a string");
        if (!parse_dtype(dt->get<std::string>(), t.dtype))
            bad(label, f + ".dtype: " + dt->get<std::string>() + ", allowed BF16, F16, F32");
        const auto sh = v.find("shape");
        if (sh == v.end() || !sh->is_array()) bad(label, f + ".shape: missing or not an array");
        if (sh->size() > static_cast<size_t>(kMaxRank))
            bad(label, f + ".shape: rank " + std::to_string(sh->size()) + ", allowed at most " +
                           std::to_string(kMaxRank));
        t.numel = 1;
        for (const json& d : *sh) {
            if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40))
                bad(label, f + ".shape: " + brief(*sh) + ", allowed non-negative integers up to 2^40");
            const uint64_t dim = d.get<uint64_t>();
            if (dim != 0 && t.numel > (uint64_t{1} << 48) / dim)
                bad(label, f + ".shape: " + brief(*sh) + " has more than 2^48 elements");
            t.numel *= dim;
            t.shape.push_back(static_cast<int64_t>(dim));
        }
        const auto off = v.find("data_offsets");
        if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
            !(*off)[1].is_number_unsigned())
            bad(label, f + ".data_offsets: " + (off == v.end() ? std::string("missing") : brief(*off)) +
                           ", allowed [begin, end] non-negative integers");
        const uint64_t b = (*off)[0].get<uint64_t>(), e = (*off)[1].get<uint64_t>();
        if (b > e) bad(label, f + ".data_offsets: [" + std::to_string(b) + ", " + std::to_string(e) + "], begin after end");
        if (e > data_bytes)
            bad(label, f + ".data_offsets: end " + std::to_string(e) + " past the data section (" +
                           std::to_string(data_bytes) + " bytes)");
        t.bytes = e - b;
        if (t.bytes != t.numel * static_cast<uint64_t>(st_dtype_bytes(t.dtype)))
            bad(label, f + ".data_offsets: " + std::to_string(t.bytes) + " bytes, but shape " + brief(*sh) +
                           " of " + st_dtype_name(t.dtype) + " needs " +
                           std::to_string(t.numel * st_dtype_bytes(t.dtype)));
        t.data = data + b;
        out.push_back(std::move(t));
    }
    // Regions may not overlap (each byte belongs to one tensor).
    std::vector<const StTensor*> by_begin;
    for (const StTensor& t : out) by_begin.push_back(&t);
    std::sort(by_begin.begin(), by_begin.end(), [](const StTensor* a, const StTensor* b) {
        return a->data != b->data ? a->data < b->data : a->bytes < b->bytes;
    });
    for (size_t i = 1; i < by_begin.size(); ++i) {
        const StTensor& a = *by_begin[i - 1];
        const StTensor& b = *by_begin[i];
        if (b.bytes > 0 && a.data + a.bytes > b.data)
            bad(label, "header." + b.name + ".data_offsets: overlaps header." + a.name + ".data_offsets");
    }
    return out;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(ErrorCode::Io, path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(ErrorCode::Io, path + ": not a regular file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
        void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            throw Error(ErrorCode::Io, path + ": cannot map: " + std::strerror(err));
        }
        data_ = static_cast<const uint8_t*>(m);
    }
    ::close(fd);
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::release(const uint8_t* p, size_t n) const {
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    uintptr_t b = reinterpret_cast<uintptr_t>(p), e = b + n;
    b = (b + page - 1) / page * page;  // whole pages inside the range only: neighbours may still be read
    e = e / page * page;
    if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

SafetensorsSet::SafetensorsSet(const std::string& dir) {
    const fs::path d(dir);
    const fs::path index = d / "model.safetensors.index.json";
    std::map<std::string, std::string> weight_map;  // tensor -> shard file name
    std::vector<std::string> shards;
    if (fs::exists(index)) {
        const std::string label = index.string();
        MappedFile f(label);
        if (f.size() > kMaxIndexBytes)
            bad(label, "file is " + std::to_string(f.size()) + " bytes, allowed at most 64 MiB");
        const json j = parse_json_checked(f.data(), f.size(), label, "index", true);
        if (!j.is_object()) bad(label, "index: allowed a JSON object");
        const auto wm = j.find("weight_map");
        if (wm == j.end() || !wm->is_object()) bad(label, "weight_map: missing or not an object");
        for (const auto& [name, file] : wm->items()) {
            if (!file.is_string()) bad(label, "weight_map." + name + ": " + brief(file) + ", allowed a file name");
            const std::string fn = file.get<std::string>();
            if (fn.empty() || fn.find('/') != std::string::npos || fn.find('\\') != std::string::npos ||
                fn == "." || fn == "..")
                bad(label, "weight_map." + name + ": \"" + fn + "\", allowed a file name inside the folder");
            weight_map[name] = fn;
            if (std::find(shards.begin(), shards.end(), fn) == shards.end()) shards.push_back(fn);
        }
        if (shards.empty()) bad(label, "weight_map: empty, allowed at least one tensor");
    } else if (fs::exists(d / "model.safetensors")) {
        shards.push_back("model.safetensors");
    } else {
        throw Error(ErrorCode::Io, dir + ": neither model.safetensors nor model.safetensors.index.json");
    }
    for (const std::string& s : shards) {
        auto mf = std::make_unique<MappedFile>((d / s).string());
        for (StTensor& t : parse_safetensors(mf->data(), mf->size(), mf->path())) {
            if (!weight_map.empty()) {
                const auto it = weight_map.find(t.name);
                if (it == weight_map.end() || it->second != s)
                    bad(mf->path(), "header." + t.name + ": not listed for this file in " + index.string() +
                                        " weight_map" + (it == weight_map.end() ? "" : " (listed for " + it->second + ")"));
            }
            if (tensors_.count(t.name))
                bad(mf->path(), "header." + t.name + ": also in " + tensors_[t.name].file + ", allowed once");
            file_of_[t.name] = mf.get();
            tensors_.emplace(t.name, std::move(t));
        }
        files_.push_back(std::move(mf));
    }
    for (const auto& [name, file] : weight_map)
        if (!tensors_.count(name))
            bad(index.string(), "weight_map." + name + ": listed in " + file + ", which does not hold it");
}

const StTensor* SafetensorsSet::find(const std::string& name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsSet::release(const StTensor& t) const {
    const auto it = file_of_.find(t.name);
    if (it != file_of_.end()) it->second->release(t.data, t.bytes);
}

void st_to_f32(const StTensor& t, float* out) {
    const uint8_t* p = t.data;
    switch (t.dtype) {
        case StDType::F32:
            std::memcpy(out, p, t.numel * 4);
            break;
        case StDType::BF16:
            for (uint64_t i = 0; i < t.numel; ++i) {
                const uint32_t bits = (static_cast<uint32_t>(p[2 * i + 1]) << 24) | (static_cast<uint32_t>(p[2 * i]) << 16);
                std::memcpy(out + i, &bits, 4);
            }
            break;
        case StDType::F16:
            for (uint64_t i = 0; i < t.numel; ++i)
                out[i] = kern::f16_to_f32(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
            break;
    }
}

}  // namespace tinyloop
