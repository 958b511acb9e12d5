// What the subcommands share: loading a model from the common options, reading files,
// JSON output, and turning engine field names into flag names in messages.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "tinyloop/json.h"
#include "tinyloop/tinyloop.h"

namespace tinyloop::cli {

// --backend and --threads into LoadOptions (UsageError on a bad value). --threads is 1..256
// in every command (serve included); without it the engine uses all cores.
LoadOptions load_options(const Args& args);

// --loops: nullopt when absent (the model's default_loops), else a depth >= 1; 0 is refused
// with the range 1..max_loops (the engine refuses depths past max_loops once the model is open).
std::optional<int> loops_flag(const Args& args);

// A list of depths (--depths, --escalate) against the model: each in [1, max_loops].
void check_depths(const std::string& flag, const std::vector<int>& depths, const HParams& hp);

// A Hugging Face checkpoint folder's file in the import cache (import.h's import_cache_path;
// $TINYLOOP_IMPORT_CACHE, else $XDG_CACHE_HOME/tinyloop/imports, else ~/.cache/tinyloop/imports):
// imported on first use with progress on stderr, read from the cache while the folder is unchanged.
std::string imported_folder(const std::string& path);

// Loads MODEL (a .tinyloop file, or a Hugging Face folder through imported_folder). A path that
// does not exist or is not a readable file is a UsageError naming it; engine errors are rethrown
// with the path in the message.
ModelHandle open_model(const std::string& path, const LoadOptions& options);

// UsageError "FLAG: cannot open file 'path': reason" unless path is a readable regular file.
void check_file_readable(const std::string& flag, const std::string& path);

// The two positionals of a command that reads one file and writes another (quantize,
// export-gguf), named `in_name` and OUT in messages: both given, non-empty, nothing more.
std::pair<std::string, std::string> in_out_positionals(const Args& args, const std::string& in_name);
// UsageError unless OUT may be written: not the input file itself, not a directory.
void check_output_path(const std::string& in, const std::string& out);

// The whole file, or UsageError "FLAG: cannot read 'path': reason".
std::string read_text_file(const std::string& flag, const std::string& path);

// One line of JSON; invalid UTF-8 becomes U+FFFD instead of an exception.
std::string dump_json(const nlohmann::json& j);
void print_json(const nlohmann::json& j);

// A float as the double with the same shortest decimal form (0.8f -> 0.8, not 0.800000011):
// the engine codec's json_float.
inline double f2d(float f) { return json_float(f); }

// Bytes shown to a person on one line: invalid UTF-8 -> U+FFFD, control characters escaped.
std::string display_text(const std::string& bytes);

// An engine message with the flag that sets the field it names prefixed:
// "top_p must be in (0, 1]" -> "--top-p (top_p): top_p must be in (0, 1]". `fields` maps
// engine field names to flags; the first one found as a whole word wins.
std::string with_flag_name(const std::string& message,
                           const std::vector<std::pair<std::string, std::string>>& fields);

// The text or ids a scoring command reads: exactly one of --text, --file, --ids (plus
// --parse-special for text). read_token_input checks the flags before anything loads;
// input_tokens tokenizes (or checks the ids against the vocabulary) once the model is loaded and
// refuses fewer than `min_tokens`.
struct TokenInput {
    std::string command;  // "score", for the --parse-special hint
    std::string source;   // "--text", "--file" or "--ids"
    std::string text;
    std::vector<int32_t> ids;
    bool parse_special = false;
};
TokenInput read_token_input(const Args& args);
std::vector<int32_t> input_tokens(const TokenInput& in, Model* model, size_t min_tokens);

// One line on stderr, "PREFIX: note: ...", when `text` (read without --parse-special) holds a
// special token's text such as <|endoftext|>: it is split into ordinary tokens, which is rarely
// what was meant.
void hint_special_tokens(const std::string& prefix, const std::string& flag, const Model* model,
                         const std::string& text);

// "1 token", "2 tokens".
std::string plural(long long n, const std::string& noun);

// A token's bytes, or "" for an id the tokenizer cannot spell (padding ids of random models).
std::string token_text(const Model* model, int32_t id);

// Comma-separated items ("1,2,4", "f32,q8"), each trimmed and non-empty.
std::vector<std::string> split_list(const std::string& flag, const std::string& text);

// Runs f; an engine error naming one of `fields` (engine field -> flag) gets the flag in front.
template <class F>
auto with_engine_fields(const std::vector<std::pair<std::string, std::string>>& fields, F&& f)
    -> decltype(f()) {
    try {
        return f();
    } catch (const Error& e) {
        throw Error(e.code(), with_flag_name(e.what(), fields));
    }
}

nlohmann::json hparams_json(const HParams& hp);

// Early exit as the command line asks for it, resolved by the engine (resolve_early_exit): each of
// --early-exit C (C = model: the model's criterion), --early-exit-threshold, --early-exit-patience,
// --early-exit-min-l and --early-exit-peek-every that was given is the user's, every other field
// the model's recommendation, else the built-in default. `cfg` holds the flags' values.
// `used` (optional) receives one line saying what was used and where it came from.
GenerateConfig cli_early_exit(const Model* model, const Args& args, const GenerateConfig& cfg, std::string* used);
// --early-exit's value as a criterion: l2, margin, kl, entropy, argmax; "model" leaves `out`
// unchanged and returns false; anything else is a UsageError naming `flag`.
bool read_criterion_flag(const std::string& flag, const std::string& value, EarlyExitCriterion* out);
// The flag's name of a criterion: the codec's short name (l2, margin, kl, ...), '-' for '_'.
std::string criterion_flag_name(EarlyExitCriterion c);
// The run as the engine's resolver (resolve_run) completes it for the command line: the flags
// already hold the user's choices and the mode rules the CLI refuses by flag name, so every config
// field counts as set but a depth left at 0; a speculation knob counts as set when its flag was
// given (`given`: draft_loops, verify_loops, draft_ahead, branches). The resolver writes out the
// rest: the depth, the knobs from the model's recommendation, else the built-in defaults.
struct SpeculationFlagsGiven {
    bool draft_loops = false, verify_loops = false, draft_ahead = false, branches = false;
};
ResolvedRun resolve_cli_run(const Model* model, const RunSpec& spec, const SpeculationFlagsGiven& given);
// "speculation: draft 2 -> verify 4, draft_ahead 4 (recommended by the model)" for a resolved
// chain or tree run, "recommended by the model" when the resolver took any knob from it.
std::string speculation_used_line(const ResolvedRun& run);

// "12.3 MiB"
std::string human_bytes(uint64_t bytes);
// "12,345,678"
std::string grouped(uint64_t n);

}  // namespace tinyloop::cli
