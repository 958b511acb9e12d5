// Writing .tinyloop files (FORMAT.md §2) and random test models (tinyloop.h: save_model,
// random_model_spec).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "model/loader.h"
#include "model/quant.h"
#include "text/hf_tokenizer_json.h"

namespace tinyloop {

namespace {

using ojson = nlohmann::ordered_json;

constexpr uint64_t kAlign = 64;

[[noreturn]] void invalid(const std::string& msg) { throw Error(ErrorCode::InvalidArgument, msg); }

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The shortest decimal that reads back as the same float: 1e-5f is written "1e-05", not
// "9.999999747378752e-06".
double float_for_json(float v) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

std::string shape_text(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

struct Placed {
    const TensorData* t = nullptr;
    int64_t rows = 0, cols = 0;
    uint64_t offset = 0, code_bytes = 0;
    uint64_t scales_offset = 0, zeros_offset = 0, sz_bytes = 0;
};

class Sink {
public:
    Sink(std::ofstream& f, const std::string& path) : f_(f), path_(path) {}
    void write(const void* p, size_t n) {
        f_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
        if (!f_) throw Error(ErrorCode::Io, path_ + ": cannot write: " + std::strerror(errno));
        pos_ += n;
    }
    void pad_to(uint64_t target) {
        static const char zeros[kAlign] = {};
        while (pos_ < target)
            write(zeros, static_cast<size_t>(std::min<uint64_t>(kAlign, target - pos_)));
    }
    uint64_t pos() const { return pos_; }

private:
    std::ofstream& f_;
    const std::string& path_;
    uint64_t pos_ = 0;
};

void put_u32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// metadata_json as a JSON object ("{}" when empty).
ojson parse_metadata(const ModelSpec& spec) {
    ojson metadata;
    try {
        metadata =
            ojson::parse(spec.metadata_json.empty() ? std::string("{}") : spec.metadata_json);
    } catch (const nlohmann::json::exception& e) {
        invalid(std::string("metadata_json: invalid JSON: ") + e.what());
    }
    if (!metadata.is_object()) invalid("metadata_json: expected a JSON object");
    return metadata;
}

// Every tensor of `spec` is one of the tensors these hyperparameters call for, listed once.
std::map<std::string, const TensorData*> index_tensors(const ModelSpec& spec,
                                                       const std::vector<ExpectedTensor>& expected) {
    std::map<std::string, const TensorData*> by_name;
    for (const TensorData& t : spec.tensors) {
        if (!by_name.emplace(t.name, &t).second) invalid("tensors." + t.name + ": listed twice");
        bool known = false;
        for (const auto& e : expected) known = known || e.name == t.name;
        if (!known)
            invalid("tensors." + t.name +
                    (t.name == "head" ? ": present, but hparams.tie_embeddings is true"
                                      : ": unexpected tensor for these hyperparameters"));
    }
    return by_name;
}

// Validates every tensor and lays the data out: each region 64-aligned, in canonical order.
std::vector<Placed> place_tensors(const std::vector<ExpectedTensor>& expected,
                                  const std::map<std::string, const TensorData*>& by_name) {
    std::vector<Placed> placed;
    uint64_t cursor = 0;
    for (const ExpectedTensor& e : expected) {
        const std::string field = "tensors." + e.name;
        const auto it = by_name.find(e.name);
        if (it == by_name.end())
            invalid(field + ": missing, required with shape " + shape_text(e.shape));
        const TensorData& t = *it->second;
        if (t.shape != e.shape)
            invalid(field + ".shape: " + shape_text(t.shape) + ", allowed " + shape_text(e.shape));
        Placed p;
        p.t = &t;
        p.rows = e.is_norm ? 1 : e.shape[0];
        p.cols = e.is_norm ? e.shape[0] : e.shape[1];
        const uint64_t n = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(p.cols);
        if (t.values.size() != n)
            invalid(field + ".values: " + std::to_string(t.values.size()) + " values, allowed " +
                    std::to_string(n) + " (the shape's product)");
        if (e.is_norm && t.dtype != DType::F32)
            invalid(field + ".dtype: " + dtype_name(t.dtype) +
                    ", allowed f32 (norm gains are f32)");
        if (dtype_is_quantized(t.dtype)) {
            if (t.group_size != 32 && t.group_size != 64 && t.group_size != 128)
                invalid(field + ".group_size: " + std::to_string(t.group_size) +
                        ", allowed 32, 64 or 128");
            if (p.cols % t.group_size != 0)
                invalid(field + ".group_size: " + std::to_string(t.group_size) +
                        " does not divide the row length " + std::to_string(p.cols) +
                        ", allowed 32, 64 or 128 dividing it");
        }
        for (size_t i = 0; i < t.values.size(); ++i)
            if (!std::isfinite(t.values[i]))
                invalid(field + ".values: element " + std::to_string(i) +
                        " is not finite, allowed finite values");
            else if (t.dtype == DType::BF16 && !std::isfinite(kern::bf16_to_f32(kern::f32_to_bf16(t.values[i]))))
                invalid(field + ".values: element " + std::to_string(i) + " (" + std::to_string(t.values[i]) +
                        ") rounds to infinity in bf16, allowed |value| <= 3.3895e38 (the largest bf16)");
        p.code_bytes = n * static_cast<uint64_t>(dtype_bits(t.dtype)) / 8;
        p.offset = cursor;
        cursor = align_up(cursor + p.code_bytes);
        if (dtype_is_quantized(t.dtype)) {
            p.sz_bytes = n / static_cast<uint64_t>(t.group_size) * 2;
            p.scales_offset = cursor;
            cursor = align_up(cursor + p.sz_bytes);
            p.zeros_offset = cursor;
            cursor = align_up(cursor + p.sz_bytes);
        }
        placed.push_back(p);
    }
    return placed;
}

}  // namespace

// The header's "hparams" object, keys in FORMAT.md's order (shared with the importer, which
// writes its header itself to stream the tensors).
nlohmann::ordered_json hparams_json(const HParams& hp) {
    ojson jh;
    jh["vocab_size"] = hp.vocab_size;
    jh["d_model"] = hp.d_model;
    jh["n_heads"] = hp.n_heads;
    jh["n_kv_heads"] = hp.n_kv_heads;
    jh["head_dim"] = hp.head_dim;
    jh["d_ff"] = hp.d_ff;
    jh["n_pre_blocks"] = hp.n_pre_blocks;
    jh["n_loop_layers"] = hp.n_loop_layers;
    jh["default_loops"] = hp.default_loops;
    jh["max_loops"] = hp.max_loops;
    jh["max_seq_len"] = hp.max_seq_len;
    jh["rope_theta"] = float_for_json(hp.rope_theta);
    jh["norm_eps"] = float_for_json(hp.norm_eps);
    jh["tie_embeddings"] = hp.tie_embeddings;
    // FORMAT.md §1a: stored only when "add" (then version 2); version-1 files stay as before.
    const bool injects = hp.loop_input != LoopInput::None;
    if (injects) jh["loop_input"] = loop_input_name(hp.loop_input);
    // FORMAT.md §1b: each version-3 key only when away from its default (then version 3).
    if (hp.architecture != "tinyloop") jh["architecture"] = hp.architecture;
    if (hp.block != BlockKind::PreNorm) jh["block"] = block_kind_name(hp.block);
    if (hp.qk_bias) jh["qk_bias"] = true;
    if (hp.embed_scale != 1.0f) jh["embed_scale"] = float_for_json(hp.embed_scale);
    if (hp.pass_norm) jh["pass_norm"] = true;
    if (hp.n_coda_blocks != 0) jh["n_coda_blocks"] = hp.n_coda_blocks;
    if (hp.state_init.kind == StateInit::Kind::TruncNormal) {
        ojson si;
        si["kind"] = "truncnormal";
        si["std"] = float_for_json(hp.state_init.std);
        si["scale"] = float_for_json(hp.state_init.scale);
        si["seed"] = hp.state_init.seed;
        jh["state_init"] = std::move(si);
    }
    if (hp.exit_gate) jh["exit_gate"] = true;
    return jh;
}

namespace {

// The header's JSON text, keys in FORMAT.md's order.
std::string header_text(const ModelSpec& spec, const std::vector<Placed>& placed, ojson metadata) {
    const HParams& hp = spec.hparams;
    ojson h;
    h["format"] = "tinyloop";
    h["hparams"] = hparams_json(hp);
    ojson& jt = h["tokenizer"];
    if (spec.tokenizer.type == "hf_byte_bpe") {
        jt = hf_tokenizer_to_json(spec.tokenizer);  // FORMAT.md §3b
    } else {
        jt["type"] = spec.tokenizer.type;
        jt["pretokenizer"] = spec.tokenizer.pretokenizer;
        jt["merges"] = ojson::array();
        for (const auto& [a, b] : spec.tokenizer.merges) jt["merges"].push_back(ojson::array({a, b}));
        jt["special_tokens"] = ojson::object();
        auto specials = spec.tokenizer.special_tokens;
        std::sort(specials.begin(), specials.end(),
                  [](const auto& x, const auto& y) { return x.second < y.second; });
        for (const auto& [name, id] : specials) jt["special_tokens"][name] = id;
        jt["eos_id"] = spec.tokenizer.eos_id < 0 ? ojson(nullptr) : ojson(spec.tokenizer.eos_id);
        jt["bos_id"] = spec.tokenizer.bos_id < 0 ? ojson(nullptr) : ojson(spec.tokenizer.bos_id);
    }
    ojson& jts = h["tensors"];
    jts = ojson::object();
    for (const Placed& p : placed) {
        ojson j;
        j["dtype"] = dtype_name(p.t->dtype);
        j["shape"] = p.t->shape;
        if (dtype_is_quantized(p.t->dtype)) j["group_size"] = p.t->group_size;
        j["offset"] = p.offset;
        if (dtype_is_quantized(p.t->dtype)) {
            j["scales_offset"] = p.scales_offset;
            j["zeros_offset"] = p.zeros_offset;
        }
        jts[p.t->name] = std::move(j);
    }
    h["metadata"] = std::move(metadata);
    std::string header;
    try {
        header = h.dump();
    } catch (const nlohmann::json::exception& e) {  // e.g. a special token that is not UTF-8
        invalid(std::string("tokenizer.special_tokens: not valid UTF-8: ") + e.what());
    }
    return header;
}

// Writes preamble, header and data to `path` through `path`.tmp (removed on any failure).
void write_model_file(const std::string& path, const std::string& header, uint32_t version,
                      const std::vector<Placed>& placed) {
    const std::string tmp = path + ".tmp";
    try {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) throw Error(ErrorCode::Io, path + ": cannot write: " + std::strerror(errno));
        Sink out(f, path);
        uint8_t pre[24];
        std::memcpy(pre, "TINYLOOP", 8);
        put_u32(pre + 8, version);
        put_u32(pre + 12, 0);
        put_u64(pre + 16, header.size());
        out.write(pre, sizeof pre);
        out.write(header.data(), header.size());
        const uint64_t data_start = align_up(out.pos());
        out.pad_to(data_start);
        for (const Placed& p : placed) {
            const std::vector<float>& v = p.t->values;
            out.pad_to(data_start + p.offset);
            switch (p.t->dtype) {
                case DType::F32:
                    out.write(v.data(), v.size() * sizeof(float));
                    break;
                case DType::F16: {
                    std::vector<uint16_t> h16(v.size());
                    for (size_t i = 0; i < v.size(); ++i) h16[i] = kern::f32_to_f16(v[i]);
                    out.write(h16.data(), h16.size() * 2);
                    break;
                }
                case DType::BF16: {
                    std::vector<uint16_t> b16(v.size());
                    for (size_t i = 0; i < v.size(); ++i) b16[i] = kern::f32_to_bf16(v[i]);
                    out.write(b16.data(), b16.size() * 2);
                    break;
                }
                default: {
                    const QuantizedMatrix q =
                        quantize_matrix(v.data(), static_cast<int>(p.rows),
                                        static_cast<int>(p.cols), p.t->dtype, p.t->group_size);
                    out.write(q.codes.data(), q.codes.size());
                    out.pad_to(data_start + p.scales_offset);
                    out.write(q.scales.data(), q.scales.size() * 2);
                    out.pad_to(data_start + p.zeros_offset);
                    out.write(q.zeros.data(), q.zeros.size() * 2);
                }
            }
        }
        out.pad_to(align_up(out.pos()));
        f.close();
        if (!f) throw Error(ErrorCode::Io, path + ": cannot write: " + std::strerror(errno));
        std::error_code ec;
        std::filesystem::rename(tmp, path, ec);
        if (ec) throw Error(ErrorCode::Io, path + ": cannot write: " + ec.message());
    } catch (...) {
        std::error_code ec;
        std::filesystem::remove(tmp, ec);
        throw;
    }
}

}  // namespace

void save_model(const std::string& path, const ModelSpec& spec) {
    const HParams& hp = spec.hparams;
    if (const std::string p = hparams_problem(hp); !p.empty()) invalid(p);
    Tokenizer check;
    check.init(spec.tokenizer, hp.vocab_size);  // throws InvalidArgument naming the field
    ojson metadata = parse_metadata(spec);
    const std::vector<ExpectedTensor> expected = expected_tensors(hp);
    const std::vector<Placed> placed = place_tensors(expected, index_tensors(spec, expected));
    const std::string header = header_text(spec, placed, std::move(metadata));
    std::vector<DType> dtypes;
    for (const Placed& p : placed) dtypes.push_back(p.t->dtype);
    write_model_file(path, header, required_version(hp, dtypes, spec.tokenizer.type), placed);
}

ModelSpec random_model_spec(const HParams& hp, uint64_t seed, DType dtype, int group_size) {
    if (const std::string p = hparams_problem(hp); !p.empty()) invalid(p);
    if (dtype_is_quantized(dtype)) {
        if (group_size != 32 && group_size != 64 && group_size != 128)
            invalid("group_size: " + std::to_string(group_size) + ", allowed 32, 64 or 128");
        for (int64_t cols :
             {int64_t{hp.d_model}, int64_t{hp.d_ff}, int64_t{hp.n_heads} * hp.head_dim})
            if (cols % group_size != 0)
                invalid("group_size: " + std::to_string(group_size) +
                        " does not divide the row length " + std::to_string(cols) +
                        ", allowed 32, 64 or 128 dividing d_model, d_ff and n_heads*head_dim");
    }
    ModelSpec spec;
    spec.hparams = hp;
    if (hp.vocab_size > 256) {  // bytes only, then <|endoftext|> as the first special id
        spec.tokenizer.special_tokens.emplace_back("<|endoftext|>", 256);
        spec.tokenizer.eos_id = 256;
    }
    spec.metadata_json =
        "{\"generator\": \"random_model_spec\", \"seed\": " + std::to_string(seed) + "}";

    // Box-Muller on mt19937_64 bits: the same values on every platform and standard library.
    std::mt19937_64 rng(seed);
    bool have_spare = false;
    double spare = 0;
    auto gauss = [&]() {
        if (have_spare) {
            have_spare = false;
            return spare;
        }
        const double u1 = 1.0 - static_cast<double>(rng() >> 11) * 0x1.0p-53;  // (0, 1]
        const double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
        const double r = std::sqrt(-2.0 * std::log(u1));
        const double a = 6.283185307179586 * u2;
        spare = r * std::sin(a);
        have_spare = true;
        return r * std::cos(a);
    };
    for (const ExpectedTensor& e : expected_tensors(hp)) {
        TensorData t;
        t.name = e.name;
        t.shape = e.shape;
        const size_t n = e.is_norm ? static_cast<size_t>(e.shape[0])
                                   : static_cast<size_t>(e.shape[0] * e.shape[1]);
        t.values.resize(n);
        const bool bias = e.name.size() > 3 && (e.name.compare(e.name.size() - 3, 3, ".bq") == 0 ||
                                                e.name.compare(e.name.size() - 3, 3, ".bk") == 0 ||
                                                e.name.rfind("exit_gate.", 0) == 0);
        if (e.is_norm) {  // gains 1 + noise; biases (qk_bias, exit gate, §1b) small around 0
            t.dtype = DType::F32;
            for (float& v : t.values) v = static_cast<float>(bias ? 0.1 * gauss() : 1.0 + 0.05 * gauss());
        } else {
            t.dtype = dtype;
            t.group_size = group_size;
            const double sd = 1.0 / std::sqrt(static_cast<double>(e.shape[1]));
            for (float& v : t.values) v = static_cast<float>(sd * gauss());
        }
        spec.tensors.push_back(std::move(t));
    }
    return spec;
}

}  // namespace tinyloop
