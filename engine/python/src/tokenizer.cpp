// tinyloop_py.HfTokenizer: a Hugging Face tokenizer.json read by the engine's importer entry
// (tinyloop::tokenizer_spec_from_hf) and run by the engine's tokenizer, outside any model — what
// the tokenizer parity test compares with the `tokenizers` package.
#include "common.h"

namespace tinyloop_py {

namespace {

struct PyHfTokenizer {
    tinyloop::TokenizerSpec spec;
    std::string chat_template;
    std::unique_ptr<tinyloop::StandaloneTokenizer> tok;
};

}  // namespace

void register_tokenizer(py::module_& m) {
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
