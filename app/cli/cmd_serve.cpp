// tinyloop serve MODEL [--host H] [--port P] [...]: execs the HTTP server (app/serve/server.py,
// Python over the tinyloop_py binding) with the interpreter found at configure time, so that
// signals (Ctrl-C, SIGTERM from a service manager) reach the server itself.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"

#ifndef TL_SOURCE_DIR
#define TL_SOURCE_DIR ""
#endif
#ifndef TL_INSTALL_PREFIX
#define TL_INSTALL_PREFIX ""
#endif
#ifndef TL_PYTHON_EXECUTABLE
#define TL_PYTHON_EXECUTABLE ""
#endif
#ifndef TL_PYTHON_MODULE_DIR
#define TL_PYTHON_MODULE_DIR ""
#endif

namespace tinyloop::cli {

namespace fs = std::filesystem;

CommandSpec serve_spec() {
    CommandSpec s;
    s.name = "serve";
    s.synopsis = "MODEL|HF_FOLDER [--host 127.0.0.1] [--port 8080] [server options]";
    s.summary =
        "Runs the OpenAI-compatible HTTP server (app/serve/server.py) on MODEL. Every argument\n"
        "after 'serve' goes to the server unchanged; the server replaces this process, so Ctrl-C\n"
        "and signals reach it directly. A Hugging Face folder (config.json, safetensors,\n"
        "tokenizer.json) is imported first (as `tinyloop import FOLDER OUT`, bf16) into the import\n"
        "cache $TINYLOOP_IMPORT_CACHE (else $XDG_CACHE_HOME/tinyloop/imports, else\n"
        "~/.cache/tinyloop/imports), which every command that opens a folder shares; a later\n"
        "serve or run of the unchanged folder reads the cached file.";
    const std::string S = "Server options (passed through)";
    s.options = {
        {"--host", "H", "address to listen on (default 127.0.0.1)", "", false, S},
        {"--port", "P", "port (default 8080; 0 picks a free one)", "", false, S},
        {"--max-queue", "N", "requests admitted, running or waiting (default 16)", "", false, S},
        {"--max-concurrent", "N", "requests decoding at once (default 4)", "", false, S},
        {"--no-batching", "", "decode each request on its own, not through the batch engine", "", false, S},
        {"--model-name", "NAME", "the id /v1/models reports (default: the file's stem)", "", false, S},
        {"--draft-model", "DRAFT", "a model with the same vocabulary for {mode: draft} requests", "", false, S},
        {"--max-body-bytes", "N", "largest request body; a larger one is answered 413 (default 1048576)", "", false, S},
        {"--header-timeout", "S", "seconds a connection may take to send its headers, then closed (default 10)", "", false, S},
        {"--body-timeout", "S", "seconds a request's body may take to arrive, then 408 (default 30)", "", false, S},
        {"--log-level", "L", "critical | error | warning | info | debug (default info)", "", false, S},
        {"--backend", "B", "cpu, cuda or auto (default auto)", "", false, S},
        {"--threads", "N", "CPU worker threads, 1..256 (default: all cores)", "", false, S},
        {"--help", "", "show this help", "", false, S},
    };
    s.notes =
        "Endpoints: GET /v1/models, POST /v1/completions (OpenAI legacy completions, streaming\n"
        "with SSE), POST /v1/chat/completions (messages rendered through the model metadata's\n"
        "chat_template, or a plain default), GET and HEAD /health. Every error is an OpenAI-shaped\n"
        "JSON body; an unknown \"model\" is 404. Plain decodes of concurrent requests (greedy, sampling, early\n"
        "exit, grammar) run together through one continuous-batching engine (tokens identical to a\n"
        "lone decode; /health shows its \"batch\" stats); logprobs, beam search and speculation run\n"
        "on their own. Extension field \"kv_cache\": \"f32\" | \"int8\". With --draft-model DRAFT,\n"
        "a request with \"speculative\": {\"mode\": \"draft\", \"gamma\": N, \"draft_loops\": D}\n"
        "decodes through draft-model speculation (the vocabularies are checked at start-up).\n"
        "The server's own --help lists everything it takes:\n"
        "  tinyloop serve --server-help\n"
        "The script is $TINYLOOP_SERVE_SCRIPT when set, else the source tree's\n"
        "app/serve/server.py, then <prefix>/share/tinyloop/serve/server.py (beside the\n"
        "executable's prefix, then the configured one); the binding tinyloop_py is taken from the\n"
        "build tree's python/ folder when present, else from the interpreter's own path.\n"
        "The interpreter is $TINYLOOP_PYTHON, else the one found at configure time.\n"
        "There is no --json: the server answers HTTP. Exit status 2 when the script, the\n"
        "interpreter or the binding is missing, on a malformed command line, when MODEL or\n"
        "DRAFT cannot be loaded and when the address cannot be listened on (a port in use);\n"
        "1 only for a failure while serving.\n";
    return s;
}

namespace {

bool is_file(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec);
}

fs::path self_prefix() {
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec) return {};
    return exe.parent_path().parent_path();  // <prefix>/bin/tinyloop -> <prefix>
}

std::string find_server_script(std::vector<std::string>& tried) {
    std::vector<fs::path> candidates;
    if (const char* env = std::getenv("TINYLOOP_SERVE_SCRIPT"); env && *env) {
        tried.push_back(std::string(env) + " ($TINYLOOP_SERVE_SCRIPT)");
        return is_file(env) ? std::string(env) : std::string();  // the user's choice is final
    }
    if (*TL_SOURCE_DIR) candidates.push_back(fs::path(TL_SOURCE_DIR) / "app/serve/server.py");
    if (auto p = self_prefix(); !p.empty()) candidates.push_back(p / "share/tinyloop/serve/server.py");
    if (*TL_INSTALL_PREFIX) candidates.push_back(fs::path(TL_INSTALL_PREFIX) / "share/tinyloop/serve/server.py");
    for (const auto& c : candidates) {
        tried.push_back(c.string());
        if (is_file(c)) return c.string();
    }
    return "";
}

bool module_in(const fs::path& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return false;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("tinyloop_py", 0) == 0 && name.size() > 3 && name.substr(name.size() - 3) == ".so")
            return true;
    }
    return false;
}

// Whether `python` can import tinyloop_py with the current environment (an installed binding).
bool python_imports_binding(const std::string& python) {
    std::string cmd = "'" + python + "' -c 'import tinyloop_py' >/dev/null 2>&1";
    if (python.find('\'') != std::string::npos) return true;  // cannot quote it: let the server say
    return std::system(cmd.c_str()) == 0;
}

}  // namespace

int run_serve(int argc, char** argv, int first) {
    std::vector<std::string> tried;
    const std::string script = find_server_script(tried);
    if (script.empty()) {
        std::string where;
        for (const auto& t : tried) where += "\n  " + t;
        throw UsageError("cannot find the server script server.py; looked at:" + where +
                         "\n(set TINYLOOP_SERVE_SCRIPT to its path)");
    }
    std::string python;
    if (const char* env = std::getenv("TINYLOOP_PYTHON"); env && *env) python = env;
    else python = TL_PYTHON_EXECUTABLE;
    if (python.empty())
        throw UsageError("no Python interpreter was found when tinyloop was configured; set "
                         "TINYLOOP_PYTHON to python3's path");
    if (access(python.c_str(), X_OK) != 0)
        throw UsageError("cannot run the Python interpreter '" + python + "': " + std::strerror(errno) +
                         " (set TINYLOOP_PYTHON to python3's path)");

    // The binding: the build tree's module first (a developer's checkout), else whatever the
    // interpreter finds (an installed package).
    std::string pythonpath;
    if (*TL_PYTHON_MODULE_DIR && module_in(TL_PYTHON_MODULE_DIR)) pythonpath = TL_PYTHON_MODULE_DIR;
    if (pythonpath.empty() && !python_imports_binding(python))
        throw UsageError(std::string("the Python binding tinyloop_py is missing: not built in '") +
                         TL_PYTHON_MODULE_DIR + "' and '" + python +
                         "' cannot import it (build the target tinyloop_py, or install it)");
    if (!pythonpath.empty()) {
        if (const char* old = std::getenv("PYTHONPATH"); old && *old) pythonpath.append(1, ':').append(old);
        setenv("PYTHONPATH", pythonpath.c_str(), 1);
    }

    std::vector<std::string> a = {python, script};
    for (int i = first; i < argc; ++i) {
        std::string arg = argv[i] ? argv[i] : "";
        // MODEL (the first argument) may be a Hugging Face folder: imported once, then cached.
        std::error_code ec;
        if (i == first && !arg.empty() && arg[0] != '-' && fs::is_directory(arg, ec) &&
            fs::exists(fs::path(arg) / "config.json", ec))
            arg = imported_folder(arg);
        a.push_back(arg == "--server-help" ? "--help" : arg);
    }
    std::vector<char*> cargv;
    for (auto& s : a) cargv.push_back(s.data());
    cargv.push_back(nullptr);
    std::fflush(stdout);
    std::fflush(stderr);
    execv(python.c_str(), cargv.data());
    throw UsageError("cannot run '" + python + "': " + std::strerror(errno));
}

}  // namespace tinyloop::cli
