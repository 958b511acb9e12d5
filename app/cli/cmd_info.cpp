// tinyloop info MODEL: what a .tinyloop file holds and how this machine would run it.
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "commands.h"
#include "common.h"

namespace tinyloop::cli {

CommandSpec info_spec() {
    CommandSpec s;
    s.name = "info";
    s.synopsis = "MODEL [--json] [--tensors] [--metadata | --no-metadata] [--backend B] [--threads N]";
    s.summary =
        "Loads MODEL and prints its hyperparameters, the dtypes of its tensors, its tokenizer,\n"
        "a short form of its metadata, file and weight sizes, parameter count, and the back end\n"
        "chosen (and why).";
    s.options = {
        {"--tensors", "", "list every tensor (name, dtype, shape, bytes) in the text output", "",
         false, "Info"},
        {"--metadata", "", "print the whole metadata object (training log included)", "", false,
         "Info"},
        {"--no-metadata", "", "leave the metadata out (text and --json)", "", false, "Info"},
    };
    for (auto& o : common_options()) s.options.push_back(o);
    s.notes =
        "--json prints one object: path, file_bytes, weight_bytes, parameter_count, backend,\n"
        "backend_note, threads, vram_bytes, hparams{...}, dtypes{dtype: {tensors, parameters,\n"
        "bytes}}, tensors[{name, dtype, shape, group_size, bytes}], tokenizer{type, pretokenizer,\n"
        "merges, vocab, special_tokens{text: id}, eos_id, bos_id, stop_ids}, metadata (the file's whole\n"
        "object; left out with --no-metadata).\n"
        "The text output's metadata is one line per top-level key: numbers and strings as they\n"
        "are (long strings cut at 100 characters), objects and lists by their size; --metadata\n"
        "prints the whole object instead.\n";
    return s;
}

namespace {

uint64_t elements(const TensorInfo& t) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d > 0 ? d : 0);
    return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

// One line per top-level key; objects and lists by their size.
std::string metadata_summary(const nlohmann::json& metadata) {
    std::ostringstream o;
    if (!metadata.is_object() || metadata.empty()) {
        o << "  " << (metadata.is_object() ? "(none)" : "(not a JSON object)") << "\n";
        return o.str();
    }
    size_t width = 0;
    for (const auto& [key, value] : metadata.items()) width = std::max(width, key.size());
    for (const auto& [key, value] : metadata.items()) {
        std::string shown;
        if (value.is_object()) {
            shown = "{" + plural(static_cast<long long>(value.size()), "key") + ": ";
            size_t listed = 0;
            for (const auto& [k, v] : value.items()) {
                if (listed++ == 4) {
                    shown += ", ...";
                    break;
                }
                shown += (listed > 1 ? ", " : "") + k;
            }
            shown += "}";
        } else if (value.is_array()) {
            shown = "[" + std::to_string(value.size()) + (value.size() == 1 ? " entry]" : " entries]");
        } else if (value.is_string()) {
            shown = display_text(value.get<std::string>());
            if (shown.size() > 100) shown = shown.substr(0, 97) + "...";
        } else {
            shown = value.dump();
        }
        o << "  " << key << std::string(width + 2 - key.size(), ' ') << shown << "\n";
    }
    o << "  (--metadata prints the whole object)\n";
    return o.str();
}

std::string token_name(const TokenizerSpec& tok, int32_t id) {
    if (id < 0) return "none";
    for (const auto& [text, sid] : tok.special_tokens)
        if (sid == id) return std::to_string(id) + " \"" + display_text(text) + "\"";
    return std::to_string(id);
}

struct DtypeSum {
    int tensors = 0;
    uint64_t params = 0, bytes = 0;
};

std::map<std::string, DtypeSum> dtype_sums(const ModelInfo& info) {
    std::map<std::string, DtypeSum> by_dtype;
    for (const auto& t : info.tensors) {
        auto& d = by_dtype[dtype_name(t.dtype)];
        d.tensors++;
        d.params += elements(t);
        d.bytes += t.bytes;
    }
    return by_dtype;
}

// --json without the metadata: sizes, back end, hyperparameters, dtypes, tensors, tokenizer.
nlohmann::json info_json(const ModelInfo& info, const std::string& path, size_t vram) {
    const HParams& hp = info.hparams;
    const std::map<std::string, DtypeSum> by_dtype = dtype_sums(info);
    nlohmann::json j;
    j["path"] = info.path.empty() ? path : info.path;
    j["file_bytes"] = info.file_bytes;
    j["weight_bytes"] = info.weight_bytes;
    j["parameter_count"] = info.parameter_count;
    j["backend"] = info.backend;
    j["backend_note"] = info.backend_note;
    j["threads"] = info.threads;
    j["vram_bytes"] = vram;
    j["hparams"] = hparams_json(hp);
    nlohmann::json dt = nlohmann::json::object();
    for (const auto& [name, d] : by_dtype)
        dt[name] = {{"tensors", d.tensors}, {"parameters", d.params}, {"bytes", d.bytes}};
    j["dtypes"] = dt;
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : info.tensors) {
        nlohmann::json tj = {{"name", t.name},
                             {"dtype", dtype_name(t.dtype)},
                             {"shape", t.shape},
                             {"bytes", t.bytes}};
        if (t.group_size > 0) tj["group_size"] = t.group_size;
        tensors.push_back(tj);
    }
    j["tensors"] = tensors;
    nlohmann::json specials = nlohmann::json::object();
    for (const auto& [text, id] : info.tokenizer.special_tokens) specials[text] = id;
    j["tokenizer"] = {
        {"type", info.tokenizer.type},
        {"pretokenizer", info.tokenizer.pretokenizer},
        {"merges", info.tokenizer.merges.size()},
        {"vocab", info.tokenizer_vocab},
        {"special_tokens", specials},
        {"eos_id", info.tokenizer.eos_id >= 0 ? nlohmann::json(info.tokenizer.eos_id)
                                              : nlohmann::json(nullptr)},
        {"bos_id", info.tokenizer.bos_id >= 0 ? nlohmann::json(info.tokenizer.bos_id)
                                              : nlohmann::json(nullptr)},
        {"stop_ids", info.tokenizer.stop_ids},
    };
    return j;
}

}  // namespace

int run_info(const Args& args) {
    const std::string path = args.single_positional("MODEL");
    const bool full_metadata = args.has("--metadata"), no_metadata = args.has("--no-metadata");
    if (full_metadata && no_metadata) throw UsageError("--metadata and --no-metadata cannot be used together");
    ModelHandle model = open_model(path, load_options(args));
    const ModelInfo info = model_info(model.get());
    const HParams& hp = info.hparams;
    const size_t vram = vram_usage_bytes(model.get());

    const std::map<std::string, DtypeSum> by_dtype = dtype_sums(info);

    nlohmann::json metadata;
    bool metadata_ok = true;
    try {
        metadata = nlohmann::json::parse(info.metadata_json.empty() ? "{}" : info.metadata_json);
    } catch (const std::exception&) {
        metadata_ok = false;
        metadata = info.metadata_json;
    }

    if (args.has("--json")) {
        nlohmann::json j = info_json(info, path, vram);
        if (!no_metadata) j["metadata"] = metadata;
        print_json(j);
        return 0;
    }

    std::ostringstream o;
    o << "model        " << (info.path.empty() ? path : info.path) << "\n";
    o << "file         " << human_bytes(info.file_bytes) << " (" << grouped(info.file_bytes)
      << " bytes)\n";
    o << "parameters   " << grouped(info.parameter_count) << "\n";
    o << "weights      " << human_bytes(info.weight_bytes) << " resident";
    if (vram) o << ", " << human_bytes(vram) << " on the device";
    o << "\n";
    o << "backend      " << info.backend;
    if (!info.backend_note.empty()) o << " (" << info.backend_note << ")";
    if (info.backend == "cpu" && info.threads > 0) o << ", " << plural(info.threads, "thread");
    o << "\n\nhyperparameters\n";
    // The struct's order, not the JSON object's alphabetical one.
    std::vector<std::pair<std::string, std::string>> rows = {
        {"vocab_size", std::to_string(hp.vocab_size)},
        {"d_model", std::to_string(hp.d_model)},
        {"n_heads", std::to_string(hp.n_heads)},
        {"n_kv_heads", std::to_string(hp.n_kv_heads)},
        {"head_dim", std::to_string(hp.head_dim)},
        {"d_ff", std::to_string(hp.d_ff)},
        {"n_pre_blocks", std::to_string(hp.n_pre_blocks)},
        {"n_loop_layers", std::to_string(hp.n_loop_layers)},
        {"default_loops", std::to_string(hp.default_loops)},
        {"max_loops", std::to_string(hp.max_loops)},
        {"max_seq_len", std::to_string(hp.max_seq_len)},
        {"rope_theta", nlohmann::json(f2d(hp.rope_theta)).dump()},
        {"norm_eps", nlohmann::json(f2d(hp.norm_eps)).dump()},
        {"tie_embeddings", hp.tie_embeddings ? "true" : "false"},
        {"loop_input", std::string(loop_input_name(hp.loop_input)) +
                           (hp.loop_input == LoopInput::Add ? " (input injection, file version 2)" : "")},
    };
    if (hparams_need_v3(hp)) {  // FORMAT.md §1b: shown for version-3 files only (older output unchanged)
        rows.push_back({"architecture", hp.architecture + " (file version 3)"});
        rows.push_back({"block", block_kind_name(hp.block)});
        rows.push_back({"qk_bias", hp.qk_bias ? "true" : "false"});
        rows.push_back({"embed_scale", nlohmann::json(f2d(hp.embed_scale)).dump()});
        rows.push_back({"pass_norm", hp.pass_norm ? "true" : "false"});
        rows.push_back({"n_coda_blocks", std::to_string(hp.n_coda_blocks)});
        rows.push_back({"state_init", hp.state_init.kind == StateInit::Kind::Zeros
                                          ? std::string("zeros")
                                          : "truncnormal std " + nlohmann::json(f2d(hp.state_init.std)).dump() +
                                                " scale " + nlohmann::json(f2d(hp.state_init.scale)).dump() +
                                                " seed " + std::to_string(hp.state_init.seed)});
        rows.push_back({"exit_gate", hp.exit_gate ? "true" : "false"});
    }
    for (const auto& [k, v] : rows) {
        std::string key = k;
        o << "  " << key << std::string(16 - key.size(), ' ') << v << "\n";
    }

    o << "\ndtypes\n";
    for (const auto& [name, d] : by_dtype) {
        char line[160];
        std::snprintf(line, sizeof(line), "  %-5s %4d tensors  %16s parameters  %s\n",
                      name.c_str(), d.tensors, grouped(d.params).c_str(),
                      human_bytes(d.bytes).c_str());
        o << line;
    }
    if (args.has("--tensors")) {
        o << "\ntensors\n";
        for (const auto& t : info.tensors) {
            char line[300];
            std::string dt = dtype_name(t.dtype);
            if (t.group_size > 0) dt += "/g" + std::to_string(t.group_size);
            std::snprintf(line, sizeof(line), "  %-20s %-8s %-14s %s\n", t.name.c_str(),
                          dt.c_str(), shape_text(t.shape).c_str(), human_bytes(t.bytes).c_str());
            o << line;
        }
    }

    const TokenizerSpec& tok = info.tokenizer;
    o << "\ntokenizer\n";
    o << "  type          " << tok.type << " (" << tok.pretokenizer << ")\n";
    o << "  merges        " << tok.merges.size() << "\n";
    o << "  ids           " << info.tokenizer_vocab << " (model vocab " << hp.vocab_size << ")\n";
    o << "  specials      ";
    if (tok.special_tokens.empty()) o << "none";
    for (size_t i = 0; i < tok.special_tokens.size(); ++i)
        o << (i ? ", " : "") << "\"" << display_text(tok.special_tokens[i].first)
          << "\"=" << tok.special_tokens[i].second;
    o << "\n";
    o << "  eos           " << token_name(tok, tok.eos_id) << "\n";
    if (!tok.stop_ids.empty()) {
        o << "  stop ids      ";
        for (size_t i = 0; i < tok.stop_ids.size(); ++i) o << (i ? ", " : "") << token_name(tok, tok.stop_ids[i]);
        o << "\n";
    }
    o << "  bos           " << token_name(tok, tok.bos_id) << "\n";

    if (!no_metadata) {
        o << "\nmetadata\n";
        if (full_metadata || !metadata_ok) {
            std::string meta = metadata_ok ? metadata.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                                           : display_text(info.metadata_json);
            std::istringstream lines(meta);
            for (std::string line; std::getline(lines, line);) o << "  " << line << "\n";
        } else {
            o << metadata_summary(metadata);
        }
    }

    std::string s = o.str();
    std::fwrite(s.data(), 1, s.size(), stdout);
    return 0;
}

}  // namespace tinyloop::cli
