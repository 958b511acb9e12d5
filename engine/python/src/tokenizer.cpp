// tinyloop_py.HfTokenizer: a Hugging Face tokenizer.json read by the engine's importer entry
// (tinyloop::tokenizer_spec_from_hf) and run by the engine's tokenizer, outside any model — what
// the tokenizer parity test compares with the `tokenizers` package. check_token_id(s): the
// engine's one token-id range rule for Python ints of any size (the server's request fields).
#include <climits>

#include "common.h"
#include "tinyloop/mode_rules.h"

namespace tinyloop_py {

namespace {

struct PyHfTokenizer {
    tinyloop::TokenizerSpec spec;
    std::string chat_template;
    std::unique_ptr<tinyloop::StandaloneTokenizer> tok;
};

// A Python int against the engine's token-id rule (tinyloop::check_token_id). An int past 32 bits
// is outside every vocabulary: refused through token_id_outside with its decimal text, never cast,
// so 2**70 gets the message 70 would (no OverflowError, no wrap-around).
void check_py_token_id(const py::handle& id, int vocab_size, const std::string& field) {
    if (!PyLong_Check(id.ptr()) || PyBool_Check(id.ptr()))
        throw py::type_error(field + ": expected an int token id, got " +
                             std::string(Py_TYPE(id.ptr())->tp_name));
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(id.ptr(), &overflow);
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    if (overflow != 0 || v < INT32_MIN || v > INT32_MAX)
        tinyloop::token_id_outside(py::str(id).cast<std::string>(), vocab_size, field);
    tinyloop::check_token_id(static_cast<int32_t>(v), vocab_size, field);
}

}  // namespace

void register_tokenizer(py::module_& m) {
    m.def("check_token_id", &check_py_token_id, py::arg("id"), py::arg("vocab_size"), py::arg("field"),
          "The engine's one token-id rule: ValueError 'FIELD: token id X is outside the vocabulary [0, V)'\n"
          "unless 0 <= id < vocab_size. Takes an int of any size (2**70 is refused, not overflowed);\n"
          "TypeError for a non-int (bool included).");
    m.def(
        "check_token_ids",
        [](const py::sequence& ids, int vocab_size, const std::string& field) {
            if (py::isinstance<py::str>(ids)) throw py::type_error(field + ": expected a list of int token ids, got str");
            for (size_t i = 0; i < ids.size(); ++i)
                check_py_token_id(ids[i], vocab_size, field + "[" + std::to_string(i) + "]");
        },
        py::arg("ids"), py::arg("vocab_size"), py::arg("field"),
        "check_token_id for every entry, naming the first bad one FIELD[i].");
    py::class_<PyHfTokenizer>(m, "HfTokenizer",
                              "A tokenizer.json (+ tokenizer_config.json) as the engine reads and runs it.")
        .def(py::init([](const std::string& path, const std::string& config) {
                 auto t = std::make_unique<PyHfTokenizer>();
                 t->spec = tinyloop::tokenizer_spec_from_hf(path, config, &t->chat_template);
                 t->tok = std::make_unique<tinyloop::StandaloneTokenizer>(t->spec);
                 return t;
             }),
             py::arg("tokenizer_json"), py::arg("tokenizer_config") = "")
        .def(
            "encode",
            [](const PyHfTokenizer& self, const py::object& text, bool parse_special, bool add_special) {
                // str is encoded as UTF-8; bytes go through as they are (invalid UTF-8 included).
                const std::string s = py::isinstance<py::bytes>(text) ? text.cast<std::string>()
                                                                      : py::str(text).cast<std::string>();
                py::gil_scoped_release release;
                return self.tok->encode(s, parse_special, add_special);
            },
            py::arg("text"), py::arg("parse_special") = true, py::arg("add_special") = false,
            "Token ids of str or bytes. parse_special: special added tokens in the text are "
            "matched; add_special: the post-processor's BOS/EOS ids around them.")
        .def(
            "decode",
            [](const PyHfTokenizer& self, const std::vector<int32_t>& ids, bool skip_special) {
                return py::bytes(self.tok->decode(ids, skip_special));
            },
            py::arg("ids"), py::arg("skip_special") = false, "The bytes of the ids.")
        .def_property_readonly("n_ids", [](const PyHfTokenizer& self) { return self.tok->n_ids(); })
        .def_property_readonly("eos_id", [](const PyHfTokenizer& self) { return self.spec.eos_id; })
        .def_property_readonly("bos_id", [](const PyHfTokenizer& self) { return self.spec.bos_id; })
        .def_property_readonly("chat_template",
                               [](const PyHfTokenizer& self) { return self.chat_template; });
}

}  // namespace tinyloop_py
