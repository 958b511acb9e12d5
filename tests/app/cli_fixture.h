// The fixture of the `tinyloop` command-line tests (test_cli*.cpp): a small random model the CLI
// writes itself (make-random) once per test program, in a temporary directory, and the helpers
// that run the CLI on it (cli_run.h) and read its --json output.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "app/cli_run.h"

namespace tl_test {

class CliTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        namespace fs = std::filesystem;
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
        std::filesystem::remove_all(dir_, ec);
    }

    // Runs the CLI with argv, stdin from /dev/null, stdout and stderr into files.
    static CliRun run(const std::vector<std::string>& args) { return run_cli(dir_, args); }

    static nlohmann::json parse_json(const CliRun& r) {
        nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
        EXPECT_FALSE(j.is_discarded()) << "stdout is not JSON: " << r.out << "\nstderr: " << r.err;
        return j;
    }

    // generate MODEL --prompt "Hello" + extra.
    static CliRun generate(std::vector<std::string> extra, const std::string& prompt = "Hello") {
        std::vector<std::string> a = {"generate", model_, "--prompt", prompt};
        a.insert(a.end(), extra.begin(), extra.end());
        return run(a);
    }

    inline static std::string dir_;
    inline static std::string model_;
};

}  // namespace tl_test

// A refusal: no crash, exit status 2, and stderr names `needle` (the flag, the file, the field).
#define EXPECT_USAGE_ERROR(r, needle)                                                    \
    do {                                                                                 \
        EXPECT_FALSE((r).signaled) << "crashed: " << (r).err;                            \
        EXPECT_EQ((r).status, 2) << "stdout: " << (r).out << "\nstderr: " << (r).err;    \
        EXPECT_NE((r).err.find(needle), std::string::npos)                               \
            << "stderr should mention '" << (needle) << "': " << (r).err;                \
    } while (0)
