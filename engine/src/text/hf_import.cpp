// tokenizer_spec_from_hf: a Hugging Face tokenizer.json (+ tokenizer_config.json) into an
// "hf_byte_bpe" TokenizerSpec (FORMAT.md §3b), and StandaloneTokenizer. Every option of the file
// that changes the ids is either carried over or refused by name: nothing is silently ignored.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "text/json_depth.h"
#include "text/tokenizer.h"

namespace tinyloop {

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxFileBytes = uint64_t{256} << 20;
constexpr size_t kMaxDepth = 64;

// Errors name the file and the field: "<path>: model.merges[3]: ...".
struct FileErrors {
    std::string path;
    [[noreturn]] void fail(const std::string& field, const std::string& what) const {
        throw Error(ErrorCode::InvalidArgument, path + ": " + field + ": " + what);
    }
};

std::string brief(const json& v) {
    std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

json read_json(const std::string& path) {
    const FileErrors e{path};
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) throw Error(ErrorCode::Io, path + ": cannot read: " + ec.message());
    if (size > kMaxFileBytes)
        e.fail("(file)", std::to_string(size) + " bytes, allowed at most " +
                             std::to_string(kMaxFileBytes) + " (256 MiB)");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(ErrorCode::Io, path + ": cannot open");
    std::string text(static_cast<size_t>(size), '\0');
    in.read(text.data(), static_cast<std::streamsize>(size));
    if (in.gcount() != static_cast<std::streamsize>(size))
        throw Error(ErrorCode::Io, path + ": short read");
    const size_t depth = json_nesting_depth(reinterpret_cast<const uint8_t*>(text.data()), text.size());
    if (depth > kMaxDepth)
        e.fail("(file)", "JSON nested " + std::to_string(depth) + " deep, allowed at most " +
                             std::to_string(kMaxDepth));
    try {
        return json::parse(text);
    } catch (const json::exception& x) {
        e.fail("(file)", std::string("not valid JSON: ") + x.what());
    }
}

bool is_null_or_absent(const json& obj, const char* key) {
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null();
}

bool get_bool(const FileErrors& e, const json& obj, const std::string& field, const char* key,
              bool dflt) {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) e.fail(field + "." + key, brief(*it) + ", allowed true or false");
    return it->get<bool>();
}

const std::string& get_str(const FileErrors& e, const json& v, const std::string& field) {
    if (!v.is_string()) e.fail(field, brief(v) + ", allowed a string");
    return v.get_ref<const std::string&>();
}

int32_t get_id(const FileErrors& e, const json& v, const std::string& field) {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0) ||
        v.get<uint64_t>() >= (uint64_t{1} << 22))
        e.fail(field, brief(v) + ", allowed an id 0 .. 4194303");
    return static_cast<int32_t>(v.get<int64_t>());
}

std::string type_of(const FileErrors& e, const json& v, const std::string& field) {
    if (!v.is_object()) e.fail(field, brief(v) + ", allowed an object with a \"type\"");
    const auto it = v.find("type");
    if (it == v.end()) e.fail(field + ".type", "missing");
    return get_str(e, *it, field + ".type");
}

// A literal for PCRE2: every ASCII punctuation character escaped (always literal after \).
std::string escape_literal(const std::string& s) {
    std::string out;
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x80 && !std::isalnum(u) && c != ' ') out += '\\';
        out += c;
    }
    return out;
}

void read_pre_tokenizer(const FileErrors& e, const json& p, const std::string& field,
                        TokenizerSpec& spec) {
    const std::string type = type_of(e, p, field);
    if (type == "Sequence") {
        const auto it = p.find("pretokenizers");
        if (it == p.end() || !it->is_array())
            e.fail(field + ".pretokenizers", "missing or not an array");
        for (size_t i = 0; i < it->size(); ++i)
            read_pre_tokenizer(e, (*it)[i], field + ".pretokenizers[" + std::to_string(i) + "]", spec);
        return;
    }
    HfPreStep s;
    if (type == "Split") {
        s.kind = "split";
        const auto pat = p.find("pattern");
        if (pat == p.end() || !pat->is_object() || pat->size() != 1)
            e.fail(field + ".pattern", "missing or not {\"Regex\": ...} / {\"String\": ...}");
        if (pat->contains("Regex"))
            s.pattern = get_str(e, pat->at("Regex"), field + ".pattern.Regex");
        else if (pat->contains("String"))
            s.pattern = escape_literal(get_str(e, pat->at("String"), field + ".pattern.String"));
        else
            e.fail(field + ".pattern", brief(*pat) + ", allowed {\"Regex\": ...} or {\"String\": ...}");
        const auto beh = p.find("behavior");
        if (beh == p.end()) e.fail(field + ".behavior", "missing");
        const std::string& b = get_str(e, *beh, field + ".behavior");
        static const std::pair<const char*, const char*> kMap[] = {
            {"Removed", "removed"},
            {"Isolated", "isolated"},
            {"MergedWithPrevious", "merged_with_previous"},
            {"MergedWithNext", "merged_with_next"},
            {"Contiguous", "contiguous"}};
        s.behavior.clear();
        for (const auto& [hf, ours] : kMap)
            if (b == hf) s.behavior = ours;
        if (s.behavior.empty())
            e.fail(field + ".behavior", "'" + b + "' unknown, allowed Removed, Isolated, "
                                        "MergedWithPrevious, MergedWithNext, Contiguous");
        s.invert = get_bool(e, p, field, "invert", false);
    } else if (type == "Digits") {
        s.kind = "digits";
        s.individual_digits = get_bool(e, p, field, "individual_digits", false);
    } else if (type == "ByteLevel") {
        s.kind = "byte_level";
        s.add_prefix_space = get_bool(e, p, field, "add_prefix_space", true);
        s.use_regex = get_bool(e, p, field, "use_regex", true);
        // trim_offsets changes offsets only, never ids.
        get_bool(e, p, field, "trim_offsets", true);
    } else {
        e.fail(field + ".type", "'" + type + "' not supported, allowed Sequence, Split, Digits, "
                                "ByteLevel");
    }
    spec.hf_pre.push_back(s);
}

// The ids the post-processor puts before and after a single sequence.
void read_post_processor(const FileErrors& e, const json& p, const std::string& field,
                         TokenizerSpec& spec) {
    if (p.is_null()) return;
    const std::string type = type_of(e, p, field);
    if (type == "ByteLevel") return;  // offsets only
    if (type == "Sequence") {
        const auto it = p.find("processors");
        if (it == p.end() || !it->is_array()) e.fail(field + ".processors", "missing or not an array");
        for (size_t i = 0; i < it->size(); ++i)
            read_post_processor(e, (*it)[i], field + ".processors[" + std::to_string(i) + "]", spec);
        return;
    }
    if (type == "RobertaProcessing" || type == "BertProcessing") {
        for (const char* key : {"cls", "sep"}) {
            const auto it = p.find(key);
            if (it == p.end() || !it->is_array() || it->size() != 2)
                e.fail(field + "." + key, "missing or not a [token, id] pair");
            const int32_t id = get_id(e, (*it)[1], field + "." + key + "[1]");
            (std::string(key) == "cls" ? spec.prefix_ids : spec.suffix_ids).push_back(id);
        }
        return;
    }
    if (type != "TemplateProcessing")
        e.fail(field + ".type", "'" + type + "' not supported, allowed TemplateProcessing, "
                                "ByteLevel, RobertaProcessing, BertProcessing, Sequence");
    const auto single = p.find("single");
    if (single == p.end() || !single->is_array()) e.fail(field + ".single", "missing or not an array");
    const auto specials = p.find("special_tokens");
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
        const json& item = (*single)[i];
        const std::string f = field + ".single[" + std::to_string(i) + "]";
        if (item.contains("Sequence")) {
            if (seen_sequence) e.fail(f, "a second sequence, allowed one in a single template");
            seen_sequence = true;
            continue;
        }
        if (!item.contains("SpecialToken") || !item.at("SpecialToken").is_object())
            e.fail(f, brief(item) + ", allowed {\"SpecialToken\": ...} or {\"Sequence\": ...}");
        const json& st = item.at("SpecialToken");
        const std::string name = get_str(e, st.value("id", json()), f + ".SpecialToken.id");
        if (specials == p.end() || !specials->is_object() || !specials->contains(name))
            e.fail(f + ".SpecialToken.id", "'" + name + "' not in " + field + ".special_tokens");
        const json& ids = specials->at(name).value("ids", json());
        if (!ids.is_array()) e.fail(field + ".special_tokens." + name + ".ids", "missing or not an array");
        for (size_t k = 0; k < ids.size(); ++k)
            (seen_sequence ? spec.suffix_ids : spec.prefix_ids)
                .push_back(get_id(e, ids[k], field + ".special_tokens." + name + ".ids[" +
                                                  std::to_string(k) + "]"));
    }
    if (!seen_sequence) e.fail(field + ".single", "no {\"Sequence\": ...}, allowed exactly one");
}

// The id of a token string named in tokenizer_config.json: an added token, else the vocab's.
int32_t token_id(const TokenizerSpec& spec, const std::string& content) {
    for (const auto& a : spec.added_tokens)
        if (a.content == content) return a.id;
    for (size_t i = 0; i < spec.vocab.size(); ++i)
        if (spec.vocab[i] == content) return static_cast<int32_t>(i);
    return -1;
}

}  // namespace

TokenizerSpec tokenizer_spec_from_hf(const std::string& tokenizer_json_path,
                                     const std::string& tokenizer_config_path,
                                     std::string* chat_template) {
    const FileErrors e{tokenizer_json_path};
    const json root = read_json(tokenizer_json_path);
    if (!root.is_object()) e.fail("(file)", "not a JSON object");
    TokenizerSpec spec;
    spec.type = "hf_byte_bpe";
    spec.pretokenizer.clear();

    for (const char* key : {"truncation", "padding"})
        if (!is_null_or_absent(root, key))
            e.fail(key, "set, allowed null (the runtime neither truncates nor pads)");
    if (!is_null_or_absent(root, "normalizer")) {
        const json& n = root.at("normalizer");
        const std::string type = type_of(e, n, "normalizer");
        if (!(type == "Sequence" && n.value("normalizers", json::array()).empty()))
            e.fail("normalizer.type", "'" + type + "' not supported, allowed null");
    }

    // model: BPE and its options.
    const auto mit = root.find("model");
    if (mit == root.end() || !mit->is_object()) e.fail("model", "missing or not an object");
    const json& model = *mit;
    if (model.contains("type") && get_str(e, model.at("type"), "model.type") != "BPE")
        e.fail("model.type", "'" + model.at("type").get<std::string>() + "' not supported, allowed BPE");
    if (!is_null_or_absent(model, "dropout") &&
        !(model.at("dropout").is_number() && model.at("dropout").get<double>() == 0.0))
        e.fail("model.dropout", brief(model.at("dropout")) + ", allowed null (no BPE dropout)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (!is_null_or_absent(model, key) && model.at(key) != "")
            e.fail(std::string("model.") + key, brief(model.at(key)) + ", allowed null or \"\"");
    if (get_bool(e, model, "model", "byte_fallback", false))
        e.fail("model.byte_fallback", "true, allowed false (byte-level BPE has every byte)");
    spec.ignore_merges = get_bool(e, model, "model", "ignore_merges", false);

    const auto vit = model.find("vocab");
    if (vit == model.end() || !vit->is_object()) e.fail("model.vocab", "missing or not an object");
    for (const auto& [token, idv] : vit->items()) {
        const int32_t id = get_id(e, idv, "model.vocab." + token);
        if (static_cast<size_t>(id) >= spec.vocab.size()) spec.vocab.resize(static_cast<size_t>(id) + 1);
        if (!spec.vocab[static_cast<size_t>(id)].empty())
            e.fail("model.vocab." + token, "id " + std::to_string(id) + " also names '" +
                                               spec.vocab[static_cast<size_t>(id)] +
                                               "', allowed one token per id");
        if (token.empty()) e.fail("model.vocab", "an empty token string, allowed non-empty");
        spec.vocab[static_cast<size_t>(id)] = token;
    }
    std::unordered_map<std::string, int32_t> index;
    for (size_t i = 0; i < spec.vocab.size(); ++i)
        if (!spec.vocab[i].empty()) index.emplace(spec.vocab[i], static_cast<int32_t>(i));
    if (!is_null_or_absent(model, "unk_token")) {
        // Only used for a character the vocab lacks; refused unless every byte is in the vocab.
        for (const auto& c : byte_level_chars())
            if (!index.count(c))
                e.fail("model.unk_token", "set while the vocab lacks a byte's character, allowed "
                                          "null (an unknown-token fallback is not supported)");
    }
    const auto merges = model.find("merges");
    if (merges == model.end() || !merges->is_array()) e.fail("model.merges", "missing or not an array");
    spec.merges.reserve(merges->size());
    for (size_t k = 0; k < merges->size(); ++k) {
        const json& m = (*merges)[k];
        const std::string f = "model.merges[" + std::to_string(k) + "]";
        std::string a, b;
        if (m.is_string()) {  // older files: "left right"
            const std::string& s = m.get_ref<const std::string&>();
            const size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                e.fail(f, brief(m) + ", allowed \"left right\" (one space)");
            a = s.substr(0, sp);
            b = s.substr(sp + 1);
        } else if (m.is_array() && m.size() == 2) {
            a = get_str(e, m[0], f + "[0]");
            b = get_str(e, m[1], f + "[1]");
        } else {
            e.fail(f, brief(m) + ", allowed [\"left\", \"right\"] or \"left right\"");
        }
        const auto ia = index.find(a), ib = index.find(b);
        if (ia == index.end()) e.fail(f, "'" + a + "' is not a token of model.vocab");
        if (ib == index.end()) e.fail(f, "'" + b + "' is not a token of model.vocab");
        if (!index.count(a + b)) e.fail(f, "the merged token '" + a + b + "' is not in model.vocab");
        spec.merges.emplace_back(ia->second, ib->second);
    }

    if (!is_null_or_absent(root, "added_tokens")) {
        const json& at = root.at("added_tokens");
        if (!at.is_array()) e.fail("added_tokens", "not an array");
        for (size_t k = 0; k < at.size(); ++k) {
            const json& t = at[k];
            const std::string f = "added_tokens[" + std::to_string(k) + "]";
            if (!t.is_object()) e.fail(f, "not an object");
            HfAddedToken a;
            a.id = get_id(e, t.value("id", json()), f + ".id");
            a.content = get_str(e, t.value("content", json()), f + ".content");
            a.special = get_bool(e, t, f, "special", false);
            a.normalized = get_bool(e, t, f, "normalized", !a.special);
            for (const char* key : {"lstrip", "rstrip", "single_word"})
                if (get_bool(e, t, f, key, false))
                    e.fail(f + "." + key, "true, not supported, allowed false");
            spec.added_tokens.push_back(a);
        }
    }

    if (!is_null_or_absent(root, "pre_tokenizer"))
        read_pre_tokenizer(e, root.at("pre_tokenizer"), "pre_tokenizer", spec);
    read_post_processor(e, root.value("post_processor", json()), "post_processor", spec);
    {
        const json d = root.value("decoder", json());
        if (d.is_null()) e.fail("decoder", "null, allowed ByteLevel");
        const std::string type = type_of(e, d, "decoder");
        if (type != "ByteLevel") e.fail("decoder.type", "'" + type + "' not supported, allowed ByteLevel");
    }
    if (!spec.prefix_ids.empty()) spec.bos_id = spec.prefix_ids.front();

    if (chat_template) chat_template->clear();
    if (!tokenizer_config_path.empty()) {
        const FileErrors c{tokenizer_config_path};
        const json cfg = read_json(tokenizer_config_path);
        if (!cfg.is_object()) c.fail("(file)", "not a JSON object");
        for (const char* key : {"bos_token", "eos_token"}) {
            const auto it = cfg.find(key);
            if (it == cfg.end() || it->is_null()) continue;
            const json& v = it->is_object() ? it->value("content", json()) : *it;
            const std::string& content = get_str(c, v, std::string(key));
            const int32_t id = token_id(spec, content);
            if (id < 0)
                c.fail(key, "'" + content + "' is not a token of " + tokenizer_json_path);
            (std::string(key) == "bos_token" ? spec.bos_id : spec.eos_id) = id;
        }
        if (chat_template) {
            const auto it = cfg.find("chat_template");
            if (it != cfg.end() && !it->is_null()) {
                if (it->is_string()) {
                    *chat_template = it->get<std::string>();
                } else if (it->is_array()) {  // named templates: the "default" one
                    for (const json& t : *it)
                        if (t.is_object() && t.value("name", "") == "default")
                            *chat_template = get_str(c, t.value("template", json()), "chat_template[default].template");
                    if (chat_template->empty())
                        c.fail("chat_template", "a list without a \"default\" template");
                } else {
                    c.fail("chat_template", brief(*it) + ", allowed a string or a list of named templates");
                }
            } else {
                // transformers >= 4.43 may save the template beside the config.
                const auto jinja = std::filesystem::path(tokenizer_config_path).parent_path() / "chat_template.jinja";
                if (std::filesystem::exists(jinja)) {
                    std::ifstream in(jinja, std::ios::binary);
                    *chat_template = std::string(std::istreambuf_iterator<char>(in), {});
                }
            }
        }
    }

    try {
        Tokenizer check;
        check.init(spec, 0);
    } catch (const Error& x) {
        throw Error(x.code(), tokenizer_json_path + ": " + x.what());
    }
    return spec;
}

struct StandaloneTokenizer::Impl {
    Tokenizer tok;
};

StandaloneTokenizer::StandaloneTokenizer(const TokenizerSpec& spec, int vocab_size)
    : impl_(std::make_unique<Impl>()) {
    impl_->tok.init(spec, vocab_size);
}
StandaloneTokenizer::~StandaloneTokenizer() = default;

std::vector<int32_t> StandaloneTokenizer::encode(std::string_view text, bool parse_special,
                                                 bool add_special) const {
    return impl_->tok.encode(text, parse_special, add_special);
}

std::string StandaloneTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (!impl_->tok.valid_id(ids[i]))
            throw Error(ErrorCode::InvalidArgument,
                        "ids[" + std::to_string(i) + "]: " + std::to_string(ids[i]) +
                            " is outside the tokenizer's ids [0, " +
                            std::to_string(impl_->tok.n_ids()) + ")");
        if (skip_special && impl_->tok.is_special(ids[i])) continue;
        out += impl_->tok.bytes_of(ids[i]);
    }
    return out;
}

int StandaloneTokenizer::n_ids() const { return impl_->tok.n_ids(); }

}  // namespace tinyloop
