// The safetensors reader (engine/src/import/safetensors.h): values of every accepted dtype read
// exactly, sharded folders resolved through their index, and every hostile header refused with
// Error(BadFile) naming the file and the field.
#include <gtest/gtest.h>

#include <chrono>

#include "hf_folder_fixture.h"
#include "import/safetensors.h"
#include "kernels/kernels.h"
#include "tinyloop/tinyloop.h"

using namespace tinyloop;
using namespace tlimport;

namespace {

std::vector<StTensor> parse(const std::string& bytes) {
    return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x.safetensors");
}

// The message of the BadFile parse_safetensors throws (fails the test when it does not throw).
std::string refusal(const std::string& bytes) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
        parse(bytes);
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::BadFile) << e.what();
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
        return e.what();
    }
    ADD_FAILURE() << "accepted";
    return "";
}

std::string u64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

const std::vector<StEntry> kTwo = {{"a", "F32", {2, 2}, f32_bytes({1, 2, 3, 4})}, {"b", "F32", {3}, f32_bytes({5, 6, 7})}};

}  // namespace

TEST(Safetensors, ReadsEveryDtypeExactly) {
    const std::vector<float> v = {1.5f, -2.25f, 3.0e-3f, 65504.0f, -0.0f, 1e-8f};
    std::string bf16, f16;
    for (float f : v) {
        uint32_t b;
        std::memcpy(&b, &f, 4);
        const uint16_t hb = static_cast<uint16_t>(b >> 16), hh = kern::f32_to_f16(f);
        bf16.append(reinterpret_cast<const char*>(&hb), 2);
        f16.append(reinterpret_cast<const char*>(&hh), 2);
    }
    const std::string file = safetensors_bytes({{"w32", "F32", {2, 3}, f32_bytes(v)},
                                                {"wbf", "BF16", {6}, bf16},
                                                {"wh", "F16", {3, 2}, f16}});
    const auto ts = parse(file);
    ASSERT_EQ(ts.size(), 3u);
    std::vector<float> out(6);
    for (const StTensor& t : ts) {
        st_to_f32(t, out.data());
        for (size_t i = 0; i < v.size(); ++i) {
            float want = v[i];
            if (t.name == "wbf") {
                uint32_t b;
                std::memcpy(&b, &want, 4);
                b &= 0xffff0000u;
                std::memcpy(&want, &b, 4);
            } else if (t.name == "wh") {
                want = kern::f16_to_f32(kern::f32_to_f16(want));
            }
            EXPECT_EQ(std::memcmp(&out[i], &want, 4), 0) << t.name << "[" << i << "] " << out[i] << " vs " << want;
        }
    }
    EXPECT_EQ(ts[1].shape, (std::vector<int64_t>{6}));
    EXPECT_EQ(ts[0].dtype, StDType::F32);
}

TEST(Safetensors, RefusesHostileHeadersNamingTheField) {
    EXPECT_NE(refusal("1234").find("shorter than the 8-byte header length"), std::string::npos);
    // Header length past the end of the file.
    EXPECT_NE(refusal(u64(1000) + "{}").find("header length: 1000 bytes runs past the end"), std::string::npos);
    // A 100 MB header is refused by its length alone, before anything is read.
    EXPECT_NE(refusal(u64(100000000) + "{}").find("allowed at most 16777216"), std::string::npos);
    // Deep JSON.
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    EXPECT_NE(refusal(u64(deep.size()) + deep).find("nested 100000 levels deep"), std::string::npos);
    EXPECT_NE(refusal(u64(5) + "{\"a\":").find("invalid JSON"), std::string::npos);
    EXPECT_NE(refusal(u64(2) + "[]").find("allowed a JSON object"), std::string::npos);
    // Duplicate names (a JSON parser would keep the last one silently).
    const std::string dup = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
    EXPECT_NE(refusal(u64(dup.size()) + dup + std::string(8, '\0')).find("\"a\" appears twice"), std::string::npos);
    // Dtypes other than BF16/F16/F32 are refused by name.
    for (const char* dt : {"I64", "F64", "F8_E4M3", "BOOL"}) {
        const std::string m = refusal(safetensors_bytes({{"w", dt, {2}, std::string(16, '\0')}}));
        EXPECT_NE(m.find(std::string("header.w.dtype: ") + dt + ", allowed BF16, F16, F32"), std::string::npos) << m;
    }
    // Shape and byte range disagree.
    EXPECT_NE(refusal(safetensors_bytes({{"w", "F32", {2, 3}, std::string(20, '\0')}}))
                  .find("header.w.data_offsets: 20 bytes, but shape [2,3] of F32 needs 24"),
              std::string::npos);
    EXPECT_NE(refusal(safetensors_bytes({{"w", "F32", {-1}, std::string(4, '\0')}})).find("header.w.shape"),
              std::string::npos);
    EXPECT_NE(refusal(safetensors_bytes({{"w", "F32", {1ll << 41}, std::string(4, '\0')}})).find("header.w.shape"),
              std::string::npos);
    // Offsets out of the file, reversed, overlapping.
    auto with_offsets = [](const std::string& offs, size_t data) {
        const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":)" + offs + "}}";
        return u64(h.size()) + h + std::string(data, '\0');
    };
    EXPECT_NE(refusal(with_offsets("[8,16]", 12)).find("header.b.data_offsets: end 16 past the data section (12 bytes)"),
              std::string::npos);
    EXPECT_NE(refusal(with_offsets("[16,8]", 16)).find("header.b.data_offsets: [16, 8], begin after end"), std::string::npos);
    EXPECT_NE(refusal(with_offsets("[4,12]", 16)).find("header.b.data_offsets: overlaps header.a.data_offsets"),
              std::string::npos);
    EXPECT_NE(refusal(with_offsets("[0, 18446744073709551615]", 16)).find("header.b.data_offsets"), std::string::npos);
    // Unknown fields and malformed entries.
    const std::string extra = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"quant":1}})";
    EXPECT_NE(refusal(u64(extra.size()) + extra + std::string(4, '\0')).find("header.a.quant: unknown field"), std::string::npos);
    const std::string meta = R"({"__metadata__":{"k":[1]}})";
    EXPECT_NE(refusal(u64(meta.size()) + meta).find("header.__metadata__.k"), std::string::npos);
}

TEST(Safetensors, ShardedFolderThroughItsIndex) {
    const fs::path dir = fs::path(TL_BINARY_DIR) / "test-safetensors-shards";
    fs::remove_all(dir);
    fs::create_directories(dir);
    spit(dir / "s1.safetensors", safetensors_bytes({kTwo[0]}));
    spit(dir / "s2.safetensors", safetensors_bytes({kTwo[1]}));
    auto index = [&](const std::string& wm) { std::ofstream(dir / "model.safetensors.index.json") << R"({"metadata":{},"weight_map":)" + wm + "}"; };
    index(R"({"a":"s1.safetensors","b":"s2.safetensors"})");
    {
        SafetensorsSet set(dir.string());
        ASSERT_EQ(set.tensors().size(), 2u);
        std::vector<float> out(3);
        st_to_f32(*set.find("b"), out.data());
        EXPECT_EQ(out, (std::vector<float>{5, 6, 7}));
        EXPECT_EQ(set.find("c"), nullptr);
    }
    auto refused = [&](const std::string& needle) {
        try {
            SafetensorsSet set(dir.string());
            ADD_FAILURE() << "accepted, expected " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    index(R"({"a":"s1.safetensors","b":"s1.safetensors"})");
    refused("weight_map.b: listed in s1.safetensors, which does not hold it");
    index(R"({"a":"s1.safetensors","b":"s2.safetensors","c":"s2.safetensors"})");
    refused("weight_map.c: listed in s2.safetensors, which does not hold it");
    index(R"({"a":"../s1.safetensors"})");
    refused("weight_map.a: \"../s1.safetensors\", allowed a file name inside the folder");
    spit(dir / "s2.safetensors", safetensors_bytes({kTwo[0]}));
    index(R"({"a":"s1.safetensors","b":"s2.safetensors"})");
    refused("s2.safetensors: header.a: not listed for this file");
    index(R"({"weight_map":)" + std::string(5000, '[') + "}");
    refused("nested");
}
