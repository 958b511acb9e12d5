// tinyloop::import_hf_checkpoint (tinyloop/import.h): plan, then stream. Every offset is computed
// and the header written first; then each tensor is converted from its memory-mapped source,
// encoded, written and its source pages released, so at most one tensor is held in f32.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <thread>
#include <nlohmann/json.hpp>

#include "import/hf_plan.h"
#include "import/hf_tokenizer.h"
#include "import/safetensors.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/quant.h"

namespace tinyloop {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr uint64_t kAlign = 64;
constexpr uint64_t kMaxSideFile = uint64_t{64} << 20;  // config.json, generation_config.json, tokenizer_config.json

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The stored encodings an import writes (FORMAT.md §2; bf16 from file version 3).
enum class OutType { F32, F16, BF16, Q8, Q4 };

OutType parse_out_type(const std::string& s) {
    if (s == "f32") return OutType::F32;
    if (s == "f16") return OutType::F16;
    if (s == "bf16") return OutType::BF16;
    if (s == "q8") return OutType::Q8;
    if (s == "q4") return OutType::Q4;
    throw Error(ErrorCode::InvalidArgument, "dtype: \"" + s + "\", allowed bf16, f32, f16, q8, q4");
}
const char* out_type_name(OutType t) {
    switch (t) {
        case OutType::F32: return "f32";
        case OutType::F16: return "f16";
        case OutType::BF16: return "bf16";
        case OutType::Q8: return "q8";
        case OutType::Q4: return "q4";
    }
    return "?";
}
bool quantized(OutType t) { return t == OutType::Q8 || t == OutType::Q4; }
int out_bits(OutType t) {
    switch (t) {
        case OutType::F32: return 32;
        case OutType::F16:
        case OutType::BF16: return 16;
        case OutType::Q8: return 8;
        case OutType::Q4: return 4;
    }
    return 0;
}

json read_json_file(const fs::path& p, bool required) {
    if (!fs::exists(p)) {
        if (required) throw Error(ErrorCode::Io, p.string() + ": missing (a Hugging Face folder holds it)");
        return json();
    }
    MappedFile f(p.string());
    if (f.size() > kMaxSideFile)
        throw Error(ErrorCode::BadFile, p.string() + ": " + std::to_string(f.size()) + " bytes, allowed at most 64 MiB");
    const size_t depth = json_nesting_depth(f.data(), f.size());
    if (depth > 64)
        throw Error(ErrorCode::BadFile, p.string() + ": JSON nested " + std::to_string(depth) +
                                            " levels deep, allowed at most 64");
    try {
        return json::parse(f.data(), f.data() + f.size());
    } catch (const json::exception& e) {
        throw Error(ErrorCode::BadFile, p.string() + ": invalid JSON: " + e.what());
    }
}

struct Placed {
    const PlanTensor* t = nullptr;
    OutType type = OutType::F32;
    int64_t rows = 1, cols = 1;
    uint64_t offset = 0, code_bytes = 0, scales_offset = 0, zeros_offset = 0, sz_bytes = 0;
};

class Out {
public:
    Out(const std::string& tmp, const std::string& label) : label_(label) {
        f_ = std::fopen(tmp.c_str(), "wb");
        if (!f_) throw Error(ErrorCode::Io, label + ": cannot write: " + std::strerror(errno));
    }
    ~Out() {
        if (f_) std::fclose(f_);
    }
    void write(const void* p, size_t n) {
        if (n && std::fwrite(p, 1, n, f_) != n) throw Error(ErrorCode::Io, label_ + ": cannot write: " + std::strerror(errno));
        pos_ += n;
    }
    void pad_to(uint64_t target) {
        static const char zeros[kAlign] = {};
        while (pos_ < target) write(zeros, static_cast<size_t>(std::min<uint64_t>(kAlign, target - pos_)));
    }
    void close() {
        const int rc = std::fclose(f_);
        f_ = nullptr;
        if (rc != 0) throw Error(ErrorCode::Io, label_ + ": cannot write: " + std::strerror(errno));
    }
    uint64_t pos() const { return pos_; }

private:
    std::FILE* f_ = nullptr;
    std::string label_;
    uint64_t pos_ = 0;
};

// metadata: source (format, architecture, config as read, what was acknowledged and why),
// chat_template from tokenizer_config.json, generation from generation_config.json.
ojson metadata_json(const ImportPlan& plan, const json& config, const fs::path& dir, const std::string& chat_template,
                    const json& gen, OutType type, int group_size) {
    ojson m;
    m["source"] = {{"format", "hf"},
                   {"architecture", plan.source_architecture},
                   {"folder", dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string()},
                   {"config", ojson::parse(config.dump())},
                   {"fields_without_effect", plan.notes}};
    if (!chat_template.empty()) m["chat_template"] = chat_template;
    // The strings transformers' apply_chat_template passes to the template (special_tokens_map):
    // a template writes {{ bos_token }} and the server renders it with these.
    const fs::path tok_cfg_path = dir / "tokenizer_config.json";
    const json tok_cfg = read_json_file(tok_cfg_path, false);
    if (tok_cfg.is_object()) {
        ojson specials = ojson::object();
        for (const char* k : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
            const auto it = tok_cfg.find(k);
            if (it == tok_cfg.end() || it->is_null()) continue;
            const json& v = it->is_object() ? it->value("content", json()) : *it;
            if (!v.is_string())
                throw Error(ErrorCode::BadFile, tok_cfg_path.string() + ": " + k + ": " + v.dump().substr(0, 40) +
                                                    ", allowed a string or {\"content\": string}");
            specials[k] = v.get<std::string>();
        }
        if (!specials.empty()) m["special_tokens"] = std::move(specials);
    }
    if (!gen.is_null()) m["generation"] = ojson::parse(gen.dump());
    m["import"] = {{"dtype", out_type_name(type)}, {"group_size", quantized(type) ? group_size : 0}};
    return m;
}

// The ids that end generation, as transformers' generate() takes them: generation_config.json's
// eos_token_id when that file has the key, else config.json's (GenerationConfig.from_model_config);
// an int, a list of ints or null. Each is checked against vocab_size here so the error names the
// file that holds it; the tokenizer then checks them against its own ids.
std::vector<int32_t> stop_ids_of(const json& gen, const fs::path& gen_path, const json& config,
                                 const fs::path& config_path, int vocab_size) {
    const bool from_gen = gen.is_object() && gen.contains("eos_token_id");
    const json& src = from_gen ? gen : config;
    const std::string file = (from_gen ? gen_path : config_path).string();
    const auto it = src.find("eos_token_id");
    if (it == src.end() || it->is_null()) return {};
    const std::string range = "allowed an id 0 .. " + std::to_string(vocab_size - 1) + " (config.json vocab_size " +
                              std::to_string(vocab_size) + ")";
    auto id = [&](const json& v, const std::string& field) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab_size)
            throw Error(ErrorCode::BadFile, file + ": " + field + ": " + v.dump().substr(0, 40) + ", " + range);
        return static_cast<int32_t>(v.get<int64_t>());
    };
    if (!it->is_array()) return {id(*it, "eos_token_id")};
    if (it->size() > 64)
        throw Error(ErrorCode::BadFile, file + ": eos_token_id: " + std::to_string(it->size()) + " ids, allowed at most 64");
    std::vector<int32_t> ids;
    for (size_t k = 0; k < it->size(); ++k) {
        const int32_t v = id((*it)[k], "eos_token_id[" + std::to_string(k) + "]");
        if (std::find(ids.begin(), ids.end(), v) == ids.end()) ids.push_back(v);  // transformers keeps repeats harmlessly
    }
    return ids;
}

}  // namespace

ImportReport import_hf_checkpoint(const std::string& hf_dir, const std::string& out_path, const ImportOptions& o) {
    const OutType type = parse_out_type(o.dtype);
    if (quantized(type) && o.group_size != 32 && o.group_size != 64 && o.group_size != 128)
        throw Error(ErrorCode::InvalidArgument, "group_size: " + std::to_string(o.group_size) + ", allowed 32, 64 or 128");
    if (o.threads < 0 || o.threads > 256)
        throw Error(ErrorCode::InvalidArgument, "threads: " + std::to_string(o.threads) + ", allowed 0 (all cores) or 1 .. 256");
    if (o.loops < 0 || o.loops > 1024)
        throw Error(ErrorCode::InvalidArgument, "loops: " + std::to_string(o.loops) + ", allowed 0 (the checkpoint's) or 1 .. 1024");
    const fs::path dir(hf_dir);
    if (!fs::is_directory(dir)) throw Error(ErrorCode::Io, hf_dir + ": not a folder");

    // 1. Everything that can be refused, before the output exists.
    const fs::path config_path = dir / "config.json";
    const json config = read_json_file(config_path, true);
    const SafetensorsSet st(hf_dir);
    const ImportPlan plan = plan_hf_import(config, config_path.string(), st, o);
    const fs::path gen_path = dir / "generation_config.json";
    const json gen = read_json_file(gen_path, false);
    if (!gen.is_null() && !gen.is_object())
        throw Error(ErrorCode::BadFile, gen_path.string() + ": expected a JSON object");
    const std::vector<int32_t> stop_ids = stop_ids_of(gen, gen_path, config, config_path, plan.hp.vocab_size);
    std::string chat_template;
    const ojson tokenizer = hf_tokenizer_json(dir.string(), plan.hp.vocab_size, stop_ids, &chat_template);

    std::vector<Placed> placed;
    uint64_t cursor = 0, bytes_total = 0, largest = 0;
    for (const PlanTensor& t : plan.tensors) {
        Placed p;
        p.t = &t;
        p.type = t.vector ? OutType::F32 : type;
        p.rows = t.shape.size() == 2 ? t.shape[0] : 1;
        p.cols = t.shape.size() == 2 ? t.shape[1] : t.shape[0];
        if (quantized(p.type) && p.cols % o.group_size != 0)
            throw Error(ErrorCode::InvalidArgument, "group_size: " + std::to_string(o.group_size) + " does not divide the rows of " +
                                                        t.name + " (" + std::to_string(p.cols) + " columns); allowed 32, 64 or 128 dividing every row");
        const uint64_t n = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(p.cols);
        p.code_bytes = n * out_bits(p.type) / 8;
        p.offset = cursor;
        cursor = align_up(cursor + p.code_bytes);
        if (quantized(p.type)) {
            p.sz_bytes = n / o.group_size * 2;
            p.scales_offset = cursor;
            cursor = align_up(cursor + p.sz_bytes);
            p.zeros_offset = cursor;
            cursor = align_up(cursor + p.sz_bytes);
        }
        for (const StTensor* s : t.sources) bytes_total += s->bytes;
        largest = std::max<uint64_t>(largest, n * 4);
        placed.push_back(p);
    }

    ojson h;
    h["format"] = "tinyloop";
    h["hparams"] = hparams_json(plan.hp);
    h["tokenizer"] = tokenizer;
    ojson& jts = h["tensors"];
    jts = ojson::object();
    for (const Placed& p : placed) {
        ojson j;
        j["dtype"] = out_type_name(p.type);
        j["shape"] = p.t->shape;
        if (quantized(p.type)) j["group_size"] = o.group_size;
        j["offset"] = p.offset;
        if (quantized(p.type)) {
            j["scales_offset"] = p.scales_offset;
            j["zeros_offset"] = p.zeros_offset;
        }
        jts[p.t->name] = std::move(j);
    }
    h["metadata"] = metadata_json(plan, config, dir, chat_template, gen, type, o.group_size);
    const std::string header = h.dump();

    // 2. Stream: preamble, header, then tensor by tensor.
    const std::string tmp = out_path + ".tmp";
    ImportReport rep;
    rep.source_architecture = plan.source_architecture;
    rep.architecture = plan.architecture;
    rep.largest_tensor_bytes = largest;
    try {
        Out out(tmp, out_path);
        uint8_t pre[24] = {};
        std::memcpy(pre, "TINYLOOP", 8);
        std::vector<DType> dtypes;
        for (const Placed& p : placed)
            dtypes.push_back(p.type == OutType::F32 ? DType::F32 : p.type == OutType::F16 ? DType::F16
                             : p.type == OutType::BF16 ? DType::BF16 : p.type == OutType::Q8 ? DType::Q8 : DType::Q4);
        const uint32_t version = required_version(plan.hp, dtypes);  // 3: the §1b keys of both architectures
        const uint64_t hlen = header.size();
        for (int i = 0; i < 4; ++i) pre[8 + i] = static_cast<uint8_t>(version >> (8 * i));
        for (int i = 0; i < 8; ++i) pre[16 + i] = static_cast<uint8_t>(hlen >> (8 * i));
        out.write(pre, sizeof pre);
        out.write(header.data(), header.size());
        const uint64_t data_start = align_up(out.pos());
        out.pad_to(data_start);
        ImportProgress prog;
        prog.count = static_cast<int>(placed.size());
        prog.bytes_total = bytes_total;
        if (o.progress) o.progress(prog);
        std::vector<float> values;
        std::vector<uint16_t> half;
        std::unique_ptr<kern::ThreadPool> pool;
        if (quantized(type))
            pool = std::make_unique<kern::ThreadPool>(
                o.threads ? o.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
        for (const Placed& p : placed) {
            if (o.cancel && o.cancel->load(std::memory_order_relaxed)) {
                rep.cancelled = true;
                break;
            }
            const uint64_t n = static_cast<uint64_t>(p.rows) * p.cols;
            values.assign(n, 0.0f);
            p.t->fill(values.data());
            for (uint64_t i = 0; i < n; ++i)
                if (!std::isfinite(values[i]))
                    throw Error(ErrorCode::BadFile, p.t->sources.front()->file + ": header." + p.t->sources.front()->name +
                                                        ": element " + std::to_string(i) + " of " + p.t->name +
                                                        " is not finite, allowed finite values");
            out.pad_to(data_start + p.offset);
            switch (p.type) {
                case OutType::F32: out.write(values.data(), n * 4); break;
                case OutType::F16:
                case OutType::BF16:
                    half.resize(n);
                    for (uint64_t i = 0; i < n; ++i)
                        half[i] = p.type == OutType::F16 ? kern::f32_to_f16(values[i]) : kern::f32_to_bf16(values[i]);
                    out.write(half.data(), n * 2);
                    break;
                case OutType::Q8:
                case OutType::Q4: {
                    const QuantizedMatrix q = quantize_matrix(values.data(), static_cast<int>(p.rows), static_cast<int>(p.cols),
                                                              p.type == OutType::Q8 ? DType::Q8 : DType::Q4, o.group_size,
                                                              pool.get());
                    out.write(q.codes.data(), q.codes.size());
                    out.pad_to(data_start + p.scales_offset);
                    out.write(q.scales.data(), q.scales.size() * 2);
                    out.pad_to(data_start + p.zeros_offset);
                    out.write(q.zeros.data(), q.zeros.size() * 2);
                    break;
                }
            }
            for (const StTensor* s : p.t->sources) {
                st.release(*s);
                prog.bytes_done += s->bytes;
            }
            ++prog.index;
            prog.name = p.t->name;
            if (o.progress) o.progress(prog);
        }
        // Large buffers go back before the next phase.
        std::vector<float>().swap(values);
        std::vector<uint16_t>().swap(half);
        if (rep.cancelled) {
            out.close();
            std::error_code ec;
            fs::remove(tmp, ec);
            return rep;
        }
        out.pad_to(align_up(out.pos()));
        out.close();
        std::error_code ec;
        fs::rename(tmp, out_path, ec);
        if (ec) throw Error(ErrorCode::Io, out_path + ": cannot write: " + ec.message());
    } catch (...) {
        std::error_code ec;
        fs::remove(tmp, ec);
        throw;
    }
    rep.tensors = static_cast<int>(placed.size());
    rep.file_bytes = fs::file_size(out_path);
    rep.path = out_path;
    return rep;
}

std::string default_import_cache_dir() {
    auto env = [](const char* name) -> std::string {
        const char* v = std::getenv(name);
        return v && *v ? std::string(v) : std::string();
    };
    if (std::string d = env("TINYLOOP_IMPORT_CACHE"); !d.empty()) return d;
    if (std::string d = env("XDG_CACHE_HOME"); !d.empty()) return (fs::path(d) / "tinyloop" / "imports").string();
    if (std::string d = env("HOME"); !d.empty()) return (fs::path(d) / ".cache" / "tinyloop" / "imports").string();
    throw Error(ErrorCode::Io, "import cache: none of TINYLOOP_IMPORT_CACHE, XDG_CACHE_HOME, HOME is set; give a cache folder");
}

namespace {

// FNV-1a, 64 bits: a name for the cache entry, not a security boundary (the entry is a file the
// user's own process wrote; a collision would need two folders whose listings hash alike).
struct Fnv64 {
    uint64_t h = 1469598103934665603ull;
    void add(const std::string& s) {
        for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull;  // a separator, so "ab"+"c" differs from "a"+"bc"
    }
};

}  // namespace

std::string import_cache_path(const std::string& hf_dir, const ImportOptions& o, const std::string& cache_dir) {
    const fs::path dir(hf_dir);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw Error(ErrorCode::Io, hf_dir + ": not a folder");
    const fs::path abs = fs::weakly_canonical(fs::absolute(dir), ec);
    Fnv64 f;
    f.add("tinyloop-import-1");  // bump when the importer's output for the same input changes
    f.add(abs.string());
    std::vector<std::string> rows;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        std::error_code e2;
        if (!e.is_regular_file(e2)) continue;
        const auto size = e.file_size(e2);
        const auto mtime = fs::last_write_time(e.path(), e2).time_since_epoch().count();
        rows.push_back(e.path().filename().string() + "\t" + std::to_string(size) + "\t" + std::to_string(mtime));
    }
    if (ec) throw Error(ErrorCode::Io, hf_dir + ": cannot list: " + ec.message());
    std::sort(rows.begin(), rows.end());
    for (const auto& r : rows) f.add(r);
    f.add(o.dtype);
    f.add(std::to_string(o.group_size));
    f.add(std::to_string(o.loops));
    f.add(o.state_init);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(f.h));
    std::string name = abs.filename().string();
    if (name.empty()) name = "model";
    for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
    const fs::path root = cache_dir.empty() ? fs::path(default_import_cache_dir()) : fs::path(cache_dir);
    return (root / (name + "-" + o.dtype + "-" + hex + ".tinyloop")).string();
}

ImportReport import_hf_cached(const std::string& hf_dir, const ImportOptions& o, const std::string& cache_dir) {
    const std::string path = import_cache_path(hf_dir, o, cache_dir);
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
        ImportReport rep;
        rep.cached = true;
        rep.path = path;
        rep.file_bytes = fs::file_size(path, ec);
        return rep;
    }
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (ec) throw Error(ErrorCode::Io, fs::path(path).parent_path().string() + ": cannot create the import cache: " + ec.message());
    return import_hf_checkpoint(hf_dir, path, o);
}

}  // namespace tinyloop
