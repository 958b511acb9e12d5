// Corrupt model files (FORMAT.md §4): a valid file cut at every section boundary and at random
// points, random single-bit flips in the header region, header lengths past the file,
// overlapping and misaligned regions, shapes and hyperparameters that disagree, NaN and Inf in
// the norms, tokenizers with ids out of range. Each is refused with Error(BadFile or Io) naming
// the file, never a crash or a hang; a flipped file that still parses may load, but then using it
// must not crash (any tinyloop::Error is fine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

using namespace tinyloop;
using nlohmann::json;

namespace {

using Bytes = std::string;

Bytes slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(f), {});
}

void spit(const std::string& path, const Bytes& b) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

uint64_t get_u64(const Bytes& b, size_t at) {
    uint64_t v = 0;
    std::memcpy(&v, b.data() + at, 8);
    return v;
}
void put_u64(Bytes& b, size_t at, uint64_t v) { std::memcpy(&b[at], &v, 8); }
void put_u32(Bytes& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }

uint64_t align64(uint64_t x) { return (x + 63) / 64 * 64; }

// A parsed valid file: its header and where its data starts.
struct Parsed {
    json header;
    uint64_t header_bytes = 0;
    uint64_t data_start = 0;
    uint32_t version = 1;
    Bytes data;  // everything from data_start on
};

Parsed parse(const Bytes& b) {
    Parsed p;
    p.header_bytes = get_u64(b, 16);
    p.header = json::parse(b.substr(24, p.header_bytes));
    p.data_start = align64(24 + p.header_bytes);
    std::memcpy(&p.version, b.data() + 8, 4);
    p.data = b.substr(p.data_start);
    return p;
}

// Writes a file from a (possibly edited) header and the original data section; offsets are
// relative to data_start, so the data moves with the new header length.
Bytes rebuild(const json& header, const Bytes& data, const std::string& raw_header = "", uint32_t version = 1) {
    const std::string h = raw_header.empty() ? header.dump() : raw_header;
    Bytes b("TINYLOOP", 8);
    b.append(4, '\0');
    b.append(4, '\0');
    b.append(8, '\0');
    put_u32(b, 8, version);
    put_u64(b, 16, h.size());
    b += h;
    b.append(align64(b.size()) - b.size(), '\0');
    return b + data;
}

// Every region (codes, scales, zeros) of every tensor: [begin, end) relative to data_start.
struct Region {
    std::string tensor;
    std::string key;  // "offset", "scales_offset", "zeros_offset"
    uint64_t begin, end;
};

uint64_t dtype_bits(const std::string& dt) {
    if (dt == "f32") return 32;
    if (dt == "f16" || dt == "bf16") return 16;
    if (dt == "q8") return 8;
    if (dt == "q4") return 4;
    return 2;
}

std::vector<Region> regions(const json& header) {
    std::vector<Region> out;
    for (auto it = header["tensors"].begin(); it != header["tensors"].end(); ++it) {
        const json& t = it.value();
        uint64_t n = 1, rows = 1, cols = 1;
        for (auto d : t["shape"]) n *= d.get<uint64_t>();
        if (t["shape"].size() == 2) rows = t["shape"][0].get<uint64_t>(), cols = t["shape"][1].get<uint64_t>();
        else cols = n;
        const std::string dt = t["dtype"];
        const uint64_t off = t["offset"].get<uint64_t>();
        out.push_back({it.key(), "offset", off, off + n * dtype_bits(dt) / 8});
        if (t.contains("scales_offset")) {
            const uint64_t g = t["group_size"];
            const uint64_t sb = rows * (cols / g) * 2;
            const uint64_t so = t["scales_offset"].get<uint64_t>(), zo = t["zeros_offset"].get<uint64_t>();
            out.push_back({it.key(), "scales_offset", so, so + sb});
            out.push_back({it.key(), "zeros_offset", zo, zo + sb});
        }
    }
    return out;
}

enum class Outcome { Refused, Loaded };

// Loads `bytes`; a refusal must be Error(BadFile|Io) naming the file. A file that loads must be
// usable: a short generation and a score, where any tinyloop::Error is fine.
Outcome load_bytes(const std::string& label, const Bytes& bytes, bool must_refuse) {
    SCOPED_TRACE(label);
    const std::string path = tltest::temp_path("corrupt.tinyloop");
    spit(path, bytes);
    LoadOptions o;
    o.backend = Backend::Cpu;
    o.threads = 1;
    Model* m = nullptr;
    try {
        m = load_model(path, o);
    } catch (const Error& e) {
        EXPECT_TRUE(e.code() == ErrorCode::BadFile || e.code() == ErrorCode::Io)
            << label << ": " << error_code_name(e.code()) << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << label << ": message does not name the file: " << e.what();
        return Outcome::Refused;
    } catch (const std::exception& e) {
        ADD_FAILURE() << label << ": non-tinyloop exception: " << e.what();
        return Outcome::Refused;
    }
    EXPECT_FALSE(must_refuse) << label << ": a corrupt file was accepted";
    try {
        const HParams hp = model_hparams(m);
        std::vector<int32_t> prompt = tokenize(m, "In the beginning");
        if (prompt.size() > 6) prompt.resize(6);
        GenerateConfig c;
        c.max_tokens = 3;
        c.loops = 1;
        if (static_cast<int>(prompt.size()) + 3 <= hp.max_seq_len) {
            const auto out = generate(m, prompt.data(), static_cast<int>(prompt.size()), c);
            for (int32_t t : out) EXPECT_TRUE(t >= 0 && t < hp.vocab_size) << label << ": token " << t;
            score(m, prompt.data(), static_cast<int>(prompt.size()), 1);
        }
        detokenize_text(m, prompt.data(), prompt.size());
    } catch (const Error&) {
    }
    free_model(m);
    return Outcome::Loaded;
}

class CorruptFiles : public ::testing::TestWithParam<DType> {
protected:
    void SetUp() override {
        HParams hp = tltest::small_hparams();
        hp.d_model = 64;
        hp.head_dim = 16;
        ModelSpec spec = random_model_spec(hp, 3, GetParam(), 32);
        spec.tokenizer.merges = {{116, 104}, {256, 101}, {32, 116}};
        spec.tokenizer.special_tokens = {{"<|endoftext|>", 259}};
        spec.tokenizer.eos_id = 259;
        path_ = tltest::temp_path(std::string("valid_") + dtype_name(GetParam()) + ".tinyloop");
        save_model(path_, spec);
        valid_ = slurp(path_);
        parsed_ = parse(valid_);
        ASSERT_EQ(load_bytes("the valid file", valid_, false), Outcome::Loaded);
    }
    std::string path_;
    Bytes valid_;
    Parsed parsed_;

    // Edits the header JSON and expects a refusal.
    void refuse_header(const std::string& label, const std::function<void(json&)>& edit) {
        json h = parsed_.header;
        edit(h);
        load_bytes(label, rebuild(h, parsed_.data, "", parsed_.version), true);
    }
    // Edits the data section (offsets relative to data_start) and expects a refusal.
    void refuse_data(const std::string& label, const std::function<void(Bytes&)>& edit) {
        Bytes d = parsed_.data;
        edit(d);
        load_bytes(label, rebuild(parsed_.header, d, "", parsed_.version), true);
    }
};

TEST_P(CorruptFiles, CutAtEverySectionBoundary) {
    std::set<uint64_t> cuts = {0, 1, 7, 8, 11, 12, 15, 16, 23, 24, 25, 24 + parsed_.header_bytes - 1,
                               24 + parsed_.header_bytes, 24 + parsed_.header_bytes + 1, parsed_.data_start - 1,
                               parsed_.data_start, parsed_.data_start + 1};
    uint64_t data_end = 0;
    for (const Region& r : regions(parsed_.header)) {
        data_end = std::max(data_end, r.end);
        for (uint64_t x : {r.begin, r.begin + 1, r.end - 1, r.end})
            if (x > 0) cuts.insert(parsed_.data_start + x), cuts.insert(parsed_.data_start + x - 1);
    }
    const uint64_t needed = parsed_.data_start + data_end;  // bytes a loader needs
    ASSERT_LE(needed, valid_.size());
    int refused = 0;
    for (uint64_t c : cuts) {
        if (c >= valid_.size()) continue;
        const bool must = c < needed;
        if (load_bytes("cut at " + std::to_string(c), valid_.substr(0, c), must) == Outcome::Refused) ++refused;
    }
    EXPECT_GT(refused, 20);
}

TEST_P(CorruptFiles, CutAtRandomPoints) {
    std::mt19937_64 rng(99);
    uint64_t data_end = 0;
    for (const Region& r : regions(parsed_.header)) data_end = std::max(data_end, r.end);
    const uint64_t needed = parsed_.data_start + data_end;
    for (int i = 0; i < 200; ++i) {
        const uint64_t c = rng() % valid_.size();
        load_bytes("random cut at " + std::to_string(c), valid_.substr(0, c), c < needed);
    }
}

TEST_P(CorruptFiles, RandomBitFlipsInTheHeaderRegion) {
    std::mt19937_64 rng(1234 + static_cast<int>(GetParam()));
    const uint64_t header_end = 24 + parsed_.header_bytes;
    int loaded = 0;
    for (int i = 0; i < 500; ++i) {
        Bytes b = valid_;
        const uint64_t at = rng() % header_end;
        const int bit = static_cast<int>(rng() % 8);
        b[at] = static_cast<char>(b[at] ^ (1 << bit));
        if (load_bytes("bit " + std::to_string(bit) + " of byte " + std::to_string(at), b, false) == Outcome::Loaded) ++loaded;
    }
    // Most flips land in the JSON text; some (a digit of a float, a metadata letter) still parse.
    std::printf("[ bit flips ] %s: %d of 500 still loaded\n", dtype_name(GetParam()), loaded);
    EXPECT_LT(loaded, 500);
}

TEST_P(CorruptFiles, PreambleAndHeaderLength) {
    auto with = [&](const std::function<void(Bytes&)>& f) {
        Bytes b = valid_;
        f(b);
        return b;
    };
    load_bytes("wrong magic", with([](Bytes& b) { b[0] = 'X'; }), true);
    load_bytes("lower-case magic", with([](Bytes& b) { b.replace(0, 8, "tinyloop"); }), true);
    load_bytes("version 0", with([](Bytes& b) { put_u32(b, 8, 0); }), true);
    // FORMAT.md §2: exactly the version the file's features require (1 here, 3 with bf16).
    for (uint32_t v : {1u, 2u, 3u, 4u})
        if (v != parsed_.version)
            load_bytes("version " + std::to_string(v) + " where the file needs " + std::to_string(parsed_.version),
                       with([v](Bytes& b) { put_u32(b, 8, v); }), true);
    load_bytes("version max", with([](Bytes& b) { put_u32(b, 8, 0xffffffffu); }), true);
    load_bytes("flags 1", with([](Bytes& b) { put_u32(b, 12, 1); }), true);
    for (uint64_t hb : {uint64_t{0}, uint64_t{1}, parsed_.header_bytes - 1, parsed_.header_bytes + 1,
                        static_cast<uint64_t>(valid_.size()) - 23, static_cast<uint64_t>(valid_.size()),
                        (uint64_t{64} << 20) + 1, uint64_t{1} << 40, uint64_t{1} << 63,
                        std::numeric_limits<uint64_t>::max(), std::numeric_limits<uint64_t>::max() - 23})
        load_bytes("header_bytes " + std::to_string(hb), with([&](Bytes& b) { put_u64(b, 16, hb); }), true);
    // Header text that is not a JSON object, or not UTF-8.
    for (const std::string& raw : {std::string("[]"), std::string("null"), std::string("{"), std::string("{\"a\":1}"),
                                  std::string("{\"format\":\"tinyloop\"}"), std::string("\xff\xfe{}"),
                                  parsed_.header.dump() + "x", parsed_.header.dump() + std::string(1, '\0')})
        load_bytes("raw header " + raw.substr(0, 20), rebuild(json(), parsed_.data, raw, parsed_.version), true);
    // Invalid UTF-8 inside a JSON string.
    std::string h = parsed_.header.dump();
    const size_t at = h.find("\"format\"");
    ASSERT_NE(at, std::string::npos);
    std::string bad = h;
    bad.replace(at + 1, 1, "\xc0\xa6");
    load_bytes("overlong UTF-8 in a key", rebuild(json(), parsed_.data, bad, parsed_.version), true);
    json meta = parsed_.header;
    meta["metadata"] = {{"note", "x"}};
    std::string mh = meta.dump();
    mh.replace(mh.find("\"x\"") + 1, 1, "\xed\xa0\x80");  // a UTF-16 surrogate
    load_bytes("surrogate in metadata", rebuild(json(), parsed_.data, mh, parsed_.version), true);
    load_bytes("empty file", Bytes(), true);
    load_bytes("magic only", valid_.substr(0, 8), true);
}

TEST_P(CorruptFiles, RegionsOutsideOverlappingOrMisaligned) {
    const auto rs = regions(parsed_.header);
    ASSERT_GE(rs.size(), 4u);
    const uint64_t data_size = parsed_.data.size();
    for (size_t i = 0; i < rs.size(); i += std::max<size_t>(1, rs.size() / 9)) {
        const Region r = rs[i];
        const std::string base = r.tensor + "." + r.key;
        auto set = [&](uint64_t v) { return [=](json& h) { h["tensors"][r.tensor][r.key] = v; }; };
        refuse_header(base + " misaligned +1", set(r.begin + 1));
        refuse_header(base + " misaligned +32", set(r.begin + 32));
        refuse_header(base + " past the end", set(align64(data_size)));
        refuse_header(base + " straddles the end", set(align64(data_size) - 64));
        refuse_header(base + " huge", set(std::numeric_limits<uint64_t>::max() - 63));
        refuse_header(base + " 2^63", set(uint64_t{1} << 63));
        refuse_header(base + " negative", [=](json& h) { h["tensors"][r.tensor][r.key] = -64; });
        refuse_header(base + " float", [=](json& h) { h["tensors"][r.tensor][r.key] = 64.5; });
        refuse_header(base + " string", [=](json& h) { h["tensors"][r.tensor][r.key] = "64"; });
        refuse_header(base + " missing", [=](json& h) { h["tensors"][r.tensor].erase(r.key); });
        // Overlap: point it at the previous region (a different one, so never the same bytes
        // legitimately) and halfway into it.
        const Region& other = rs[(i + 1) % rs.size()];
        refuse_header(base + " overlaps " + other.tensor + "." + other.key, set(other.begin));
        if (other.end - other.begin > 128)
            refuse_header(base + " overlaps the middle of " + other.tensor, set(align64(other.begin + (other.end - other.begin) / 2) - 64));
    }
}

TEST_P(CorruptFiles, ShapesAndHyperparametersThatDisagree) {
    const json& hp = parsed_.header["hparams"];
    refuse_header("wk shape transposed", [](json& h) {
        auto s = h["tensors"]["loop.0.wk"]["shape"];
        h["tensors"]["loop.0.wk"]["shape"] = {s[1], s[0]};
    });
    refuse_header("wk rows +1", [](json& h) { h["tensors"]["loop.0.wk"]["shape"][0] = h["tensors"]["loop.0.wk"]["shape"][0].get<int>() + 1; });
    refuse_header("embed 3-d", [](json& h) { h["tensors"]["embed"]["shape"].push_back(1); });
    refuse_header("norm 2-d", [](json& h) { h["tensors"]["final_norm"]["shape"] = {1, h["hparams"]["d_model"]}; });
    refuse_header("shape empty", [](json& h) { h["tensors"]["final_norm"]["shape"] = json::array(); });
    refuse_header("shape zero", [](json& h) { h["tensors"]["loop.0.w_up"]["shape"][0] = 0; });
    refuse_header("shape negative", [](json& h) { h["tensors"]["loop.0.w_up"]["shape"][0] = -96; });
    refuse_header("shape overflow", [](json& h) { h["tensors"]["embed"]["shape"] = {uint64_t{1} << 40, uint64_t{1} << 40}; });
    refuse_header("missing tensor", [](json& h) { h["tensors"].erase("loop.1.w_down"); });
    refuse_header("extra tensor", [](json& h) { h["tensors"]["loop.9.wq"] = h["tensors"]["loop.0.wq"]; });
    refuse_header("head present while tied", [](json& h) { h["tensors"]["head"] = h["tensors"]["embed"]; });
    refuse_header("untied without head", [](json& h) { h["hparams"]["tie_embeddings"] = false; });
    refuse_header("unknown dtype", [](json& h) { h["tensors"]["loop.0.wo"]["dtype"] = "q3"; });
    refuse_header("dtype not a string", [](json& h) { h["tensors"]["loop.0.wo"]["dtype"] = 4; });
    refuse_header("norm not f32", [](json& h) { h["tensors"]["final_norm"]["dtype"] = "f16"; });
    refuse_header("norm bf16", [](json& h) { h["tensors"]["final_norm"]["dtype"] = "bf16"; });
    if (parsed_.version < 3) {  // FORMAT.md §2: bf16 came with version 3
        refuse_header("a bf16 tensor in a version-" + std::to_string(parsed_.version) + " file",
                      [](json& h) { h["tensors"]["loop.0.wo"]["dtype"] = "bf16"; });
    } else {
        Bytes older = rebuild(parsed_.header, parsed_.data, "", 2);
        load_bytes("bf16 tensors in a version-2 file", older, true);
    }
    refuse_header("tensors not an object", [](json& h) { h["tensors"] = json::array(); });
    if (GetParam() == DType::Q8 || GetParam() == DType::Q4 || GetParam() == DType::Q2) {
        refuse_header("group_size 48", [](json& h) { h["tensors"]["loop.0.wq"]["group_size"] = 48; });
        refuse_header("group_size 0", [](json& h) { h["tensors"]["loop.0.wq"]["group_size"] = 0; });
        refuse_header("group_size 256", [](json& h) { h["tensors"]["loop.0.wq"]["group_size"] = 256; });
        refuse_header("group_size missing", [](json& h) { h["tensors"]["loop.0.wq"].erase("group_size"); });
        refuse_header("scales missing", [](json& h) { h["tensors"]["loop.0.wq"].erase("scales_offset"); });
    }
    // Hyperparameters: zero, negative, inconsistent, wrong types, missing.
    for (const auto& [key, v] : hp.items()) {
        if (!v.is_number_integer()) continue;
        refuse_header(key + " = 0", [k = key](json& h) { h["hparams"][k] = 0; });
        refuse_header(key + " = -1", [k = key](json& h) { h["hparams"][k] = -1; });
        refuse_header(key + " = 2^31", [k = key](json& h) { h["hparams"][k] = int64_t{1} << 31; });
        refuse_header(key + " = 2^64-1", [k = key](json& h) { h["hparams"][k] = std::numeric_limits<uint64_t>::max(); });
        refuse_header(key + " missing", [k = key](json& h) { h["hparams"].erase(k); });
        refuse_header(key + " a string", [k = key](json& h) { h["hparams"][k] = "3"; });
        refuse_header(key + " 1.5", [k = key](json& h) { h["hparams"][k] = h["hparams"][k].get<int>() + 0.5; });
    }
    refuse_header("n_heads % n_kv_heads", [](json& h) { h["hparams"]["n_kv_heads"] = 3; });
    refuse_header("odd head_dim", [](json& h) { h["hparams"]["head_dim"] = 15; });
    refuse_header("default_loops > max_loops", [](json& h) { h["hparams"]["default_loops"] = h["hparams"]["max_loops"].get<int>() + 1; });
    refuse_header("vocab_size below the tokenizer", [](json& h) { h["hparams"]["vocab_size"] = 259; });
    refuse_header("rope_theta NaN-ish", [](json& h) { h["hparams"]["rope_theta"] = -1.0; });
    refuse_header("rope_theta 0", [](json& h) { h["hparams"]["rope_theta"] = 0.0; });
    refuse_header("norm_eps negative", [](json& h) { h["hparams"]["norm_eps"] = -1e-5; });
    refuse_header("tie_embeddings a number", [](json& h) { h["hparams"]["tie_embeddings"] = 1.5; });
    // FORMAT.md §1a: loop_input "add" only in version 2, and no other value anywhere.
    if (parsed_.version == 1)
        refuse_header("loop_input add in version 1", [](json& h) { h["hparams"]["loop_input"] = "add"; });
    refuse_header("loop_input unknown", [](json& h) { h["hparams"]["loop_input"] = "concat"; });
    refuse_header("loop_input a number", [](json& h) { h["hparams"]["loop_input"] = 1; });
    json injecting = parsed_.header;
    injecting["hparams"]["loop_input"] = "add";
    // bf16 tensors need version 3 whatever the loop input; the version is the larger reason.
    const uint32_t with_add = std::max<uint32_t>(parsed_.version, 2);
    Bytes v2 = rebuild(injecting, parsed_.data, "", with_add);
    EXPECT_EQ(load_bytes("version " + std::to_string(with_add) + " with loop_input add", v2, false), Outcome::Loaded);
    injecting["hparams"]["loop_input"] = "none";
    v2 = rebuild(injecting, parsed_.data);
    put_u32(v2, 8, 2);
    load_bytes("version 2 with loop_input none", v2, true);
    refuse_header("hparams missing", [](json& h) { h.erase("hparams"); });
    refuse_header("format wrong", [](json& h) { h["format"] = "gguf"; });
}

TEST_P(CorruptFiles, NaNAndInfInNorms) {
    const auto rs = regions(parsed_.header);
    for (const Region& r : rs) {
        if (r.tensor.find("norm") == std::string::npos) continue;
        for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
            for (uint64_t at : {r.begin, r.end - 4}) {
                refuse_data(r.tensor + " holds " + std::to_string(bad) + " at " + std::to_string(at), [&](Bytes& d) {
                    std::memcpy(&d[at], &bad, 4);
                });
            }
        }
    }
}

// A bf16 weight that is NaN or Inf (exponent bits all ones) is refused like an f32/f16 one.
TEST_P(CorruptFiles, NaNAndInfInBf16Weights) {
    if (GetParam() != DType::BF16) GTEST_SKIP() << "bf16 files only";
    for (const Region& r : regions(parsed_.header)) {
        if (r.tensor != "loop.0.wv" && r.tensor != "embed") continue;
        for (uint16_t bad : {uint16_t{0x7fc0}, uint16_t{0x7f80}, uint16_t{0xff80}, uint16_t{0xff81}}) {
            for (uint64_t at : {r.begin, r.end - 2}) {
                refuse_data(r.tensor + " holds bf16 0x" + std::to_string(bad) + " at " + std::to_string(at),
                            [&](Bytes& d) { std::memcpy(&d[at], &bad, 2); });
            }
        }
    }
}

TEST_P(CorruptFiles, TokenizerIdsOutOfRange) {
    const int V = parsed_.header["hparams"]["vocab_size"];
    refuse_header("merge refers to itself", [](json& h) { h["tokenizer"]["merges"][1] = {257, 101}; });
    refuse_header("merge refers to a later id", [](json& h) { h["tokenizer"]["merges"][0] = {300, 101}; });
    refuse_header("merge id negative", [](json& h) { h["tokenizer"]["merges"][0] = {-1, 101}; });
    refuse_header("merge with three ids", [](json& h) { h["tokenizer"]["merges"][0] = {116, 104, 1}; });
    refuse_header("merge not ids", [](json& h) { h["tokenizer"]["merges"][0] = {"t", "h"}; });
    refuse_header("merges past vocab", [V](json& h) {
        for (int i = 0; i < V; ++i) h["tokenizer"]["merges"].push_back({116, 104});
    });
    refuse_header("special id = vocab", [V](json& h) { h["tokenizer"]["special_tokens"]["<|endoftext|>"] = V; h["tokenizer"]["eos_id"] = V; });
    refuse_header("special id negative", [](json& h) { h["tokenizer"]["special_tokens"]["<|endoftext|>"] = -1; });
    refuse_header("special id inside the merges", [](json& h) { h["tokenizer"]["special_tokens"]["<|endoftext|>"] = 257; h["tokenizer"]["eos_id"] = 257; });
    refuse_header("special id a byte", [](json& h) { h["tokenizer"]["special_tokens"]["<|endoftext|>"] = 65; h["tokenizer"]["eos_id"] = 65; });
    refuse_header("two specials one id", [](json& h) { h["tokenizer"]["special_tokens"]["<|pad|>"] = 259; });
    refuse_header("special empty string", [](json& h) { h["tokenizer"]["special_tokens"][""] = 260; });
    refuse_header("eos_id = vocab", [V](json& h) { h["tokenizer"]["eos_id"] = V; });
    refuse_header("eos_id -2", [](json& h) { h["tokenizer"]["eos_id"] = -2; });
    refuse_header("bos_id = vocab", [V](json& h) { h["tokenizer"]["bos_id"] = V; });
    refuse_header("eos_id a string", [](json& h) { h["tokenizer"]["eos_id"] = "259"; });
    refuse_header("unknown tokenizer type", [](json& h) { h["tokenizer"]["type"] = "sentencepiece"; });
    refuse_header("unknown pretokenizer", [](json& h) { h["tokenizer"]["pretokenizer"] = "gpt2"; });
    refuse_header("tokenizer missing", [](json& h) { h.erase("tokenizer"); });
}

// Found by fuzz_loader (tests/fuzz/regressions/loader/argmax-nan-logits-undecodable-id): NaN in
// a weight matrix is allowed by FORMAT.md (only norms are checked), so such a file loads; its
// logits are all NaN. With a padded vocabulary (vocab_size above the tokenizer's ids) greedy
// argmax then skipped every NaN and returned the first masked id, and the text stream read the
// bytes of an id the tokenizer does not have (heap-buffer-overflow in TextStream::push).
TEST(CorruptWeights, NaNLogitsWithAPaddedVocabularyDoNotEmitUndecodableIds) {
    HParams hp = tltest::small_hparams();
    ModelSpec spec = random_model_spec(hp, 5);
    spec.tokenizer = TokenizerSpec();
    spec.tokenizer.special_tokens = {{"<|endoftext|>", 256}};
    spec.tokenizer.eos_id = 256;  // 257 ids in a vocabulary of 300
    const std::string path = tltest::temp_path("nan_weights.tinyloop");
    save_model(path, spec);  // the writer refuses NaN, so it goes into the bytes afterwards
    Bytes bytes = slurp(path);
    const Parsed parsed = parse(bytes);
    for (const Region& r : regions(parsed.header))
        if (r.tensor == "embed")
            for (uint64_t at = r.begin; at + 4 <= r.end; at += 4 * 7) {
                const float nan = std::numeric_limits<float>::quiet_NaN();
                std::memcpy(&bytes[parsed.data_start + at], &nan, 4);
            }
    spit(path, bytes);
    Model* m = nullptr;
    try {
        m = load_model(path);
    } catch (const Error&) {
        SUCCEED() << "refused at load: fine";
        return;
    }
    const int n_ids = model_info(m).tokenizer_vocab;
    const std::vector<int32_t> prompt = {65, 66, 67};
    for (float temp : {0.0f, 0.8f}) {
        GenerateConfig c;
        c.max_tokens = 4;
        c.temperature = temp;
        c.stop_strings = {"zz"};
        try {
            const GenerateResult r = generate_ex(m, prompt.data(), 3, c);
            for (size_t i = 3; i < r.tokens.size(); ++i) EXPECT_LT(r.tokens[i], n_ids) << "an id the tokenizer cannot decode";
        } catch (const Error&) {
        }
    }
    free_model(m);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CorruptFiles, ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8, DType::Q4, DType::Q2),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
