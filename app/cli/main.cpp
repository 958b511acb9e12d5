// `tinyloop`: the command line over the engine's public header. Thin by design: each
// subcommand fills a config from its flags, calls the library, prints text or one JSON object.
// Every mistake (a flag, a file, an engine refusal) is a message on stderr and exit status 2.
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

struct Entry {
    const char* name;
    CommandSpec (*spec)();
    int (*run)(const Args&);
    const char* summary;
};

const Entry kCommands[] = {
    {"info", info_spec, run_info, "hyperparameters, dtypes, tokenizer, metadata, memory"},
    {"generate", generate_spec, run_generate, "generate a continuation of a prompt"},
    {"score", score_spec, run_score,
     "per-token log-probabilities, perplexity, uncertainty, escalation"},
    {"lens", lens_spec, run_lens, "logit lens: the prediction at every loop depth, token x depth"},
    {"depths", depths_spec, run_depths, "answer one prompt at several loop depths from one prefill"},
    {"reuse", reuse_spec, run_reuse, "answer prompts that share prefixes through a prefix pool"},
    {"bench", bench_spec, run_bench, "prefill/decode tok/s, GB/s, speedups of early exit and speculation"},
    {"quantize", quantize_spec, run_quantize, "re-write a model as f16, q8, q4 or q2"},
    {"serve", serve_spec, nullptr, "OpenAI-compatible HTTP server (Python, over the binding)"},
    {"make-random", make_random_spec, run_make_random,
     "write a model with random weights (tests, demos)"},
};

void print_usage(std::FILE* to) {
    std::string s =
        "usage: tinyloop COMMAND [options]\n"
        "       tinyloop COMMAND --help\n"
        "       tinyloop --version\n\n"
        "TinyLoop runs weight-shared looped transformers (.tinyloop files).\n\nCommands:\n";
    for (const auto& c : kCommands) {
        std::string name = c.name;
        s += "  " + name + std::string(14 - name.size(), ' ') + c.summary + "\n";
    }
    s += "\nEvery command takes --json (one JSON object on stdout), --backend cpu|cuda|auto\n"
         "and --threads N (serve passes its arguments to the server). Errors go to stderr with\n"
         "exit status 2.\n";
    std::fputs(s.c_str(), to);
}

int fail(const std::string& prefix, const std::string& message) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", prefix.c_str(), message.c_str());
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const std::string first = argv[1] ? argv[1] : "";
    if (first == "--help" || first == "-h") {
        print_usage(stdout);
        return 0;
    }
    if (first == "--version" || first == "-V") {
        std::printf("tinyloop %s\n", TINYLOOP_VERSION);
        return 0;
    }
    if (first == "help") {
        if (argc < 3) {
            print_usage(stdout);
            return 0;
        }
        for (const auto& c : kCommands)
            if (argv[2] && std::string(argv[2]) == c.name) {
                std::fputs(help_text(c.spec()).c_str(), stdout);
                return 0;
            }
        return fail("tinyloop", std::string("unknown command '") + (argv[2] ? argv[2] : "") +
                                    "' (commands: info, generate, score, lens, bench, quantize, serve, make-random)");
    }

    const Entry* entry = nullptr;
    for (const auto& c : kCommands)
        if (first == c.name) entry = &c;
    if (!entry) {
        if (!first.empty() && first[0] == '-')
            return fail("tinyloop", "unknown option '" + first +
                                        "' (expected a command first; see 'tinyloop --help')");
        return fail("tinyloop", "unknown command '" + first +
                                    "' (commands: info, generate, score, lens, bench, quantize, serve, make-random)");
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
        return fail("tinyloop: error", e.what());
    } catch (const std::bad_alloc&) {
        return fail("tinyloop: error", "out of memory");
    } catch (const std::exception& e) {
        return fail("tinyloop: error", e.what());
    } catch (...) {
        return fail("tinyloop: error", "unknown failure");
    }
}
