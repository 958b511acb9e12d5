// Shared pieces of the tinyloop_py binding: the model handle every wrapper keeps alive, the
// conversions between Python values and the engine's structs, and the result dictionaries.
//
// Lifetime rule: every object that uses a Model (a call in flight with the GIL released, a
// stream's worker thread, a cache) holds a std::shared_ptr<Model> copy, so Model.free() only
// drops the Python object's reference and the weights go when the last user is done.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tinyloop/json.h"
#include "tinyloop/tinyloop.h"

namespace tinyloop_py {

namespace py = pybind11;
// Shared by the Python Model and every call or handle in flight; frees through the engine's
// ModelHandle deleter (tinyloop::free_model) when the last owner lets go.
using SharedModel = std::shared_ptr<tinyloop::Model>;

// The Python `Model` object: a loaded model until free() or the end of a `with` block.
class PyModel {
public:
    PyModel(SharedModel m, std::string path) : m_(std::move(m)), path_(std::move(path)) {}
    // The model, or ValueError("model is closed") after free().
    SharedModel get() const;
    void free() { m_.reset(); }
    bool closed() const { return !m_; }
    const std::string& path() const { return path_; }

private:
    SharedModel m_;
    std::string path_;
};

// A prompt given as text (tokenized without special tokens) or as a sequence of token ids.
std::vector<int32_t> prompt_ids(const tinyloop::Model* m, const py::handle& prompt);

// The config for one call: a copy of `base` (a GenerateConfig or None) with `kwargs` applied
// by field name; an unknown name raises TypeError naming it and `fn`.
tinyloop::GenerateConfig make_config(const py::object& base, const py::kwargs& kwargs,
                                     const char* fn);
// Options that are not part of GenerateConfig (events, lens, lens_top_k), removed from kwargs.
struct CallOptions {
    bool events = false;
    bool lens = false;
    int lens_top_k = 5;
    std::shared_ptr<tinyloop::Grammar> grammar;  // kept alive for the call (and a stream's thread)
};
// The Python `Grammar` object: a parsed grammar shared by every call that uses it.
struct PyGrammar {
    std::shared_ptr<tinyloop::Grammar> g;
    std::string source;
};
// Removes events, lens, lens_top_k and grammar (a Grammar, GBNF text or None) from kwargs.
CallOptions take_call_options(py::kwargs& kwargs);

// JSON values (the engine codec's, tinyloop/json.h) to and from Python objects; strings that are
// not valid UTF-8 decode with U+FFFD.
py::object json_to_py(const nlohmann::json& j);
nlohmann::json py_to_json(const py::handle& v);

// Result dictionaries (the shapes the .pyi stub declares), written by the engine codec.
py::dict stats_dict(const tinyloop::GenerateStats& s);
py::dict event_dict(const tinyloop::TokenEvent& ev);
py::dict result_dict(const tinyloop::GenerateResult& r, const std::vector<tinyloop::TokenEvent>* events);

// Runs a GenerateResult-returning engine call with the GIL released, collecting events when asked.
template <class F>
py::dict run_generate(const CallOptions& co, F&& call) {
    std::vector<tinyloop::TokenEvent> events;
    tinyloop::GenerateOptions opts;
    opts.lens = co.lens;
    opts.lens_top_k = co.lens_top_k;
    if (co.events || co.lens)
        opts.observer = [&events](const tinyloop::TokenEvent& ev) {
            events.push_back(ev);
            return true;
        };
    tinyloop::GenerateResult r;
    {
        py::gil_scoped_release nogil;
        r = call(opts);
    }
    return result_dict(r, (co.events || co.lens) ? &events : nullptr);
}

void register_config(py::module_& m);
void register_generate(py::module_& m);
void register_scoring(py::module_& m);
void register_caches(py::module_& m);
void register_batch(py::module_& m);
void register_recommendation(py::module_& m);  // after register_model (adds to Model)
void register_tokenizer(py::module_& m);

// The consumer side of a stream's event queue (GenerationStream, BatchStream): waits up to 100 ms
// with the GIL released. Returns true with *ev when an event was taken (on_pop then runs under the
// lock), false otherwise; *finished tells whether the producer is done and the queue empty.
template <class OnPop>
bool take_event(std::mutex& mu, std::condition_variable& cv, std::deque<tinyloop::TokenEvent>& queue,
                const bool& done, tinyloop::TokenEvent* ev, bool* finished, OnPop on_pop) {
    py::gil_scoped_release nogil;
    std::unique_lock<std::mutex> lk(mu);
    cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return !queue.empty() || done; });
    *finished = false;
    if (queue.empty()) {
        *finished = done;
        return false;
    }
    *ev = std::move(queue.front());
    queue.pop_front();
    on_pop();
    return true;
}

// While waiting for a slow token: lets Ctrl-C (KeyboardInterrupt) reach the consumer, after
// `abort` stopped the producer.
template <class Abort>
void check_signals(Abort abort) {
    if (PyErr_CheckSignals() != 0) {
        abort();
        throw py::error_already_set();
    }
}

}  // namespace tinyloop_py
