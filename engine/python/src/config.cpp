// GenerateConfig as a Python class (defaults from the C++ struct), keyword arguments applied
// onto it by name, prompt conversion and the result dictionaries.
#include <cmath>
#include <stdexcept>

#include "common.h"

namespace tinyloop_py {

namespace tl = tinyloop;

SharedModel PyModel::get() const {
    if (!m_) throw py::value_error("model is closed (Model.free() was called or its with-block ended)");
    return m_;
}

std::vector<int32_t> prompt_ids(const tl::Model* m, const py::handle& prompt) {
    if (py::isinstance<py::str>(prompt)) return tl::tokenize(m, prompt.cast<std::string>());
    if (py::isinstance<py::bytes>(prompt)) return tl::tokenize(m, prompt.cast<std::string>());
    if (!py::isinstance<py::sequence>(prompt))
        throw py::type_error("prompt: expected a str or a sequence of token ids, got " +
                             std::string(py::str(prompt.get_type().attr("__name__"))));
    std::vector<int32_t> ids;
    for (const auto& item : prompt) {
        if (!py::isinstance<py::int_>(item) || py::isinstance<py::bool_>(item))
            throw py::type_error("prompt: token ids must be int, got " +
                                 std::string(py::str(item.get_type().attr("__name__"))));
        const long long v = item.cast<long long>();
        if (v < INT32_MIN || v > INT32_MAX)
            throw py::value_error("prompt: token id " + std::to_string(v) + " is outside int32");
        ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
}

namespace {

tl::EarlyExitCriterion parse_criterion(const std::string& s) {
    tl::EarlyExitCriterion c;
    if (tl::parse_criterion(s, &c)) return c;
    throw py::value_error("early_exit_criterion: '" + s +
                          "' is not one of hidden_l2, logit_margin, kl, entropy_delta, argmax_stable, gate_stop, "
                          "gate_select, reverse_kl, minp_kl (or l2, margin, entropy, argmax, gate)");
}

// Every name make_config accepts: the codec's GenerateConfig fields (grammar goes to the call)
// and the OpenAI-style aliases stop (stop_strings) and seed (sample_seed).
bool is_field(const std::string& k) {
    if (k == "stop" || k == "seed") return true;
    return k != "grammar" && tl::find_config_field(k) != nullptr;
}

// logit_bias: {id: bias}; keys may be int or str holding an int (OpenAI's JSON boundary).
std::vector<std::pair<int32_t, float>> parse_logit_bias(const py::handle& obj) {
    std::vector<std::pair<int32_t, float>> out;
    if (obj.is_none()) return out;
    if (!py::isinstance<py::dict>(obj)) throw py::type_error("logit_bias: expected a dict {token_id: bias}");
    for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(obj)) {
        long long id;
        if (py::isinstance<py::int_>(k) && !py::isinstance<py::bool_>(k)) {
            id = k.cast<long long>();
        } else if (py::isinstance<py::str>(k)) {
            const std::string s = k.cast<std::string>();
            size_t used = 0;
            try {
                id = std::stoll(s, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used == 0 || used != s.size())
                throw py::value_error("logit_bias: key '" + s + "' is not a token id");
        } else {
            throw py::type_error("logit_bias: keys must be token ids (int or str of an int)");
        }
        if (id < INT32_MIN || id > INT32_MAX)
            throw py::value_error("logit_bias: token id " + std::to_string(id) + " is outside int32");
        if (!py::isinstance<py::float_>(v) && !py::isinstance<py::int_>(v))
            throw py::type_error("logit_bias: bias for token " + std::to_string(id) + " must be a number");
        out.emplace_back(static_cast<int32_t>(id), v.cast<float>());
    }
    return out;
}

std::vector<std::string> parse_stop(const py::handle& obj) {
    if (obj.is_none()) return {};
    if (py::isinstance<py::str>(obj)) return {obj.cast<std::string>()};
    if (!py::isinstance<py::sequence>(obj)) throw py::type_error("stop: expected a str or a list of str");
    std::vector<std::string> out;
    for (const auto& s : obj) {
        if (!py::isinstance<py::str>(s)) throw py::type_error("stop: expected a str or a list of str");
        out.push_back(s.cast<std::string>());
    }
    return out;
}

// early_stopping as Hugging Face spells it: True, False or "never".
py::object early_stopping_value(tl::EarlyStopping e) {
    if (e == tl::EarlyStopping::Never) return py::str("never");
    return py::bool_(e == tl::EarlyStopping::WhenFull);
}

tl::EarlyStopping parse_early_stopping(const py::handle& v) {
    if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? tl::EarlyStopping::WhenFull : tl::EarlyStopping::Heuristic;
    if (py::isinstance<py::str>(v) && v.cast<std::string>() == "never") return tl::EarlyStopping::Never;
    throw py::value_error("early_stopping: expected True, False or \"never\", got " + std::string(py::repr(v)));
}

py::dict logit_bias_dict(const tl::GenerateConfig& c) {
    py::dict d;
    for (const auto& [id, b] : c.logit_bias) d[py::int_(id)] = b;
    return d;
}

}  // namespace

tl::GenerateConfig make_config(const py::object& base, const py::kwargs& kwargs, const char* fn) {
    tl::GenerateConfig c;
    if (kwargs.contains("grammar"))
        throw py::type_error(std::string(fn) + "(): grammar must be given to the call, not to GenerateConfig");
    if (!base.is_none()) {
        if (!py::isinstance<tl::GenerateConfig>(base))
            throw py::type_error(std::string(fn) + "(): config must be a GenerateConfig or None");
        c = base.cast<tl::GenerateConfig>();
    }
    py::object ref = py::cast(&c, py::return_value_policy::reference);
    for (const auto& [k, v] : kwargs) {
        const std::string key = k.cast<std::string>();
        if (!is_field(key))
            throw py::type_error(std::string(fn) + "() got an unexpected keyword argument '" + key + "'");
        try {
            if (py::hasattr(py::type::of(ref), key.c_str()))
                py::setattr(ref, key.c_str(), v);
            else
                tl::set_config_field(c, key, py_to_json(v));
        } catch (py::error_already_set& e) {
            if (e.matches(PyExc_TypeError))
            {
                std::string doc = py::str(py::type::of(ref).attr(key.c_str()).attr("__doc__"));
                doc = doc.substr(0, doc.find(':'));
                throw py::type_error(key + ": expected " + doc + ", got " +
                                     std::string(py::str(v.get_type().attr("__name__"))));
            }
            throw;
        }
    }
    return c;
}

CallOptions take_call_options(py::kwargs& kwargs) {
    CallOptions o;
    if (kwargs.contains("grammar")) {
        py::object g = kwargs["grammar"];
        PyDict_DelItemString(kwargs.ptr(), "grammar");
        if (py::isinstance<PyGrammar>(g)) {
            o.grammar = g.cast<const PyGrammar&>().g;
        } else if (py::isinstance<py::str>(g)) {
            o.grammar = std::shared_ptr<tl::Grammar>(tl::Owned<tl::Grammar>(tl::parse_grammar(g.cast<std::string>())));
        } else if (!g.is_none()) {
            throw py::type_error("grammar: expected a Grammar, GBNF text or None");
        }
    }
    if (kwargs.contains("events")) {
        o.events = kwargs["events"].cast<bool>();
        PyDict_DelItemString(kwargs.ptr(), "events");
    }
    if (kwargs.contains("lens")) {
        o.lens = kwargs["lens"].cast<bool>();
        PyDict_DelItemString(kwargs.ptr(), "lens");
    }
    if (kwargs.contains("lens_top_k")) {
        o.lens_top_k = kwargs["lens_top_k"].cast<int>();
        PyDict_DelItemString(kwargs.ptr(), "lens_top_k");
        if (o.lens_top_k < 1 || o.lens_top_k > 64)
            throw py::value_error("lens_top_k: " + std::to_string(o.lens_top_k) + " is outside [1, 64]");
    }
    return o;
}

py::object json_to_py(const nlohmann::json& j) {
    switch (j.type()) {
        case nlohmann::json::value_t::null: return py::none();
        case nlohmann::json::value_t::boolean: return py::bool_(j.get<bool>());
        case nlohmann::json::value_t::number_integer: return py::int_(j.get<long long>());
        case nlohmann::json::value_t::number_unsigned: return py::int_(j.get<unsigned long long>());
        case nlohmann::json::value_t::number_float: return py::float_(j.get<double>());
        case nlohmann::json::value_t::string: {
            const auto& s = j.get_ref<const std::string&>();
            return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t)s.size(), "replace"));
        }
        case nlohmann::json::value_t::array: {
            py::list l;
            for (const auto& x : j) l.append(json_to_py(x));
            return l;
        }
        case nlohmann::json::value_t::object: {
            py::dict d;
            for (auto it = j.begin(); it != j.end(); ++it) d[py::str(it.key())] = json_to_py(it.value());
            return d;
        }
        default: return py::none();
    }
}

nlohmann::json py_to_json(const py::handle& v) {
    if (v.is_none()) return nullptr;
    if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
    if (py::isinstance<py::int_>(v)) return v.cast<long long>();
    if (py::isinstance<py::float_>(v)) return v.cast<double>();
    if (py::isinstance<py::str>(v)) return v.cast<std::string>();
    if (py::isinstance<py::dict>(v)) {
        nlohmann::json o = nlohmann::json::object();
        for (const auto& [k, x] : py::reinterpret_borrow<py::dict>(v)) o[std::string(py::str(k))] = py_to_json(x);
        return o;
    }
    if (py::isinstance<py::sequence>(v)) {
        nlohmann::json a = nlohmann::json::array();
        for (const auto& x : v) a.push_back(py_to_json(x));
        return a;
    }
    throw py::type_error("expected a JSON-like value, got " + std::string(py::str(v.get_type().attr("__name__"))));
}

py::dict stats_dict(const tl::GenerateStats& s) { return py::dict(json_to_py(tl::stats_to_json(s))); }

py::dict event_dict(const tl::TokenEvent& ev) { return py::dict(json_to_py(tl::event_to_json(ev))); }

py::dict result_dict(const tl::GenerateResult& r, const std::vector<tl::TokenEvent>* events) {
    py::dict d;
    const auto pl = static_cast<std::ptrdiff_t>(r.prompt_len);
    d["tokens"] = r.tokens;
    d["prompt_ids"] = std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + pl);
    d["output_ids"] = std::vector<int32_t>(r.tokens.begin() + pl, r.tokens.end());
    d["text"] = py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(r.text.data(), (Py_ssize_t)r.text.size(), "replace"));
    d["stats"] = stats_dict(r.stats);
    if (!r.sequences.empty()) d["sequences"] = json_to_py(tl::sequences_to_json(r.sequences));
    if (events) {
        py::list l;
        for (const auto& ev : *events) l.append(event_dict(ev));
        d["events"] = l;
    }
    return d;
}

void register_config(py::module_& m) {
    using C = tl::GenerateConfig;
    py::class_<C>(m, "GenerateConfig",
                  "Decode settings (the seed's GenerateConfig). Every generate* function takes one as\n"
                  "`config=` and/or its fields as keyword arguments (keywords win). Defaults are the\n"
                  "C++ defaults; the engine validates ranges when a call starts and raises ValueError\n"
                  "naming the field.")
        .def(py::init([](const py::kwargs& kw) { return make_config(py::none(), kw, "GenerateConfig"); }),
             "GenerateConfig(**fields): a config with the C++ defaults, then the given fields.")
        .def_readwrite("max_tokens", &C::max_tokens, "int: upper bound on emitted tokens, >= 0 (default 64)")
        .def_readwrite("loops", &C::loops, "int: loop depth 1..max_loops; 0 = the model's default_loops (default 0)")
        .def_readwrite("temperature", &C::temperature, "float: >= 0; <= 0.01 is greedy argmax (default 0)")
        .def_readwrite("top_k", &C::top_k, "int: keep the k most likely tokens when sampling, >= 1 (default 50)")
        .def_readwrite("top_p", &C::top_p, "float: nucleus threshold in (0, 1]; 1 disables (default 1)")
        .def_readwrite("min_p", &C::min_p, "float: drop tokens with p < min_p * p_max, [0, 1] (default 0)")
        .def_readwrite("cache_window", &C::cache_window, "int: attend to the last W positions; 0 = unlimited (default 0)")
        .def_readwrite("repetition_penalty", &C::repetition_penalty,
                       "float: HF-style penalty > 0 over prompt + output; 1 disables (default 1)")
        .def_readwrite("frequency_penalty", &C::frequency_penalty,
                       "float: minus penalty * count(token in output), [-2, 2] (default 0)")
        .def_readwrite("presence_penalty", &C::presence_penalty,
                       "float: minus penalty if the token is in the output, [-2, 2] (default 0)")
        .def_property(
            "logit_bias", [](const C& c) { return logit_bias_dict(c); },
            [](C& c, const py::object& v) { c.logit_bias = parse_logit_bias(v); },
            "dict[int, float]: bias in [-100, 100] added to a token's logit before the penalties (HF's order); "
            "keys may be str holding an int (OpenAI JSON) (default {})")
        .def_readwrite("stop_sequences", &C::stop_sequences,
                       "list[list[int]]: token-id tails that stop decoding; kept in the output (default [])")
        .def_readwrite("stop_strings", &C::stop_strings,
                       "list[str]: texts that stop decoding; excluded from the text (OpenAI stop) (default [])")
        .def_property(
            "stop", [](const C& c) { return c.stop_strings; },
            [](C& c, const py::object& v) { c.stop_strings = parse_stop(v); },
            "str | list[str] | None: alias of stop_strings (OpenAI's `stop`)")
        .def_readwrite("ignore_eos", &C::ignore_eos, "bool: keep generating past the EOS token (default False)")
        .def_readwrite("max_time", &C::max_time, "float: wall-clock seconds for the call, >= 0; 0 = no limit (default 0)")
        .def_readwrite("no_repeat_ngram_size", &C::no_repeat_ngram_size,
                       "int: n > 0 bans a token that would repeat an n-gram of prompt + output (default 0)")
        .def_readwrite("bad_words", &C::bad_words, "list[list[int]]: token sequences never emitted (default [])")
        .def_readwrite("beam_size", &C::beam_size, "int: 0 or 1 = sampling; >= 2 beam search (default 0)")
        .def_readwrite("length_penalty", &C::length_penalty, "float: beam only; rank by logp / len^x (default 1)")
        .def_property(
            "early_stopping", [](const C& c) { return early_stopping_value(c.early_stopping); },
            [](C& c, const py::object& v) { c.early_stopping = parse_early_stopping(v); },
            "bool | 'never': beam only, HF's early_stopping (default False)")
        .def_readwrite("renormalize_logits", &C::renormalize_logits,
                       "bool: beam only; log-softmax again after the processors (default False)")
        .def_readwrite("min_new_tokens", &C::min_new_tokens, "int: EOS banned until this many tokens are emitted (default 0)")
        .def_readwrite("min_length", &C::min_length, "int: EOS banned until prompt + output hold this many (default 0)")
        .def_readwrite("forced_eos_token_id", &C::forced_eos_token_id,
                       "int: the only token allowed as the last of max_tokens; -1 off (default -1)")
        .def_readwrite("exponential_decay_length_penalty", &C::exponential_decay_length_penalty,
                       "tuple[int, float] | None: (start_index, decay_factor) raising EOS's score past start_index "
                       "new tokens (default None)")
        .def_readwrite("suppress_tokens", &C::suppress_tokens, "list[int]: token ids never emitted (default [])")
        .def_readwrite("begin_suppress_tokens", &C::begin_suppress_tokens,
                       "list[int]: token ids banned for the first new token (default [])")
        .def_readwrite("typical_p", &C::typical_p, "float: sampling only; locally typical mass in (0, 1] (default 1)")
        .def_readwrite("epsilon_cutoff", &C::epsilon_cutoff, "float: sampling only; drop p < this, [0, 1) (default 0)")
        .def_readwrite("eta_cutoff", &C::eta_cutoff,
                       "float: sampling only; drop p < min(eta, sqrt(eta) e^-entropy), [0, 1) (default 0)")
        .def_readwrite("num_return_sequences", &C::num_return_sequences,
                       "int: outputs, 1..64; beam's best N (<= beam_size) or N samples seeded seed + i (default 1)")
        .def_readwrite("num_beam_groups", &C::num_beam_groups,
                       "int: beam only; diverse beam search in groups of beam_size / num_beam_groups (default 1)")
        .def_readwrite("diversity_penalty", &C::diversity_penalty,
                       "float: group beam only; minus x per earlier group's beam that chose the id, [0, 100] (default 0)")
        .def_property(
            "force_words", [](const C& c) { return json_to_py(tl::config_to_json(c).at("force_words")); },
            [](C& c, const py::object& v) { tl::set_config_field(c, "force_words", py_to_json(v)); },
            "list[list[int] | list[list[int]]]: beam only; HF's force_words_ids, each entry a word or its "
            "alternatives, all in the output (default [])")
        .def_property("early_exit_patience", [](const C& c) { return c.early_exit.patience; }, [](C& c, decltype(tl::EarlyExitPolicy::patience) v) { c.early_exit.patience = v; },
                       "int: 0 disables early exit; > 0 consecutive stable probes before exiting (default 0)")
        .def_property("early_exit_min_L", [](const C& c) { return c.early_exit.min_L; }, [](C& c, decltype(tl::EarlyExitPolicy::min_L) v) { c.early_exit.min_L = v; }, "int: first depth probed, 1..max_loops (default 2)")
        .def_property("early_exit_peek_every", [](const C& c) { return c.early_exit.peek_every; }, [](C& c, decltype(tl::EarlyExitPolicy::peek_every) v) { c.early_exit.peek_every = v; }, "int: probe cadence, >= 1 (default 1)")
        .def_property("early_exit_logit_margin", [](const C& c) { return c.early_exit.logit_margin; }, [](C& c, decltype(tl::EarlyExitPolicy::logit_margin) v) { c.early_exit.logit_margin = v; },
                       "float: > 0 switches to logit-margin stability (default 0)")
        .def_property(
            "early_exit_criterion", [](const C& c) { return std::string(tl::criterion_name(c.early_exit.criterion)); },
            [](C& c, const std::string& s) { c.early_exit.criterion = parse_criterion(s); },
            "str: hidden_l2 | logit_margin | kl | entropy_delta | argmax_stable | gate_stop | gate_select | "
            "reverse_kl | minp_kl (default hidden_l2)")
        .def_property("early_exit_threshold", [](const C& c) { return c.early_exit.threshold; }, [](C& c, decltype(tl::EarlyExitPolicy::threshold) v) { c.early_exit.threshold = v; }, "float: stability threshold > 0 (default 0.05)")
        .def_readwrite("sample_seed", &C::sample_seed, "int: RNG seed, 0..2^64-1 (default 0)")
        .def_property(
            "kv_cache", [](const C& c) { return std::string(tl::kv_cache_type_name(c.kv_cache)); },
            [](C& c, const std::string& s) { c.kv_cache = tl::parse_kv_cache_type(s); },
            "str: KV cache layout, f32 | int8 (per-head, per-position scales) (default f32)")
        .def_property(
            "kv_sharing", [](const C& c) { return tl::kv_sharing_name(c.kv_sharing); },
            [](C& c, const std::string& s) { c.kv_sharing = tl::parse_kv_sharing(s); },
            "str: keys/values across passes, per-pass | last-pass | latest-m4 | compress-s{k} (default per-pass)")
        .def_property(
            "seed", [](const C& c) { return c.sample_seed; }, [](C& c, uint64_t s) { c.sample_seed = s; },
            "int: alias of sample_seed")
        .def(
            "to_dict",
            [](const C& c) {
                // The codec's field set; logit_bias as {id: bias}, as the property gives it.
                nlohmann::json j = tl::config_to_json(c);
                j.erase("grammar");
                py::dict d(json_to_py(j));
                d["logit_bias"] = logit_bias_dict(c);
                return d;
            },
            "The fields as a dict.")
        .def("__repr__", [](const C& c) {
            py::object self = py::cast(c);
            std::string out = "GenerateConfig(";
            bool first = true;
            for (const auto& [k, v] : py::dict(self.attr("to_dict")())) {
                if (!first) out += ", ";
                first = false;
                out += std::string(py::str(k)) + "=" + std::string(py::repr(v));
            }
            return out + ")";
        });
}

}  // namespace tinyloop_py
