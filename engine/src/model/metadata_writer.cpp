// write_model_metadata: a model file with a new "metadata" object and every tensor byte kept
// (model.h). Tensor offsets are relative to data_start (FORMAT.md §2), so a header of another
// length only moves the tensor region as a whole; the bytes are copied, never re-encoded.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "tinyloop/tinyloop.h"

namespace tinyloop {

namespace {

using ojson = nlohmann::ordered_json;

constexpr uint64_t kPreamble = 24;  // magic, version, flags, header_bytes
constexpr uint64_t kAlign = 64;

[[noreturn]] void fail(ErrorCode code, const std::string& msg) { throw Error(code, msg); }

uint64_t read_u64(const char* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
    return v;
}

void put_u64(std::string& out, uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t aligned(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

void write_model_metadata(const std::string& in_path, const std::string& out_path, const std::string& metadata_json) {
    ojson metadata;
    try {
        metadata = ojson::parse(metadata_json);
    } catch (const std::exception& e) {
        fail(ErrorCode::InvalidArgument, std::string("metadata: invalid JSON: ") + e.what());
    }
    if (!metadata.is_object()) fail(ErrorCode::InvalidArgument, "metadata: expected a JSON object");
    // The source must be a file the engine accepts: load it (this checks every region) first.
    free_model(load_model(in_path));

    std::ifstream in(in_path, std::ios::binary);
    if (!in) fail(ErrorCode::Io, in_path + ": cannot open for reading");
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const uint64_t header_bytes = read_u64(bytes.data() + 16);
    const uint64_t data_start = aligned(kPreamble + header_bytes);
    ojson header = ojson::parse(bytes.substr(kPreamble, header_bytes));
    header["metadata"] = std::move(metadata);
    const std::string text = header.dump();

    std::string out(bytes.data(), 16);  // magic, version and flags as they were
    put_u64(out, text.size());
    out += text;
    out.resize(aligned(out.size()), '\0');
    out.append(bytes, data_start, std::string::npos);  // the tensor region, byte for byte

    // Through a temporary file beside the target, so an in-place rewrite never leaves half a file.
    const std::string tmp = out_path + ".tmp-metadata";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) fail(ErrorCode::Io, out_path + ": cannot open for writing");
        f.write(out.data(), static_cast<std::streamsize>(out.size()));
        if (!f) fail(ErrorCode::Io, out_path + ": write failed");
    }
    try {
        free_model(load_model(tmp));
    } catch (...) {
        std::remove(tmp.c_str());
        throw;
    }
    std::error_code ec;
    std::filesystem::rename(tmp, out_path, ec);
    if (ec) {
        std::remove(tmp.c_str());
        fail(ErrorCode::Io, out_path + ": cannot replace: " + ec.message());
    }
}

}  // namespace tinyloop
