// The cache handles as Python classes: PrefixCache, ResumeHandle (+ resume_generate),
// PrefixPool (+ generate_with_pool). Each keeps its model alive, reports its memory (nbytes),
// frees on free() / with-block exit / garbage collection, and serialises its own calls with a
// mutex where the engine mutates it (ResumeHandle deepens, PrefixPool grows).
#include <mutex>

#include "common.h"

namespace tinyloop_py {

namespace tl = tinyloop;

namespace {

// A handle of type T freed by Free, shared by the Python object and calls in flight.
template <class T, void (*Free)(T*)>
class Handle {
public:
    Handle(SharedModel model, T* raw, const char* what)
        : model_(std::move(model)), h_(raw, [](T* p) { Free(p); }), what_(what) {}
    std::shared_ptr<T> get() const {
        if (!h_) throw py::value_error(std::string(what_) + " is freed (free() was called or its with-block ended)");
        return h_;
    }
    const SharedModel& model() const { return model_; }
    void free() { h_.reset(); }
    bool freed() const { return !h_; }
    std::mutex& mu() { return *mu_; }

private:
    SharedModel model_;
    std::shared_ptr<T> h_;
    const char* what_;
    std::shared_ptr<std::mutex> mu_ = std::make_shared<std::mutex>();
};

using PrefixCacheH = Handle<tl::PrefixCache, tl::free_prefix_cache>;
using ResumeH = Handle<tl::ResumeHandle, tl::free_resume_handle>;
using PoolH = Handle<tl::PrefixPool, tl::free_prefix_pool>;

std::unique_ptr<PrefixCacheH> make_prefix_cache(const PyModel& model, const py::object& prefix, int loops,
                                                int cache_window) {
    SharedModel m = model.get();
    const std::vector<int32_t> ids = prompt_ids(m.get(), prefix);
    tl::PrefixCache* raw;
    {
        py::gil_scoped_release nogil;
        raw = tl::create_prefix_cache(m.get(), ids.data(), static_cast<int>(ids.size()), loops, cache_window);
    }
    return std::make_unique<PrefixCacheH>(std::move(m), raw, "PrefixCache");
}

py::dict generate_with_prefix_py(PrefixCacheH& cache, const py::object& prompt, const py::object& config,
                                 py::kwargs kw) {
    const auto c = cache.get();
    const SharedModel m = cache.model();
    const CallOptions co = take_call_options(kw);
    tl::GenerateConfig cfg = make_config(config, kw, "generate_with_prefix");
    cfg.grammar = co.grammar.get();
    const std::vector<int32_t> ids = prompt_ids(m.get(), prompt);
    return run_generate(co, [&](const tl::GenerateOptions& o) {
        return tl::generate_with_prefix(m.get(), c.get(), ids.data(), static_cast<int>(ids.size()), cfg, o);
    });
}

std::unique_ptr<ResumeH> make_resume(const PyModel& model, const py::object& prompt, int loops) {
    SharedModel m = model.get();
    const std::vector<int32_t> ids = prompt_ids(m.get(), prompt);
    tl::ResumeHandle* raw;
    {
        py::gil_scoped_release nogil;
        raw = tl::create_resume_handle(m.get(), ids.data(), static_cast<int>(ids.size()), loops);
    }
    return std::make_unique<ResumeH>(std::move(m), raw, "ResumeHandle");
}

py::dict resume_generate_py(ResumeH& handle, const py::object& config, py::kwargs kw) {
    const auto h = handle.get();
    const CallOptions co = take_call_options(kw);
    tl::GenerateConfig cfg = make_config(config, kw, "resume_generate");
    cfg.grammar = co.grammar.get();
    std::mutex& mu = handle.mu();
    return run_generate(co, [&](const tl::GenerateOptions& o) {
        std::lock_guard<std::mutex> lk(mu);  // taken without the GIL
        return tl::resume_generate(h.get(), cfg, o);
    });
}

std::unique_ptr<PoolH> make_pool(const PyModel& model, int loops) {
    SharedModel m = model.get();
    tl::PrefixPool* raw = tl::create_prefix_pool(m.get(), loops);
    return std::make_unique<PoolH>(std::move(m), raw, "PrefixPool");
}

int pool_add(PoolH& pool, const py::object& prefix) {
    const auto p = pool.get();
    const std::vector<int32_t> ids = prompt_ids(pool.model().get(), prefix);
    std::mutex& mu = pool.mu();
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(mu);
    return tl::prefix_pool_add(p.get(), ids.data(), static_cast<int>(ids.size()));
}

py::dict generate_with_pool_py(PoolH& pool, const py::object& prompt, const py::object& config, py::kwargs kw) {
    const auto p = pool.get();
    const SharedModel m = pool.model();
    const CallOptions co = take_call_options(kw);
    tl::GenerateConfig cfg = make_config(config, kw, "generate_with_pool");
    cfg.grammar = co.grammar.get();
    const std::vector<int32_t> ids = prompt_ids(m.get(), prompt);
    int reused = 0;
    std::mutex& mu = pool.mu();
    py::dict d = run_generate(co, [&](const tl::GenerateOptions& o) {
        std::lock_guard<std::mutex> lk(mu);
        return tl::generate_with_pool(p.get(), ids.data(), static_cast<int>(ids.size()), cfg, o, &reused);
    });
    d["reused_tokens"] = reused;
    return d;
}

template <class H>
void common_methods(py::class_<H>& c) {
    c.def("free", &H::free, "Frees the handle's memory once no call in flight uses it. Idempotent.")
        .def_property_readonly("freed", &H::freed, "True after free().")
        .def("__enter__", [](H& self) -> H& { return self; }, py::return_value_policy::reference)
        .def("__exit__", [](H& self, py::args) {
            self.free();
            return false;
        });
}

}  // namespace

void register_caches(py::module_& m) {
    py::class_<PrefixCacheH> pc(m, "PrefixCache",
                                "A prefix prefilled once at one depth (and cache_window), reused by any prompt\n"
                                "that starts with it: only the rest of the prompt is prefilled.");
    pc.def(py::init(&make_prefix_cache), py::arg("model"), py::arg("prefix"), py::arg("loops") = 0,
           py::arg("cache_window") = 0, "PrefixCache(model, prefix (text or ids), loops=0, cache_window=0)")
        .def_property_readonly("length", [](const PrefixCacheH& h) { return tl::prefix_cache_length(h.get().get()); },
                               "Tokens in the prefix.")
        .def_property_readonly("nbytes", [](const PrefixCacheH& h) { return tl::prefix_cache_bytes(h.get().get()); },
                               "Bytes the cached state holds.")
        .def("generate", &generate_with_prefix_py, py::arg("prompt"), py::arg("config") = py::none(),
             "Same as generate_with_prefix(self.model, self, prompt, ...).");
    common_methods(pc);

    py::class_<ResumeH> rh(m, "ResumeHandle",
                           "A prompt prefilled at some depth and kept with its states, so it can be answered at\n"
                           "another depth without recomputing the prompt: deeper by running only the new passes,\n"
                           "shallower for free.");
    rh.def(py::init(&make_resume), py::arg("model"), py::arg("prompt"), py::arg("loops") = 0,
           "ResumeHandle(model, prompt (text or ids), loops=0)")
        .def_property_readonly("loops", [](const ResumeH& h) { return tl::resume_handle_loops(h.get().get()); },
                               "Deepest depth computed so far.")
        .def_property_readonly("nbytes", [](const ResumeH& h) { return tl::resume_handle_bytes(h.get().get()); },
                               "Bytes the kept states hold.")
        .def("generate", &resume_generate_py, py::arg("config") = py::none(),
             "Same as resume_generate(self, ...).");
    common_methods(rh);

    py::class_<PoolH> pp(m, "PrefixPool",
                         "Registered prefixes at one depth; a request reuses the longest one its prompt starts with.");
    pp.def(py::init(&make_pool), py::arg("model"), py::arg("loops") = 0, "PrefixPool(model, loops=0)")
        .def("add", &pool_add, py::arg("prefix"), "Prefills and registers a prefix (text or ids); returns its index.")
        .def_property_readonly("nbytes", [](const PoolH& h) { return tl::prefix_pool_bytes(h.get().get()); },
                               "Bytes the registered prefixes hold.")
        .def("generate", &generate_with_pool_py, py::arg("prompt"), py::arg("config") = py::none(),
             "Same as generate_with_pool(self, prompt, ...).");
    common_methods(pp);

    m.def("generate_with_prefix",
          [](const PyModel& model, PrefixCacheH& cache, const py::object& prompt, const py::object& config,
             py::kwargs kw) {
              if (model.get() != cache.model())
                  throw py::value_error("cache: this PrefixCache was made for another model");
              return generate_with_prefix_py(cache, prompt, config, std::move(kw));
          },
          py::arg("model"), py::arg("cache"), py::arg("prompt"), py::arg("config") = py::none(),
          "Generates as generate() would; the prompt must start with the cache's prefix and loops and\n"
          "cache_window must equal the cache's. Returns the generate() result dict.");
    m.def("resume_generate", &resume_generate_py, py::arg("handle"), py::arg("config") = py::none(),
          "Generates from the handle's prompt at loops (0 = the handle's depth). Deeper than the handle:\n"
          "only the new passes run over the prompt and the handle keeps the deeper state. Returns the\n"
          "generate() result dict.");
    m.def("generate_with_pool", &generate_with_pool_py, py::arg("pool"), py::arg("prompt"),
          py::arg("config") = py::none(),
          "Generates reusing the longest registered prefix the prompt starts with. Returns the\n"
          "generate() result dict plus reused_tokens.");
}

}  // namespace tinyloop_py
