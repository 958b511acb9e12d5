// Runs the `tinyloop` program as a user does: a child process with stdin from /dev/null, its
// stdout and stderr into files under `dir` (or both into one file, in the order they were
// written, with merge_stderr), its exit status or the signal that killed it.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace tl_test {

struct CliRun {
    int status = -1;  // exit status; 128 + signal when killed by a signal
    bool signaled = false;
    std::string out, err;  // with merge_stderr, `out` holds both and `err` is empty
};

inline std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

inline CliRun run_cli(const std::string& dir, const std::vector<std::string>& args,
                      bool merge_stderr = false) {
    static int counter = 0;
    const std::string base = dir + "/run" + std::to_string(counter++);
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
    if (merge_stderr)
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    else
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
    if (!merge_stderr) r.err = slurp(err_path);
    std::error_code ec;
    std::filesystem::remove(out_path, ec);
    std::filesystem::remove(err_path, ec);
    return r;
}

}  // namespace tl_test
