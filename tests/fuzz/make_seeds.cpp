// Writes the seed corpora of the fuzz targets from valid inputs: small models of every dtype
// written with tinyloop::save_model, texts and id lists for the tokenizer, the bundled grammars
// and presets. Usage: tinyloop_fuzz_seeds OUT_DIR SOURCE_DIR
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_targets.h"

namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s OUT_DIR SOURCE_DIR\n", argv[0]);
        return 2;
    }
    const fs::path out = argv[1], src = argv[2];
    for (const char* t : {"loader", "tokenizer", "grammar", "preset", "safetensors", "hf_tokenizer"}) fs::create_directories(out / t);

    // Models: every dtype, tied and untied, no prelude, GQA and not, input injection (version 2),
    // bf16 (version 3).
    using tinyloop::DType;
    using tinyloop::LoopInput;
    struct Variant { const char* name; DType dt; int group; bool tie; int pre; int kv; LoopInput input = LoopInput::None; };
    const Variant variants[] = {
        {"f32", DType::F32, 32, true, 1, 1},  {"f16", DType::F16, 32, true, 1, 2},
        {"q8", DType::Q8, 32, true, 0, 1},    {"q4", DType::Q4, 32, false, 1, 2},
        {"q2", DType::Q2, 32, true, 1, 1},    {"f32-untied", DType::F32, 32, false, 2, 1},
        {"f32-inject", DType::F32, 32, true, 1, 2, LoopInput::Add},
        {"bf16", DType::BF16, 32, false, 1, 2},  // version 3
    };
    int seed = 1;
    for (const Variant& v : variants) {
        tinyloop::HParams hp = tlfuzz::tiny_hparams();
        hp.tie_embeddings = v.tie;
        hp.n_pre_blocks = v.pre;
        hp.n_kv_heads = v.kv;
        hp.loop_input = v.input;
        tinyloop::ModelSpec spec = tinyloop::random_model_spec(hp, seed++, v.dt, v.group);
        spec.tokenizer = tlfuzz::small_tokenizer();
        spec.metadata_json = R"({"note": "fuzz seed", "variant": ")" + std::string(v.name) + "\"}";
        tinyloop::save_model((out / "loader" / (std::string(v.name) + ".tinyloop")).string(), spec);
    }

    // Tokenizer: op byte (0 encode, 1 encode with specials, 2 decode, 3 stream) + payload.
    const std::vector<std::string> texts = {
        "In the beginning God created the heaven and the earth.",
        "the and there in an thing  spaces   \n\n\ttabs",
        "caf\xc3\xa9 \xe2\x80\x99quotes\xe2\x80\x99 \xf0\x9f\x98\x80 emoji",
        "<|endoftext|>after<|pad|> <|endof",
        "numbers 1234567890 and 12 12",
        std::string("\x80\xff\xc3 broken \xe2\x80 utf8\0nul", 22),
    };
    int k = 0;
    for (const auto& t : texts)
        for (char op : {'\0', '\1'}) write(out / "tokenizer" / ("text" + std::to_string(k++)), std::string(1, op) + t);
    for (char op : {'\2', '\3'}) {
        std::string ids(1, op);
        for (int id : {256, 257, 104, 101, 0xc3, 0xa9, 0xe2, 0x80, 0x99, 280, 281, 287, 300})
            ids += static_cast<char>(id & 0xff), ids += static_cast<char>(id >> 8);
        write(out / "tokenizer" / ("ids" + std::to_string(k++)), ids);
    }

    // hf_tokenizer: texts (op 0, 1), the test tokenizer.json files and the hostile ones kept as
    // regressions (op 2).
    for (const auto& t : texts)
        for (char op : {'\0', '\1'}) write(out / "hf_tokenizer" / ("text" + std::to_string(k++)), std::string(1, op) + t);
    for (const char* name : {"ouro", "huginn"}) {
        const fs::path p = src / "tests/data/hf_tokenizers" / name / "tokenizer.json";
        if (fs::exists(p)) write(out / "hf_tokenizer" / (std::string("json-") + name), std::string(1, '\2') + slurp(p));
    }
    if (fs::exists(src / "tests/fuzz/regressions/hf_tokenizer"))
        for (const auto& e : fs::directory_iterator(src / "tests/fuzz/regressions/hf_tokenizer"))
            write(out / "hf_tokenizer" / e.path().filename(), slurp(e.path()));

    // Grammars: the bundled ones, each followed by a sample text, plus a few written here.
    std::vector<std::pair<std::string, std::string>> grammars;
    if (fs::exists(src / "resources/grammars"))
        for (const auto& e : fs::directory_iterator(src / "resources/grammars"))
            if (e.path().extension() == ".gbnf") grammars.push_back({e.path().stem().string(), slurp(e.path())});
    grammars.push_back({"escapes", "root ::= \"a\\n\\t\\x41\\u00e9\\U0001F600\" [^\\]\\-a-z]* (\"x\" | \"\")+\n"});
    grammars.push_back({"multiline", "root ::= item\n    | item \",\" root\nitem ::= [0-9]+ # digits\n"});
    grammars.push_back({"nested", "root ::= ( ( \"(\" root \")\" )* | [a-c]? ) .\n"});
    // Deep nesting: groups just under and far over the parser's limit (256), unbalanced, and a
    // long rule chain; repetitions near the compiled-size bound.
    for (int depth : {200, 257, 5000})
        grammars.push_back({"deep" + std::to_string(depth),
                            "root ::= " + std::string(depth, '(') + "\"a\"" + std::string(depth, ')') + "\n"});
    grammars.push_back({"unbalanced", "root ::= " + std::string(3000, '(') + "\"a\"\n"});
    std::string chain = "root ::= r0\n";
    for (int r = 0; r < 300; ++r) chain += "r" + std::to_string(r) + " ::= \"x\" r" + std::to_string(r + 1) + " | \"\"\n";
    grammars.push_back({"chain", chain + "r300 ::= \"y\"\n"});
    grammars.push_back({"repeat-bound", "root ::= (\"ab\"{4096}){1000} [a-z]{0,4096}\n"});
    const char* samples[] = {"yes, because it is.", "{\"a\": 1}", "1+2*3", "a\n\tA\xc3\xa9"};
    k = 0;
    for (const auto& [name, text] : grammars) {
        write(out / "grammar" / (name + ".gbnf"), text);
        write(out / "grammar" / (name + "-sample"), text + std::string(1, '\0') + samples[k++ % 4]);
    }

    // Presets: op 0 whole preset, 1 its config, 2 its knobs; 3..5 the panel's text forms.
    k = 0;
    if (fs::exists(src / "resources/presets"))
        for (const auto& e : fs::directory_iterator(src / "resources/presets")) {
            const std::string j = slurp(e.path());
            write(out / "preset" / e.path().filename(), std::string(1, '\0') + j);
        }
    write(out / "preset" / "config", std::string(1, '\1') +
          R"({"max_tokens": 8, "temperature": 0.7, "top_k": 40, "top_p": 0.9, "logit_bias": [[5, -1.5]],)"
          R"( "stop_sequences": [[1, 2], [3]], "stop_strings": ["\n\n"], "early_exit_criterion": "kl"})");
    write(out / "preset" / "knobs", std::string(1, '\2') + R"({"draft_loops": 2, "verify_loops": 6, "draft_ahead": 4, "K_branches": 2})");
    write(out / "preset" / "idlists", std::string(1, '\3') + "1 2 3; 4 5");
    write(out / "preset" / "bias", std::string(1, '\4') + "5:-1.5, 7:2");
    write(out / "preset" / "strings", std::string(1, '\5') + R"(["\n\n", "Amen"])");
    // Deep JSON for the preset reader and the panel's text forms (nlohmann parses iteratively).
    const std::string deep_json = std::string(20000, '[') + std::string(20000, ']');
    write(out / "preset" / "deep", std::string(1, '\0') + R"({"name": "deep", "config": )" + deep_json + "}");
    write(out / "preset" / "deep-strings", std::string(1, '\5') + deep_json);
    // A model header nested far past the loader's depth limit (64).
    const std::string header = std::string(10000, '[') + std::string(10000, ']');
    std::string model = "TINYLOOP";
    for (uint32_t v : {1u, 0u}) model.append(reinterpret_cast<const char*>(&v), 4);
    const uint64_t header_bytes = header.size();
    model.append(reinterpret_cast<const char*>(&header_bytes), 8);
    write(out / "loader" / "deep-header.tinyloop", model + header);
    // Safetensors: valid files of each dtype, shards of an Ouro-like and a Huginn-like layout, and
    // the hostile headers of tests/import (length past the end, 100 MB, deep, overlapping).
    auto st = [](const std::string& header, const std::string& data) {
        const uint64_t n = header.size();
        return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
    };
    const std::string st_data(64, '\x3f');
    write(out / "safetensors" / "f32", st(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"format":"pt"}})", st_data.substr(0, 16)));
    write(out / "safetensors" / "bf16-f16", st(R"({"model.layers.0.self_attn.q_proj.weight":{"dtype":"BF16","shape":[4,2],"data_offsets":[0,16]},"model.norm.weight":{"dtype":"F16","shape":[8],"data_offsets":[16,32]}})", st_data.substr(0, 32)));
    write(out / "safetensors" / "huginn", st(R"({"transformer.prelude.0.attn.qk_bias":{"dtype":"F32","shape":[2,1,2,2],"data_offsets":[0,32]},"freqs_cis":{"dtype":"F32","shape":[1,2,1,1,2],"data_offsets":[32,48]},"empty":{"dtype":"F32","shape":[0],"data_offsets":[48,48]}})", st_data.substr(0, 48)));
    write(out / "safetensors" / "past-end", std::string("\xe8\x03\0\0\0\0\0\0{}", 10));
    write(out / "safetensors" / "huge-header", std::string("\x00\xe1\xf5\x05\0\0\0\0{}", 10));
    write(out / "safetensors" / "overlap", st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", st_data.substr(0, 12)));
    write(out / "safetensors" / "deep", st(std::string(5000, '[') + std::string(5000, ']'), ""));
    write(out / "safetensors" / "dtype-i64", st(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", st_data.substr(0, 8)));
    std::printf("fuzz seeds written to %s\n", out.string().c_str());
    return 0;
}
