// The `tinyloop` command line, run as a user runs it: a child process, its stdout, stderr and
// exit status. The model is a small random one the CLI writes itself (make-random).
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tinyloop/tinyloop.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct CliRun {
    int status = -1;     // exit status; 128 + signal when killed by a signal
    bool signaled = false;
    std::string out, err;
};

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

class CliTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        std::string tmpl = (fs::temp_directory_path() / "tinyloop_cli_XXXXXX").string();
        ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
        dir_ = tmpl;
        model_ = (fs::path(dir_) / "tiny.tinyloop").string();
        CliRun r = run({"make-random", model_, "--d-model", "64", "--n-heads", "4", "--n-kv-heads",
                     "4", "--head-dim", "16", "--d-ff", "128", "--vocab", "300", "--n-pre", "1",
                     "--n-loop", "1", "--loops", "3", "--max-loops", "6", "--max-seq-len", "128",
                     "--seed", "3"});
        ASSERT_EQ(r.status, 0) << r.err;
        ASSERT_TRUE(fs::exists(model_));
    }
    static void TearDownTestSuite() {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }

    // Runs the CLI with argv, stdin from /dev/null, stdout and stderr into files.
    static CliRun run(const std::vector<std::string>& args) {
        static int counter = 0;
        const std::string base = dir_ + "/run" + std::to_string(counter++);
        const std::string out_path = base + ".out", err_path = base + ".err";
        std::vector<std::string> argv_s = {TL_CLI_PATH};
        argv_s.insert(argv_s.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (auto& a : argv_s) argv.push_back(a.data());
        argv.push_back(nullptr);

        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        pid_t pid = 0;
        CliRun r;
        int rc = posix_spawn(&pid, TL_CLI_PATH, &fa, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&fa);
        if (rc != 0) {
            r.err = "posix_spawn failed: " + std::to_string(rc);
            return r;
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0) {
        }
        if (WIFEXITED(st)) {
            r.status = WEXITSTATUS(st);
        } else if (WIFSIGNALED(st)) {
            r.signaled = true;
            r.status = 128 + WTERMSIG(st);
        }
        r.out = slurp(out_path);
        r.err = slurp(err_path);
        fs::remove(out_path);
        fs::remove(err_path);
        return r;
    }

    static json parse_json(const CliRun& r) {
        json j = json::parse(r.out, nullptr, false);
        EXPECT_FALSE(j.is_discarded()) << "stdout is not JSON: " << r.out << "\nstderr: " << r.err;
        return j;
    }

    // generate MODEL --prompt "Hello" + extra.
    static CliRun generate(std::vector<std::string> extra, const std::string& prompt = "Hello") {
        std::vector<std::string> a = {"generate", model_, "--prompt", prompt};
        a.insert(a.end(), extra.begin(), extra.end());
        return run(a);
    }

    static std::string dir_;
    static std::string model_;
};

std::string CliTest::dir_;
std::string CliTest::model_;

#define EXPECT_USAGE_ERROR(r, needle)                                                    \
    do {                                                                                 \
        EXPECT_FALSE((r).signaled) << "crashed: " << (r).err;                            \
        EXPECT_EQ((r).status, 2) << "stdout: " << (r).out << "\nstderr: " << (r).err;    \
        EXPECT_NE((r).err.find(needle), std::string::npos)                               \
            << "stderr should mention '" << (needle) << "': " << (r).err;                \
    } while (0)

TEST_F(CliTest, HelpAndVersion) {
    CliRun r = run({"--help"});
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("generate"), std::string::npos);
    r = run({"--version"});
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out.rfind("tinyloop ", 0), 0u) << r.out;
    for (const char* cmd : {"info", "generate", "score", "make-random"}) {
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
}

TEST_F(CliTest, InfoTextShowsEverySection) {
    CliRun r = run({"info", model_, "--tensors", "--backend", "cpu", "--threads", "2"});
    ASSERT_EQ(r.status, 0) << r.err;
    for (const char* s : {"hyperparameters", "d_model", "dtypes", "tokenizer", "metadata",
                          "parameters", "backend", "embed"})
        EXPECT_NE(r.out.find(s), std::string::npos) << s << " missing in:\n" << r.out;
}

TEST_F(CliTest, GenerateJsonIsConsistent) {
    CliRun r = generate({"--max-tokens", "8", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    json j = parse_json(r);
    const auto out = j["output_ids"].get<std::vector<int32_t>>();
    const auto prompt = j["prompt_ids"].get<std::vector<int32_t>>();
    EXPECT_LE(out.size(), 8u);
    EXPECT_EQ(j["stats"]["tokens_emitted"].get<size_t>(), out.size());
    EXPECT_EQ(j["stats"]["prompt_tokens"].get<size_t>(), prompt.size());
    for (const char* k : {"prefill_ms", "first_token_ms", "decode_ms", "total_ms", "stop_reason",
                          "loops_used", "decode_tokens_per_s", "depth_per_token"})
        EXPECT_TRUE(j["stats"].contains(k)) << k;
    EXPECT_EQ(j["config"]["max_tokens"], 8);
    EXPECT_EQ(j["config"]["loops"], 3);
    EXPECT_EQ(j["config"]["mode"], "greedy");

    // The same model through the library: the prompt's ids and the text of the output.
    tinyloop::Model* m = tinyloop::load_model(model_, {tinyloop::Backend::Cpu});
    EXPECT_EQ(prompt, tinyloop::tokenize(m, "Hello"));
    EXPECT_EQ(j["text"].get<std::string>(), tinyloop::detokenize_text(m, out.data(), out.size()));
    tinyloop::free_model(m);
}

TEST_F(CliTest, PlainOutputStreamsTheSameText) {
    CliRun j = generate({"--max-tokens", "12", "--json"});
    ASSERT_EQ(j.status, 0) << j.err;
    CliRun p = generate({"--max-tokens", "12"});
    ASSERT_EQ(p.status, 0) << p.err;
    EXPECT_EQ(p.out, parse_json(j)["text"].get<std::string>());
    EXPECT_NE(p.err.find("tok/s"), std::string::npos) << p.err;
    EXPECT_NE(p.err.find("prefill"), std::string::npos) << p.err;
    EXPECT_NE(p.err.find("stop"), std::string::npos) << p.err;
    CliRun q = generate({"--max-tokens", "12", "--quiet"});
    EXPECT_EQ(q.status, 0);
    EXPECT_EQ(q.err, "");
}

TEST_F(CliTest, PromptIdsAndPromptFile) {
    CliRun r = run({"generate", model_, "--prompt-ids", "72, 101,108", "--max-tokens", "4", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(parse_json(r)["prompt_ids"], json({72, 101, 108}));

    const std::string file = dir_ + "/prompt.txt";
    std::ofstream(file) << "Hello";
    CliRun a = run({"generate", model_, "--prompt-file", file, "--max-tokens", "4", "--json"});
    CliRun b = generate({"--max-tokens", "4", "--json"});
    ASSERT_EQ(a.status, 0) << a.err;
    ASSERT_EQ(b.status, 0) << b.err;
    EXPECT_EQ(parse_json(a)["output_ids"], parse_json(b)["output_ids"]);
}

TEST_F(CliTest, EverySamplingFlagIsAcceptedAndTheSeedDecides) {
    auto sample = [&](const std::string& seed) {
        return generate({"--max-tokens", "16", "--mode", "sample", "--temperature", "1.5",
                         "--top-k", "200", "--top-p", "0.95", "--min-p", "0.001",
                         "--repetition-penalty", "1.1", "--frequency-penalty", "0.2",
                         "--presence-penalty", "0.1", "--logit-bias", "65:2.5", "--logit-bias",
                         "66:-100", "--seed", seed, "--loops", "4", "--cache-window", "64",
                         "--stop-ids", "299,299", "--ignore-eos", "--json"});
    };
    CliRun a = sample("7"), b = sample("7");
    ASSERT_EQ(a.status, 0) << a.err;
    ASSERT_EQ(b.status, 0) << b.err;
    json ja = parse_json(a), jb = parse_json(b);
    EXPECT_EQ(ja["output_ids"], jb["output_ids"]);
    EXPECT_EQ(ja["text"], jb["text"]);
    EXPECT_EQ(ja["config"]["seed"], 7);
    EXPECT_EQ(ja["config"]["loops"], 4);
    EXPECT_EQ(ja["config"]["logit_bias"], json({{65, 2.5}, {66, -100.0}}));
    EXPECT_EQ(ja["config"]["temperature"], 1.5);
    EXPECT_EQ(ja["config"]["mode"], "sample");
    for (int id : ja["output_ids"]) EXPECT_NE(id, 66) << "logit bias -100 should rule 66 out";

    // At temperature 1.5 over a random model, some other seed gives another continuation.
    bool differs = false;
    for (const char* seed : {"8", "9", "10", "11"}) {
        CliRun c = sample(seed);
        ASSERT_EQ(c.status, 0) << c.err;
        if (parse_json(c)["output_ids"] != ja["output_ids"]) differs = true;
    }
    EXPECT_TRUE(differs);
}

TEST_F(CliTest, BadWordsAndTimeLimit) {
    CliRun base = generate({"--max-tokens", "6", "--json"});
    ASSERT_EQ(base.status, 0) << base.err;
    const auto out = parse_json(base)["output_ids"].get<std::vector<int32_t>>();
    ASSERT_FALSE(out.empty());
    CliRun banned = generate({"--max-tokens", "6", "--bad-words", std::to_string(out[0]),
                              "--no-repeat-ngram", "3", "--json"});
    ASSERT_EQ(banned.status, 0) << banned.err;
    json jb = parse_json(banned);
    for (int id : jb["output_ids"]) EXPECT_NE(id, out[0]);
    EXPECT_EQ(jb["config"]["bad_words"], json({{out[0]}}));

    CliRun timed = generate({"--max-tokens", "100", "--max-time", "0.000001", "--json"});
    ASSERT_EQ(timed.status, 0) << timed.err;
    EXPECT_EQ(parse_json(timed)["stats"]["stop_reason"], "MAX_TIME");
    EXPECT_USAGE_ERROR(generate({"--max-time", "-1"}), "--max-time");
    EXPECT_USAGE_ERROR(generate({"--no-repeat-ngram", "-1"}), "--no-repeat-ngram");
    EXPECT_USAGE_ERROR(generate({"--bad-words", "4000"}), "--bad-words");
}

TEST_F(CliTest, SampleModeDefaultsToTemperature08) {
    CliRun r = generate({"--mode", "sample", "--max-tokens", "2", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(parse_json(r)["config"]["temperature"], 0.8);
    r = generate({"--mode", "greedy", "--temperature", "0.7", "--max-tokens", "2"});
    EXPECT_USAGE_ERROR(r, "--temperature");
}

TEST_F(CliTest, PromptIdsOutsideTheVocabularyAreRefused) {
    CliRun r = run({"generate", model_, "--prompt-ids", "1,2,5000", "--max-tokens", "2"});
    EXPECT_USAGE_ERROR(r, "5000");
    EXPECT_NE(r.err.find("vocab"), std::string::npos) << r.err;
}

TEST_F(CliTest, BadValuesNameTheFlag) {
    struct Case {
        std::vector<std::string> extra;
        std::string needle;
    };
    const std::vector<Case> cases = {
        {{"--top-p", "abc"}, "--top-p"},
        {{"--top-p", "1.5x"}, "--top-p"},
        {{"--top-p", "nan"}, "--top-p"},
        {{"--top-p", "1.5"}, "top_p"},
        {{"--top-k", "-1", "--temperature", "0.8"}, "top"},
        {{"--temperature", "-1"}, "temperature"},
        {{"--max-tokens"}, "--max-tokens"},
        {{"--max-tokens", "--json"}, "--max-tokens"},
        {{"--max-tokens", "99999999999"}, "--max-tokens"},
        {{"--max-tokens", "-3"}, "max_tokens"},
        {{"--max-tokens", "1000"}, "max_tokens"},
        {{"--loops", "99"}, "loops"},
        {{"--seed", "-1"}, "--seed"},
        {{"--seed", "18446744073709551616"}, "--seed"},
        {{"--threads", "0"}, "--threads"},
        {{"--threads", "100000"}, "--threads"},
        {{"--backend", "tpu"}, "--backend"},
        {{"--mode", "creative"}, "--mode"},
        {{"--logit-bias", "12"}, "--logit-bias"},
        {{"--logit-bias", "x:1"}, "--logit-bias"},
        {{"--stop-ids", "1,,2"}, "--stop-ids"},
        {{"--stop", ""}, "--stop"},
        {{"--early-exit", "vibes"}, "--early-exit"},
        {{"--early-exit-min-l", "2"}, "--early-exit"},
        {{"--draft-loops", "2"}, "--draft-loops"},
        {{"--bogus"}, "--bogus"},
        {{"--top-pp", "0.5"}, "--top-pp"},
        {{"-x"}, "-x"},
        {{"--json=yes"}, "--json"},
        {{"--max-tokens", "4", "--max-tokens", "5"}, "--max-tokens"},
        {{"--prompt-file", "/nonexistent/prompt.txt"}, "--prompt"},
        {{"--prompt-ids", "1,2"}, "--prompt"},
        {{"--grammar", "g.gbnf"}, "--grammar"},
        {{"--mode", "speculative", "--min-p", "0.1"}, "--min-p"},
        {{"--mode", "speculative", "--loops", "3", "--verify-loops", "4"}, "--verify-loops"},
        {{"--mode", "speculative", "--draft-loops", "5", "--verify-loops", "3"}, "draft_loops"},
        {{"--mode", "speculative", "--draft-ahead", "0"}, "draft_ahead"},
        {{"--mode", "tree", "--branches", "2"}, "--mode tree: not supported yet"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::PrintToString(c.extra));
        CliRun r = generate(c.extra);
        EXPECT_USAGE_ERROR(r, c.needle);
        EXPECT_EQ(r.out, "");
    }
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
    EXPECT_NE(r.err.find("tinyloop: error:"), std::string::npos) << r.err;
}

TEST_F(CliTest, EventsGiveOneEventPerOutputToken) {
    CliRun r = generate({"--max-tokens", "10", "--events", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    json j = parse_json(r);
    const auto out = j["output_ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(j["events"].size(), out.size());
    const int prompt_len = static_cast<int>(j["prompt_ids"].size());
    for (size_t i = 0; i < out.size(); ++i) {
        const json& ev = j["events"][i];
        EXPECT_EQ(ev["token"], out[i]);
        EXPECT_EQ(ev["index"], i);
        EXPECT_EQ(ev["position"], prompt_len + static_cast<int>(i));
        EXPECT_GE(ev["depth"].get<int>(), 1);
        EXPECT_GE(ev["prob"].get<double>(), 0.0);
        EXPECT_LE(ev["prob"].get<double>(), 1.0 + 1e-6);
        EXPECT_FALSE(ev.contains("lens"));
    }
    // Plain mode: the table goes to stderr, the text stays alone on stdout.
    CliRun p = generate({"--max-tokens", "10", "--events"});
    ASSERT_EQ(p.status, 0) << p.err;
    EXPECT_EQ(p.out, j["text"].get<std::string>());
    EXPECT_NE(p.err.find("depth"), std::string::npos);
}

TEST_F(CliTest, LensAddsPerDepthRows) {
    CliRun r = generate({"--max-tokens", "3", "--lens", "--lens-top-k", "4", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    json j = parse_json(r);
    ASSERT_EQ(j["events"].size(), j["output_ids"].size());
    for (const auto& ev : j["events"]) {
        ASSERT_TRUE(ev.contains("lens"));
        EXPECT_EQ(ev["lens"].size(), ev["depth"].get<size_t>());
        for (const auto& l : ev["lens"]) EXPECT_EQ(l["top_ids"].size(), 4u);
    }
}

TEST_F(CliTest, StopStringIsLeftOutOfTheTextAndTheStream) {
    CliRun base = generate({"--max-tokens", "40", "--json", "--ignore-eos"});
    ASSERT_EQ(base.status, 0) << base.err;
    const std::string text = parse_json(base)["text"];
    // A printable character of the greedy output, first seen after its start, as the stop.
    std::string stop;
    for (size_t i = 1; i < text.size() && stop.empty(); ++i)
        if (text[i] > 0x20 && text[i] < 0x7f && text.find(text[i]) == i) stop = text.substr(i, 1);
    if (stop.empty()) GTEST_SKIP() << "no printable character in the random model's output";
    const std::string expected = text.substr(0, text.find(stop));

    CliRun j = generate({"--max-tokens", "40", "--json", "--ignore-eos", "--stop", stop});
    ASSERT_EQ(j.status, 0) << j.err;
    json jj = parse_json(j);
    EXPECT_EQ(jj["text"].get<std::string>(), expected);
    EXPECT_EQ(jj["stats"]["stop_reason"], "STOP_STRING");
    CliRun p = generate({"--max-tokens", "40", "--ignore-eos", "--stop", stop, "--quiet"});
    ASSERT_EQ(p.status, 0) << p.err;
    EXPECT_EQ(p.out, expected);

    // A stop string that starts like the output but never completes: the text held back while
    // it might have matched still reaches stdout in the end.
    const std::string never = stop + "\x01\x02\x03";
    CliRun q = generate({"--max-tokens", "40", "--ignore-eos", "--stop", never, "--quiet"});
    ASSERT_EQ(q.status, 0) << q.err;
    EXPECT_EQ(q.out, text);
}

TEST_F(CliTest, GreedySpeculationEqualsGreedyDecoding) {
    CliRun plain = generate({"--max-tokens", "20", "--loops", "4", "--ignore-eos", "--json"});
    ASSERT_EQ(plain.status, 0) << plain.err;
    CliRun spec = generate({"--max-tokens", "20", "--mode", "speculative", "--draft-loops", "2",
                            "--verify-loops", "4", "--draft-ahead", "3", "--ignore-eos",
                            "--events", "--json"});
    ASSERT_EQ(spec.status, 0) << spec.err;
    json p = parse_json(plain), j = parse_json(spec);
    EXPECT_EQ(j["output_ids"], p["output_ids"]);
    EXPECT_EQ(j["text"], p["text"]);
    EXPECT_EQ(j["config"]["mode"], "speculative");
    EXPECT_EQ(j["config"]["verify_loops"], 4);
    EXPECT_EQ(j["config"]["draft_loops"], 2);
    EXPECT_EQ(j["config"]["draft_ahead"], 3);
    EXPECT_GT(j["stats"]["spec_cycles"].get<int>(), 0);
    EXPECT_LE(j["stats"]["spec_accepted"].get<int>(), j["stats"]["spec_tested"].get<int>());
    ASSERT_EQ(j["events"].size(), j["output_ids"].size());
    // Every token after the first (which prefill produces) belongs to a draft-verify cycle.
    for (size_t i = 1; i < j["events"].size(); ++i) {
        const json& ev = j["events"][i];
        EXPECT_TRUE(ev.contains("cycle") && ev.contains("drafted") && ev.contains("accepted") &&
                    ev.contains("from_verifier"))
            << ev.dump();
    }

    // Sampled speculation is reproducible from its seed.
    auto sampled = [&] {
        return generate({"--max-tokens", "12", "--mode", "speculative", "--temperature", "1.0",
                         "--top-k", "40", "--top-p", "0.9", "--seed", "5", "--json"});
    };
    CliRun a = sampled(), b = sampled();
    ASSERT_EQ(a.status, 0) << a.err;
    EXPECT_EQ(parse_json(a)["output_ids"], parse_json(b)["output_ids"]);

    CliRun text = generate({"--max-tokens", "8", "--mode", "speculative"});
    ASSERT_EQ(text.status, 0) << text.err;
    EXPECT_NE(text.err.find("accepted"), std::string::npos) << text.err;
}

TEST_F(CliTest, NotYetSupportedFeaturesExitCleanly) {
    // Beam search and early exit reach the engine; until it implements them it refuses with
    // NotSupported, which must be a message and exit status 2, never a crash.
    for (const auto& extra : std::vector<std::vector<std::string>>{
             {"--mode", "beam", "--beam-size", "3", "--length-penalty", "0.7"},
             {"--early-exit", "margin", "--early-exit-threshold", "1.5"},
             {"--early-exit", "kl", "--early-exit-patience", "2", "--early-exit-min-l", "2",
              "--early-exit-peek-every", "1"},
             {"--early-exit-patience", "1"}}) {
        SCOPED_TRACE(::testing::PrintToString(extra));
        std::vector<std::string> a = extra;
        a.insert(a.end(), {"--max-tokens", "4", "--json"});
        CliRun r = generate(a);
        EXPECT_FALSE(r.signaled) << r.err;
        EXPECT_TRUE(r.status == 0 || r.status == 2) << r.status << " " << r.err;
        if (r.status == 0) {
            EXPECT_FALSE(parse_json(r).is_discarded());
        }
        if (r.status == 2) {
            EXPECT_FALSE(r.err.empty());
        }
    }
    CliRun r = generate({"--mode", "beam", "--beam-size", "1"});
    EXPECT_USAGE_ERROR(r, "--beam-size");
}

TEST_F(CliTest, ScoreJsonHasPerplexity) {
    CliRun r = run({"score", model_, "--text", "In the beginning was the word", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    json j = parse_json(r);
    const size_t n = j["tokens"].size();
    ASSERT_GE(n, 2u);
    EXPECT_EQ(j["token_logprobs"].size(), n - 1);
    EXPECT_EQ(j["token_texts"].size(), n);
    EXPECT_GT(j["perplexity"].get<double>(), 0.0);
    EXPECT_GT(j["total_nll"].get<double>(), 0.0);
    EXPECT_EQ(j["loops"], 3);
    double sum = 0;
    for (double lp : j["token_logprobs"]) {
        EXPECT_LE(lp, 1e-6);
        sum -= lp;
    }
    EXPECT_NEAR(sum, j["total_nll"].get<double>(), 1e-3 * (1 + sum));

    CliRun deeper = run({"score", model_, "--text", "In the beginning", "--loops", "5", "--json"});
    ASSERT_EQ(deeper.status, 0) << deeper.err;
    EXPECT_EQ(parse_json(deeper)["loops"], 5);

    CliRun plain = run({"score", model_, "--text", "In the beginning"});
    ASSERT_EQ(plain.status, 0) << plain.err;
    EXPECT_NE(plain.out.find("perplexity"), std::string::npos);

    EXPECT_USAGE_ERROR(run({"score", model_, "--text", "I"}), "at least 2");
    EXPECT_USAGE_ERROR(run({"score", model_, "--text", "hi", "--file", "x"}), "--file");
    EXPECT_USAGE_ERROR(run({"score", model_, "--text", "hello", "--loops", "x"}), "--loops");
    EXPECT_USAGE_ERROR(run({"score", model_, "--text", "hello", "--loops", "50"}), "loops");
}

TEST_F(CliTest, MakeRandomRefusesBadShapes) {
    const std::string out = dir_ + "/bad.tinyloop";
    EXPECT_USAGE_ERROR(run({"make-random", out, "--dtype", "q9"}), "--dtype");
    EXPECT_USAGE_ERROR(run({"make-random", out, "--d-model", "0"}), "--d-model");
    EXPECT_USAGE_ERROR(run({"make-random", out, "--group-size", "48"}), "--group-size");
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

}  // namespace
