// The `tinyloop` command line, run as a user runs it: a child process, its stdout, stderr and
// exit status. The model is a small random one the CLI writes itself (make-random; cli_fixture.h).
// This file: help and version, info, usage errors common to every command, odd argv, make-random,
// quantize and serve. The other subjects: test_cli_generate.cpp (generate, its modes and
// grammars, depths, reuse) and test_cli_measure.cpp (score, lens, bench).
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "app/cli_fixture.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using tl_test::CliRun;
using tl_test::CliTest;

TEST_F(CliTest, HelpAndVersion) {
    CliRun r = run({"--help"});
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("generate"), std::string::npos);
    r = run({"--version"});
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out.rfind("tinyloop ", 0), 0u) << r.out;
    for (const char* cmd : {"info", "generate", "score", "lens", "bench", "quantize", "export-gguf", "make-random"}) {
        r = run({cmd, "--help"});
        EXPECT_EQ(r.status, 0) << cmd;
        EXPECT_NE(r.out.find("usage: tinyloop " + std::string(cmd)), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("--json"), std::string::npos) << cmd;
        EXPECT_NE(r.out.find("--backend"), std::string::npos) << cmd;
        EXPECT_NE(r.out.find("--threads"), std::string::npos) << cmd;
    }
    r = run({"generate", "-h"});
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("--top-p"), std::string::npos);
    EXPECT_NE(r.out.find("0.8"), std::string::npos) << "sample mode's default temperature";
    r = run({});
    EXPECT_EQ(r.status, 2);
    r = run({"frobnicate"});
    EXPECT_USAGE_ERROR(r, "frobnicate");
}

TEST_F(CliTest, InfoJsonHasHyperparameters) {
    CliRun r = run({"info", model_, "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    json j = parse_json(r);
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["hparams"]["d_model"], 64);
    EXPECT_EQ(j["hparams"]["n_heads"], 4);
    EXPECT_EQ(j["hparams"]["head_dim"], 16);
    EXPECT_EQ(j["hparams"]["d_ff"], 128);
    EXPECT_EQ(j["hparams"]["vocab_size"], 300);
    EXPECT_EQ(j["hparams"]["default_loops"], 3);
    EXPECT_EQ(j["hparams"]["max_loops"], 6);
    EXPECT_EQ(j["hparams"]["max_seq_len"], 128);
    EXPECT_GT(j["parameter_count"].get<uint64_t>(), 0u);
    EXPECT_GT(j["file_bytes"].get<uint64_t>(), 0u);
    EXPECT_GT(j["weight_bytes"].get<uint64_t>(), 0u);
    EXPECT_EQ(j["file_bytes"].get<uint64_t>(), fs::file_size(model_));
    EXPECT_TRUE(j["dtypes"].contains("f32"));
    EXPECT_FALSE(j["tensors"].empty());
    EXPECT_TRUE(j["tokenizer"].contains("eos_id"));
    EXPECT_TRUE(j["tokenizer"]["special_tokens"].is_object());
    EXPECT_TRUE(j["backend"] == "cpu" || j["backend"] == "cuda");
    EXPECT_TRUE(j["metadata"].is_object());
    EXPECT_EQ(j["hparams"]["loop_input"], "none");
}

TEST_F(CliTest, InfoTextShowsEverySection) {
    CliRun r = run({"info", model_, "--tensors", "--backend", "cpu", "--threads", "2"});
    ASSERT_EQ(r.status, 0) << r.err;
    for (const char* s : {"hyperparameters", "d_model", "loop_input", "dtypes", "tokenizer", "metadata",
                          "parameters", "backend", "embed"})
        EXPECT_NE(r.out.find(s), std::string::npos) << s << " missing in:\n" << r.out;
}

TEST_F(CliTest, MissingModelAndPromptAreUsageErrors) {
    CliRun r = run({"generate", "--prompt", "hi"});
    EXPECT_USAGE_ERROR(r, "MODEL");
    r = run({"generate", model_});
    EXPECT_USAGE_ERROR(r, "prompt");
    r = run({"generate", model_, model_, "--prompt", "hi"});
    EXPECT_USAGE_ERROR(r, "unexpected argument");
    r = run({"generate", model_, "--prompt", ""});
    EXPECT_USAGE_ERROR(r, "empty");
    r = run({"score", model_});
    EXPECT_USAGE_ERROR(r, "--text");
    r = run({"info"});
    EXPECT_USAGE_ERROR(r, "MODEL");
}

TEST_F(CliTest, NonexistentModelNamesThePath) {
    const std::string missing = dir_ + "/no-such-model.tinyloop";
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"info", missing},
             {"generate", missing, "--prompt", "hi"},
             {"score", missing, "--text", "hello there"}}) {
        CliRun r = run(args);
        EXPECT_USAGE_ERROR(r, missing);
    }
    CliRun r = run({"info", dir_});
    EXPECT_USAGE_ERROR(r, "directory");

    // Not a model at all: the engine refuses it, naming the file.
    const std::string junk = dir_ + "/junk.tinyloop";
    std::ofstream(junk) << "this is not a model";
    r = run({"info", junk});
    EXPECT_USAGE_ERROR(r, "junk.tinyloop");
    EXPECT_EQ(r.err.rfind("tinyloop info: ", 0), 0u) << r.err;
}

TEST_F(CliTest, MakeRandomRefusesBadShapes) {
    const std::string out = dir_ + "/bad.tinyloop";
    EXPECT_USAGE_ERROR(run({"make-random", out, "--dtype", "q9"}), "--dtype");
    EXPECT_USAGE_ERROR(run({"make-random", out, "--d-model", "0"}), "--d-model");
    EXPECT_USAGE_ERROR(run({"make-random", out, "--group-size", "48"}), "--group-size");
    EXPECT_USAGE_ERROR(run({"make-random", out, "--loop-input", "concat"}), "--loop-input");
    EXPECT_USAGE_ERROR(run({"make-random", out, "--d-model", "65536", "--vocab", "4000000"}),
                       "parameters");
    EXPECT_USAGE_ERROR(run({"make-random"}), "OUT");
    // Inconsistent hyperparameters: the engine names the field.
    CliRun r = run({"make-random", out, "--n-heads", "8", "--n-kv-heads", "3"});
    EXPECT_FALSE(r.signaled);
    EXPECT_EQ(r.status, 2) << r.err;
    // A quantized model loads and generates.
    const std::string q = dir_ + "/q4.tinyloop";
    r = run({"make-random", q, "--d-model", "64", "--n-heads", "4", "--n-kv-heads", "2",
             "--head-dim", "16", "--d-ff", "128", "--vocab", "300", "--n-pre", "1", "--n-loop",
             "1", "--loops", "2", "--max-loops", "4", "--max-seq-len", "64", "--dtype", "q4",
             "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(parse_json(r)["dtype"], "q4");
    r = run({"info", q, "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(parse_json(r)["dtypes"].contains("q4"));
    // Input injection: a version-2 file that info reports and quantize keeps.
    const std::string v2 = dir_ + "/inject.tinyloop", v2q = dir_ + "/inject-q8.tinyloop";
    r = run({"make-random", v2, "--d-model", "64", "--n-heads", "4", "--n-kv-heads", "2", "--head-dim", "16",
             "--d-ff", "128", "--vocab", "300", "--loops", "2", "--max-loops", "4", "--max-seq-len", "64",
             "--loop-input", "add", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(parse_json(r)["hparams"]["loop_input"], "add");
    ASSERT_EQ(run({"quantize", v2, v2q, "--dtype", "q8"}).status, 0);
    r = run({"info", v2q});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("loop_input      add (input injection, file version 2)"), std::string::npos) << r.out;
}

TEST_F(CliTest, OddArgvNeverCrashes) {
    const std::vector<std::vector<std::string>> argvs = {
        {""},
        {"generate", ""},
        {"generate", "", "--prompt", ""},
        {"generate", model_, "--prompt"},
        {"generate", model_, "--prompt=--json", "--max-tokens=2"},
        {"generate", model_, "--", "--prompt"},
        {"generate", model_, "--=", "x"},
        {"generate", model_, "-"},
        {"generate", model_, "--prompt", "hi", "--max-tokens", "0"},
        {"generate", model_, "--prompt", "hi", "--top-k", "0"},
        {"generate", model_, "--prompt", "hi", "--cache-window", "-5"},
        {"generate", model_, "--prompt", "hi", "--logit-bias", "4000000:1"},
        {"generate", model_, "--prompt", "hi", "--logit-bias", "5:1e39"},
        {"generate", model_, "--prompt", "hi", "--stop-ids", "99999"},
        {"generate", model_, "--prompt-ids", "2147483648"},
        {"generate", model_, "--prompt", std::string(1000, 'a'), "--max-tokens", "2"},
        {"generate", model_, "--prompt", "<|endoftext|>", "--parse-special", "--max-tokens", "2"},
        {"generate", model_, "--prompt", "\xff\xfe", "--max-tokens", "3", "--json"},
        {"generate", model_, "--prompt-file", "-"},  // stdin is /dev/null: an empty prompt
        {"score", model_, "--ids", "1,2,-3"},
        {"score", model_, "--ids", "1,2,3", "--json"},
        {"info", model_, "extra"},
        {"make-random", dir_ + "/nodir/x.tinyloop", "--d-model", "64", "--head-dim", "8"},
    };
    for (const auto& a : argvs) {
        SCOPED_TRACE(::testing::PrintToString(a));
        CliRun r = run(a);
        EXPECT_FALSE(r.signaled) << r.err;
        EXPECT_TRUE(r.status == 0 || r.status == 2) << r.status << "\n" << r.err;
        if (r.status == 2) {
            EXPECT_FALSE(r.err.empty());
        }
    }
}

// ---- quantize -----------------------------------------------------------------------------------

TEST_F(CliTest, QuantizeWritesLoadableFiles) {
    struct Case {
        std::string dtype, group;
        double max_err;
    };
    for (const Case& c : std::vector<Case>{{"q8", "32", 0.02}, {"q4", "64", 0.3}, {"f16", "32", 1e-3}}) {
        SCOPED_TRACE(c.dtype);
        const std::string out = dir_ + "/quant-" + c.dtype + ".tinyloop";
        CliRun r = run({"quantize", model_, out, "--dtype", c.dtype, "--group-size", c.group, "--json"});
        ASSERT_EQ(r.status, 0) << r.err;
        json j = parse_json(r);
        EXPECT_EQ(j["dtype"], c.dtype);
        EXPECT_GT(j["tensors"].size(), 0u);
        EXPECT_LT(j["file_bytes_out"].get<uint64_t>(), j["file_bytes_in"].get<uint64_t>());
        EXPECT_EQ(j["file_bytes_out"].get<uint64_t>(), fs::file_size(out));
        bool any_converted = false;
        for (const auto& t : j["tensors"]) {
            EXPECT_LE(t["rel_error"].get<double>(), c.max_err) << t.dump();
            EXPECT_GE(t["rel_error"].get<double>(), 0.0);
            any_converted = any_converted || t["to"] == c.dtype;
        }
        EXPECT_TRUE(any_converted);
        CliRun info = run({"info", out, "--json"});
        ASSERT_EQ(info.status, 0) << info.err;
        EXPECT_TRUE(parse_json(info)["dtypes"].contains(c.dtype)) << info.out;
        CliRun g = run({"generate", out, "--prompt", "Hello", "--max-tokens", "4", "--json"});
        ASSERT_EQ(g.status, 0) << g.err;
    }
    CliRun text = run({"quantize", model_, dir_ + "/quant-text.tinyloop", "--dtype", "q8"});
    ASSERT_EQ(text.status, 0) << text.err;
    EXPECT_NE(text.out.find("rel error"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("wrote"), std::string::npos) << text.out;
    EXPECT_EQ(text.out.find("tinyloop recommend"), std::string::npos) << "no recommendation to copy:\n" << text.out;

    // A file that recommends settings: they are copied, and the output says they were measured on
    // IN and how to measure them on OUT (the bundled reasoner's q4 loses accuracy under its f32's).
    const std::string rec_in = TL_SOURCE_DIR "/resources/models/tinyloop-digitsum/model-f32.tinyloop";
    CliRun rj = run({"quantize", rec_in, dir_ + "/quant-rec.tinyloop", "--dtype", "q4", "--json"});
    ASSERT_EQ(rj.status, 0) << rj.err;
    EXPECT_TRUE(parse_json(rj)["recommendation_copied"].get<bool>());
    EXPECT_FALSE(parse_json(run({"quantize", model_, dir_ + "/quant-norec.tinyloop", "--dtype", "q8", "--json"}))
                     ["recommendation_copied"].get<bool>());
    CliRun rt = run({"quantize", rec_in, dir_ + "/quant-rec.tinyloop", "--dtype", "q4"});
    ASSERT_EQ(rt.status, 0) << rt.err;
    EXPECT_NE(rt.out.find("measured on IN"), std::string::npos) << rt.out;
    EXPECT_NE(rt.out.find("tinyloop recommend " + dir_ + "/quant-rec.tinyloop --file"), std::string::npos) << rt.out;

    const std::string out = dir_ + "/quant-bad.tinyloop";
    EXPECT_USAGE_ERROR(run({"quantize", model_, out, "--dtype", "q9"}), "--dtype");
    EXPECT_USAGE_ERROR(run({"quantize", model_, out}), "--dtype");
    EXPECT_USAGE_ERROR(run({"quantize", model_, out, "--dtype", "q4", "--group-size", "48"}), "--group-size");
    EXPECT_USAGE_ERROR(run({"quantize", model_, "--dtype", "q4"}), "OUT");
    EXPECT_USAGE_ERROR(run({"quantize", model_, model_, "--dtype", "q4"}), "input file");
    EXPECT_USAGE_ERROR(run({"quantize", dir_ + "/nope.tinyloop", out, "--dtype", "q4"}), "nope.tinyloop");
    EXPECT_FALSE(fs::exists(out));
}

// ---- serve --------------------------------------------------------------------------------------

TEST_F(CliTest, ServeExplainsWhatIsMissing) {
    CliRun h = run({"serve", "--help"});
    EXPECT_EQ(h.status, 0);
    EXPECT_NE(h.out.find("--port"), std::string::npos);
    setenv("TINYLOOP_SERVE_SCRIPT", "/nonexistent/server.py", 1);
    CliRun r = run({"serve", model_, "--port", "0"});
    unsetenv("TINYLOOP_SERVE_SCRIPT");
    EXPECT_USAGE_ERROR(r, "/nonexistent/server.py");
    setenv("TINYLOOP_PYTHON", "/nonexistent/python3", 1);
    r = run({"serve", model_, "--port", "0"});
    unsetenv("TINYLOOP_PYTHON");
    EXPECT_USAGE_ERROR(r, "/nonexistent/python3");
}

}  // namespace
