// Reading and validating .tinyloop files (FORMAT.md §2; every refusal of §4).
//
// The whole file is read into one 64-byte aligned buffer; weights are used in place, never
// copied or expanded. Every refusal is Error(BadFile) with "<path>: <field>: <what>, allowed
// <range>"; nothing here reads outside the buffer: every offset and size is checked with
// overflow-checked arithmetic before it is used.
#include "model/loader.h"
#include "text/json_depth.h"
#include "text/hf_tokenizer_json.h"
#include "model/quant.h"
#include "tinyloop/json.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace tinyloop {

namespace {

using nlohmann::json;

constexpr uint64_t kPreambleBytes = 24;
constexpr uint64_t kMaxHeaderBytes = uint64_t{64} << 20;
constexpr uint64_t kAlign = 64;

struct IntField {
    const char* name;
    int HParams::*member;
    int64_t lo, hi;
};

// Upper bounds keep every size computed from them far inside 64 bits and an int.
constexpr IntField kIntFields[] = {
    {"vocab_size", &HParams::vocab_size, 256, int64_t{1} << 20},
    {"d_model", &HParams::d_model, 1, 65536},
    {"n_heads", &HParams::n_heads, 1, 4096},
    {"n_kv_heads", &HParams::n_kv_heads, 1, 4096},
    {"head_dim", &HParams::head_dim, 2, 4096},
    {"d_ff", &HParams::d_ff, 1, int64_t{1} << 20},
    {"n_pre_blocks", &HParams::n_pre_blocks, 0, 1024},
    {"n_loop_layers", &HParams::n_loop_layers, 1, 1024},
    {"default_loops", &HParams::default_loops, 1, 1024},
    {"max_loops", &HParams::max_loops, 1, 1024},
    {"max_seq_len", &HParams::max_seq_len, 1, int64_t{1} << 20},
};

// The hyperparameters of file version 3 (FORMAT.md §1b); refused in version 1 and 2 files.
constexpr const char* kV3Keys[] = {"architecture", "block",     "qk_bias",    "embed_scale",
                                   "pass_norm",    "n_coda_blocks", "state_init", "exit_gate"};

std::string range_text(int64_t lo, int64_t hi) {
    return std::to_string(lo) + " .. " + std::to_string(hi);
}

std::string shape_text(const std::vector<uint64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}
std::string shape_text(const std::vector<int64_t>& s) {
    return shape_text(std::vector<uint64_t>(s.begin(), s.end()));
}

bool mul_ok(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
bool add_ok(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_add_overflow(a, b, &out); }

uint32_t read_u32(const uint8_t* p) {
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint64_t read_u64(const uint8_t* p) {
    return uint64_t{read_u32(p)} | uint64_t{read_u32(p + 4)} << 32;
}

bool f16_finite(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }
bool bf16_finite(uint16_t h) { return (h & 0x7f80u) != 0x7f80u; }

constexpr const char* kDtypesAllowed = "f32, f16, bf16, q8, q4, q2";

// nlohmann quotes the offending bytes in its messages; escape them so that a message about
// invalid UTF-8 is itself printable text.
std::string printable(std::string_view s) {
    static const char hex[] = "0123456789abcdef";
    std::string out;
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c >= 0x20 && c < 0x7f) {
            out += ch;
        } else {
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

// A JSON value for an error message: at most 80 printable characters.
std::string brief_text(std::string_view text) {
    std::string s = printable(text.substr(0, 100));
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return s;
}
std::string brief(const json& v) { return brief_text(v.dump()); }

// Parses and validates one file; `bad` carries the path into every message.
class Reader {
public:
    explicit Reader(const std::string& path) : path_(path) {}
    std::unique_ptr<Model> read();

private:
    struct Region {
        uint64_t begin, end;  // absolute file offsets
        std::string label;
    };

    [[noreturn]] void bad(const std::string& msg) const {
        throw Error(ErrorCode::BadFile, path_ + ": " + msg);
    }
    void load_bytes(Model& m);
    json parse_header(const Model& m);
    void parse_hparams(const json& h, HParams& hp);
    void parse_hparams_v3(const json& h, HParams& hp);
    void parse_tokenizer(const json& t, TokenizerSpec& spec);
    uint64_t get_offset(const json& t, const std::string& field, const char* key);
    uint64_t place(const json& t, const std::string& field, const char* key, uint64_t bytes);
    // The CPU int8 kernel's row panels for every Q8/Q4 matrix (kern::i8_pack_panels); none where
// this CPU's kernels do not use them. Costs a second copy of those matrices' codes in memory
// (as llama.cpp's repacked CPU buffers do) and a pass over them at load. Likewise the float
// panels of every F32/BF16 matrix that matmul multiplies (kern::f32_pack_panels; none with
// TINYLOOP_F32_PANELS=0): not the vectors (one row) and not an untied embedding (only looked up).
void pack_panels(Model& m) {
    const auto fbytes = [&](const std::string& name, const kern::WeightView& v) -> size_t {
        if (v.rows <= 1 || (name == "embed" && !m.hp.tie_embeddings)) return 0;
        return kern::f32_panel_bytes(v);
    };
    size_t total = 0;
    for (const auto& nv : m.views) {
        total += (kern::i8_panel_bytes(nv.second) + 63) / 64 * 64;
        total += (fbytes(nv.first, nv.second) + 63) / 64 * 64;
    }
    if (total == 0) return;
    m.panels = AlignedBuffer(total);
    size_t at = 0;
    for (auto& nv : m.views) {
        if (const size_t n = kern::i8_panel_bytes(nv.second); n != 0) {
            kern::i8_pack_panels(nv.second, m.panels.data() + at);
            nv.second.panels = m.panels.data() + at;
            at += (n + 63) / 64 * 64;
        }
        if (const size_t n = fbytes(nv.first, nv.second); n != 0) {
            kern::f32_pack_panels(nv.second, m.panels.data() + at);
            nv.second.fpanels = m.panels.data() + at;
            at += (n + 63) / 64 * 64;
        }
    }
}

void parse_tensors(const json& t, Model& m);

    std::string path_;
    uint32_t version_ = 0;
    uint64_t data_start_ = 0;
    uint64_t file_size_ = 0;
    std::vector<Region> regions_;
};

void Reader::load_bytes(Model& m) {
    std::error_code ec;
    const auto st = std::filesystem::status(path_, ec);
    if (ec || !std::filesystem::exists(st))
        throw Error(ErrorCode::Io,
                    path_ + ": cannot open: " + (ec ? ec.message() : std::string("no such file")));
    if (!std::filesystem::is_regular_file(st))
        throw Error(ErrorCode::Io, path_ + ": cannot open: not a regular file");
    std::ifstream f(path_, std::ios::binary);
    if (!f) throw Error(ErrorCode::Io, path_ + ": cannot open: " + std::strerror(errno));
    f.seekg(0, std::ios::end);
    const std::streamoff size = f.tellg();
    if (size < 0) throw Error(ErrorCode::Io, path_ + ": cannot read its size");
    f.seekg(0, std::ios::beg);
    m.file = AlignedBuffer(static_cast<size_t>(size));
    if (size > 0 && !f.read(reinterpret_cast<char*>(m.file.data()), size))
        throw Error(ErrorCode::Io, path_ + ": cannot read " + std::to_string(size) + " bytes");
    file_size_ = static_cast<uint64_t>(size);
}

json Reader::parse_header(const Model& m) {
    const uint8_t* p = m.file.data();
    if (file_size_ < kPreambleBytes)
        bad("file: " + std::to_string(file_size_) +
            " bytes, too short for the 24-byte preamble (magic, version, flags, header_bytes)");
    if (std::memcmp(p, "TINYLOOP", 8) != 0) bad("magic: not TINYLOOP, allowed TINYLOOP");
    const uint32_t version = read_u32(p + 8);
    if (version < 1 || version > 3) bad("version: " + std::to_string(version) + ", allowed 1, 2 or 3");
    version_ = version;
    const uint32_t flags = read_u32(p + 12);
    if (flags != 0) bad("flags: " + std::to_string(flags) + ", allowed 0");
    const uint64_t header_bytes = read_u64(p + 16);
    if (header_bytes > kMaxHeaderBytes)
        bad("header_bytes: " + std::to_string(header_bytes) + ", allowed at most " +
            std::to_string(kMaxHeaderBytes) + " (64 MiB)");
    if (header_bytes > file_size_ - kPreambleBytes)
        bad("header_bytes: " + std::to_string(header_bytes) + " runs past the end of the file (" +
            std::to_string(file_size_) + " bytes), allowed at most " +
            std::to_string(file_size_ - kPreambleBytes));
    data_start_ = (kPreambleBytes + header_bytes + kAlign - 1) / kAlign * kAlign;

    constexpr size_t kMaxDepth = 64;
    const size_t depth = json_nesting_depth(p + kPreambleBytes, static_cast<size_t>(header_bytes));
    if (depth > kMaxDepth)
        bad("header: JSON nested " + std::to_string(depth) + " levels deep, allowed at most " +
            std::to_string(kMaxDepth));
    // nlohmann stops at a NUL byte, which would let junk after it pass unseen.
    if (std::memchr(p + kPreambleBytes, 0, static_cast<size_t>(header_bytes)) != nullptr)
        bad("header: contains a NUL byte, allowed UTF-8 JSON text only");
    json h;
    try {
        // nlohmann rejects ill-formed UTF-8 inside strings while parsing.
        h = json::parse(p + kPreambleBytes, p + kPreambleBytes + header_bytes);
    } catch (const json::exception& e) {
        bad("header: invalid JSON or UTF-8, allowed one UTF-8 JSON object: " + printable(e.what()));
    }
    if (!h.is_object()) bad("header: " + std::string(h.type_name()) + ", allowed a JSON object");
    const auto fmt = h.find("format");
    if (fmt == h.end() || !fmt->is_string() || fmt->get<std::string>() != "tinyloop")
        bad("format: " + (fmt == h.end() ? std::string("missing") : brief(*fmt)) +
            ", allowed \"tinyloop\"");
    for (const char* key : {"hparams", "tokenizer", "tensors"}) {
        const auto it = h.find(key);
        if (it == h.end()) bad(std::string(key) + ": missing, allowed a JSON object");
        if (!it->is_object())
            bad(std::string(key) + ": " + it->type_name() + ", allowed a JSON object");
    }
    return h;
}

void Reader::parse_hparams(const json& h, HParams& hp) {
    for (const auto& f : kIntFields) {
        const std::string field = std::string("hparams.") + f.name;
        const auto it = h.find(f.name);
        if (it == h.end()) bad(field + ": missing, allowed " + range_text(f.lo, f.hi));
        if (!it->is_number_integer())
            bad(field + ": " + brief(*it) + " is not an integer, allowed " +
                range_text(f.lo, f.hi));
        const bool too_big = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(f.hi);
        const int64_t v = too_big ? f.hi + 1 : it->get<int64_t>();
        if (too_big || v < f.lo || v > f.hi)
            bad(field + ": " + brief(*it) + ", allowed " + range_text(f.lo, f.hi));
        hp.*f.member = static_cast<int>(v);
    }
    for (const char* name : {"rope_theta", "norm_eps"}) {
        const std::string field = std::string("hparams.") + name;
        const auto it = h.find(name);
        const char* range = std::string(name) == "rope_theta" ? "> 0" : "(0, 1]";
        if (it == h.end()) bad(field + ": missing, allowed " + range);
        if (!it->is_number()) bad(field + ": " + brief(*it) + " is not a number, allowed " + range);
        const double v = it->get<double>();
        const float fv = static_cast<float>(v);
        if (std::string(name) == "rope_theta") {
            if (!std::isfinite(fv) || !(fv > 0)) bad(field + ": " + brief(*it) + ", allowed > 0");
            hp.rope_theta = fv;
        } else {
            if (!(fv > 0) || !(fv <= 1)) bad(field + ": " + brief(*it) + ", allowed (0, 1]");
            hp.norm_eps = fv;
        }
    }
    const auto tie = h.find("tie_embeddings");
    if (tie == h.end()) bad("hparams.tie_embeddings: missing, allowed true or false");
    if (!tie->is_boolean())
        bad("hparams.tie_embeddings: " + brief(*tie) + ", allowed true or false");
    hp.tie_embeddings = tie->get<bool>();
    // FORMAT.md §1a: "add" exactly in version-2 files; absent or "none" in version 1.
    const auto input = h.find("loop_input");
    if (input != h.end()) {
        const bool v3 = version_ >= 3;
        if (!input->is_string() || (*input != "none" && *input != "add" && !(v3 && *input == "adapter")))
            bad("hparams.loop_input: " + brief(*input) +
                (v3 ? ", allowed \"none\", \"add\" or \"adapter\"" : ", allowed \"none\" or \"add\""));
        hp.loop_input = parse_loop_input(input->get<std::string>());
    }
    parse_hparams_v3(h, hp);  // first: a version-3 key in an older file is named as such
    if (version_ == 2 && hp.loop_input != LoopInput::Add)
        bad("version: 2 without hparams.loop_input \"add\", allowed version 2 only with "
            "loop_input \"add\" (FORMAT.md §1a)");
    if (version_ == 1 && hp.loop_input == LoopInput::Add)
        bad("hparams.loop_input: \"add\" in a version-1 file, allowed only in version 2 or 3");
    for (const auto& [key, value] : h.items()) {
        bool known = key == "rope_theta" || key == "norm_eps" || key == "tie_embeddings" || key == "loop_input";
        for (const char* k : kV3Keys) known = known || key == k;
        for (const auto& f : kIntFields) known = known || key == f.name;
        // An unknown hyperparameter would change the math in a way this runtime cannot honour.
        if (!known) bad("hparams." + brief_text(key) + ": unknown hyperparameter");
    }
    const std::string problem = hparams_problem(hp);
    if (!problem.empty()) bad(problem);
}

// FORMAT.md §1b: the version-3 keys, each refused by name in an older file, each value checked
// against its allowed set (a value this runtime cannot honour would silently change the math).
void Reader::parse_hparams_v3(const json& h, HParams& hp) {
    for (const char* key : kV3Keys)
        if (version_ < 3 && h.contains(key))
            bad(std::string("hparams.") + key + ": present in a version-" + std::to_string(version_) +
                " file, allowed only in version 3 (FORMAT.md §1b)");
    auto boolean = [&](const char* key, bool& out) {
        const auto it = h.find(key);
        if (it == h.end()) return;
        if (!it->is_boolean()) bad(std::string("hparams.") + key + ": " + brief(*it) + ", allowed true or false");
        out = it->get<bool>();
    };
    if (const auto it = h.find("architecture"); it != h.end()) {
        if (!it->is_string() || (*it != "tinyloop" && *it != "ouro" && *it != "huginn" && *it != "nanbeige"))
            bad("hparams.architecture: " + brief(*it) + ", allowed \"tinyloop\", \"ouro\", \"huginn\" or \"nanbeige\"");
        hp.architecture = it->get<std::string>();
    }
    if (const auto it = h.find("block"); it != h.end()) {
        if (!it->is_string() || (*it != "pre_norm" && *it != "sandwich_branch" && *it != "sandwich_sum"))
            bad("hparams.block: " + brief(*it) + ", allowed \"pre_norm\", \"sandwich_branch\" or \"sandwich_sum\"");
        hp.block = parse_block_kind(it->get<std::string>());
    }
    boolean("qk_bias", hp.qk_bias);
    boolean("pass_norm", hp.pass_norm);
    boolean("exit_gate", hp.exit_gate);
    if (const auto it = h.find("embed_scale"); it != h.end()) {
        const float v = it->is_number() ? static_cast<float>(it->get<double>()) : 0.0f;
        if (!it->is_number() || !std::isfinite(v) || !(v > 0))
            bad("hparams.embed_scale: " + brief(*it) + ", allowed a finite number > 0");
        hp.embed_scale = v;
    }
    if (const auto it = h.find("n_coda_blocks"); it != h.end()) {
        if (!it->is_number_integer() || (it->is_number_unsigned() && it->get<uint64_t>() > 1024) ||
            it->get<int64_t>() < 0 || it->get<int64_t>() > 1024)
            bad("hparams.n_coda_blocks: " + brief(*it) + ", allowed 0 .. 1024");
        hp.n_coda_blocks = static_cast<int>(it->get<int64_t>());
    }
    if (const auto it = h.find("state_init"); it != h.end()) {
        const auto kind = it->is_object() ? it->find("kind") : it->end();
        if (!it->is_object() || kind == it->end() || !kind->is_string() ||
            (*kind != "zeros" && *kind != "truncnormal"))
            bad("hparams.state_init: " + brief(*it) + ", allowed {\"kind\": \"zeros\"} or {\"kind\": \"truncnormal\", "
                "\"std\": > 0, \"scale\": finite, \"seed\": 0 .. 2^64-1}");
        StateInit si;
        if (*kind == "truncnormal") {
            si.kind = StateInit::Kind::TruncNormal;
            for (const auto& [k, v] : it->items()) {
                const std::string field = "hparams.state_init." + brief_text(k);
                if (k == "kind") continue;
                if (k == "std" || k == "scale") {
                    const float f = v.is_number() ? static_cast<float>(v.get<double>()) : NAN;
                    if (!std::isfinite(f) || (k == "std" && !(f > 0)))
                        bad(field + ": " + brief(v) + (k == "std" ? ", allowed a finite number > 0" : ", allowed a finite number"));
                    (k == "std" ? si.std : si.scale) = f;
                } else if (k == "seed") {
                    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
                        bad(field + ": " + brief(v) + ", allowed an integer 0 .. 2^64-1");
                    si.seed = v.get<uint64_t>();
                } else {
                    bad(field + ": unknown key, allowed kind, std, scale, seed");
                }
            }
            if (!it->contains("std")) bad("hparams.state_init.std: missing, allowed a finite number > 0");
        } else if (it->size() != 1) {
            bad("hparams.state_init: " + brief(*it) + ", allowed {\"kind\": \"zeros\"} with no other key");
        }
        hp.state_init = si;
    }
}

void Reader::parse_tokenizer(const json& t, TokenizerSpec& spec) {
    // FORMAT.md §3b: a Hugging Face byte-level BPE, only in version-3 files.
    if (const auto type = t.find("type"); type != t.end() && *type == "hf_byte_bpe") {
        if (version_ < 3)
            bad("tokenizer.type: \"hf_byte_bpe\" in a version-" + std::to_string(version_) +
                " file, allowed only in version 3");
        hf_tokenizer_from_json(t, spec, [&](const std::string& msg) { bad(msg); });
        return;
    }
    auto get_string = [&](const char* key) {
        const auto it = t.find(key);
        if (it == t.end() || !it->is_string())
            bad(std::string("tokenizer.") + key + ": missing or not a string, allowed " +
                (std::string(key) == "type" ? "byte_bpe" : "tinyloop-ascii-v1"));
        return it->get<std::string>();
    };
    auto get_id = [&](const json& v, const std::string& field) -> int32_t {
        if (!v.is_number_integer())
            bad(field + ": " + brief(v) + " is not an integer, allowed an integer id");
        if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT32_MAX)
                                   : (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX))
            bad(field + ": " + brief(v) + " out of range, allowed a 32-bit id");
        return static_cast<int32_t>(v.get<int64_t>());
    };
    spec.type = get_string("type");
    spec.pretokenizer = get_string("pretokenizer");
    const auto merges = t.find("merges");
    if (merges == t.end() || !merges->is_array())
        bad("tokenizer.merges: missing or not an array, allowed an array of [a, b] id pairs");
    spec.merges.reserve(merges->size());
    for (size_t k = 0; k < merges->size(); ++k) {
        const json& m = (*merges)[k];
        const std::string field = "tokenizer.merges[" + std::to_string(k) + "]";
        if (!m.is_array() || m.size() != 2)
            bad(field + ": " + brief(m) + ", allowed a pair [a, b] of ids");
        spec.merges.emplace_back(get_id(m[0], field), get_id(m[1], field));
    }
    const auto specials = t.find("special_tokens");
    if (specials != t.end()) {
        if (!specials->is_object())
            bad("tokenizer.special_tokens: " + std::string(specials->type_name()) +
                ", allowed an object mapping strings to ids");
        for (const auto& [name, id] : specials->items())
            spec.special_tokens.emplace_back(name, get_id(id, "tokenizer.special_tokens." + name));
        std::sort(spec.special_tokens.begin(), spec.special_tokens.end(),
                  [](const auto& a, const auto& b) { return a.second < b.second; });
    }
    for (const char* key : {"eos_id", "bos_id"}) {
        const auto it = t.find(key);
        const int32_t id =
            (it == t.end() || it->is_null()) ? -1 : get_id(*it, std::string("tokenizer.") + key);
        (std::string(key) == "eos_id" ? spec.eos_id : spec.bos_id) = id;
    }
}

uint64_t Reader::get_offset(const json& t, const std::string& field, const char* key) {
    const std::string f = field + "." + key;
    const auto it = t.find(key);
    if (it == t.end()) bad(f + ": missing, allowed a non-negative integer multiple of 64");
    if (!it->is_number_integer() || (!it->is_number_unsigned() && it->get<int64_t>() < 0))
        bad(f + ": " + brief(*it) + ", allowed a non-negative integer multiple of 64");
    const uint64_t off = it->get<uint64_t>();
    if (off % kAlign != 0)
        bad(f + ": " + std::to_string(off) + " is not 64-aligned, allowed a multiple of 64");
    return off;
}

// Checks that [data_start + offset, + bytes) lies in the file; records it for the overlap check.
uint64_t Reader::place(const json& t, const std::string& field, const char* key, uint64_t bytes) {
    const uint64_t off = get_offset(t, field, key);
    uint64_t begin = 0, end = 0;
    if (!add_ok(data_start_, off, begin) || !add_ok(begin, bytes, end) || end > file_size_)
        bad(field + "." + key + ": region of " + std::to_string(bytes) + " bytes at offset " +
            std::to_string(off) + " lies outside the file, allowed within the " +
            std::to_string(file_size_ > data_start_ ? file_size_ - data_start_ : 0) +
            " data bytes after data_start " + std::to_string(data_start_));
    regions_.push_back({begin, end, field + "." + key});
    return begin;
}

void Reader::parse_tensors(const json& t, Model& m) {
    const HParams& hp = m.hp;
    const std::vector<ExpectedTensor> expected = expected_tensors(hp);
    for (const auto& item : t.items()) {
        const std::string& name = item.key();  // not a structured binding: clang < 16 cannot capture one
        const bool known = std::any_of(expected.begin(), expected.end(),
                                       [&](const ExpectedTensor& e) { return e.name == name; });
        if (known) continue;
        if (name == "head") bad("tensors.head: present, but hparams.tie_embeddings is true");
        bad("tensors." + brief_text(name) + ": unexpected tensor for these hyperparameters");
    }
    for (const ExpectedTensor& e : expected) {
        const std::string field = "tensors." + e.name;
        const auto it = t.find(e.name);
        if (it == t.end()) bad(field + ": missing, required with shape " + shape_text(e.shape));
        const json& j = *it;
        if (!j.is_object())
            bad(field + ": " + j.type_name() + ", allowed a JSON object (dtype, shape, offset)");

        const auto dt = j.find("dtype");
        if (dt == j.end() || !dt->is_string())
            bad(field + ".dtype: missing or not a string, allowed " + kDtypesAllowed);
        DType dtype;
        try {
            dtype = parse_dtype(dt->get<std::string>());
        } catch (const Error&) {
            bad(field + ".dtype: '" + brief_text(dt->get<std::string>()) + "' unknown, allowed " +
                kDtypesAllowed);
        }
        // FORMAT.md §2: bf16 came with version 3; an older file naming it is not one this
        // format ever produced.
        if (dtype == DType::BF16 && version_ < 3)
            bad(field + ".dtype: bf16 in a version-" + std::to_string(version_) +
                " file, allowed only in version 3");
        if (e.is_norm && dtype != DType::F32)
            bad(field + ".dtype: " + dtype_name(dtype) + ", allowed f32 (norm gains are f32)");

        const auto sh = j.find("shape");
        if (sh == j.end() || !sh->is_array())
            bad(field + ".shape: missing or not an array, allowed " + shape_text(e.shape));
        std::vector<uint64_t> shape;
        bool shape_ok = sh->size() == e.shape.size();
        for (const json& d : *sh) {
            if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<int64_t>() < 0))
                bad(field + ".shape: " + brief(*sh) + ", allowed " + shape_text(e.shape));
            shape.push_back(d.get<uint64_t>());
        }
        uint64_t elems = 1;
        for (uint64_t d : shape)
            if (!mul_ok(elems, d, elems))
                bad(field + ".shape: " + shape_text(shape) + " overflows a 64-bit size, allowed " +
                    shape_text(e.shape));
        for (size_t i = 0; shape_ok && i < shape.size(); ++i)
            shape_ok = shape[i] == static_cast<uint64_t>(e.shape[i]);
        if (!shape_ok)
            bad(field + ".shape: " + shape_text(shape) + ", allowed " + shape_text(e.shape) +
                " (from the hyperparameters)");

        const uint64_t rows = e.is_norm ? 1 : shape[0];
        const uint64_t cols = e.is_norm ? shape[0] : shape[1];
        const int bits = dtype_bits(dtype);
        uint64_t code_bytes = 0;
        if (!mul_ok(elems, static_cast<uint64_t>(bits), code_bytes))
            bad(field + ".shape: " + shape_text(shape) + " overflows a 64-bit size");
        code_bytes /= 8;  // cols is a multiple of group_size (>= 32) for q*: exact

        kern::WeightView v;
        v.type = dtype_wtype(dtype);
        v.rows = static_cast<int>(rows);
        v.cols = static_cast<int>(cols);
        TensorInfo info;
        info.name = e.name;
        info.dtype = dtype;
        info.shape = e.shape;
        info.bytes = code_bytes;
        if (dtype_is_quantized(dtype)) {
            const auto gs = j.find("group_size");
            int64_t g = -1;
            if (gs != j.end() && gs->is_number_integer())
                g = gs->is_number_unsigned()
                        ? static_cast<int64_t>(std::min<uint64_t>(gs->get<uint64_t>(), 1u << 20))
                        : gs->get<int64_t>();
            if (g != 32 && g != 64 && g != 128)
                bad(field +
                    ".group_size: " + (gs == j.end() ? std::string("missing") : brief(*gs)) +
                    ", allowed 32, 64 or 128");
            if (cols % static_cast<uint64_t>(g) != 0)
                bad(field + ".group_size: " + std::to_string(g) +
                    " does not divide the row length " + std::to_string(cols) +
                    ", allowed 32, 64 or 128 dividing it");
            const uint64_t sz_bytes = rows * (cols / static_cast<uint64_t>(g)) * 2;  // bounded
            v.group_size = static_cast<int>(g);
            info.group_size = static_cast<int>(g);
            info.bytes = code_bytes + 2 * sz_bytes;
            v.data = m.file.data() + place(j, field, "offset", code_bytes);
            v.scales = reinterpret_cast<const uint16_t*>(
                m.file.data() + place(j, field, "scales_offset", sz_bytes));
            v.zeros = reinterpret_cast<const uint16_t*>(m.file.data() +
                                                        place(j, field, "zeros_offset", sz_bytes));
            const size_t n_groups = static_cast<size_t>(sz_bytes / 2);
            for (size_t i = 0; i < n_groups; ++i) {
                if (!f16_finite(v.scales[i]))
                    bad(field + ": scale " + std::to_string(i) +
                        " is NaN or Inf, allowed finite values");
                if (!f16_finite(v.zeros[i]))
                    bad(field + ": zero " + std::to_string(i) +
                        " is NaN or Inf, allowed finite values");
            }
        } else {
            v.data = m.file.data() + place(j, field, "offset", code_bytes);
            // Norms must be finite (FORMAT.md §4); a non-finite weight poisons every logit, so
            // f32/f16/bf16 weights get the same cheap scan.
            const size_t n = static_cast<size_t>(elems);
            if (dtype == DType::F32) {
                const float* f = reinterpret_cast<const float*>(v.data);
                for (size_t i = 0; i < n; ++i)
                    if (!std::isfinite(f[i]))
                        bad(field + ": element " + std::to_string(i) + " is " +
                            (std::isnan(f[i]) ? "NaN" : "Inf") + ", allowed finite values");
            } else {
                const uint16_t* h = reinterpret_cast<const uint16_t*>(v.data);
                const bool bf = dtype == DType::BF16;
                for (size_t i = 0; i < n; ++i)
                    if (!(bf ? bf16_finite(h[i]) : f16_finite(h[i])))
                        bad(field + ": element " + std::to_string(i) +
                            " is NaN or Inf, allowed finite values");
            }
        }
        m.tensor_infos.push_back(info);
        m.views.emplace_back(e.name, v);
    }

    // Sorted by start, two regions overlap exactly when one starts before an earlier one ends.
    std::sort(regions_.begin(), regions_.end(),
              [](const Region& a, const Region& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < regions_.size(); ++i) {
        const Region& a = regions_[i - 1];
        const Region& b = regions_[i];
        if (b.begin < a.end)
            bad(b.label + ": region [" + std::to_string(b.begin - data_start_) + ", " +
                std::to_string(b.end - data_start_) + ") overlaps " + a.label + " [" +
                std::to_string(a.begin - data_start_) + ", " + std::to_string(a.end - data_start_) +
                "), allowed disjoint regions");
    }
}

std::unique_ptr<Model> Reader::read() {
    auto m = std::make_unique<Model>();
    m->path = path_;
    load_bytes(*m);
    m->file_bytes = file_size_;
    const json h = parse_header(*m);
    parse_hparams(h.at("hparams"), m->hp);
    parse_tokenizer(h.at("tokenizer"), m->tokenizer_spec);
    try {
        m->tokenizer.init(m->tokenizer_spec, m->hp.vocab_size);
    } catch (const Error& e) {
        bad(e.what());
    }
    const auto meta = h.find("metadata");
    if (meta != h.end() && !meta->is_object())
        bad("metadata: " + std::string(meta->type_name()) + ", allowed a JSON object");
    m->metadata_json = meta == h.end() ? "{}" : meta->dump();
    if (meta != h.end() && meta->contains("recommended")) {
        // FORMAT.md §2: the recommended settings must be ones the engine can run on this model.
        try {
            m->recommended = recommendation_from_json((*meta)["recommended"],
                                                      {m->hp.max_loops, m->hp.max_seq_len, m->hp.vocab_size},
                                                      "metadata.recommended.");
        } catch (const Error& e) {
            bad(e.what());
        }
    }
    parse_tensors(h.at("tensors"), *m);
    // FORMAT.md §2: the version is exactly what the file's features require, so an older reader
    // never meets a feature it does not know, and a file claims no feature it does not use.
    std::vector<DType> dtypes;
    for (const TensorInfo& t : m->tensor_infos) dtypes.push_back(t.dtype);
    const uint32_t required = required_version(m->hp, dtypes, m->tokenizer_spec.type);
    if (version_ != required)
        bad("version: " + std::to_string(version_) + ", allowed " + std::to_string(required) +
            " for this file (the highest its features require: loop_input \"add\" 2; a bf16 tensor, a version-3 "
            "hparams key or an hf_byte_bpe tokenizer 3)");
    pack_panels(*m);

    auto view = [&](const std::string& name) -> const kern::WeightView& {
        const kern::WeightView* v = m->find_tensor(name);
        if (!v) throw Error(ErrorCode::Internal, path_ + ": " + name + " not mapped");
        return *v;
    };
    auto norm = [&](const std::string& name) {
        return reinterpret_cast<const float*>(view(name).data);
    };
    auto layer = [&](const std::string& p) {
        LayerWeights w;
        w.attn_norm = norm(p + ".attn_norm");
        w.mlp_norm = norm(p + ".mlp_norm");
        w.wq = view(p + ".wq");
        w.wk = view(p + ".wk");
        w.wv = view(p + ".wv");
        w.wo = view(p + ".wo");
        w.w_gate = view(p + ".w_gate");
        w.w_up = view(p + ".w_up");
        w.w_down = view(p + ".w_down");
        if (m->hp.block != BlockKind::PreNorm) {
            w.attn_post_norm = norm(p + ".attn_post_norm");
            w.mlp_post_norm = norm(p + ".mlp_post_norm");
        }
        if (m->hp.qk_bias) {
            w.bq = norm(p + ".bq");
            w.bk = norm(p + ".bk");
        }
        return w;
    };
    m->embed = view("embed");
    m->head = m->hp.tie_embeddings ? m->embed : view("head");
    m->final_norm = norm("final_norm");
    for (int i = 0; i < m->hp.n_pre_blocks; ++i)
        m->pre.push_back(layer("pre." + std::to_string(i)));
    for (int j = 0; j < m->hp.n_loop_layers; ++j)
        m->loop.push_back(layer("loop." + std::to_string(j)));
    for (int j = 0; j < m->hp.n_coda_blocks; ++j)
        m->coda.push_back(layer("coda." + std::to_string(j)));
    if (m->hp.loop_input == LoopInput::Adapter) m->adapter = view("adapter");
    if (m->hp.exit_gate) {
        m->exit_gate_w = norm("exit_gate.w");
        m->exit_gate_b = norm("exit_gate.b");
    }
    m->max_seq_len = m->hp.max_seq_len;
    return m;
}

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const HParams& hp) {
    const int64_t d = hp.d_model, H = int64_t{hp.n_heads} * hp.head_dim,
                  Hkv = int64_t{hp.n_kv_heads} * hp.head_dim, ff = hp.d_ff, V = hp.vocab_size;
    std::vector<ExpectedTensor> out;
    out.push_back({"embed", {V, d}, false});
    const bool sandwich = hp.block != BlockKind::PreNorm;  // FORMAT.md §1b: two post norms per block
    auto block = [&](const std::string& p) {
        out.push_back({p + ".attn_norm", {d}, true});
        out.push_back({p + ".wq", {H, d}, false});
        out.push_back({p + ".wk", {Hkv, d}, false});
        out.push_back({p + ".wv", {Hkv, d}, false});
        if (hp.qk_bias) {
            out.push_back({p + ".bq", {H}, true});
            out.push_back({p + ".bk", {Hkv}, true});
        }
        out.push_back({p + ".wo", {d, H}, false});
        if (sandwich) out.push_back({p + ".attn_post_norm", {d}, true});
        out.push_back({p + ".mlp_norm", {d}, true});
        out.push_back({p + ".w_gate", {ff, d}, false});
        out.push_back({p + ".w_up", {ff, d}, false});
        out.push_back({p + ".w_down", {d, ff}, false});
        if (sandwich) out.push_back({p + ".mlp_post_norm", {d}, true});
    };
    for (int i = 0; i < hp.n_pre_blocks; ++i) block("pre." + std::to_string(i));
    if (hp.loop_input == LoopInput::Adapter) out.push_back({"adapter", {d, 2 * d}, false});
    for (int j = 0; j < hp.n_loop_layers; ++j) block("loop." + std::to_string(j));
    for (int j = 0; j < hp.n_coda_blocks; ++j) block("coda." + std::to_string(j));
    out.push_back({"final_norm", {d}, true});
    if (hp.exit_gate) {
        out.push_back({"exit_gate.w", {d}, true});
        out.push_back({"exit_gate.b", {1}, true});
    }
    if (!hp.tie_embeddings) out.push_back({"head", {V, d}, false});
    return out;
}

std::string hparams_problem(const HParams& hp) {
    for (const auto& f : kIntFields) {
        const int v = hp.*f.member;
        if (v < f.lo || v > f.hi)
            return std::string("hparams.") + f.name + ": " + std::to_string(v) + ", allowed " +
                   range_text(f.lo, f.hi);
    }
    if (hp.n_kv_heads > hp.n_heads || hp.n_heads % hp.n_kv_heads != 0)
        return "hparams.n_kv_heads: " + std::to_string(hp.n_kv_heads) +
               ", allowed a divisor of n_heads " + std::to_string(hp.n_heads);
    if (hp.head_dim % 2 != 0)
        return "hparams.head_dim: " + std::to_string(hp.head_dim) + ", allowed an even number";
    if (int64_t{hp.n_heads} * hp.head_dim > (int64_t{1} << 18))
        return "hparams.n_heads: n_heads * head_dim = " +
               std::to_string(int64_t{hp.n_heads} * hp.head_dim) + ", allowed at most 262144";
    if (hp.default_loops > hp.max_loops)
        return "hparams.default_loops: " + std::to_string(hp.default_loops) + ", allowed 1 .. " +
               "max_loops " + std::to_string(hp.max_loops);
    if (!std::isfinite(hp.rope_theta) || !(hp.rope_theta > 0))
        return "hparams.rope_theta: " + std::to_string(hp.rope_theta) + ", allowed > 0";
    if (!(hp.norm_eps > 0) || !(hp.norm_eps <= 1))
        return "hparams.norm_eps: " + std::to_string(hp.norm_eps) + ", allowed (0, 1]";
    if (hp.loop_input != LoopInput::None && hp.loop_input != LoopInput::Add && hp.loop_input != LoopInput::Adapter)
        return "hparams.loop_input: " + std::to_string(static_cast<int>(hp.loop_input)) +
               ", allowed none, add or adapter";
    if (hp.architecture != "tinyloop" && hp.architecture != "ouro" && hp.architecture != "huginn" &&
        hp.architecture != "nanbeige")
        return "hparams.architecture: '" + hp.architecture + "', allowed tinyloop, ouro, huginn or nanbeige";
    if (!std::isfinite(hp.embed_scale) || !(hp.embed_scale > 0))
        return "hparams.embed_scale: " + std::to_string(hp.embed_scale) + ", allowed a finite number > 0";
    if (hp.n_coda_blocks < 0 || hp.n_coda_blocks > 1024)
        return "hparams.n_coda_blocks: " + std::to_string(hp.n_coda_blocks) + ", allowed 0 .. 1024";
    if (hp.state_init.kind == StateInit::Kind::TruncNormal &&
        (!std::isfinite(hp.state_init.std) || !(hp.state_init.std > 0) || !std::isfinite(hp.state_init.scale)))
        return "hparams.state_init: std " + std::to_string(hp.state_init.std) + ", scale " +
               std::to_string(hp.state_init.scale) + ", allowed std finite > 0 and scale finite";
    if (hp.state_init.kind != StateInit::Kind::Zeros && hp.loop_input != LoopInput::Adapter)
        return "hparams.state_init: truncnormal with loop_input " + std::string(loop_input_name(hp.loop_input)) +
               ", allowed only with loop_input adapter (the state before pass 1 is otherwise the prelude output)";
    return {};
}

uint32_t required_version(const HParams& hp, const std::vector<DType>& tensor_dtypes,
                          const std::string& tokenizer_type) {
    uint32_t v = 1;
    if (tokenizer_type == "hf_byte_bpe") v = std::max<uint32_t>(v, 3);  // FORMAT.md §3b
    if (hp.loop_input == LoopInput::Add) v = std::max<uint32_t>(v, 2);  // FORMAT.md §1a
    for (DType t : tensor_dtypes)
        if (t == DType::BF16) v = std::max<uint32_t>(v, 3);  // FORMAT.md §2, dtype bf16
    if (hparams_need_v3(hp)) v = std::max<uint32_t>(v, 3);  // FORMAT.md §1b
    return v;
}

std::unique_ptr<Model> read_model_file(const std::string& path) { return Reader(path).read(); }

}  // namespace tinyloop
