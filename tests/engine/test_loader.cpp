// Writing and reading .tinyloop files (FORMAT.md §2) and every refusal of FORMAT.md §4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <unistd.h>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "model/loader.h"
#include "quant_ref.h"

using namespace tinyloop;
using ojson = nlohmann::ordered_json;

namespace {

std::string temp_path(const std::string& name) {
    // One directory per process: CTest runs the tests of this file as parallel processes.
    const std::filesystem::path dir =
        std::filesystem::path(TL_BINARY_DIR) / "test_loader_tmp" / std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    return (dir / name).string();
}

HParams small_hp(bool tied = true) {
    HParams hp;
    hp.vocab_size = 300;
    hp.d_model = 128;
    hp.n_heads = 4;
    hp.n_kv_heads = 2;
    hp.head_dim = 32;
    hp.d_ff = 256;
    hp.n_pre_blocks = 1;
    hp.n_loop_layers = 2;
    hp.default_loops = 2;
    hp.max_loops = 4;
    hp.max_seq_len = 64;
    hp.rope_theta = 10000.0f;
    hp.norm_eps = 1e-5f;
    hp.tie_embeddings = tied;
    return hp;
}

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

void spit(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

uint64_t get_u64(const std::string& b, size_t at) {
    uint64_t v = 0;
    std::memcpy(&v, b.data() + at, 8);
    return v;
}
void set_u64(std::string& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }

// A file split into its header (parsed, key order kept) and its data section.
struct Parts {
    ojson header;
    std::string data;
};

Parts split(const std::string& bytes) {
    const uint64_t hb = get_u64(bytes, 16);
    const uint64_t data_start = (24 + hb + 63) / 64 * 64;
    return {ojson::parse(bytes.substr(24, hb)), bytes.substr(data_start)};
}

std::string join_text(const std::string& header_text, const std::string& data) {
    std::string out("TINYLOOP", 8);
    out += std::string("\x01\0\0\0\0\0\0\0", 8);
    out += std::string(8, '\0');
    set_u64(out, 16, header_text.size());
    out += header_text;
    out.resize((out.size() + 63) / 64 * 64, '\0');
    return out + data;
}

std::string join(const Parts& p) { return join_text(p.header.dump(), p.data); }

using tltest::bound_for;
using tltest::decode_view;
using tltest::rel_err;

// A valid file the refusal tests corrupt, one per test run.
class Corrupt : public ::testing::Test {
protected:
    void SetUp() override {
        base_ = temp_path("base.tinyloop");
        ModelSpec spec = random_model_spec(small_hp(), 3, DType::Q4, 32);
        save_model(base_, spec);
        bytes_ = slurp(base_);
    }

    // Writes `bytes` to a file named after the test and expects a BadFile naming the path and
    // `field`.
    void expect_bad(const std::string& bytes, const std::string& field) {
        const std::string path =
            temp_path(std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
                      "_" + std::to_string(n_++) + ".tinyloop");
        spit(path, bytes);
        try {
            read_model_file(path);
            ADD_FAILURE() << "loaded a file that should be refused (" << field << ")";
        } catch (const Error& e) {
            const std::string msg = e.what();
            if (std::getenv("TL_SHOW_ERRORS")) std::printf("    %s\n", msg.c_str());
            EXPECT_EQ(e.code(), ErrorCode::BadFile) << msg;
            EXPECT_EQ(msg.rfind(path + ": ", 0), 0u)
                << "message does not start with the path: " << msg;
            EXPECT_NE(msg.find(field), std::string::npos)
                << "message does not name " << field << ": " << msg;
        }
    }
    void expect_bad(const Parts& p, const std::string& field) { expect_bad(join(p), field); }

    std::string base_;
    std::string bytes_;
    int n_ = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------------

class RoundTrip : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(RoundTrip, ViewsDecodeToTheWrittenValues) {
    const auto [dtype, tied] = GetParam();
    const HParams hp = small_hp(tied);
    const ModelSpec spec = random_model_spec(hp, 42, dtype, 32);
    const std::string path = temp_path(std::string("rt_") + dtype_name(dtype) +
                                       (tied ? "_tied" : "_untied") + ".tinyloop");
    save_model(path, spec);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    const auto m = read_model_file(path);

    EXPECT_EQ(m->path, path);
    EXPECT_EQ(m->file_bytes, std::filesystem::file_size(path));
    EXPECT_EQ(m->file_bytes % 64, 0u);
    EXPECT_EQ(m->hp.vocab_size, hp.vocab_size);
    EXPECT_EQ(m->hp.n_kv_heads, hp.n_kv_heads);
    EXPECT_EQ(m->hp.default_loops, hp.default_loops);
    EXPECT_EQ(m->hp.rope_theta, hp.rope_theta);
    EXPECT_EQ(m->hp.norm_eps, hp.norm_eps);
    EXPECT_EQ(m->hp.tie_embeddings, tied);
    EXPECT_EQ(m->tokenizer.n_ids(), 257);
    EXPECT_EQ(m->tokenizer.eos_id(), 256);
    EXPECT_EQ(m->tokenizer.bytes_of(256), "<|endoftext|>");
    EXPECT_EQ(m->tokenizer_spec.eos_id, 256);
    EXPECT_EQ(m->tokenizer_spec.bos_id, -1);
    EXPECT_EQ(nlohmann::json::parse(m->metadata_json)["seed"], 42);
    EXPECT_EQ(m->pre.size(), 1u);
    EXPECT_EQ(m->loop.size(), 2u);

    ASSERT_EQ(m->views.size(), spec.tensors.size());
    ASSERT_EQ(m->tensor_infos.size(), spec.tensors.size());
    for (const TensorData& t : spec.tensors) {
        SCOPED_TRACE(t.name);
        const kern::WeightView* v = m->find_tensor(t.name);
        ASSERT_NE(v, nullptr);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % 64, 0u);
        const std::vector<float> got = decode_view(*v);
        ASSERT_EQ(got.size(), t.values.size());
        if (t.dtype == DType::F32) {
            EXPECT_EQ(got, t.values);
        } else if (t.dtype == DType::F16) {
            for (size_t i = 0; i < got.size(); ++i)
                ASSERT_EQ(got[i], kern::f16_to_f32(kern::f32_to_f16(t.values[i])));
        } else if (t.dtype == DType::BF16) {
            for (size_t i = 0; i < got.size(); ++i)
                ASSERT_EQ(got[i], kern::bf16_to_f32(kern::f32_to_bf16(t.values[i])));
        } else {
            EXPECT_EQ(v->group_size, 32);
            EXPECT_LT(rel_err(got, t.values), bound_for(t.dtype));
        }
    }
    EXPECT_EQ(m->find_tensor("nope"), nullptr);
    EXPECT_EQ(m->embed.data, m->find_tensor("embed")->data);
    if (tied) {
        EXPECT_EQ(m->head.data, m->embed.data);
    } else {
        EXPECT_EQ(m->head.data, m->find_tensor("head")->data);
        EXPECT_NE(m->head.data, m->embed.data);
    }
    EXPECT_EQ(m->final_norm, reinterpret_cast<const float*>(m->find_tensor("final_norm")->data));
    EXPECT_EQ(m->loop[1].wq.data, m->find_tensor("loop.1.wq")->data);
    EXPECT_EQ(m->loop[1].attn_norm,
              reinterpret_cast<const float*>(m->find_tensor("loop.1.attn_norm")->data));
    EXPECT_EQ(m->pre[0].w_down.rows, hp.d_model);
    EXPECT_EQ(m->pre[0].w_down.cols, hp.d_ff);
    EXPECT_EQ(m->loop[0].wk.rows, hp.n_kv_heads * hp.head_dim);
    // Weights are used in place, never copied: every view points into the file buffer. Where this
    // CPU's int8 kernel uses row panels (Q8/Q4 with AVX512-VNNI), each such matrix also has its
    // panels, packed from those codes, in the model's panel buffer; the layer copies share them.
    for (const auto& [name, v] : m->views) {
        SCOPED_TRACE(name);
        EXPECT_GE(v.data, m->file.data());
        EXPECT_LT(v.data, m->file.data() + m->file.size());
        // F32/BF16 matrices that matmul multiplies carry float panels (not vectors, not an untied
        // embedding), packed from their values.
        const size_t fb = (v.rows <= 1 || (name == "embed" && !m->hp.tie_embeddings)) ? 0 : kern::f32_panel_bytes(v);
        if (fb == 0) {
            EXPECT_EQ(v.fpanels, nullptr);
        } else {
            ASSERT_NE(v.fpanels, nullptr);
            EXPECT_EQ(reinterpret_cast<uintptr_t>(v.fpanels) % 64, 0u);
            EXPECT_GE(v.fpanels, m->panels.data());
            EXPECT_LE(v.fpanels + fb, m->panels.data() + m->panels.size());
            std::vector<uint8_t> want(fb);
            kern::f32_pack_panels(v, want.data());
            EXPECT_EQ(std::memcmp(want.data(), v.fpanels, fb), 0);
        }
        const size_t pb = kern::i8_panel_bytes(v);
        if (pb == 0) {
            EXPECT_EQ(v.panels, nullptr);
            continue;
        }
        ASSERT_NE(v.panels, nullptr);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(v.panels) % 64, 0u);
        EXPECT_GE(v.panels, m->panels.data());
        EXPECT_LE(v.panels + pb, m->panels.data() + m->panels.size());
        std::vector<uint8_t> want(pb);
        kern::i8_pack_panels(v, want.data());
        EXPECT_EQ(std::memcmp(want.data(), v.panels, pb), 0);
    }
    EXPECT_EQ(m->loop[1].w_up.panels, m->find_tensor("loop.1.w_up")->panels);
    EXPECT_EQ(m->loop[1].w_up.fpanels, m->find_tensor("loop.1.w_up")->fpanels);
    if (dtype == DType::Q8 || dtype == DType::Q4)
        std::printf("[ info ] %s: %zu bytes of row panels\n", dtype_name(dtype), m->panels.size());
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, RoundTrip,
                         ::testing::Combine(::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8,
                                                              DType::Q4, DType::Q2),
                                            ::testing::Bool()));

TEST(Writer, HeaderFollowsTheFormat) {
    const std::string path = temp_path("header.tinyloop");
    ModelSpec spec = random_model_spec(small_hp(false), 1, DType::Q8, 64);
    spec.tokenizer.merges = {{'a', 'b'}, {256, 'c'}};
    spec.tokenizer.special_tokens = {{"<|endoftext|>", 258}, {"<|bos|>", 259}};
    spec.tokenizer.eos_id = 258;
    spec.tokenizer.bos_id = 259;
    save_model(path, spec);
    const std::string bytes = slurp(path);
    EXPECT_EQ(bytes.substr(0, 8), "TINYLOOP");
    EXPECT_EQ(bytes.substr(8, 8), std::string("\x01\0\0\0\0\0\0\0", 8));
    const Parts p = split(bytes);
    const ojson& h = p.header;
    EXPECT_EQ(h["format"], "tinyloop");
    EXPECT_EQ(h["hparams"]["norm_eps"].get<double>(), 1e-5);
    EXPECT_EQ(h["hparams"]["tie_embeddings"], false);
    EXPECT_EQ(h["tokenizer"]["merges"].dump(), "[[97,98],[256,99]]");
    EXPECT_EQ(h["tokenizer"]["special_tokens"]["<|bos|>"], 259);
    EXPECT_EQ(h["tokenizer"]["eos_id"], 258);
    EXPECT_EQ(h["tokenizer"]["bos_id"], 259);
    const ojson& wq = h["tensors"]["loop.0.wq"];
    EXPECT_EQ(wq["dtype"], "q8");
    EXPECT_EQ(wq["group_size"], 64);
    EXPECT_EQ(wq["shape"].dump(), "[128,128]");
    for (const auto& [name, t] : h["tensors"].items())
        for (const char* key : {"offset", "scales_offset", "zeros_offset"})
            if (t.contains(key)) {
                EXPECT_EQ(t[key].get<uint64_t>() % 64, 0u) << name << " " << key;
            }
    EXPECT_EQ(h["tensors"]["final_norm"]["dtype"], "f32");
    EXPECT_FALSE(h["tensors"]["final_norm"].contains("group_size"));
    EXPECT_TRUE(h["tensors"].contains("head"));

    const auto m = read_model_file(path);
    EXPECT_EQ(m->tokenizer.encode("abc<|bos|>", true), (std::vector<int32_t>{257, 259}));
    EXPECT_EQ(m->tokenizer_spec.bos_id, 259);
    EXPECT_EQ(m->tokenizer_spec.special_tokens.size(), 2u);
}

TEST(Writer, RandomSpecIsDeterministicPerSeed) {
    const HParams hp = small_hp();
    const ModelSpec a = random_model_spec(hp, 5), b = random_model_spec(hp, 5),
                    c = random_model_spec(hp, 6);
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (size_t i = 0; i < a.tensors.size(); ++i)
        EXPECT_EQ(a.tensors[i].values, b.tensors[i].values);
    EXPECT_NE(a.tensors[0].values, c.tensors[0].values);
    // Norm gains are 1 + small noise, matrices have standard deviation 1/sqrt(cols).
    for (const TensorData& t : a.tensors) {
        double sum = 0, sq = 0;
        for (float v : t.values) {
            sum += v;
            sq += double(v) * v;
        }
        const double n = static_cast<double>(t.values.size());
        if (t.shape.size() == 1) {
            EXPECT_EQ(t.dtype, DType::F32);
            EXPECT_NEAR(sum / n, 1.0, 0.05) << t.name;
        } else {
            EXPECT_NEAR(std::sqrt(sq / n) * std::sqrt(double(t.shape[1])), 1.0, 0.1) << t.name;
        }
    }
    HParams small_vocab = hp;
    small_vocab.vocab_size = 256;
    EXPECT_TRUE(random_model_spec(small_vocab, 1).tokenizer.special_tokens.empty());
    EXPECT_THROW(random_model_spec(hp, 1, DType::Q4, 48), Error);
    HParams bad = hp;
    bad.d_model = 0;
    EXPECT_THROW(random_model_spec(bad, 1), Error);
}

TEST(Writer, RefusesInconsistentSpecs) {
    const std::string path = temp_path("refused.tinyloop");
    auto expect_invalid = [&](const ModelSpec& s, const std::string& field) {
        try {
            save_model(path, s);
            ADD_FAILURE() << "saved a spec that should be refused (" << field << ")";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
        }
    };
    const ModelSpec good = random_model_spec(small_hp(), 9, DType::Q4, 32);
    ModelSpec s = good;
    s.tensors.pop_back();
    expect_invalid(s, "tensors.final_norm");
    s = good;
    s.tensors.push_back(s.tensors[0]);
    s.tensors.back().name = "head";
    expect_invalid(s, "tensors.head");
    // A bf16 matrix whose value would round to infinity (the largest bf16 is 3.3895e38).
    s = random_model_spec(small_hp(), 9, DType::BF16);
    s.tensors[0].values[5] = 3.3962e38f;  // embed
    expect_invalid(s, "tensors.embed.values: element 5");
    s.tensors[0].values[5] = 3.3895e38f;  // rounds to the largest finite bf16: fine
    EXPECT_NO_THROW(save_model(temp_path("bf16_largest.tinyloop"), s));
    s = random_model_spec(small_hp(), 9, DType::BF16);
    s.tensors[1].dtype = DType::BF16;  // pre.0.attn_norm: norms are f32
    expect_invalid(s, "tensors.pre.0.attn_norm.dtype");
    s = good;
    s.tensors[1].dtype = DType::F16;  // pre.0.attn_norm
    expect_invalid(s, "tensors.pre.0.attn_norm.dtype");
    s = good;
    s.tensors[2].shape = {128, 64};
    expect_invalid(s, "tensors.pre.0.wq.shape");
    s = good;
    s.tensors[2].values.pop_back();
    expect_invalid(s, "tensors.pre.0.wq.values");
    s = good;
    s.tensors[2].group_size = 16;
    expect_invalid(s, "tensors.pre.0.wq.group_size");
    s = good;
    s.tensors[2].values[7] = std::numeric_limits<float>::quiet_NaN();
    expect_invalid(s, "tensors.pre.0.wq.values");
    s = good;
    s.metadata_json = "[1, 2]";
    expect_invalid(s, "metadata_json");
    s.metadata_json = "{oops";
    expect_invalid(s, "metadata_json");
    s = good;
    s.hparams.default_loops = 9;
    expect_invalid(s, "hparams.default_loops");
    s = good;
    s.tokenizer.eos_id = 4000;
    expect_invalid(s, "tokenizer.eos_id");
    EXPECT_FALSE(std::filesystem::exists(path));

    try {
        save_model(temp_path("no/such/dir/m.tinyloop"), good);
        ADD_FAILURE() << "wrote into a missing directory";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Io) << e.what();
    }
}

// ---------------------------------------------------------------------------------------------
// Refusals (FORMAT.md §4)
// ---------------------------------------------------------------------------------------------

TEST(Loader, MissingFileIsIo) {
    for (const std::string& path : {temp_path("does-not-exist.tinyloop"), temp_path("")}) {
        try {
            read_model_file(path);
            ADD_FAILURE() << "opened " << path;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::Io) << e.what();
            EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        }
    }
}

TEST_F(Corrupt, BaseFileLoads) { EXPECT_NO_THROW(read_model_file(base_)); }

TEST_F(Corrupt, Preamble) {
    std::string b = bytes_;
    b[0] = 'X';
    expect_bad(b, "magic");
    b = bytes_;
    b[8] = 2;
    expect_bad(b, "version");
    b = bytes_;
    b[12] = 1;
    expect_bad(b, "flags");
    b = bytes_;
    set_u64(b, 16, uint64_t{1} << 40);
    expect_bad(b, "header_bytes");
    b = bytes_;
    set_u64(b, 16, (uint64_t{64} << 20) + 1);
    expect_bad(b, "header_bytes");
    b = bytes_;
    set_u64(b, 16, b.size() - 23);
    expect_bad(b, "header_bytes");
    b = bytes_;
    set_u64(b, 16, UINT64_MAX);
    expect_bad(b, "header_bytes");
}

TEST_F(Corrupt, TruncatedAnywhere) {
    const uint64_t hb = get_u64(bytes_, 16);
    for (size_t len :
         {size_t{0}, size_t{7}, size_t{23}, size_t{24}, size_t{24 + hb / 2}, size_t{24 + hb - 1},
          size_t{24 + hb}, bytes_.size() / 2, bytes_.size() - 1}) {
        SCOPED_TRACE(len);
        const std::string b = bytes_.substr(0, len);
        expect_bad(b, len < 24 ? "file" : len < 24 + hb ? "header_bytes" : "tensors.");
    }
}

TEST_F(Corrupt, HeaderJsonAndUtf8) {
    const Parts p = split(bytes_);
    expect_bad(join_text("{\"format\": \"tinyloop\", ", p.data), "header");
    expect_bad(join_text("[1, 2, 3]", p.data), "header");
    expect_bad(join_text("", p.data), "header");
    // Ill-formed UTF-8 inside a string: a stray byte, an overlong '/', a UTF-16 surrogate.
    for (const std::string& junk : {std::string("\xff"), std::string("\xc0\xaf"),
                                    std::string("\xed\xa0\x80"), std::string("caf\xc3")}) {
        Parts q = p;
        q.header["metadata"]["note"] = "PLACEHOLDER";
        std::string text = q.header.dump();
        text.replace(text.find("PLACEHOLDER"), 11, junk);
        expect_bad(join_text(text, p.data), "UTF-8");
    }
    // Nesting deep enough to overflow a recursive dump or destructor.
    std::string deep = p.header.dump();
    deep.insert(deep.size() - 1,
                ", \"metadata\": " + std::string(200000, '[') + std::string(200000, ']'));
    expect_bad(join_text(deep, p.data), "header");
    Parts q = p;
    q.header.erase("format");
    expect_bad(q, "format");
    q = p;
    q.header["format"] = "gguf";
    expect_bad(q, "format");
    for (const char* key : {"hparams", "tokenizer", "tensors"}) {
        q = p;
        q.header.erase(key);
        expect_bad(q, key);
        q = p;
        q.header[key] = 7;
        expect_bad(q, key);
    }
    q = p;
    q.header["metadata"] = "not an object";
    expect_bad(q, "metadata");
}

TEST_F(Corrupt, Hyperparameters) {
    const Parts p = split(bytes_);
    auto with = [&](const char* key, const ojson& v) {
        Parts q = p;
        q.header["hparams"][key] = v;
        return q;
    };
    expect_bad(with("d_model", 0), "hparams.d_model");
    expect_bad(with("n_heads", -4), "hparams.n_heads");
    expect_bad(with("vocab_size", 0), "hparams.vocab_size");
    expect_bad(with("vocab_size", -300), "hparams.vocab_size");
    expect_bad(with("vocab_size", "300"), "hparams.vocab_size");
    expect_bad(with("vocab_size", uint64_t{1} << 63), "hparams.vocab_size");
    expect_bad(with("d_model", 128.5), "hparams.d_model");
    expect_bad(with("d_ff", nullptr), "hparams.d_ff");
    expect_bad(with("max_loops", 0), "hparams.max_loops");
    expect_bad(with("max_seq_len", 0), "hparams.max_seq_len");
    expect_bad(with("n_loop_layers", 0), "hparams.n_loop_layers");
    expect_bad(with("n_pre_blocks", -1), "hparams.n_pre_blocks");
    expect_bad(with("n_kv_heads", 3), "hparams.n_kv_heads");
    expect_bad(with("n_kv_heads", 8), "hparams.n_kv_heads");
    expect_bad(with("head_dim", 31), "hparams.head_dim");
    expect_bad(with("default_loops", 5), "hparams.default_loops");
    expect_bad(with("default_loops", 0), "hparams.default_loops");
    expect_bad(with("d_model", 1 << 20), "hparams.d_model");
    expect_bad(with("rope_theta", 0), "hparams.rope_theta");
    expect_bad(with("rope_theta", -1.0), "hparams.rope_theta");
    expect_bad(with("rope_theta", 1e300), "hparams.rope_theta");
    expect_bad(with("norm_eps", 0.0), "hparams.norm_eps");
    expect_bad(with("norm_eps", "tiny"), "hparams.norm_eps");
    expect_bad(with("tie_embeddings", 1), "hparams.tie_embeddings");
    expect_bad(with("qk_norm", true), "hparams.qk_norm");
    Parts q = p;
    q.header["hparams"].erase("head_dim");
    expect_bad(q, "hparams.head_dim");
}

TEST_F(Corrupt, Tokenizer) {
    const Parts p = split(bytes_);
    Parts q = p;
    q.header["tokenizer"]["type"] = "wordpiece";
    expect_bad(q, "tokenizer.type");
    q = p;
    q.header["tokenizer"]["pretokenizer"] = "gpt2";
    expect_bad(q, "tokenizer.pretokenizer");
    q = p;  // merge 1 refers to id 999, which does not exist before it
    q.header["tokenizer"]["merges"] = ojson::parse("[[97, 98], [256, 999]]");
    q.header["tokenizer"]["special_tokens"]["<|endoftext|>"] = 258;
    q.header["tokenizer"]["eos_id"] = 258;
    expect_bad(q, "tokenizer.merges[1]");
    q.header["tokenizer"]["merges"] = ojson::parse("[[97, 98], [256]]");
    expect_bad(q, "tokenizer.merges[1]");
    q.header["tokenizer"]["merges"] = ojson::parse("[[97, 98], [256, -3]]");
    expect_bad(q, "tokenizer.merges[1]");
    q.header["tokenizer"]["merges"] = ojson::parse("[[97, 98], [256, \"c\"]]");
    expect_bad(q, "tokenizer.merges[1]");
    q.header["tokenizer"]["merges"] = ojson::parse("[[97, 98], [256, 4294967296]]");
    expect_bad(q, "tokenizer.merges[1]");
    q = p;
    q.header["tokenizer"]["special_tokens"]["<|endoftext|>"] = 299;
    q.header["tokenizer"]["eos_id"] = 299;
    expect_bad(q, "tokenizer.special_tokens.<|endoftext|>");
    q.header["tokenizer"]["special_tokens"]["<|endoftext|>"] = 300;
    expect_bad(q, "tokenizer.special_tokens.<|endoftext|>");
    q = p;
    q.header["tokenizer"]["eos_id"] = 5000;
    expect_bad(q, "tokenizer.eos_id");
    q = p;
    q.header["tokenizer"]["bos_id"] = -7;
    expect_bad(q, "tokenizer.bos_id");
    q = p;
    q.header["tokenizer"]["merges"] = "none";
    expect_bad(q, "tokenizer.merges");
}

TEST_F(Corrupt, MissingExtraAndMisshapenTensors) {
    const Parts p = split(bytes_);
    Parts q = p;
    q.header["tensors"].erase("loop.1.wq");
    expect_bad(q, "tensors.loop.1.wq");
    q = p;
    q.header["tensors"].erase("final_norm");
    expect_bad(q, "tensors.final_norm");
    q = p;
    q.header["tensors"]["loop.2.wq"] = p.header["tensors"]["loop.1.wq"];
    expect_bad(q, "tensors.loop.2.wq");
    q = p;  // the file is tied: a head is one tensor too many
    q.header["tensors"]["head"] = p.header["tensors"]["embed"];
    expect_bad(q, "tensors.head");
    q = p;  // untied but no head
    q.header["hparams"]["tie_embeddings"] = false;
    expect_bad(q, "tensors.head");
    q = p;
    q.header["tensors"]["loop.0.wq"]["shape"] = ojson::parse("[128, 127]");
    expect_bad(q, "tensors.loop.0.wq.shape");
    q.header["tensors"]["loop.0.wq"]["shape"] = ojson::parse("[128]");
    expect_bad(q, "tensors.loop.0.wq.shape");
    q.header["tensors"]["loop.0.wq"]["shape"] = ojson::parse("[128, -128]");
    expect_bad(q, "tensors.loop.0.wq.shape");
    q.header["tensors"]["loop.0.wq"]["shape"] = ojson::parse("[128, 128, 1]");
    expect_bad(q, "tensors.loop.0.wq.shape");
    q = p;  // 2^40 x 2^40 elements: the size overflows 64 bits
    q.header["tensors"]["embed"]["shape"] = ojson::array({uint64_t{1} << 40, uint64_t{1} << 40});
    expect_bad(q, "tensors.embed.shape");
    q = p;
    q.header["tensors"]["final_norm"] = 3;
    expect_bad(q, "tensors.final_norm");
}

TEST_F(Corrupt, DtypesAndGroupSizes) {
    const Parts p = split(bytes_);
    Parts q = p;
    q.header["tensors"]["embed"]["dtype"] = "q3";
    expect_bad(q, "tensors.embed.dtype");
    q.header["tensors"]["embed"]["dtype"] = 4;
    expect_bad(q, "tensors.embed.dtype");
    q = p;
    q.header["tensors"]["loop.0.mlp_norm"]["dtype"] = "f16";
    expect_bad(q, "tensors.loop.0.mlp_norm.dtype");
    for (const ojson& g :
         {ojson(48), ojson(256), ojson(0), ojson(-32), ojson("32"), ojson(nullptr)}) {
        q = p;
        q.header["tensors"]["loop.0.wv"]["group_size"] = g;
        expect_bad(q, "tensors.loop.0.wv.group_size");
    }
    q = p;
    q.header["tensors"]["loop.0.wv"].erase("group_size");
    expect_bad(q, "tensors.loop.0.wv.group_size");

    // A group size that is allowed but does not divide the row (d_model 96, group 64).
    HParams hp = small_hp();
    hp.d_model = 96;
    hp.head_dim = 24;
    hp.d_ff = 192;
    const std::string path = temp_path("d96.tinyloop");
    save_model(path, random_model_spec(hp, 4, DType::Q8, 32));
    q = split(slurp(path));
    q.header["tensors"]["pre.0.wk"]["group_size"] = 64;
    expect_bad(q, "tensors.pre.0.wk.group_size");
}

TEST_F(Corrupt, RegionsAlignedDisjointAndInside) {
    const Parts p = split(bytes_);
    const ojson& t = p.header["tensors"];
    Parts q = p;
    q.header["tensors"]["loop.0.wq"]["offset"] = t["loop.0.wq"]["offset"].get<uint64_t>() + 8;
    expect_bad(q, "tensors.loop.0.wq.offset");
    q = p;
    q.header["tensors"]["loop.0.wq"]["scales_offset"] =
        t["loop.0.wq"]["scales_offset"].get<uint64_t>() + 2;
    expect_bad(q, "tensors.loop.0.wq.scales_offset");
    q = p;
    q.header["tensors"]["final_norm"]["offset"] = -64;
    expect_bad(q, "tensors.final_norm.offset");
    q.header["tensors"]["final_norm"]["offset"] = "0";
    expect_bad(q, "tensors.final_norm.offset");
    q.header["tensors"]["final_norm"].erase("offset");
    expect_bad(q, "tensors.final_norm.offset");

    q = p;  // two tensors on the same bytes
    q.header["tensors"]["loop.0.wk"]["offset"] = t["loop.0.wq"]["offset"];
    expect_bad(q, "overlaps");
    q = p;  // a zeros region starting inside another tensor's scales
    q.header["tensors"]["loop.1.w_up"]["zeros_offset"] = t["loop.1.w_up"]["scales_offset"];
    expect_bad(q, "tensors.loop.1.w_up");
    q = p;  // a norm inside a matrix's codes
    q.header["tensors"]["final_norm"]["offset"] = t["embed"]["offset"].get<uint64_t>() + 64;
    expect_bad(q, "overlaps");

    const uint64_t data_bytes = p.data.size();
    q = p;
    q.header["tensors"]["final_norm"]["offset"] = data_bytes;
    expect_bad(q, "tensors.final_norm.offset");
    q.header["tensors"]["final_norm"]["offset"] = uint64_t{1} << 40;
    expect_bad(q, "tensors.final_norm.offset");
    q.header["tensors"]["final_norm"]["offset"] = UINT64_MAX - 63;  // offset + size overflows
    expect_bad(q, "tensors.final_norm.offset");
    q = p;
    q.header["tensors"]["embed"]["zeros_offset"] = (data_bytes / 64) * 64;
    expect_bad(q, "tensors.embed.zeros_offset");
}

TEST_F(Corrupt, NonFiniteValues) {
    const Parts p = split(bytes_);
    const ojson& t = p.header["tensors"];
    auto poke_f32 = [&](const char* name, size_t index, float v) {
        Parts q = p;
        std::memcpy(q.data.data() + t[name]["offset"].get<uint64_t>() + 4 * index, &v, 4);
        return q;
    };
    expect_bad(poke_f32("final_norm", 5, std::numeric_limits<float>::quiet_NaN()),
               "tensors.final_norm");
    expect_bad(poke_f32("loop.0.attn_norm", 0, std::numeric_limits<float>::infinity()),
               "tensors.loop.0.attn_norm");
    expect_bad(poke_f32("pre.0.mlp_norm", 127, -std::numeric_limits<float>::infinity()),
               "tensors.pre.0.mlp_norm");
    Parts q = p;  // an f16 NaN scale in a quantized matrix
    const uint16_t nan16 = 0x7e00;
    std::memcpy(q.data.data() + t["loop.1.wo"]["scales_offset"].get<uint64_t>() + 6, &nan16, 2);
    expect_bad(q, "tensors.loop.1.wo");
}

TEST(Loader, NonFiniteWeightsInF32AndF16Files) {
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
        const std::string path = temp_path(std::string("nf_") + dtype_name(dt) + ".tinyloop");
        save_model(path, random_model_spec(small_hp(), 8, dt));
        Parts p = split(slurp(path));
        const uint64_t off = p.header["tensors"]["loop.0.w_gate"]["offset"].get<uint64_t>();
        if (dt == DType::F32) {
            const float inf = std::numeric_limits<float>::infinity();
            std::memcpy(p.data.data() + off + 40, &inf, 4);
        } else {
            const uint16_t inf16 = dt == DType::BF16 ? 0x7f80 : 0x7c00;
            std::memcpy(p.data.data() + off + 40, &inf16, 2);
        }
        std::string bytes = join(p);  // written as version 1; a bf16 file is version 3
        if (dt == DType::BF16) bytes[8] = 3;
        spit(path, bytes);
        try {
            read_model_file(path);
            ADD_FAILURE() << "loaded a non-finite weight";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::BadFile);
            EXPECT_NE(std::string(e.what()).find("tensors.loop.0.w_gate"), std::string::npos)
                << e.what();
        }
    }
}

// Random byte flips anywhere in a valid file: the loader either accepts the file or refuses it
// with BadFile naming the path, never crashes or reads outside it (run under the sanitizers).
TEST_F(Corrupt, RandomByteFlipsNeverCrash) {
    std::mt19937_64 rng(2024);
    const uint64_t hb = get_u64(bytes_, 16);
    int refused = 0;
    for (int trial = 0; trial < 400; ++trial) {
        std::string b = bytes_;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k) {
            // Mostly the preamble and header, where the structure lives.
            const size_t at = trial % 4 == 3 ? rng() % b.size() : rng() % (24 + hb);
            b[at] = static_cast<char>(rng() % 3 == 0 ? rng() : b[at] ^ (1 << (rng() % 8)));
        }
        const std::string path = temp_path("flip.tinyloop");
        spit(path, b);
        try {
            const auto m = read_model_file(path);
            EXPECT_NE(m, nullptr);
        } catch (const Error& e) {
            ++refused;
            EXPECT_EQ(e.code(), ErrorCode::BadFile) << e.what();
            EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
        }
    }
    EXPECT_GT(refused, 100);
}
