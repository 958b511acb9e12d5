// What a newcomer reads from `tinyloop` on the bundled model: text that ends its line before the
// timing, summaries that say what ran (beam, tree, early exit), a short `info`, one error format
// with exit status 2 for every refusal (--loops 0, --threads 0, lists of depths, --random sizes),
// and a hint when a prompt holds a special token's text without --parse-special.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "app/cli_run.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tl_test::CliRun;

const std::string kModel = TL_SOURCE_DIR "/resources/models/tinyloop-kjv/model-f32.tinyloop";

class CliMessages : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        std::string tmpl = (fs::temp_directory_path() / "tinyloop_cli_messages_XXXXXX").string();
        ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
        dir_ = tmpl;
    }
    static void TearDownTestSuite() {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    static CliRun run(const std::vector<std::string>& args) { return tl_test::run_cli(dir_, args); }
    // stdout and stderr into one file, in the order written: what a terminal shows.
    static CliRun run_merged(const std::vector<std::string>& args) {
        return tl_test::run_cli(dir_, args, true);
    }
    static CliRun generate(std::vector<std::string> extra, const std::string& prompt = "And God said") {
        std::vector<std::string> a = {"generate", kModel, "--prompt", prompt};
        a.insert(a.end(), extra.begin(), extra.end());
        return run(a);
    }
    static std::string dir_;
};

std::string CliMessages::dir_;

// A refusal: exit status 2, one line on stderr that starts with the command's prefix and
// contains `needle`, nothing on stdout.
void expect_refusal(const CliRun& r, const std::string& prefix, const std::string& needle) {
    EXPECT_FALSE(r.signaled) << r.err;
    EXPECT_EQ(r.status, 2) << "stdout: " << r.out << "\nstderr: " << r.err;
    EXPECT_EQ(r.err.rfind(prefix + ": ", 0), 0u) << "stderr should start with '" << prefix << ": ': " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr should mention '" << needle << "': " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
    EXPECT_EQ(r.out, "");
}

TEST_F(CliMessages, GeneratedTextEndsItsLineBeforeTheTiming) {
    for (const std::vector<std::string>& extra :
         {std::vector<std::string>{"--max-tokens", "12", "--ignore-eos"},
          std::vector<std::string>{"--max-tokens", "12", "--ignore-eos", "--events"}}) {
        std::vector<std::string> a = {"generate", kModel, "--prompt", "And God said"};
        a.insert(a.end(), extra.begin(), extra.end());
        const CliRun r = run_merged(a);
        ASSERT_EQ(r.status, 0) << r.out;
        const std::string after = extra.size() == 4 ? "    #    pos" : "tinyloop: prompt";
        const size_t at = r.out.find(after);
        ASSERT_NE(at, std::string::npos) << r.out;
        ASSERT_GT(at, 0u) << r.out;
        EXPECT_EQ(r.out[at - 1], '\n') << "the text runs on into '" << after << "': " << r.out;
    }
    // stdout alone: the text and one newline; --quiet: the text exactly, as --json has it.
    const CliRun j = generate({"--max-tokens", "12", "--ignore-eos", "--json"});
    ASSERT_EQ(j.status, 0) << j.err;
    const std::string text = json::parse(j.out)["text"];
    ASSERT_FALSE(text.empty());
    const CliRun plain = generate({"--max-tokens", "12", "--ignore-eos"});
    EXPECT_EQ(plain.out, text.back() == '\n' ? text : text + "\n");
    const CliRun quiet = generate({"--max-tokens", "12", "--ignore-eos", "--quiet"});
    EXPECT_EQ(quiet.out, text);
    EXPECT_EQ(quiet.err, "");
}

// The README's reasoner example: a model whose context (64) is shorter than prompt + the default
// 64 tokens answers without --max-tokens (the default stops where the context ends).
TEST_F(CliMessages, DefaultLengthFitsAShortContext) {
    const std::string reasoner = TL_SOURCE_DIR "/resources/models/tinyloop-digitsum/model-f32.tinyloop";
    const CliRun r = run({"generate", reasoner, "--prompt", "2479362?", "--temperature", "0", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["text"].get<std::string>().rfind("=3", 0), 0u) << r.out;
    // Asked for explicitly, a length past the context is still refused, naming the range.
    expect_refusal(run({"generate", reasoner, "--prompt", "2479362?", "--max-tokens", "64"}), "tinyloop generate",
                   "max_tokens must be in [0, 56]");
}

TEST_F(CliMessages, SummariesSayWhatRan) {
    // Beam search emits its tokens at the end: no per-token decode rate, the whole search's.
    const CliRun beam = generate({"--mode", "beam", "--max-tokens", "6", "--ignore-eos"});
    ASSERT_EQ(beam.status, 0) << beam.err;
    EXPECT_NE(beam.err.find("beam search"), std::string::npos) << beam.err;
    EXPECT_EQ(beam.err.find("decode "), std::string::npos) << beam.err;
    // Tree speculation says so, and counts in the singular where there is one.
    // (The first token comes from the prefill; the second from one draft-and-verify cycle.)
    const CliRun tree = generate({"--mode", "tree", "--max-tokens", "2", "--ignore-eos"});
    ASSERT_EQ(tree.status, 0) << tree.err;
    EXPECT_NE(tree.err.find("tree speculation 1 cycle,"), std::string::npos) << tree.err;
    const CliRun one = generate({"--max-tokens", "1", "--ignore-eos"});
    EXPECT_NE(one.err.find("tinyloop: 1 token,"), std::string::npos) << one.err;
    const CliRun chain = generate({"--mode", "speculative", "--max-tokens", "6", "--ignore-eos"});
    ASSERT_EQ(chain.status, 0) << chain.err;
    EXPECT_NE(chain.err.find("tinyloop: speculative "), std::string::npos) << chain.err;
    // bench's header counts in the singular too.
    const CliRun bench = run({"bench", kModel, "--prompt-tokens", "1", "--tokens", "2", "--modes", "plain",
                              "--no-machine", "--repeat", "1"});
    ASSERT_EQ(bench.status, 0) << bench.err;
    EXPECT_NE((bench.out + bench.err).find(", prompt 1 token, 2 decoded"), std::string::npos) << bench.out << bench.err;
}

TEST_F(CliMessages, ScoreEarlyExitShowsTheDepthAndWhenNothingExited) {
    const std::string text = "And God said, Let there be light: and there was light.";
    const CliRun all = run({"score", kModel, "--text", text, "--early-exit", "l2", "--early-exit-threshold", "1e30"});
    ASSERT_EQ(all.status, 0) << all.err;
    EXPECT_NE(all.out.find("  depth  token"), std::string::npos) << all.out;
    EXPECT_NE(all.out.find("early exit: l2"), std::string::npos) << all.out;
    EXPECT_EQ(all.out.find("no position exited"), std::string::npos) << all.out;
    const CliRun none = run({"score", kModel, "--text", text, "--early-exit", "l2", "--early-exit-threshold", "1e-30"});
    ASSERT_EQ(none.status, 0) << none.err;
    EXPECT_NE(none.out.find("no position exited"), std::string::npos) << none.out;
    EXPECT_NE(none.out.find(" 0 of "), std::string::npos) << none.out;
    const CliRun j = run({"score", kModel, "--text", text, "--early-exit", "l2", "--early-exit-threshold", "1e-30", "--json"});
    ASSERT_EQ(j.status, 0) << j.err;
    EXPECT_EQ(json::parse(j.out)["early_exit"]["n_exited"], 0);
}

TEST_F(CliMessages, InfoIsShortUnlessAskedAndCanLeaveTheMetadataOut) {
    const CliRun shortform = run({"info", kModel});
    ASSERT_EQ(shortform.status, 0) << shortform.err;
    const CliRun full = run({"info", kModel, "--metadata"});
    ASSERT_EQ(full.status, 0) << full.err;
    const CliRun none = run({"info", kModel, "--no-metadata"});
    ASSERT_EQ(none.status, 0) << none.err;
    auto lines = [](const std::string& s) { return std::count(s.begin(), s.end(), '\n'); };
    EXPECT_LT(lines(shortform.out), 70) << shortform.out;
    EXPECT_GT(lines(full.out), 2 * lines(shortform.out));
    EXPECT_NE(shortform.out.find("training_log"), std::string::npos);
    EXPECT_NE(shortform.out.find("--metadata"), std::string::npos);
    EXPECT_EQ(none.out.find("metadata"), std::string::npos) << none.out;
    EXPECT_LT(lines(none.out), lines(shortform.out));
    const CliRun j = run({"info", kModel, "--json", "--no-metadata"});
    ASSERT_EQ(j.status, 0) << j.err;
    EXPECT_FALSE(json::parse(j.out).contains("metadata"));
    EXPECT_TRUE(json::parse(run({"info", kModel, "--json"}).out).contains("metadata"));
    expect_refusal(run({"info", kModel, "--metadata", "--no-metadata"}), "tinyloop info", "--no-metadata");
    const CliRun one = run({"info", kModel, "--backend", "cpu", "--threads", "1"});
    ASSERT_EQ(one.status, 0) << one.err;
    EXPECT_NE(one.out.find(", 1 thread\n"), std::string::npos) << one.out;
}

TEST_F(CliMessages, EveryRefusalHasOnePrefixAndExitStatusTwo) {
    // A flag (UsageError) and a file the engine refuses (tinyloop::Error): the same format.
    expect_refusal(generate({"--temperature", "-1"}), "tinyloop generate", "--temperature");
    const std::string junk = dir_ + "/junk.tinyloop";
    { std::ofstream(junk) << "not a model"; }
    expect_refusal(run({"info", junk}), "tinyloop info", "junk.tinyloop");
    expect_refusal(run({"score", junk, "--text", "a b"}), "tinyloop score", "junk.tinyloop");
    // The unknown-command list is the command table: every command `tinyloop --help` lists.
    const CliRun unknown = run({"nope"});
    expect_refusal(unknown, "tinyloop", "unknown command 'nope'");
    for (const char* c : {"info", "generate", "score", "lens", "depths", "reuse", "bench", "quantize", "serve",
                          "make-random"})
        EXPECT_NE(unknown.err.find(c), std::string::npos) << c << ": " << unknown.err;
    expect_refusal(run({"help", "nope"}), "tinyloop help", "depths, reuse");
    // Tree speculation is greedy only: the message names the mode that samples.
    expect_refusal(generate({"--mode", "tree", "--temperature", "0.7"}), "tinyloop generate", "use speculative to sample");
}

TEST_F(CliMessages, LoopsAndThreadsNameTheirRangeEverywhere) {
    const std::vector<std::vector<std::string>> commands = {
        {"generate", kModel, "--prompt", "hi"},
        {"score", kModel, "--text", "hi there"},
        {"lens", kModel, "--text", "hi there"},
        {"reuse", kModel, "--prefix", "And", "--prompt", "And God"},
        {"bench", kModel, "--modes", "plain", "--no-machine"},
    };
    for (const auto& base : commands) {
        const std::string prefix = "tinyloop " + base[0];
        auto with = [&](std::vector<std::string> extra) {
            std::vector<std::string> a = base;
            a.insert(a.end(), extra.begin(), extra.end());
            return run(a);
        };
        expect_refusal(with({"--loops", "0"}), prefix, "--loops: expected an integer in [1, max_loops], got '0'");
        const CliRun deep = with({"--loops", "1000"});
        EXPECT_EQ(deep.status, 2) << base[0] << ": " << deep.err;
        EXPECT_NE(deep.err.find("--loops"), std::string::npos) << deep.err;
        if (base[0] != "bench")  // bench takes a list of thread counts; its own test covers it
            expect_refusal(with({"--threads", "0"}), prefix, "--threads: expected an integer in [1, 256]");
    }
}

TEST_F(CliMessages, ListsAndSizesNameTheirRange) {
    const CliRun info = run({"info", kModel, "--json"});
    ASSERT_EQ(info.status, 0) << info.err;
    const int max_loops = json::parse(info.out)["hparams"]["max_loops"];
    const std::string range = "[1, " + std::to_string(max_loops) + "]";
    expect_refusal(run({"depths", kModel, "--text", "And God", "--depths", "1,100000"}), "tinyloop depths",
                   "depth 100000 is outside " + range);
    expect_refusal(run({"score", kModel, "--text", "And God said", "--escalate", "2,100000"}), "tinyloop score",
                   "depth 100000 is outside " + range);
    expect_refusal(run({"bench", "--random", "d_model=10000000", "--no-machine"}), "tinyloop bench",
                   "d_model=N with N in [1, 4194304], got '10000000'");
    expect_refusal(run({"depths", kModel, "--text", "", "--depths", "2"}), "tinyloop depths",
                   "need at least 1 token, got 0");
}

TEST_F(CliMessages, SpecialTokenTextWithoutParseSpecialGetsAHint) {
    const CliRun plain = generate({"--max-tokens", "2", "--quiet"}, "<|endoftext|>And God said");
    ASSERT_EQ(plain.status, 0) << plain.err;
    EXPECT_NE(plain.err.find("tinyloop generate: note: --prompt contains \"<|endoftext|>\""), std::string::npos)
        << plain.err;
    EXPECT_NE(plain.err.find("--parse-special"), std::string::npos) << plain.err;
    EXPECT_EQ(std::count(plain.err.begin(), plain.err.end(), '\n'), 1) << plain.err;
    const CliRun parsed = generate({"--max-tokens", "2", "--quiet", "--parse-special"}, "<|endoftext|>And God said");
    ASSERT_EQ(parsed.status, 0) << parsed.err;
    EXPECT_EQ(parsed.err, "");
    const CliRun score = run({"score", kModel, "--text", "<|endoftext|>And God said"});
    ASSERT_EQ(score.status, 0) << score.err;
    EXPECT_NE(score.err.find("tinyloop score: note: --text contains"), std::string::npos) << score.err;
}

}  // namespace
