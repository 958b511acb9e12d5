// `tinyloop`: the command line over the engine's public header. Thin by design: each
// subcommand fills a config from its flags, calls the library, prints text or one JSON object.
// Every mistake (a flag, a file, an engine refusal) is one line on stderr and exit status 2.
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "args.h"
#include "commands.h"
#include "tinyloop/tinyloop.h"

#ifndef TINYLOOP_VERSION
#define TINYLOOP_VERSION "0.0.0"
#endif

namespace {

using namespace tinyloop::cli;

// Every error, whatever raised it, is one line "tinyloop COMMAND: message" (or "tinyloop:
// message" before a command is known) and exit status 2.
int fail(const std::string& prefix, const std::string& message) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", prefix.c_str(), message.c_str());
    return 2;
}

std::string command_names() {
    std::string names;
    for (const auto& c : command_table()) names += (names.empty() ? "" : ", ") + std::string(c.name);
    return names;
}

const CommandEntry* find_command(const std::string& name) {
    for (const auto& c : command_table())
        if (name == c.name) return &c;
    return nullptr;
}

// tinyloop help [COMMAND | --markdown]
int run_help(int argc, char** argv) {
    const std::string what = argc >= 3 && argv[2] ? argv[2] : "";
    if (argc > 3) return fail("tinyloop help", "expected one COMMAND or --markdown, got more");
    if (what.empty()) {
        std::fputs(usage_text().c_str(), stdout);
        return 0;
    }
    if (what == "--markdown") {
        std::fputs(reference_markdown().c_str(), stdout);
        return 0;
    }
    if (const CommandEntry* c = find_command(what)) {
        std::fputs(help_text(c->spec()).c_str(), stdout);
        return 0;
    }
    return fail("tinyloop help",
                "unknown command '" + what + "' (commands: " + command_names() + ")");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fputs(usage_text().c_str(), stderr);
        return 2;
    }
    const std::string first = argv[1] ? argv[1] : "";
    if (first == "--help" || first == "-h") {
        std::fputs(usage_text().c_str(), stdout);
        return 0;
    }
    if (first == "--version" || first == "-V") {
        std::printf("tinyloop %s\n", TINYLOOP_VERSION);
        return 0;
    }
    if (first == "help") return run_help(argc, argv);

    const CommandEntry* entry = find_command(first);
    if (!entry) {
        if (!first.empty() && first[0] == '-')
            return fail("tinyloop", "unknown option '" + first +
                                        "' (expected a command first; see 'tinyloop --help')");
        return fail("tinyloop", "unknown command '" + first + "' (commands: " + command_names() +
                                    "; see 'tinyloop --help')");
    }

    const std::string prefix = std::string("tinyloop ") + entry->name;
    try {
        const CommandSpec spec = entry->spec();
        if (!entry->run) {  // serve: the arguments belong to the server
            for (int i = 2; i < argc; ++i)
                if (argv[i] && (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h")) {
                    std::fputs(help_text(spec).c_str(), stdout);
                    return 0;
                }
            return run_serve(argc, argv, 2);
        }
        Args args(spec, argc, argv, 2);
        if (args.help()) {
            std::fputs(help_text(spec).c_str(), stdout);
            return 0;
        }
        return entry->run(args);
    } catch (const UsageError& e) {
        return fail(prefix, e.what());
    } catch (const tinyloop::Error& e) {
        return fail(prefix, e.what());
    } catch (const std::bad_alloc&) {
        return fail(prefix, "out of memory");
    } catch (const std::exception& e) {
        return fail(prefix, e.what());
    } catch (...) {
        return fail(prefix, "unknown failure");
    }
}
