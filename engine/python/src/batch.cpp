// tinyloop_py.BatchEngine: the continuous-batching engine (tinyloop.h, "Continuous batching")
// with a driver thread that steps it while requests are queued or active. Any Python thread
// may submit; each request comes back as a BatchStream (an iterator of event dicts, like
// GenerationStream) or, with generate(), as a result dict. The driver never takes the GIL.
//
// A BatchStream holds at most queue_size unread events: when full, its request is held (skipped
// by the steps, BatchRequest::hold) until the reader catches up, so a slow reader slows only its
// own request, never the batch. abort()/close() cancel the request at the next step.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common.h"

namespace tinyloop_py {

namespace tl = tinyloop;

namespace {

// The engine and its driver thread; shared by the Python object and every stream.
class Driver {
public:
    Driver(SharedModel m, const tl::BatchEngineOptions& o) : model_(std::move(m)), engine_(tl::create_batch_engine(model_.get(), o)) {
        thread_ = std::thread([this] { loop(); });
    }
    ~Driver() { stop(); }

    uint64_t submit(tl::BatchRequest r) {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_) throw py::value_error("BatchEngine is closed");
        const uint64_t id = tl::batch_submit(engine_, std::move(r));
        ids_.push_back(id);
        ++pending_;
        cv_.notify_all();
        return id;
    }
    // A reader made room: the driver re-checks its held requests.
    void wake() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            ++pending_;
        }
        cv_.notify_all();
    }
    void cancel(uint64_t id) {
        std::lock_guard<std::mutex> lk(mu_);
        if (engine_) tl::batch_cancel(engine_, id);
    }
    tl::BatchEngineStats stats() const {
        std::lock_guard<std::mutex> lk(mu_);
        if (!engine_) throw py::value_error("BatchEngine is closed");
        return tl::batch_stats(engine_);
    }
    const SharedModel& model() const { return model_; }

    // Stops the driver: requests still queued or running are cancelled (their streams end with
    // stop reason CALLBACK_ABORT), then the engine is freed.
    void stop() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (stopping_) return;
            stopping_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable()) thread_.join();
        std::lock_guard<std::mutex> lk(mu_);
        for (uint64_t id : ids_) tl::batch_cancel(engine_, id);
        try {
            for (int i = 0; i < 4 && tl::batch_step(engine_) > 0; ++i) {
            }
        } catch (...) {
        }
        tl::free_batch_engine(engine_);
        engine_ = nullptr;
    }

private:
    void loop() {
        for (;;) {
            {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [this] { return stopping_ || pending_ > 0; });
                if (stopping_) return;
                pending_ = 0;
            }
            try {
                long long rows = tl::batch_stats(engine_).rows;
                for (;;) {
                    const int left = tl::batch_step(engine_);
                    const long long now = tl::batch_stats(engine_).rows;
                    std::unique_lock<std::mutex> lk(mu_);
                    drop_finished();
                    if (stopping_ || left == 0) break;
                    // Every request held by its reader: wait for a reader (wake()) or a submit.
                    if (now == rows) cv_.wait_for(lk, std::chrono::milliseconds(5), [this] { return stopping_ || pending_ > 0; });
                    pending_ = 0;
                    rows = now;
                }
            } catch (...) {
                // A broken invariant inside a step: the requests of that step keep their streams
                // waiting until close(); nothing better can be done from this thread.
            }
        }
    }

    // The streams got their results through on_done: the engine's copies are dropped.
    void drop_finished() {
        ids_.erase(std::remove_if(ids_.begin(), ids_.end(),
                                  [this](uint64_t id) {
                                      if (!tl::batch_done(engine_, id)) return false;
                                      try {
                                          tl::batch_result(engine_, id);
                                      } catch (const tl::Error&) {
                                      }
                                      return true;
                                  }),
                   ids_.end());
    }

    SharedModel model_;
    tl::BatchEngine* engine_;
    mutable std::mutex mu_;
    std::vector<uint64_t> ids_;
    std::condition_variable cv_;
    int pending_ = 0;
    bool stopping_ = false;
    std::thread thread_;
};

class BatchStream {
public:
    BatchStream(std::shared_ptr<Driver> d, std::vector<int32_t> prompt, std::shared_ptr<tl::Grammar> grammar,
                size_t capacity)
        : driver_(std::move(d)), prompt_(std::move(prompt)), grammar_(std::move(grammar)), capacity_(capacity) {}

    // Called once the stream is shared: submits the request.
    static std::shared_ptr<BatchStream> start(std::shared_ptr<Driver> d, std::vector<int32_t> prompt,
                                              tl::GenerateConfig cfg, std::shared_ptr<tl::Grammar> grammar,
                                              size_t capacity) {
        auto s = std::make_shared<BatchStream>(d, prompt, grammar, capacity);
        tl::BatchRequest r;
        r.prompt = std::move(prompt);
        r.config = cfg;
        std::weak_ptr<BatchStream> w = s;
        r.observer = [w](const tl::TokenEvent& ev) {
            auto self = w.lock();
            if (!self) return false;
            std::lock_guard<std::mutex> lk(self->mu_);
            if (self->aborted_) return false;
            self->queue_.push_back(ev);
            self->cv_.notify_all();
            return true;
        };
        r.hold = [w] {
            auto self = w.lock();
            if (!self) return false;
            std::lock_guard<std::mutex> lk(self->mu_);
            return self->capacity_ > 0 && !self->aborted_ && self->queue_.size() >= self->capacity_;
        };
        r.on_done = [w](uint64_t, const tl::GenerateResult& res, const std::string& err) {
            auto self = w.lock();
            if (!self) return;
            std::lock_guard<std::mutex> lk(self->mu_);
            self->result_ = res;
            self->error_ = err;
            self->finished_ = true;
            self->cv_.notify_all();
        };
        s->id_ = d->submit(std::move(r));
        return s;
    }

    py::dict next() {
        for (;;) {
            tl::TokenEvent ev;
            bool finished = false;
            if (take_event(mu_, cv_, queue_, finished_, &ev, &finished, [this] {
                    if (queue_.size() + 1 == capacity_) driver_->wake();
                }))
                return event_dict(ev);
            if (finished) {
                if (!error_.empty() && !error_raised_) {
                    error_raised_ = true;
                    throw tl::Error(tl::ErrorCode::InvalidArgument, error_);
                }
                throw py::stop_iteration();
            }
            check_signals([this] { abort(); });
        }
    }

    void abort() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            aborted_ = true;
            queue_.clear();
        }
        driver_->cancel(id_);
    }

    // Waits (GIL released) until the request has finished.
    void wait() {
        py::gil_scoped_release nogil;
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [this] { return finished_; });
    }

    void close() {
        abort();
        wait();
    }

    bool finished() {
        std::lock_guard<std::mutex> lk(mu_);
        return finished_;
    }

    py::object result() {
        std::lock_guard<std::mutex> lk(mu_);
        if (!finished_ || !error_.empty()) return py::none();
        return result_dict(result_, nullptr);
    }

    // The whole result after waiting, with the events not yet read (raises the request's error).
    py::dict collect(bool events) {
        wait();
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_.empty()) throw tl::Error(tl::ErrorCode::InvalidArgument, error_);
        std::vector<tl::TokenEvent> evs(queue_.begin(), queue_.end());
        queue_.clear();
        return result_dict(result_, events ? &evs : nullptr);
    }

    const std::vector<int32_t>& prompt() const { return prompt_; }
    uint64_t id() const { return id_; }

private:
    std::shared_ptr<Driver> driver_;
    std::vector<int32_t> prompt_;
    std::shared_ptr<tl::Grammar> grammar_;  // alive while the request may use it
    size_t capacity_ = 0;                   // 0: unbounded (generate() collects at the end)
    uint64_t id_ = 0;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<tl::TokenEvent> queue_;
    bool aborted_ = false;
    bool finished_ = false;
    tl::GenerateResult result_;
    std::string error_;
    bool error_raised_ = false;
};

class PyBatchEngine {
public:
    PyBatchEngine(const PyModel& model, int kv_pages, int page_size, int max_batch, int prefill_chunk) {
        tl::BatchEngineOptions o;
        o.kv_pages = kv_pages;
        o.page_size = page_size;
        o.max_batch = max_batch;
        o.prefill_chunk = prefill_chunk;
        driver_ = std::make_shared<Driver>(model.get(), o);
    }

    std::shared_ptr<BatchStream> submit(const py::object& prompt, const py::object& config, int queue_size,
                                        py::kwargs kw) {
        if (queue_size < 0) throw py::value_error("queue_size: " + std::to_string(queue_size) + " must be >= 0");
        const std::shared_ptr<Driver> d = live();
        CallOptions co = take_call_options(kw);
        if (co.lens) throw py::value_error("lens: the batch engine does not compute lens rows (use generate_stream)");
        tl::GenerateConfig cfg = make_config(config, kw, "BatchEngine.submit");
        cfg.grammar = co.grammar.get();
        std::vector<int32_t> ids = prompt_ids(d->model().get(), prompt);
        return BatchStream::start(d, std::move(ids), cfg, co.grammar, static_cast<size_t>(queue_size));
    }

    py::dict generate(const py::object& prompt, const py::object& config, py::kwargs kw) {
        const bool events = kw.contains("events") && py::bool_(kw["events"]);
        auto s = submit(prompt, config, 0, std::move(kw));
        return s->collect(events);
    }

    py::dict stats() const {
        const tl::BatchEngineStats s = live()->stats();
        py::dict d;
        d["queued"] = s.queued;
        d["active"] = s.active;
        d["finished"] = s.finished;
        d["pages_total"] = s.pages_total;
        d["pages_free"] = s.pages_free;
        d["pool_bytes"] = s.pool_bytes;
        d["steps"] = s.steps;
        d["rows"] = s.rows;
        d["max_active"] = s.max_active;
        return d;
    }

    void close() {
        if (!driver_) return;
        {
            py::gil_scoped_release nogil;
            driver_->stop();
        }
        driver_.reset();
    }
    bool closed() const { return !driver_; }

private:
    std::shared_ptr<Driver> live() const {
        if (!driver_) throw py::value_error("BatchEngine is closed");
        return driver_;
    }
    std::shared_ptr<Driver> driver_;
};

}  // namespace

void register_batch(py::module_& m) {
    py::class_<BatchStream, std::shared_ptr<BatchStream>>(
        m, "BatchStream",
        "One request of a BatchEngine: iterate for event dicts (as GenerationStream's), then read\n"
        "`result`. abort() cancels it at the engine's next step (stop reason CALLBACK_ABORT).")
        .def("__iter__", [](BatchStream& s) -> BatchStream& { return s; })
        .def("__next__", &BatchStream::next)
        .def("abort", &BatchStream::abort, "Cancels the request at the next step; unread events are dropped.")
        .def("close", &BatchStream::close, "abort() and wait until the request has ended.")
        .def("wait", &BatchStream::wait, "Waits until the request has ended.")
        .def("__enter__", [](BatchStream& s) -> BatchStream& { return s; }, py::return_value_policy::reference)
        .def("__exit__", [](BatchStream& s, py::args) { s.close(); return false; })
        .def_property_readonly("finished", &BatchStream::finished)
        .def_property_readonly("result", &BatchStream::result, "The result dict once finished, else None.")
        .def_property_readonly("prompt_ids", &BatchStream::prompt)
        .def_property_readonly("id", &BatchStream::id);

    py::class_<PyBatchEngine>(
        m, "BatchEngine",
        "Continuous batching: requests submitted from any thread are decoded together, one token per\n"
        "active request per step, by a driver thread. Every request's tokens equal generate()'s for\n"
        "it alone. kv_pages (1..1048576) pages of page_size (1..4096) positions per KV type;\n"
        "max_batch (1..4096) requests at a time; prefill_chunk (1..4096) prompt tokens per step.\n"
        "A request waits in the queue until the pool can hold its whole length.")
        .def(py::init<const PyModel&, int, int, int, int>(), py::arg("model"), py::arg("kv_pages") = 2048,
             py::arg("page_size") = 16, py::arg("max_batch") = 64, py::arg("prefill_chunk") = 64)
        .def("submit", &PyBatchEngine::submit, py::arg("prompt"), py::arg("config") = py::none(),
             py::arg("queue_size") = 16,
             "Queues a request (GenerateConfig fields as keywords, grammar=, kv_cache='f32'|'int8');\n"
             "returns its BatchStream. At queue_size unread events (0 = unbounded) the request waits\n"
             "for its reader (the others go on). Bad settings raise here.")
        .def("generate", &PyBatchEngine::generate, py::arg("prompt"), py::arg("config") = py::none(),
             "submit() and wait: the result dict (events=True adds the events).")
        .def("stats", &PyBatchEngine::stats,
             "{queued, active, finished, pages_total, pages_free, pool_bytes, steps, rows, max_active}")
        .def("close", &PyBatchEngine::close, "Stops the driver; requests still running are dropped.")
        .def_property_readonly("closed", &PyBatchEngine::closed)
        .def("__enter__", [](PyBatchEngine& e) -> PyBatchEngine& { return e; }, py::return_value_policy::reference)
        .def("__exit__", [](PyBatchEngine& e, py::args) { e.close(); return false; });
}

}  // namespace tinyloop_py
