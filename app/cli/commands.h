// The subcommands of `tinyloop`. Each has a spec (its options and --help) and a run function
// that returns the exit status; they throw UsageError / tinyloop::Error, which main() prints.
#pragma once

#include <string>
#include <vector>

#include "args.h"

namespace tinyloop::cli {

CommandSpec info_spec();
int run_info(const Args& args);

CommandSpec generate_spec();
int run_generate(const Args& args);

CommandSpec score_spec();
int run_score(const Args& args);

CommandSpec make_random_spec();
int run_make_random(const Args& args);

CommandSpec lens_spec();
int run_lens(const Args& args);

CommandSpec depths_spec();
int run_depths(const Args& args);

CommandSpec reuse_spec();
int run_reuse(const Args& args);

CommandSpec quantize_spec();
int run_quantize(const Args& args);

CommandSpec import_spec();
int run_import(const Args& args);

CommandSpec export_gguf_spec();
int run_export_gguf(const Args& args);

CommandSpec recommend_spec();
int run_recommend(const Args& args);

CommandSpec bench_spec();
int run_bench(const Args& args);

// serve passes its arguments through to the server unparsed (it execs and returns only on error).
CommandSpec serve_spec();
int run_serve(int argc, char** argv, int first);

// One row of the command table: main() dispatches through it, `tinyloop --help` lists it and
// `tinyloop help --markdown` (reference.cpp) writes app/cli/CLI.md from it.
struct CommandEntry {
    const char* name;
    CommandSpec (*spec)();
    int (*run)(const Args&);  // nullptr for serve (its arguments go to the server)
    const char* summary;
};
const std::vector<CommandEntry>& command_table();

// `tinyloop --help`: the commands, the options they share, examples.
std::string usage_text();
// app/cli/CLI.md: usage_text() and every command's --help, as Markdown.
std::string reference_markdown();

}  // namespace tinyloop::cli
