// hf_byte_bpe tokenizers (FORMAT.md §3b): tokenizer_spec_from_hf on the small Ouro- and
// Huginn-style tokenizer.json files of tests/data/hf_tokenizers, stored in a .tinyloop file and
// read back (version 3), and the refusals of hostile tokenizer.json files — each an error naming
// the file and the field, none taking seconds. Parity with the `tokenizers` package is
// tests/python/test_tokenizer_hf_parity.py.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "text/tokenizer.h"
#include "tinyloop/tinyloop.h"

using namespace tinyloop;
using json = nlohmann::json;
using tltest::temp_path;

namespace {

std::string data_dir(const std::string& name) {
    return std::string(TL_SOURCE_DIR) + "/tests/data/hf_tokenizers/" + name;
}

HParams hp_for(int vocab) {
    HParams hp;
    hp.vocab_size = vocab;
    hp.d_model = 64;
    hp.n_heads = 2;
    hp.n_kv_heads = 1;
    hp.head_dim = 32;
    hp.d_ff = 128;
    hp.n_pre_blocks = 1;
    hp.n_loop_layers = 1;
    hp.default_loops = 2;
    hp.max_loops = 4;
    hp.max_seq_len = 32;
    return hp;
}

const char* kTexts[] = {"Hello world! 12345  foo\n\n  bar", "Ça coûte 12,50 €", "日本語 😀👍🏽",
                        "def f(x):\n    return x**2", "<|im_start|>user\nhi<|im_end|>",
                        "<|begin_text|>Huginn \"\"\"ok\"\"\" \\nabla 1st", "   ", "a\xff" "b\xc3"};

json read(const std::string& path) {
    std::ifstream f(path);
    return json::parse(f);
}

std::string write_json(const std::string& name, const json& j) {
    const std::string path = temp_path(name);
    std::ofstream(path) << j.dump();
    return path;
}

// The error message of tokenizer_spec_from_hf on `path`, and how long it took.
std::string refusal(const std::string& path, double* seconds = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string what;
    try {
        tokenizer_spec_from_hf(path);
    } catch (const Error& e) {
        what = e.what();
    }
    if (seconds) seconds[0] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return what;
}

}  // namespace

TEST(TokenizerHf, ReadsBothShapes) {
    for (const char* name : {"ouro", "huginn"}) {
        std::string chat;
        const TokenizerSpec s = tokenizer_spec_from_hf(data_dir(name) + "/tokenizer.json",
                                                       data_dir(name) + "/tokenizer_config.json", &chat);
        EXPECT_EQ(s.type, "hf_byte_bpe");
        EXPECT_EQ(s.vocab.size(), 2000u);
        EXPECT_FALSE(s.merges.empty());
        EXPECT_FALSE(chat.empty()) << name;
        StandaloneTokenizer tok(s);
        EXPECT_EQ(tok.n_ids(), std::string(name) == "ouro" ? 2000 : 2002);
        if (std::string(name) == "ouro") {
            EXPECT_EQ(s.hf_pre.size(), 2u);
            EXPECT_EQ(s.hf_pre[0].kind, "digits");
            EXPECT_EQ(s.eos_id, 2);  // <|im_end|>
            EXPECT_TRUE(s.prefix_ids.empty());
            // Digits are split one by one.
            EXPECT_EQ(tok.encode("2026").size(), 4u);
        } else {
            EXPECT_EQ(s.hf_pre[0].kind, "split");
            EXPECT_EQ(s.prefix_ids, std::vector<int32_t>{0});  // <|begin_text|>
            EXPECT_EQ(s.suffix_ids, std::vector<int32_t>{1});  // <|end_text|>
            const auto ids = tok.encode("hi", true, true);
            EXPECT_EQ(ids.front(), 0);
            EXPECT_EQ(ids.back(), 1);
        }
        for (const char* t : kTexts) EXPECT_EQ(tok.decode(tok.encode(t)), t) << name << ": " << t;
    }
}

TEST(TokenizerHf, StoredInVersion3FileAndReadBack) {
    for (const char* name : {"ouro", "huginn"}) {
        const TokenizerSpec s = tokenizer_spec_from_hf(data_dir(name) + "/tokenizer.json",
                                                       data_dir(name) + "/tokenizer_config.json");
        StandaloneTokenizer direct(s);
        ModelSpec spec = random_model_spec(hp_for(2048), 3);
        spec.tokenizer = s;
        const std::string path = temp_path(std::string("hf_") + name + ".tinyloop");
        save_model(path, spec);
        std::ifstream f(path, std::ios::binary);
        char pre[12];
        f.read(pre, 12);
        EXPECT_EQ(pre[8], 3) << "an hf_byte_bpe tokenizer makes a version-3 file";
        ModelHandle m = load_model_handle(path);
        const ModelInfo info = model_info(m.get());
        EXPECT_EQ(info.tokenizer.type, "hf_byte_bpe");
        EXPECT_EQ(info.tokenizer.vocab, s.vocab);
        EXPECT_EQ(info.tokenizer.merges, s.merges);
        EXPECT_EQ(info.tokenizer_vocab, direct.n_ids());
        for (const char* t : kTexts) {
            const auto ids = tokenize(m.get(), t, true);
            EXPECT_EQ(ids, direct.encode(t, true)) << name << ": " << t;
            EXPECT_EQ(detokenize(m.get(), ids.data(), ids.size()), t);
        }
        // Patched to version 1, the same file is refused by name.
        std::ifstream in(path, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), {});
        bytes[8] = 1;
        const std::string v1 = temp_path(std::string("hf_v1_") + name + ".tinyloop");
        std::ofstream(v1, std::ios::binary) << bytes;
        try {
            load_model_handle(v1);
            ADD_FAILURE() << "a version-1 file with hf_byte_bpe loaded";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("tokenizer.type"), std::string::npos) << e.what();
        }
    }
}

TEST(TokenizerHf, ByteBpeFilesStayVersion1) {
    const std::string path = temp_path("byte_bpe.tinyloop");
    save_model(path, random_model_spec(hp_for(300), 3));
    std::ifstream f(path, std::ios::binary);
    char pre[12];
    f.read(pre, 12);
    EXPECT_EQ(pre[8], 1);
}

TEST(TokenizerHf, HostileFilesAreRefusedByFileAndField) {
    const std::string src = data_dir("ouro") + "/tokenizer.json";
    const json base = read(src);
    struct Case {
        const char* name;
        std::function<void(json&)> mutate;
        const char* field;
    };
    const Case cases[] = {
        {"catastrophic", [](json& j) {
             j["pre_tokenizer"]["pretokenizers"].insert(
                 j["pre_tokenizer"]["pretokenizers"].begin(),
                 json{{"type", "Split"}, {"pattern", {{"Regex", "(a+)+$"}}}, {"behavior", "Isolated"}, {"invert", false}});
         }, "pre_tokenizer[0].pattern: the pattern exceeds the match limit"},
        {"nocompile", [](json& j) { j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(ab"}}}, {"behavior", "Isolated"}}; },
         "pre_tokenizer[0].pattern: the pattern does not compile"},
        {"unknown_merge", [](json& j) { j["model"]["merges"][5] = json::array({"Ġ", "no-such-token"}); },
         "model.merges[5]: 'no-such-token' is not a token of model.vocab"},
        {"merge_result", [](json& j) { j["model"]["merges"][5] = json::array({"z", "q"}); },
         "model.merges[5]: the merged token 'zq' is not in model.vocab"},
        {"normalizer", [](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "normalizer.type: 'NFKC' not supported"},
        {"lstrip", [](json& j) { j["added_tokens"][1]["lstrip"] = true; }, "added_tokens[1].lstrip: true, not supported"},
        {"byte_fallback", [](json& j) { j["model"]["byte_fallback"] = true; }, "model.byte_fallback"},
        {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout"},
        {"pre_kind", [](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }, "pre_tokenizer.type: 'Metaspace' not supported"},
        {"decoder", [](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder.type"},
        {"vocab_id", [](json& j) { j["model"]["vocab"]["Ġ"] = -3; }, "model.vocab.Ġ"},
        {"truncation", [](json& j) { j["truncation"] = {{"max_length", 8}}; }, "truncation: set"},
    };
    for (const Case& c : cases) {
        json j = base;
        c.mutate(j);
        const std::string path = write_json(std::string("hostile_") + c.name + ".json", j);
        double seconds = 0;
        const std::string what = refusal(path, &seconds);
        EXPECT_NE(what.find(path + ": "), std::string::npos) << c.name << ": " << what;
        EXPECT_NE(what.find(c.field), std::string::npos) << c.name << ": " << what;
        EXPECT_LT(seconds, 5.0) << c.name;
    }
    // Deep JSON, refused before parsing.
    const std::string deep = temp_path("hostile_deep.json");
    std::ofstream(deep) << std::string(100000, '[') << std::string(100000, ']');
    EXPECT_NE(refusal(deep).find("JSON nested 100000 deep, allowed at most 64"), std::string::npos);
    // A huge file (sparse), refused by its size before reading.
    const std::string huge = temp_path("hostile_huge.json");
    std::ofstream(huge) << "{";
    std::filesystem::resize_file(huge, (uint64_t{256} << 20) + 1);
    EXPECT_NE(refusal(huge).find("allowed at most 268435456 (256 MiB)"), std::string::npos);
    std::filesystem::remove(huge);
    EXPECT_NE(refusal(temp_path("missing.json")).find("cannot read"), std::string::npos);
}

TEST(TokenizerHf, CatastrophicPatternAtEncodeIsAnErrorNotAHang) {
    // A pattern that passes the probes can still meet its match limit on some text: the encode
    // then throws naming the field, in bounded time.
    TokenizerSpec s = tokenizer_spec_from_hf(data_dir("ouro") + "/tokenizer.json");
    s.hf_pre.insert(s.hf_pre.begin(), HfPreStep{"split", "(x+x+)+$", "isolated"});
    StandaloneTokenizer tok(s);
    const auto t0 = std::chrono::steady_clock::now();
    try {
        tok.encode(std::string(5000, 'x') + "y");
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer.pre_tokenizer[0].pattern: the pattern exceeds the match limit"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(TokenizerHf, StopIdsStoredAndChecked) {
    TokenizerSpec s = tokenizer_spec_from_hf(data_dir("ouro") + "/tokenizer.json", data_dir("ouro") + "/tokenizer_config.json");
    ASSERT_EQ(s.eos_id, 2);
    s.stop_ids = {0, 2};  // generation_config.json's [<|endoftext|>, <|im_end|>]
    ModelSpec spec = random_model_spec(hp_for(2048), 3);
    spec.tokenizer = s;
    const std::string path = temp_path("hf_stop_ids.tinyloop");
    save_model(path, spec);
    ModelHandle m = load_model_handle(path);
    EXPECT_EQ(model_info(m.get()).tokenizer.stop_ids, (std::vector<int32_t>{0, 2}));
    EXPECT_EQ(stop_token_ids(m.get()), (std::vector<int32_t>{2, 0})) << "eos first, each once";
    // Without stop_ids the tokenizer's eos alone, as in every file written before them.
    s.stop_ids.clear();
    spec.tokenizer = s;
    save_model(path, spec);
    m = load_model_handle(path);
    EXPECT_EQ(stop_token_ids(m.get()), (std::vector<int32_t>{2}));

    auto refused = [&](std::vector<int32_t> ids, const std::string& want, const std::string& type = "hf_byte_bpe") {
        TokenizerSpec t = type == "hf_byte_bpe" ? s : TokenizerSpec{};
        t.stop_ids = std::move(ids);
        try {
            StandaloneTokenizer tok(t, type == "hf_byte_bpe" ? 0 : 300);
            ADD_FAILURE() << "accepted: " << want;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
        }
    };
    const int n = StandaloneTokenizer(s).n_ids();
    refused({0, n}, "tokenizer.stop_ids[1]: " + std::to_string(n) + " out of range, allowed 0 .. " + std::to_string(n - 1));
    refused({0, -1}, "tokenizer.stop_ids[1]: -1 out of range");
    refused({1, 1}, "tokenizer.stop_ids[1]: 1 is listed twice");
    refused(std::vector<int32_t>(65, 1), "tokenizer.stop_ids: 65 ids, allowed at most 64");
    refused({1}, "tokenizer.stop_ids: only an hf_byte_bpe tokenizer carries them", "byte_bpe");
}
