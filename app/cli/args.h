// Command-line parsing for the `tinyloop` program: a table of options per subcommand, a
// parser that never throws anything but UsageError, and typed value readers whose messages
// name the flag, what it expects and what it got.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tinyloop::cli {

// A mistake in the command line. main() prints "tinyloop CMD: <message>" and exits 2.
class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// One option of a subcommand. A switch has an empty value_name.
struct OptionSpec {
    std::string name;        // "--top-p"
    std::string value_name;  // "P"; empty for a switch
    std::string help;        // one line for --help
    std::string expect;      // what a value must look like, for messages: "a number in (0, 1]"
    bool repeatable = false;
    std::string group;       // --help heading; options with the same group stay together
};

struct CommandSpec {
    std::string name;      // "generate"
    std::string synopsis;  // "MODEL (--prompt TEXT | ...) [options]"
    std::string summary;   // one paragraph under the usage line
    std::vector<OptionSpec> options;
    std::string notes;     // printed after the options
};

// The parsed command line of one subcommand.
class Args {
public:
    // Parses argv[first..argc). Accepts "--flag value" and "--flag=value"; "--" ends the
    // options; "-h"/"--help" set help(). Throws UsageError for an unknown option, a missing
    // value, a value given to a switch, or a non-repeatable option given twice.
    Args(const CommandSpec& spec, int argc, char** argv, int first);

    bool help() const { return help_; }
    // The subcommand's name ("generate"), for messages.
    const std::string& command() const { return spec_.name; }
    bool has(const std::string& name) const;
    // Whether the subcommand has the option at all (has() of an undeclared one is a logic error).
    bool declares(const std::string& name) const;
    // The value of a non-repeatable option, or nullopt.
    std::optional<std::string> value(const std::string& name) const;
    // Every value of a repeatable option, in order.
    std::vector<std::string> values(const std::string& name) const;
    const std::vector<std::string>& positionals() const { return positionals_; }

    // Exactly one positional argument (e.g. MODEL), named `what` in the error.
    std::string single_positional(const std::string& what) const;
    // At most one of `names` was given; returns it or "".
    std::string exclusive(const std::vector<std::string>& names) const;

    // Typed readers: nullopt when the option is absent; UsageError when the text is not a
    // value of the type or lies outside [lo, hi] (lo/hi are the CLI's own limits; engine config
    // ranges are checked by the engine so that its messages come from one place). Integers are
    // always within int32.
    std::optional<int> get_int(const std::string& name, int64_t lo = INT32_MIN,
                               int64_t hi = INT32_MAX) const;
    std::optional<uint64_t> get_u64(const std::string& name) const;
    std::optional<float> get_float(const std::string& name) const;

    const OptionSpec& spec_of(const std::string& name) const;

private:
    const CommandSpec& spec_;
    bool help_ = false;
    std::map<std::string, std::vector<std::string>> values_;
    std::vector<std::string> positionals_;
};

// Value parsers usable on pieces of a value ("5:-1.5", "1,2,3"). `flag` and `expect` only
// shape the message: "--top-p: expected a number in (0, 1], got 'abc'".
int64_t parse_integer(const std::string& flag, const std::string& text, int64_t lo, int64_t hi,
                      const std::string& expect);
uint64_t parse_unsigned(const std::string& flag, const std::string& text,
                        const std::string& expect);
float parse_number(const std::string& flag, const std::string& text, const std::string& expect);
// "1,2,3" (spaces around items allowed) -> ids, each in [0, INT32_MAX].
std::vector<int32_t> parse_id_list(const std::string& flag, const std::string& text);

// The --help text of a subcommand.
std::string help_text(const CommandSpec& spec);

// Options every subcommand takes: --json, --backend, --threads, --help.
std::vector<OptionSpec> common_options();

}  // namespace tinyloop::cli
