#include "args.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <sstream>
#include <system_error>

namespace tinyloop::cli {

namespace {

std::string quoted(const std::string& text) {
    // Keep messages on one line and bounded whatever the user typed.
    std::string out;
    for (unsigned char c : text.substr(0, 80)) {
        if (c < 0x20 || c == 0x7f) {
            static const char* hex = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    if (text.size() > 80) out += "...";
    return "'" + out + "'";
}

std::string trim(const std::string& s) {
    size_t b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    size_t e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
}

// Levenshtein distance, for "did you mean" on unknown options.
size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t cur = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] != b[j - 1])});
            prev = cur;
        }
    }
    return row[b.size()];
}

}  // namespace

std::vector<OptionSpec> common_options() {
    return {
        {"--json", "", "print one JSON object on stdout instead of text", "", false, "Output"},
        {"--backend", "B", "cpu, cuda or auto (default auto: CUDA when a usable device exists)",
         "one of cpu, cuda, auto", false, "Output"},
        {"--threads", "N", "CPU worker threads, 1..256 (default: all cores)",
         "an integer in [1, 256]", false, "Output"},
        {"--help", "", "show this help", "", false, "Output"},
    };
}

Args::Args(const CommandSpec& spec, int argc, char** argv, int first) : spec_(spec) {
    auto find = [&](const std::string& name) -> const OptionSpec* {
        for (const auto& o : spec_.options)
            if (o.name == name) return &o;
        return nullptr;
    };
    auto known_option = [&](const std::string& arg) {
        if (arg == "-h") return true;
        if (arg.rfind("--", 0) != 0) return false;
        return find(arg.substr(0, arg.find('='))) != nullptr;
    };

    // The first mistake is kept, not thrown at once, so that --help anywhere still works.
    std::optional<std::string> error;
    auto fail = [&](const std::string& message) {
        if (!error) error = message;
    };

    bool options_done = false;
    for (int i = first; i < argc; ++i) {
        const std::string arg = argv[i] ? argv[i] : "";
        if (options_done) {
            positionals_.push_back(arg);
            continue;
        }
        if (arg == "--") {
            options_done = true;
            continue;
        }
        if (arg == "-h" || arg == "--help") {
            help_ = true;
            continue;
        }
        if (arg.size() > 1 && arg[0] == '-') {
            if (arg[1] != '-') {
                fail("unknown option " + quoted(arg) + " (options start with --)");
                continue;
            }
            size_t eq = arg.find('=');
            std::string name = arg.substr(0, eq);
            const OptionSpec* o = find(name);
            if (!o) {
                std::string best;
                size_t best_d = 4;
                for (const auto& c : spec_.options) {
                    size_t d = edit_distance(name, c.name);
                    if (d < best_d) best_d = d, best = c.name;
                }
                fail("unknown option " + quoted(name) +
                     (best.empty() ? "" : " (did you mean " + best + "?)") + "; see 'tinyloop " +
                     spec_.name + " --help'");
                continue;
            }
            std::string value;
            if (o->value_name.empty()) {
                if (eq != std::string::npos) {
                    fail(name + ": takes no value, got " + quoted(arg.substr(eq + 1)));
                    continue;
                }
            } else if (eq != std::string::npos) {
                value = arg.substr(eq + 1);
            } else if (i + 1 >= argc || !argv[i + 1]) {
                fail(name + ": missing value (expected " + o->value_name + ")");
                continue;
            } else if (known_option(argv[i + 1])) {
                // "--max-tokens --loops 3": the value was forgotten. A value that really starts
                // with an option's name can be given as --prompt=--json.
                fail(name + ": missing value (expected " + o->value_name + ", got option " +
                     quoted(argv[i + 1]) + ")");
                continue;
            } else {
                value = argv[++i];
            }
            auto& slot = values_[name];
            if (!slot.empty() && !o->repeatable) {
                fail(name + ": given more than once");
                continue;
            }
            slot.push_back(value);
            continue;
        }
        positionals_.push_back(arg);
    }
    if (error && !help_) throw UsageError(*error);
}

const OptionSpec& Args::spec_of(const std::string& name) const {
    for (const auto& o : spec_.options)
        if (o.name == name) return o;
    throw std::logic_error("tinyloop cli: option " + name + " not declared for " + spec_.name);
}

bool Args::declares(const std::string& name) const {
    for (const auto& o : spec_.options)
        if (o.name == name) return true;
    return false;
}

bool Args::has(const std::string& name) const {
    spec_of(name);
    return values_.count(name) != 0;
}

std::optional<std::string> Args::value(const std::string& name) const {
    spec_of(name);
    auto it = values_.find(name);
    if (it == values_.end() || it->second.empty()) return std::nullopt;
    return it->second.back();
}

std::vector<std::string> Args::values(const std::string& name) const {
    spec_of(name);
    auto it = values_.find(name);
    return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::string Args::single_positional(const std::string& what) const {
    if (positionals_.empty()) throw UsageError("missing " + what + "; see 'tinyloop " + spec_.name + " --help'");
    if (positionals_.size() > 1)
        throw UsageError("unexpected argument " + quoted(positionals_[1]) + " (only one " + what +
                         " is taken)");
    if (positionals_[0].empty()) throw UsageError(what + " is an empty string");
    return positionals_[0];
}

std::string Args::exclusive(const std::vector<std::string>& names) const {
    std::string given;
    for (const auto& n : names) {
        if (!has(n)) continue;
        if (!given.empty()) throw UsageError(given + " and " + n + " cannot be used together");
        given = n;
    }
    return given;
}

std::optional<int> Args::get_int(const std::string& name, int64_t lo, int64_t hi) const {
    auto v = value(name);
    if (!v) return std::nullopt;
    return static_cast<int>(parse_integer(name, *v, lo, hi, spec_of(name).expect));
}

std::optional<uint64_t> Args::get_u64(const std::string& name) const {
    auto v = value(name);
    if (!v) return std::nullopt;
    return parse_unsigned(name, *v, spec_of(name).expect);
}

std::optional<float> Args::get_float(const std::string& name) const {
    auto v = value(name);
    if (!v) return std::nullopt;
    return parse_number(name, *v, spec_of(name).expect);
}

int64_t parse_integer(const std::string& flag, const std::string& text, int64_t lo, int64_t hi,
                      const std::string& expect) {
    const std::string what = !expect.empty() ? expect
                                             : "an integer in [" + std::to_string(lo) + ", " +
                                                   std::to_string(hi) + "]";
    std::string t = text;
    if (t.size() > 1 && t[0] == '+' && t[1] != '-') t.erase(0, 1);
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec == std::errc::invalid_argument || ptr != t.data() + t.size())
        throw UsageError(flag + ": expected " + what + ", got " + quoted(text));
    if (ec == std::errc::result_out_of_range || v < INT32_MIN || v > INT32_MAX)
        throw UsageError(flag + ": expected " + what + ", got " + quoted(text) + " (out of range)");
    if (v < lo || v > hi) throw UsageError(flag + ": expected " + what + ", got " + quoted(text));
    return v;
}

uint64_t parse_unsigned(const std::string& flag, const std::string& text,
                        const std::string& expect) {
    const std::string what = expect.empty() ? "an integer in [0, 2^64-1]" : expect;
    std::string t = text;
    if (t.size() > 1 && t[0] == '+' && t[1] != '-') t.erase(0, 1);
    uint64_t v = 0;
    auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || ptr != t.data() + t.size())
        throw UsageError(flag + ": expected " + what + ", got " + quoted(text));
    return v;
}

float parse_number(const std::string& flag, const std::string& text, const std::string& expect) {
    const std::string what = expect.empty() ? "a number" : expect;
    std::string t = text;
    if (t.size() > 1 && t[0] == '+' && t[1] != '-') t.erase(0, 1);
    float v = 0;
    auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec == std::errc::invalid_argument || ptr != t.data() + t.size())
        throw UsageError(flag + ": expected " + what + ", got " + quoted(text));
    if (ec == std::errc::result_out_of_range)
        throw UsageError(flag + ": expected " + what + ", got " + quoted(text) +
                         " (out of float range)");
    if (!std::isfinite(v))
        throw UsageError(flag + ": expected " + what + ", got " + quoted(text) + " (not finite)");
    return v;
}

std::vector<int32_t> parse_id_list(const std::string& flag, const std::string& text) {
    std::vector<int32_t> ids;
    std::string item;
    std::istringstream in(text);
    const std::string expect = "a comma-separated list of token ids like 1,2,3";
    if (trim(text).empty()) throw UsageError(flag + ": expected " + expect + ", got " + quoted(text));
    while (std::getline(in, item, ',')) {
        std::string t = trim(item);
        if (t.empty())
            throw UsageError(flag + ": expected " + expect + ", got " + quoted(text) +
                             " (empty item)");
        ids.push_back(static_cast<int32_t>(
            parse_integer(flag, t, 0, INT32_MAX, "a token id (an integer >= 0)")));
    }
    if (!text.empty() && text.back() == ',')
        throw UsageError(flag + ": expected " + expect + ", got " + quoted(text) +
                         " (trailing comma)");
    return ids;
}

std::string help_text(const CommandSpec& spec) {
    std::ostringstream out;
    out << "usage: tinyloop " << spec.name << " " << spec.synopsis << "\n\n" << spec.summary << "\n";
    std::string group = "\x01";
    for (const auto& o : spec.options) {
        if (o.group != group) {
            group = o.group;
            out << "\n" << (group.empty() ? "Options" : group) << ":\n";
        }
        std::string left = "  " + o.name + (o.value_name.empty() ? "" : " " + o.value_name);
        if (o.repeatable) left += " ...";
        out << left;
        if (left.size() >= 30)
            out << "\n" << std::string(30, ' ');
        else
            out << std::string(30 - left.size(), ' ');
        out << o.help << "\n";
    }
    if (!spec.notes.empty()) out << "\n" << spec.notes;
    return out.str();
}

}  // namespace tinyloop::cli
