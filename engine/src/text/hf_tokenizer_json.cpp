// The "hf_byte_bpe" tokenizer object of a .tinyloop header (FORMAT.md §3b).
#include "text/hf_tokenizer_json.h"

namespace tinyloop {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string brief(const json& v) {
    std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

}  // namespace

ojson hf_tokenizer_to_json(const TokenizerSpec& spec) {
    ojson t;
    t["type"] = spec.type;
    t["vocab"] = spec.vocab;
    t["merges"] = ojson::array();
    for (const auto& [a, b] : spec.merges) t["merges"].push_back(ojson::array({a, b}));
    t["ignore_merges"] = spec.ignore_merges;
    t["pre_tokenizer"] = ojson::array();
    for (const HfPreStep& s : spec.hf_pre) {
        ojson j;
        j["kind"] = s.kind;
        if (s.kind == "split") {
            j["pattern"] = s.pattern;
            j["behavior"] = s.behavior;
            j["invert"] = s.invert;
        } else if (s.kind == "digits") {
            j["individual_digits"] = s.individual_digits;
        } else {
            j["add_prefix_space"] = s.add_prefix_space;
            j["use_regex"] = s.use_regex;
        }
        t["pre_tokenizer"].push_back(std::move(j));
    }
    t["added_tokens"] = ojson::array();
    for (const HfAddedToken& a : spec.added_tokens)
        t["added_tokens"].push_back(
            {{"id", a.id}, {"content", a.content}, {"special", a.special}, {"normalized", a.normalized}});
    t["post_processor"] = {{"prefix", spec.prefix_ids}, {"suffix", spec.suffix_ids}};
    t["eos_id"] = spec.eos_id < 0 ? ojson(nullptr) : ojson(spec.eos_id);
    t["bos_id"] = spec.bos_id < 0 ? ojson(nullptr) : ojson(spec.bos_id);
    // Only when there are any: a file imported without them reads back the same.
    if (!spec.stop_ids.empty()) t["stop_ids"] = spec.stop_ids;
    return t;
}

void hf_tokenizer_from_json(const json& t, TokenizerSpec& spec,
                            const std::function<void(const std::string&)>& bad_cb) {
    auto bad = [&](const std::string& m) {
        bad_cb(m);
        throw Error(ErrorCode::Internal, m);  // bad_cb throws; this keeps the lambda noreturn
    };
    auto get = [&](const json& obj, const std::string& field, const char* key) -> const json& {
        const auto it = obj.find(key);
        if (it == obj.end()) bad(field + "." + key + ": missing");
        return *it;
    };
    auto boolean = [&](const json& v, const std::string& field) {
        if (!v.is_boolean()) bad(field + ": " + brief(v) + ", allowed true or false");
        return v.get<bool>();
    };
    auto id = [&](const json& v, const std::string& field) -> int32_t {
        if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0) ||
            v.get<uint64_t>() >= (uint64_t{1} << 22))
            bad(field + ": " + brief(v) + ", allowed an id 0 .. 4194303");
        return static_cast<int32_t>(v.get<int64_t>());
    };
    auto string = [&](const json& v, const std::string& field) -> const std::string& {
        if (!v.is_string()) bad(field + ": " + brief(v) + ", allowed a string");
        return v.get_ref<const std::string&>();
    };
    auto array = [&](const json& v, const std::string& field) -> const json& {
        if (!v.is_array()) bad(field + ": " + brief(v) + ", allowed an array");
        return v;
    };
    const std::string T = "tokenizer";
    spec.type = "hf_byte_bpe";
    spec.pretokenizer.clear();
    for (const auto& [key, value] : t.items()) {
        static const char* kKeys[] = {"type", "vocab", "merges", "ignore_merges", "pre_tokenizer",
                                      "added_tokens", "post_processor", "eos_id", "bos_id", "stop_ids"};
        bool known = false;
        for (const char* k : kKeys) known = known || key == k;
        if (!known)
            bad(T + "." + key.substr(0, 40) + ": unknown key, allowed type, vocab, merges, "
                                              "ignore_merges, pre_tokenizer, added_tokens, "
                                              "post_processor, eos_id, bos_id, stop_ids");
    }
    const json& vocab = array(get(t, T, "vocab"), T + ".vocab");
    spec.vocab.reserve(vocab.size());
    for (size_t i = 0; i < vocab.size(); ++i)
        spec.vocab.push_back(string(vocab[i], T + ".vocab[" + std::to_string(i) + "]"));
    const json& merges = array(get(t, T, "merges"), T + ".merges");
    spec.merges.reserve(merges.size());
    for (size_t k = 0; k < merges.size(); ++k) {
        const std::string f = T + ".merges[" + std::to_string(k) + "]";
        const json& m = merges[k];
        if (!m.is_array() || m.size() != 2) bad(f + ": " + brief(m) + ", allowed a pair [a, b] of ids");
        spec.merges.emplace_back(id(m[0], f), id(m[1], f));
    }
    spec.ignore_merges = boolean(get(t, T, "ignore_merges"), T + ".ignore_merges");
    const json& pre = array(get(t, T, "pre_tokenizer"), T + ".pre_tokenizer");
    for (size_t k = 0; k < pre.size(); ++k) {
        const std::string f = T + ".pre_tokenizer[" + std::to_string(k) + "]";
        const json& p = pre[k];
        if (!p.is_object()) bad(f + ": " + brief(p) + ", allowed an object");
        HfPreStep s;
        s.kind = string(get(p, f, "kind"), f + ".kind");
        if (s.kind == "split") {
            s.pattern = string(get(p, f, "pattern"), f + ".pattern");
            s.behavior = string(get(p, f, "behavior"), f + ".behavior");
            s.invert = boolean(get(p, f, "invert"), f + ".invert");
        } else if (s.kind == "digits") {
            s.individual_digits = boolean(get(p, f, "individual_digits"), f + ".individual_digits");
        } else if (s.kind == "byte_level") {
            s.add_prefix_space = boolean(get(p, f, "add_prefix_space"), f + ".add_prefix_space");
            s.use_regex = boolean(get(p, f, "use_regex"), f + ".use_regex");
        } else {
            bad(f + ".kind: " + brief(p.at("kind")) + ", allowed split, digits, byte_level");
        }
        spec.hf_pre.push_back(std::move(s));
    }
    const json& added = array(get(t, T, "added_tokens"), T + ".added_tokens");
    for (size_t k = 0; k < added.size(); ++k) {
        const std::string f = T + ".added_tokens[" + std::to_string(k) + "]";
        const json& a = added[k];
        if (!a.is_object()) bad(f + ": " + brief(a) + ", allowed an object");
        HfAddedToken x;
        x.id = id(get(a, f, "id"), f + ".id");
        x.content = string(get(a, f, "content"), f + ".content");
        x.special = boolean(get(a, f, "special"), f + ".special");
        x.normalized = boolean(get(a, f, "normalized"), f + ".normalized");
        spec.added_tokens.push_back(std::move(x));
    }
    const json& post = get(t, T, "post_processor");
    if (!post.is_object()) bad(T + ".post_processor: " + brief(post) + ", allowed {\"prefix\": [...], \"suffix\": [...]}");
    for (const char* key : {"prefix", "suffix"}) {
        const std::string f = T + ".post_processor." + key;
        const json& ids = array(get(post, T + ".post_processor", key), f);
        for (size_t k = 0; k < ids.size(); ++k)
            (std::string(key) == "prefix" ? spec.prefix_ids : spec.suffix_ids)
                .push_back(id(ids[k], f + "[" + std::to_string(k) + "]"));
    }
    for (const char* key : {"eos_id", "bos_id"}) {
        const auto it = t.find(key);
        const int32_t v = (it == t.end() || it->is_null()) ? -1 : id(*it, T + "." + key);
        (std::string(key) == "eos_id" ? spec.eos_id : spec.bos_id) = v;
    }
    if (const auto it = t.find("stop_ids"); it != t.end()) {
        const json& ids = array(*it, T + ".stop_ids");
        if (ids.size() > 64) bad(T + ".stop_ids: " + std::to_string(ids.size()) + " ids, allowed at most 64");
        for (size_t k = 0; k < ids.size(); ++k) spec.stop_ids.push_back(id(ids[k], T + ".stop_ids[" + std::to_string(k) + "]"));
    }
}

}  // namespace tinyloop
