#include "common.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace tinyloop::cli {

LoadOptions load_options(const Args& args) {
    LoadOptions opt;
    if (auto b = args.value("--backend")) {
        if (*b == "cpu")
            opt.backend = Backend::Cpu;
        else if (*b == "cuda")
            opt.backend = Backend::Cuda;
        else if (*b == "auto")
            opt.backend = Backend::Auto;
        else
            throw UsageError("--backend: expected one of cpu, cuda, auto, got '" + *b + "'");
    }
    if (auto t = args.get_int("--threads", 1, 256)) opt.threads = *t;
    return opt;
}

std::optional<int> loops_flag(const Args& args) {
    return args.get_int("--loops", 1, INT32_MAX);
}

void check_depths(const std::string& flag, const std::vector<int>& depths, const HParams& hp) {
    for (int d : depths)
        if (d < 1 || d > hp.max_loops)
            throw UsageError(flag + ": depth " + std::to_string(d) + " is outside [1, " +
                             std::to_string(hp.max_loops) + "] (1..max_loops of this model)");
}

namespace {

// Refuses what the engine would only describe less directly: a missing path, a directory.
void check_readable(const std::string& what, const std::string& path) {
    std::error_code ec;
    auto st = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(st))
        throw UsageError("cannot open " + what + " '" + path + "': " +
                         (ec ? ec.message() : std::string(std::strerror(ENOENT))));
    if (std::filesystem::is_directory(st))
        throw UsageError("cannot open " + what + " '" + path + "': it is a directory");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError("cannot open " + what + " '" + path + "': " + std::strerror(errno));
}

}  // namespace

void check_file_readable(const std::string& flag, const std::string& path) {
    try {
        check_readable("file", path);
    } catch (const UsageError& e) {
        throw UsageError(flag + ": " + e.what());
    }
}

std::string imported_folder(const std::string& path) {
    // A Hugging Face checkpoint folder: imported once into the import cache (the importer's
    // defaults: bf16, exact to a bf16 checkpoint), then read from there; `tinyloop import`
    // chooses other dtypes.
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::path(path) / "config.json", ec))
        throw UsageError("cannot open model '" + path +
                         "': it is a directory without config.json (a .tinyloop file or a Hugging Face checkpoint folder)");
    ImportOptions io;
    const std::string cached = import_cache_path(path, io);
    if (std::filesystem::is_regular_file(cached, ec)) {
        std::fprintf(stderr, "%s was imported before: reading %s\n", path.c_str(), cached.c_str());
        return cached;
    }
    std::fprintf(stderr, "importing %s into %s (once; later opens read the cache)\n", path.c_str(), cached.c_str());
    int last_pct = -1;
    io.progress = [&](const ImportProgress& p) {
        const int pct = p.bytes_total ? static_cast<int>(100 * p.bytes_done / p.bytes_total) : 100;
        if (pct / 10 != last_pct / 10 || p.index == p.count) {
            std::fprintf(stderr, "  %d/%d tensors, %d%%\n", p.index, p.count, pct);
            last_pct = pct;
        }
    };
    const ImportReport rep = import_hf_cached(path, io);
    std::fprintf(stderr, "imported %s (%d tensors, %llu bytes)\n", rep.source_architecture.c_str(), rep.tensors,
                 static_cast<unsigned long long>(rep.file_bytes));
    return rep.path;
}

ModelHandle open_model(const std::string& path, const LoadOptions& options) {
    std::error_code dir_ec;
    if (std::filesystem::is_directory(path, dir_ec)) return open_model(imported_folder(path), options);
    check_readable("model", path);
    try {
        return load_model_handle(path, options);
    } catch (const Error& e) {
        std::string msg = e.what();
        if (msg.find(path) == std::string::npos) msg = "model '" + path + "': " + msg;
        throw Error(e.code(), msg);
    }
}

std::pair<std::string, std::string> in_out_positionals(const Args& args, const std::string& in_name) {
    const auto& pos = args.positionals();
    if (pos.size() < 2)
        throw UsageError(std::string("missing ") + (pos.empty() ? in_name + " and OUT" : "OUT") + "; see 'tinyloop " +
                         args.command() + " --help'");
    if (pos.size() > 2) throw UsageError("unexpected argument '" + pos[2] + "' (takes " + in_name + " and OUT)");
    if (pos[0].empty() || pos[1].empty()) throw UsageError(in_name + " and OUT must be non-empty paths");
    return {pos[0], pos[1]};
}

void check_output_path(const std::string& in, const std::string& out) {
    std::error_code ec;
    if (!std::filesystem::exists(out, ec)) return;
    if (std::filesystem::equivalent(in, out, ec))
        throw UsageError("OUT '" + out + "' is the input file; write to another path");
    if (std::filesystem::is_directory(out, ec)) throw UsageError("OUT '" + out + "' is a directory");
}

std::string read_text_file(const std::string& flag, const std::string& path) {
    // A prompt or a text to score; the cap turns /dev/zero or a mistaken multi-GiB file into
    // a message instead of an out-of-memory kill.
    constexpr size_t kMaxBytes = size_t(64) << 20;
    std::FILE* f = nullptr;
    if (path == "-") {
        f = stdin;
    } else {
        try {
            check_readable("file", path);
        } catch (const UsageError& e) {
            throw UsageError(flag + ": " + e.what());
        }
        f = std::fopen(path.c_str(), "rb");
        if (!f) throw UsageError(flag + ": cannot open '" + path + "': " + std::strerror(errno));
    }
    std::string text;
    char buf[1 << 16];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
        text.append(buf, n);
        if (text.size() > kMaxBytes) break;
    }
    const bool failed = std::ferror(f) != 0;
    if (f != stdin) std::fclose(f);
    const std::string name = path == "-" ? "standard input" : "'" + path + "'";
    if (failed) throw UsageError(flag + ": cannot read " + name + ": read error");
    if (text.size() > kMaxBytes)
        throw UsageError(flag + ": " + name + " is larger than 64 MiB");
    return text;
}

std::string dump_json(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void print_json(const nlohmann::json& j) {
    std::string s = dump_json(j);
    s += '\n';
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
}

std::string display_text(const std::string& bytes) {
    std::string clean = sanitize_utf8(bytes);
    std::string out;
    static const char* hex = "0123456789abcdef";
    for (unsigned char c : clean) {
        switch (c) {
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            case '\\': out += "\\\\"; break;
            case '"': out += "\\\""; break;
            default:
                if (c < 0x20 || c == 0x7f) {
                    out += "\\x";
                    out += hex[c >> 4];
                    out += hex[c & 15];
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    return out;
}

std::string with_flag_name(const std::string& message,
                           const std::vector<std::pair<std::string, std::string>>& fields) {
    auto word_char = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_';
    };
    size_t best_pos = std::string::npos;
    const std::pair<std::string, std::string>* best = nullptr;
    for (const auto& f : fields) {
        for (size_t pos = message.find(f.first); pos != std::string::npos;
             pos = message.find(f.first, pos + 1)) {
            bool left = pos == 0 || !word_char(message[pos - 1]);
            size_t end = pos + f.first.size();
            bool right = end >= message.size() || !word_char(message[end]);
            if (left && right) {
                if (pos < best_pos) best_pos = pos, best = &f;
                break;
            }
        }
    }
    if (!best) return message;
    if (message.rfind(best->second, 0) == 0) return message;
    // "top_p: 1.5 is outside (0, 1]" -> "--top-p (top_p): 1.5 is outside (0, 1]";
    // "logit_bias[0]: token id ..." -> "--logit-bias (logit_bias[0]): token id ...".
    if (best_pos == 0) {
        size_t colon = message.find(": ");
        size_t after = best->first.size();
        if (colon != std::string::npos &&
            (colon == after || (after < message.size() && message[after] == '[')))
            return best->second + " (" + message.substr(0, colon) + ")" + message.substr(colon);
    }
    return best->second + " (" + best->first + "): " + message;
}

TokenInput read_token_input(const Args& args) {
    TokenInput in;
    in.command = args.command();
    in.source = args.exclusive({"--text", "--file", "--ids"});
    if (in.source.empty())
        throw UsageError("missing input: give --text TEXT, --file F or --ids 1,2,3");
    in.parse_special = args.has("--parse-special");
    if (in.source == "--ids" && in.parse_special)
        throw UsageError("--parse-special applies to text, not to --ids");
    if (in.source == "--text") in.text = *args.value("--text");
    if (in.source == "--file") in.text = read_text_file("--file", *args.value("--file"));
    if (in.source == "--ids") in.ids = parse_id_list("--ids", *args.value("--ids"));
    return in;
}

std::vector<int32_t> input_tokens(const TokenInput& in, Model* model, size_t min_tokens) {
    const HParams& hp = model_hparams(model);
    std::vector<int32_t> ids = in.ids;
    if (in.source == "--ids") {
        try {
            check_token_ids(ids.data(), ids.size(), hp.vocab_size, "--ids");
        } catch (const Error& e) {
            throw UsageError(e.what());
        }
    } else {
        if (!in.parse_special) hint_special_tokens("tinyloop " + in.command, in.source, model, in.text);
        ids = tokenize(model, in.text, in.parse_special);
    }
    if (ids.size() < min_tokens)
        throw UsageError(in.source + ": need at least " + plural(static_cast<long long>(min_tokens), "token") +
                         ", got " + std::to_string(ids.size()));
    if (ids.size() > static_cast<size_t>(hp.max_seq_len))
        throw UsageError(in.source + ": " + std::to_string(ids.size()) +
                         " tokens is more than the model's max_seq_len " +
                         std::to_string(hp.max_seq_len));
    return ids;
}

void hint_special_tokens(const std::string& prefix, const std::string& flag, const Model* model,
                         const std::string& text) {
    const TokenizerSpec tok = model_info(model).tokenizer;
    for (const auto& special : tok.special_tokens) {
        if (special.first.empty() || text.find(special.first) == std::string::npos) continue;
        std::fflush(stdout);
        std::fprintf(stderr,
                     "%s: note: %s contains \"%s\" as plain text (ordinary tokens); add "
                     "--parse-special to read it as the special token %d\n",
                     prefix.c_str(), flag.c_str(), display_text(special.first).c_str(),
                     special.second);
        return;
    }
}

std::string plural(long long n, const std::string& noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string token_text(const Model* model, int32_t id) {
    try {
        return token_bytes(model, id);
    } catch (const Error&) {
        return "";
    }
}

std::vector<std::string> split_list(const std::string& flag, const std::string& text) {
    std::vector<std::string> items;
    std::string item;
    std::istringstream in(text);
    while (std::getline(in, item, ',')) {
        size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
        if (b == std::string::npos)
            throw UsageError(flag + ": empty item in '" + text + "' (expected a list like a,b,c)");
        items.push_back(item.substr(b, e - b + 1));
    }
    if (items.empty() || text.back() == ',')
        throw UsageError(flag + ": expected a comma-separated list, got '" + text + "'");
    return items;
}

nlohmann::json hparams_json(const HParams& hp) {
    nlohmann::json j = {
        {"vocab_size", hp.vocab_size},       {"d_model", hp.d_model},
        {"n_heads", hp.n_heads},             {"n_kv_heads", hp.n_kv_heads},
        {"head_dim", hp.head_dim},           {"d_ff", hp.d_ff},
        {"n_pre_blocks", hp.n_pre_blocks},   {"n_loop_layers", hp.n_loop_layers},
        {"default_loops", hp.default_loops}, {"max_loops", hp.max_loops},
        {"max_seq_len", hp.max_seq_len},     {"rope_theta", f2d(hp.rope_theta)},
        {"norm_eps", f2d(hp.norm_eps)},      {"tie_embeddings", hp.tie_embeddings},
        {"loop_input", loop_input_name(hp.loop_input)},
    };
    if (hparams_need_v3(hp)) {  // FORMAT.md §1b, as the file writes them (older JSON unchanged)
        j["architecture"] = hp.architecture;
        j["block"] = block_kind_name(hp.block);
        j["qk_bias"] = hp.qk_bias;
        j["embed_scale"] = f2d(hp.embed_scale);
        j["pass_norm"] = hp.pass_norm;
        j["n_coda_blocks"] = hp.n_coda_blocks;
        j["state_init"] = hp.state_init.kind == StateInit::Kind::Zeros
                              ? nlohmann::json{{"kind", "zeros"}}
                              : nlohmann::json{{"kind", "truncnormal"},
                                               {"std", f2d(hp.state_init.std)},
                                               {"scale", f2d(hp.state_init.scale)},
                                               {"seed", hp.state_init.seed}};
        j["exit_gate"] = hp.exit_gate;
    }
    return j;
}

std::string human_bytes(uint64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
    char buf[64];
    if (u == 0)
        std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
    else
        std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
    return buf;
}

std::string grouped(uint64_t n) {
    const std::string digits = std::to_string(n);
    std::string s;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
        s += digits[i];
    }
    return s;
}

// ---- the model's recommendation as the default of early exit and speculation ----

// The criteria's names on the command line are the codec's (parse_criterion: the short ones
// l2, margin, kl, entropy, argmax, gate and the full names), with '-' for '_' (gate-select).
std::string criterion_flag_name(EarlyExitCriterion c) {
    std::string name = criterion_short_name(c);
    std::replace(name.begin(), name.end(), '_', '-');
    return name;
}

bool read_criterion_flag(const std::string& flag, const std::string& value, EarlyExitCriterion* out) {
    if (value == "model") return false;
    std::string name = value;
    std::replace(name.begin(), name.end(), '-', '_');
    if (parse_criterion(name, out)) return true;
    throw UsageError(flag + ": expected one of l2, margin, kl, entropy, argmax, gate, gate-select, reverse-kl, minp-kl, "
                            "model, got '" + value + "'");
}

GenerateConfig cli_early_exit(const Model* model, const Args& args, const GenerateConfig& cfg, std::string* used) {
    std::vector<std::string> keys;
    EarlyExitCriterion c = cfg.early_exit.criterion;
    if (auto v = args.value("--early-exit"); v && read_criterion_flag("--early-exit", *v, &c))
        keys.push_back("early_exit_criterion");
    const std::pair<const char*, const char*> flags[] = {{"--early-exit-threshold", "early_exit_threshold"},
                                                         {"--early-exit-patience", "early_exit_patience"},
                                                         {"--early-exit-min-l", "early_exit_min_L"},
                                                         {"--early-exit-peek-every", "early_exit_peek_every"}};
    for (const auto& [flag, key] : flags)
        if (args.declares(flag) && args.has(flag)) keys.push_back(key);
    std::vector<std::pair<std::string, std::string>> source;
    GenerateConfig out = resolve_early_exit(model, cfg, keys, &source);
    if (used) {
        bool model_used = false, builtin_used = false;
        for (const auto& [key, from] : source) {
            model_used |= from == "model";
            builtin_used |= from == "built-in";
        }
        char line[200];
        std::snprintf(line, sizeof line, "early exit: %s, threshold %g, patience %d, first probe at depth %d%s",
                      criterion_name(out.early_exit.criterion), out.early_exit.threshold, out.early_exit.patience,
                      out.early_exit.min_L,
                      !model_used ? (builtin_used && keys.empty() ? " (built-in default)" : "")
                      : keys.empty() ? " (recommended by the model)"
                                     : " (the fields not given: recommended by the model)");
        *used = line;
    }
    return out;
}

ResolvedRun resolve_cli_run(const Model* model, const RunSpec& spec, const SpeculationFlagsGiven& given) {
    std::vector<std::string> keys;
    for (const ConfigField& f : config_fields())
        if (std::string(f.key) != "loops" || spec.config.loops > 0) keys.push_back(f.key);
    if (given.verify_loops) keys.push_back("speculation.verify_loops");
    if (given.draft_loops) keys.push_back("speculation.draft_loops");
    if (given.draft_ahead) keys.push_back("speculation.draft_ahead");
    if (given.branches) keys.push_back("speculation.branches");
    try {
        return resolve_run(model, spec, keys);
    } catch (const Error& e) {
        // The resolver names the knob ("branches: 9 is outside [0, 8] ..."); on the command line
        // the user typed a flag, so the message names it too.
        const std::string msg = e.what();
        static const std::pair<const char*, const char*> flags[] = {{"branches:", "--branches"},
                                                                   {"draft_ahead:", "--draft-ahead"},
                                                                   {"draft_loops:", "--draft-loops"},
                                                                   {"verify_loops:", "--verify-loops"}};
        for (const auto& [knob, flag] : flags)
            if (e.code() == ErrorCode::InvalidArgument && msg.rfind(knob, 0) == 0)
                throw UsageError(std::string(flag) + ": " + msg);
        throw;
    }
}

std::string speculation_used_line(const ResolvedRun& run) {
    const SpeculationPolicy& k = run.spec.speculation;
    bool from_model = false;
    for (const auto& [key, from] : run.source) from_model |= key.rfind("speculation.", 0) == 0 && from == "model";
    std::string s = "speculation: draft " + std::to_string(k.draft_loops) + " -> verify " +
                    std::to_string(k.verify_loops);
    if (run.spec.mode == DecodeMode::Pipelined) s += ", pipelined";
    else s += ", draft_ahead " + std::to_string(k.draft_ahead);
    if (k.kind == SpeculationKind::Tree) s += ", branches " + std::to_string(k.branches);
    return s + (from_model ? " (recommended by the model)" : "");
}

}  // namespace tinyloop::cli
