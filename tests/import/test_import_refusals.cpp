// `tinyloop import` on hostile Hugging Face folders, run as a user runs it: each is refused with
// exit status 2 and one line naming the file and the field, within 5 s, and no output is left
// behind. The base folder (hf_folder_fixture.h) is a valid tiny Ouro, changed one thing at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <cstdio>
#include <sys/wait.h>

#include "hf_folder_fixture.h"

using namespace tlimport;
using nlohmann::json;

namespace {

struct CliRun {
    int status = -1;
    std::string err;
    double seconds = 0;
};

CliRun import_folder(const fs::path& dir, const std::string& extra = "") {
    const fs::path out = dir.parent_path() / (dir.filename().string() + ".tinyloop");
    const fs::path err = dir.parent_path() / (dir.filename().string() + ".err");
    const std::string cmd = "timeout 20 " + std::string(TL_CLI_PATH) + " import " + dir.string() + " " + out.string() +
                            " " + extra + " > /dev/null 2> " + err.string();
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = std::system(cmd.c_str());
    CliRun r;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    std::ifstream f(err);
    r.err.assign(std::istreambuf_iterator<char>(f), {});
    EXPECT_FALSE(fs::exists(out)) << "an output was left behind";
    EXPECT_FALSE(fs::exists(out.string() + ".tmp")) << "a temporary file was left behind";
    return r;
}

class ImportRefusals : public ::testing::Test {
protected:
    fs::path dir(const std::string& name) { return fs::path(TL_BINARY_DIR) / "test-import-refusals" / name; }
    void expect_refused(const std::string& name, const json& config, const std::vector<StEntry>& tensors,
                        const std::vector<std::string>& needles) {
        const fs::path d = dir(name);
        write_tiny_ouro(d, config, tensors);
        expect_refused_dir(d, needles);
    }
    void expect_refused_dir(const fs::path& d, const std::vector<std::string>& needles, const std::string& extra = "") {
        const CliRun r = import_folder(d, extra);
        EXPECT_EQ(r.status, 2) << d << ": " << r.err;
        EXPECT_LT(r.seconds, 5.0) << d;
        for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << d << ": " << r.err << "\nwanted: " << n;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
};

}  // namespace

TEST_F(ImportRefusals, ConfigFieldsOutsideTheMath) {
    const auto t = tiny_ouro_tensors();
    auto with = [](const std::string& k, const json& v) {
        json c = tiny_ouro_config();
        c[k] = v;
        return c;
    };
    expect_refused("arch", with("architectures", {"LlamaForCausalLM"}), t,
                   {"config.json: architectures: \"LlamaForCausalLM\", allowed OuroForCausalLM or RavenForCausalLM"});
    expect_refused("absurd-d", with("hidden_size", 1000000000000LL), t, {"config.json: hidden_size: 1000000000000, allowed an integer in 1 .. 65536"});
    expect_refused("absurd-vocab", with("vocab_size", 1 << 30), t, {"config.json: vocab_size"});
    expect_refused("absurd-layers", with("num_hidden_layers", 100000), t, {"config.json: num_hidden_layers"});
    expect_refused("steps", with("total_ut_steps", 0), t, {"config.json: total_ut_steps: 0"});
    expect_refused("string-size", with("hidden_size", "32"), t, {"config.json: hidden_size: \"32\""});
    expect_refused("rope-scaling", with("rope_scaling", {{"type", "linear"}, {"factor", 2.0}}), t,
                   {"config.json: rope_scaling", "allowed null"});
    expect_refused("sliding", with("layer_types", {"sliding_attention"}), t, {"config.json: layer_types[0]: \"sliding_attention\""});
    expect_refused("sliding2", with("use_sliding_window", true), t, {"config.json: use_sliding_window: true, allowed false"});
    expect_refused("act", with("hidden_act", "gelu"), t, {"config.json: hidden_act: \"gelu\", allowed \"silu\""});
    expect_refused("unknown", with("attn_logit_softcapping", 50.0), t,
                   {"config.json: attn_logit_softcapping: 50.0 is a field the OuroForCausalLM importer does not know"});
    expect_refused("eps", with("rms_norm_eps", -1.0), t, {"config.json: rms_norm_eps"});
    json gqa = tiny_ouro_config();
    gqa["num_key_value_heads"] = 3;  // does not divide 2 heads
    expect_refused("kv", gqa, t, {"config.json: (as mapped) hparams.n_kv_heads"});
}

TEST_F(ImportRefusals, TensorsThatDisagreeWithTheConfig) {
    const json c = tiny_ouro_config();
    auto t = tiny_ouro_tensors();
    t[5].shape = {16, 64};  // q_proj [32, 32] stored as [16, 64]
    expect_refused("shape", c, t, {"model.safetensors: header.model.layers.0.self_attn.q_proj.weight.shape: [16, 64], config.json implies [32, 32]"});
    t = tiny_ouro_tensors();
    t[5].dtype = "I32";
    expect_refused("dtype", c, t, {"model.safetensors: header.model.layers.0.self_attn.q_proj.weight.dtype: I32, allowed BF16, F16, F32"});
    t = tiny_ouro_tensors();
    t.pop_back();  // lm_head.weight
    expect_refused("missing", c, t, {"config.json: the checkpoint has no tensor lm_head.weight"});
    t = tiny_ouro_tensors();
    t.push_back({"model.layers.0.self_attn.q_norm.weight", "F32", {16}, f32_bytes(pseudo(16, 99))});
    expect_refused("extra", c, t, {"header.model.layers.0.self_attn.q_norm.weight: a tensor the OuroForCausalLM importer does not map"});
}

TEST_F(ImportRefusals, HostileFiles) {
    const json c = tiny_ouro_config();
    const fs::path d = dir("files");
    write_tiny_ouro(d, c, tiny_ouro_tensors());
    const std::string good = [&] {
        std::ifstream f(d / "model.safetensors", std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(f), {});
    }();
    auto with_bytes = [&](const std::string& b, const std::vector<std::string>& needles) {
        spit(d / "model.safetensors", b);
        expect_refused_dir(d, needles);
    };
    std::string b = good;
    const uint64_t past = good.size();
    std::memcpy(&b[0], &past, 8);
    with_bytes(b, {"model.safetensors: header length: " + std::to_string(past) + " bytes runs past the end"});
    b = good;
    const uint64_t big = 100000000;  // a 100 MB header
    std::memcpy(&b[0], &big, 8);
    with_bytes(b, {"model.safetensors: header length: 100000000 bytes, allowed at most"});
    with_bytes(good.substr(0, good.size() - 100), {"model.safetensors: header.lm_head.weight.data_offsets: end"});
    with_bytes("", {"model.safetensors: file is 0 bytes"});
    // Overlapping regions: q_proj's offsets point into k_proj's.
    b = good;
    uint64_t hlen;
    std::memcpy(&hlen, b.data(), 8);
    json h = json::parse(b.substr(8, hlen));
    auto& q = h["model.layers.0.self_attn.q_proj.weight"]["data_offsets"];
    auto& k = h["model.layers.0.self_attn.k_proj.weight"]["data_offsets"];
    q = {k[0].get<uint64_t>() + 4, k[1].get<uint64_t>() + 4};
    const std::string hs = h.dump();
    const uint64_t n = hs.size();
    with_bytes(std::string(reinterpret_cast<const char*>(&n), 8) + hs + b.substr(8 + hlen), {"overlaps"});
    spit(d / "model.safetensors", good);
    std::ofstream(d / "config.json") << std::string(100000, '[') + std::string(100000, ']');
    expect_refused_dir(d, {"config.json: JSON nested 100000 levels deep"});
    std::ofstream(d / "config.json") << "{\"architectures\": [\"OuroForCausalLM\"], ";
    expect_refused_dir(d, {"config.json: invalid JSON"});
    fs::remove(d / "config.json");
    expect_refused_dir(d, {"config.json: missing"});
}

TEST_F(ImportRefusals, ArgumentsNameTheFlag) {
    const fs::path d = dir("args");
    write_tiny_ouro(d, tiny_ouro_config(), tiny_ouro_tensors());
    expect_refused_dir(d, {"--dtype: expected one of bf16, f32, f16, q8, q4, got 'q2'"}, "--dtype q2");
    expect_refused_dir(d, {"--loops"}, "--loops 0");
    expect_refused_dir(d, {"--state-init"}, "--state-init random");
    expect_refused_dir(d.parent_path() / "no-such-folder", {"is not a folder"});
}

TEST_F(ImportRefusals, StopIdsNameTheFileAndField) {
    const fs::path d = dir("stop-ids");
    json c = tiny_ouro_config();
    write_tiny_ouro(d, c, tiny_ouro_tensors());
    const fs::path gen = d / "generation_config.json";
    std::ofstream(gen) << json({{"eos_token_id", {0, 256}}}).dump();
    expect_refused_dir(d, {"generation_config.json: eos_token_id[1]: 256, allowed an id 0 .. 255 (config.json vocab_size 256)"});
    std::ofstream(gen) << json({{"eos_token_id", "2"}}).dump();
    expect_refused_dir(d, {"generation_config.json: eos_token_id: \"2\", allowed an id 0 .. 255"});
    std::ofstream(gen) << json({{"eos_token_id", std::vector<int>(65, 1)}}).dump();
    expect_refused_dir(d, {"generation_config.json: eos_token_id: 65 ids, allowed at most 64"});
    std::ofstream(gen) << "[1, 2]";
    expect_refused_dir(d, {"generation_config.json: expected a JSON object"});
    // Without generation_config.json, config.json's eos_token_id is the list (transformers'
    // GenerationConfig.from_model_config).
    fs::remove(gen);
    c["eos_token_id"] = -1;
    std::ofstream(d / "config.json") << c.dump(2);
    expect_refused_dir(d, {"config.json: eos_token_id: -1, allowed an id 0 .. 255"});
}
