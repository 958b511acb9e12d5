// tinyloop_py: the pybind11 module over the engine's public header (tinyloop/tinyloop.h).
// This file: the module, error translation, Model (load, info, tokenizer, free), the writer.
#include <pybind11/functional.h>

#include "common.h"

namespace tinyloop_py {

namespace tl = tinyloop;

namespace {

py::dict hparams_dict(const tl::HParams& h) {
    py::dict d;
    d["vocab_size"] = h.vocab_size;
    d["d_model"] = h.d_model;
    d["n_heads"] = h.n_heads;
    d["n_kv_heads"] = h.n_kv_heads;
    d["head_dim"] = h.head_dim;
    d["d_ff"] = h.d_ff;
    d["n_pre_blocks"] = h.n_pre_blocks;
    d["n_loop_layers"] = h.n_loop_layers;
    d["default_loops"] = h.default_loops;
    d["max_loops"] = h.max_loops;
    d["max_seq_len"] = h.max_seq_len;
    d["rope_theta"] = h.rope_theta;
    d["norm_eps"] = h.norm_eps;
    d["tie_embeddings"] = h.tie_embeddings;
    d["loop_input"] = tl::loop_input_name(h.loop_input);  // "none" or "add" (FORMAT.md §1a)
    return d;
}

py::dict info_dict(const tl::ModelInfo& i) {
    py::dict d;
    d["path"] = i.path;
    d["hparams"] = hparams_dict(i.hparams);
    py::dict tok;
    tok["type"] = i.tokenizer.type;
    tok["pretokenizer"] = i.tokenizer.pretokenizer;
    tok["n_merges"] = i.tokenizer.merges.size();
    py::dict specials;
    for (const auto& [s, id] : i.tokenizer.special_tokens) specials[py::str(s)] = id;
    tok["special_tokens"] = specials;
    tok["eos_id"] = i.tokenizer.eos_id;
    tok["bos_id"] = i.tokenizer.bos_id;
    tok["stop_ids"] = i.tokenizer.stop_ids;
    d["tokenizer"] = tok;
    d["tokenizer_vocab"] = i.tokenizer_vocab;
    py::list tensors;
    for (const auto& t : i.tensors) {
        py::dict e;
        e["name"] = t.name;
        e["dtype"] = tl::dtype_name(t.dtype);
        e["shape"] = t.shape;
        e["group_size"] = t.group_size;
        e["bytes"] = t.bytes;
        tensors.append(e);
    }
    d["tensors"] = tensors;
    d["metadata"] = py::module_::import("json").attr("loads")(i.metadata_json.empty() ? "{}" : i.metadata_json);
    d["file_bytes"] = i.file_bytes;
    d["weight_bytes"] = i.weight_bytes;
    d["parameter_count"] = i.parameter_count;
    d["backend"] = i.backend;
    d["backend_note"] = i.backend_note;
    d["threads"] = i.threads;
    return d;
}

tl::Backend parse_backend(const std::string& s) {
    if (s == "auto") return tl::Backend::Auto;
    if (s == "cpu") return tl::Backend::Cpu;
    if (s == "cuda") return tl::Backend::Cuda;
    throw py::value_error("backend: '" + s + "' is not one of auto, cpu, cuda");
}

std::shared_ptr<PyModel> load(const std::string& path, const std::string& backend, int threads,
                              int max_seq_len, int prefill_chunk) {
    tl::LoadOptions o;
    o.backend = parse_backend(backend);
    o.threads = threads;
    o.max_seq_len = max_seq_len;
    o.prefill_chunk = prefill_chunk;
    tl::ModelHandle loaded;
    {
        py::gil_scoped_release nogil;
        loaded = tl::load_model_handle(path, o);
    }
    return std::make_shared<PyModel>(SharedModel(std::move(loaded)), path);
}

py::str to_py_text(const std::string& s) {
    return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t)s.size(), "replace"));
}


// The module's exceptions and the translation of tl::Error codes into Python exceptions.
void register_errors(py::module_& m) {
    static py::exception<tl::Error> model_file_error(m, "ModelFileError", PyExc_ValueError);
    static py::exception<tl::Error> engine_error(m, "EngineError", PyExc_RuntimeError);
    model_file_error.attr("__doc__") = "A model file the loader refuses (FORMAT.md §4): bad magic, version, sizes, checksums.";
    engine_error.attr("__doc__") = "A back-end (CUDA) failure or a broken engine invariant.";
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const tl::Error& e) {
            switch (e.code()) {
                case tl::ErrorCode::InvalidArgument: PyErr_SetString(PyExc_ValueError, e.what()); break;
                case tl::ErrorCode::BadFile: PyErr_SetString(model_file_error.ptr(), e.what()); break;
                case tl::ErrorCode::Io: PyErr_SetString(PyExc_OSError, e.what()); break;
                case tl::ErrorCode::OutOfMemory: PyErr_SetString(PyExc_MemoryError, e.what()); break;
                case tl::ErrorCode::NotSupported: PyErr_SetString(PyExc_NotImplementedError, e.what()); break;
                default: PyErr_SetString(engine_error.ptr(), e.what()); break;
            }
        }
    });
}

// Model (load, info, tokenizer, free), load_model, StreamDecoder.
void register_model(py::module_& m) {
    py::class_<PyModel, std::shared_ptr<PyModel>>(
        m, "Model",
        "A loaded .tinyloop model. Use as a context manager or call free(); calls in flight (and\n"
        "open streams and caches) keep the weights alive until they finish.")
        .def_property_readonly("path", &PyModel::path, "The file the model was loaded from.")
        .def_property_readonly("closed", &PyModel::closed, "True after free().")
        .def_property_readonly(
            "info", [](const PyModel& self) { return info_dict(tl::model_info(self.get().get())); },
            "Model description: hparams, tokenizer, tensors, metadata, file/weight bytes, back end.")
        .def_property_readonly(
            "hparams", [](const PyModel& self) { return hparams_dict(tl::model_hparams(self.get().get())); },
            "The hyperparameters (FORMAT.md §1) as a dict.")
        .def_property_readonly(
            "vocab_size", [](const PyModel& self) { return tl::model_hparams(self.get().get()).vocab_size; },
            "Rows of the output head.")
        .def_property_readonly(
            "eos_id", [](const PyModel& self) { return tl::model_info(self.get().get()).tokenizer.eos_id; },
            "The end-of-text token id, or -1.")
        .def("vram_usage_bytes", [](const PyModel& self) { return tl::vram_usage_bytes(self.get().get()); },
             "Device memory the model holds (0 on the CPU back end).")
        .def(
            "tokenize",
            [](const PyModel& self, const std::string& text, bool parse_special) {
                return tl::tokenize(self.get().get(), text, parse_special);
            },
            py::arg("text"), py::arg("parse_special") = false, py::call_guard<py::gil_scoped_release>(),
            "Token ids of `text` (UTF-8). Special-token strings are plain text unless parse_special.\n"
            "Releases the GIL while it runs (a server tokenizes off its event loop).")
        .def(
            "detokenize",
            [](const PyModel& self, const std::vector<int32_t>& ids) {
                return to_py_text(tl::detokenize_text(self.get().get(), ids.data(), ids.size()));
            },
            py::arg("ids"), "Text of the ids; invalid UTF-8 becomes U+FFFD. ValueError for an id it cannot decode.")
        .def(
            "detokenize_bytes",
            [](const PyModel& self, const std::vector<int32_t>& ids) {
                return py::bytes(tl::detokenize(self.get().get(), ids.data(), ids.size()));
            },
            py::arg("ids"), "Raw bytes of the ids (may be incomplete UTF-8).")
        .def(
            "token_bytes", [](const PyModel& self, int32_t id) { return py::bytes(tl::token_bytes(self.get().get(), id)); },
            py::arg("id"), "Raw bytes of one token.")
        .def("free", &PyModel::free,
             "Releases this object's hold on the model; the weights are freed once no call, stream or\n"
             "cache uses them. Further use of this object raises ValueError. Idempotent.")
        .def("__enter__", [](std::shared_ptr<PyModel> self) { return self; })
        .def("__exit__", [](PyModel& self, py::args) { self.free(); return false; })
        .def("__repr__", [](const PyModel& self) {
            return std::string("<tinyloop_py.Model '") + self.path() + "'" + (self.closed() ? " closed>" : ">");
        });

    m.def("load_model", &load, py::arg("path"), py::arg("backend") = "auto", py::arg("threads") = 0,
          py::arg("max_seq_len") = 0, py::arg("prefill_chunk") = 64,
          "Loads and validates a .tinyloop file.\n\n"
          "backend: 'auto' (CUDA when usable, else CPU), 'cpu' or 'cuda'. threads: CPU worker threads,\n"
          "0 = all cores (1..256). max_seq_len: 0 = the model's. prefill_chunk: 1..4096.\n"
          "Raises OSError when the file cannot be read, ModelFileError when the loader refuses it.");

    py::class_<tl::StreamDecoder>(m, "StreamDecoder",
                                  "Streaming detokenizer: push ids one at a time, get the text completed so far.")
        .def(py::init([](const PyModel& model) {
                 // The decoder keeps a raw pointer: keep the model alive with the decoder.
                 return std::make_unique<tl::StreamDecoder>(model.get().get());
             }),
             py::arg("model"), py::keep_alive<1, 2>())
        .def("push", [](tl::StreamDecoder& d, int32_t id) { return to_py_text(d.push(id)); }, py::arg("id"),
             "Text completed by this id (an incomplete UTF-8 sequence is held back).")
        .def("flush", [](tl::StreamDecoder& d) { return to_py_text(d.flush()); },
             "Whatever is held back, invalid bytes replaced.");
}

// The writer: write_random_model, quantize_model_file.
void register_writer(py::module_& m) {
    m.def(
        "write_random_model",
        [](const std::string& path, int vocab_size, int d_model, int n_heads, int n_kv_heads, int head_dim,
           int d_ff, int n_pre_blocks, int n_loop_layers, int default_loops, int max_loops, int max_seq_len,
           uint64_t seed, const std::string& dtype, int group_size, const std::string& loop_input) {
            tl::HParams hp;
            hp.vocab_size = vocab_size;
            hp.d_model = d_model;
            hp.n_heads = n_heads;
            hp.n_kv_heads = n_kv_heads > 0 ? n_kv_heads : n_heads;
            hp.head_dim = head_dim;
            hp.d_ff = d_ff;
            hp.n_pre_blocks = n_pre_blocks;
            hp.n_loop_layers = n_loop_layers;
            hp.default_loops = default_loops;
            hp.max_loops = max_loops;
            hp.max_seq_len = max_seq_len;
            hp.loop_input = tl::parse_loop_input(loop_input);
            const tl::DType dt = tl::parse_dtype(dtype);
            py::gil_scoped_release nogil;
            tl::save_model(path, tl::random_model_spec(hp, seed, dt, group_size));
        },
        py::arg("path"), py::kw_only(), py::arg("vocab_size") = 300, py::arg("d_model") = 64,
        py::arg("n_heads") = 4, py::arg("n_kv_heads") = 0, py::arg("head_dim") = 16, py::arg("d_ff") = 128,
        py::arg("n_pre_blocks") = 1, py::arg("n_loop_layers") = 1, py::arg("default_loops") = 3,
        py::arg("max_loops") = 6, py::arg("max_seq_len") = 256, py::arg("seed") = 1, py::arg("dtype") = "f32",
        py::arg("group_size") = 32, py::arg("loop_input") = "none",
        "Writes a .tinyloop model with random weights (tests, demos): a byte tokenizer plus one\n"
        "<|endoftext|> token at the top id. n_kv_heads 0 = n_heads. dtype: f32|f16|bf16|q8|q4|q2.\n"
        "loop_input: none|add (add: input injection, a version-2 file, FORMAT.md 1a).");

    m.def(
        "quantize_model_file",
        [](const std::string& in_path, const std::string& out_path, const std::string& dtype, int group_size) {
            const tl::DType dt = tl::parse_dtype(dtype);
            tl::QuantizeReport r;
            {
                py::gil_scoped_release nogil;
                r = tl::quantize_model_file(in_path, out_path, dt, group_size);
            }
            py::list tensors;
            for (const auto& t : r.tensors) {
                py::dict e;
                e["name"] = t.name;
                e["from"] = tl::dtype_name(t.from);
                e["to"] = tl::dtype_name(t.to);
                e["rel_error"] = t.rel_error;
                e["bytes_in"] = t.bytes_in;
                e["bytes_out"] = t.bytes_out;
                tensors.append(e);
            }
            py::dict d;
            d["tensors"] = tensors;
            d["file_bytes_in"] = r.file_bytes_in;
            d["file_bytes_out"] = r.file_bytes_out;
            return d;
        },
        py::arg("in_path"), py::arg("out_path"), py::arg("dtype"), py::arg("group_size") = 32,
        "Re-writes a model with every matrix stored as dtype (q8|q4|q2|f16|bf16|f32; groups of 32, 64 or\n"
        "128). Returns {tensors: [{name, from, to, rel_error, bytes_in, bytes_out}], file_bytes_in,\n"
        "file_bytes_out}.");
}

}  // namespace

}  // namespace tinyloop_py

using namespace tinyloop_py;

PYBIND11_MODULE(tinyloop_py, m) {
    m.doc() =
        "tinyloop_py: Python binding of the TinyLoop runtime (weight-shared looped transformers).\n"
        "\n"
        "    import tinyloop_py as tl\n"
        "    with tl.load_model('model.tinyloop') as model:\n"
        "        r = tl.generate(model, 'In the beginning', max_tokens=32)\n"
        "        print(r['text'], r['stats']['stop_reason'])\n"
        "        for ev in tl.generate_stream(model, 'In the beginning', max_tokens=32):\n"
        "            print(ev['piece'], end='', flush=True)\n"
        "\n"
        "Errors: ValueError for an invalid argument (the message names the field and its range),\n"
        "ModelFileError (a ValueError) for a file the loader refuses, OSError when a file cannot be\n"
        "read or written, MemoryError, NotImplementedError for a feature not in this build,\n"
        "RuntimeError otherwise (EngineError for back-end failures and internal errors).\n"
        "\n"
        "Threads: every call releases the GIL while the engine runs; calls on one Model from several\n"
        "threads run concurrently (the engine's weights are immutable).";

    register_errors(m);
    register_model(m);
    register_writer(m);
    register_tokenizer(m);
    register_config(m);
    register_generate(m);
    register_scoring(m);
    register_caches(m);
    register_batch(m);
    register_recommendation(m);
}
