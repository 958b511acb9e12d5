// generate, generate_stream (a Python iterator fed by a worker thread), generate_batch.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common.h"

namespace tinyloop_py {

namespace tl = tinyloop;

namespace {

// One streamed generation. The engine runs on a worker std::thread without the GIL; its
// observer pushes TokenEvents into a bounded queue (blocking while the queue is full, so a
// consumer that stops reading stops the decode too) and returns false once abort() was called.
// __next__ waits for an event with the GIL released. Closing, breaking out of a for loop (the
// iterator is released) or garbage collection aborts the decode and joins the thread.
class GenerationStream {
public:
    using Call = std::function<tl::GenerateResult(const tl::GenerateOptions&)>;

    // `call` runs the decode (generate_ex, a speculative entry, ...) with the options it is given;
    // it owns copies of everything it needs (the model, the prompt, the config).
    GenerationStream(Call call, std::vector<int32_t> prompt, CallOptions co, size_t capacity)
        : call_(std::move(call)), prompt_(std::move(prompt)), co_(co), capacity_(capacity) {
        worker_ = std::thread([this] { run(); });
    }
    GenerationStream(const GenerationStream&) = delete;
    GenerationStream& operator=(const GenerationStream&) = delete;

    ~GenerationStream() {
        abort();
        // The worker never takes the GIL, so joining while holding it cannot deadlock; it returns
        // after at most the token step in progress.
        if (worker_.joinable()) worker_.join();
    }

    py::dict next() {
        for (;;) {
            tl::TokenEvent ev;
            bool finished = false;
            if (take_event(mu_, cv_, queue_, finished_, &ev, &finished, [this] { cv_.notify_all(); }))
                return event_dict(ev);
            if (finished) {
                if (error_ && !error_raised_) {
                    error_raised_ = true;
                    std::rethrow_exception(error_);
                }
                throw py::stop_iteration();
            }
            check_signals([this] { abort(); });
        }
    }

    // Asks the worker to stop after the token in progress and drops the events not yet read
    // (iteration ends); does not wait.
    void abort() {
        abort_.store(true);
        std::lock_guard<std::mutex> lk(mu_);
        queue_.clear();
        cv_.notify_all();
    }

    // abort() and wait for the worker (GIL released).
    void close() {
        abort();
        py::gil_scoped_release nogil;
        std::lock_guard<std::mutex> jl(join_mu_);
        if (worker_.joinable()) worker_.join();
    }

    bool finished() {
        std::lock_guard<std::mutex> lk(mu_);
        return finished_;
    }

    // The final result (tokens, text, stats) once the worker is done, else None.
    py::object result() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (!finished_ || error_) return py::none();
        }
        return result_dict(result_, nullptr);
    }

    const std::vector<int32_t>& prompt() const { return prompt_; }

private:
    void run() {
        tl::GenerateOptions opts;
        opts.lens = co_.lens;
        opts.lens_top_k = co_.lens_top_k;
        opts.observer = [this](const tl::TokenEvent& ev) {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [this] { return queue_.size() < capacity_ || abort_.load(); });
            if (abort_.load()) return false;
            queue_.push_back(ev);
            cv_.notify_all();
            return true;
        };
        tl::GenerateResult r;
        std::exception_ptr err;
        try {
            r = call_(opts);
        } catch (...) {
            err = std::current_exception();
        }
        std::lock_guard<std::mutex> lk(mu_);
        result_ = std::move(r);
        error_ = err;
        finished_ = true;
        cv_.notify_all();
    }

    Call call_;
    std::vector<int32_t> prompt_;
    CallOptions co_;
    size_t capacity_;

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<tl::TokenEvent> queue_;
    bool finished_ = false;
    std::atomic<bool> abort_{false};
    tl::GenerateResult result_;
    std::exception_ptr error_;
    bool error_raised_ = false;  // touched only with the GIL held
    std::mutex join_mu_;
    std::thread worker_;  // last: started once everything above exists
};

const char* kConfigDoc =
    "Config: `config` (a GenerateConfig) and/or its fields as keywords, with the C++ defaults:\n"
    "max_tokens=64, loops=0 (model default), temperature=0.0 (greedy), top_k=50, top_p=1.0,\n"
    "min_p=0.0, cache_window=0, repetition_penalty=1.0, frequency_penalty=0.0,\n"
    "presence_penalty=0.0, logit_bias={}, stop=None (str or list, excluded from text),\n"
    "stop_sequences=[] (token-id tails), ignore_eos=False, max_time=0.0 (seconds; 0 = none),\n"
    "no_repeat_ngram_size=0, bad_words=[] (token sequences), beam_size=0, length_penalty=1.0,\n"
    "early_stopping=False (True | False | 'never'), renormalize_logits=False, min_new_tokens=0, min_length=0,\n"
    "forced_eos_token_id=-1 (off), exponential_decay_length_penalty=None ((start_index, decay_factor)),\n"
    "suppress_tokens=[], begin_suppress_tokens=[], typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0,\n"
    "num_return_sequences=1 (then the result's `sequences` lists every output), num_beam_groups=1,\n"
    "diversity_penalty=0.0, force_words=[] (HF's force_words_ids: [ids] or [[ids], [ids]] alternatives),\n"
    "early_exit_patience=0, early_exit_min_L=2, early_exit_peek_every=1,\n"
    "early_exit_logit_margin=0.0, early_exit_criterion='hidden_l2', early_exit_threshold=0.05,\n"
    "seed (sample_seed)=0. Call options: grammar (a Grammar or GBNF text), events=False,\n"
    "lens=False, lens_top_k=5 (1..64).\n";

py::dict generate_py(const PyModel& model, const py::object& prompt, const py::object& config, py::kwargs kw) {
    const SharedModel m = model.get();
    const CallOptions co = take_call_options(kw);
    tl::GenerateConfig cfg = make_config(config, kw, "generate");
    cfg.grammar = co.grammar.get();
    const std::vector<int32_t> ids = prompt_ids(m.get(), prompt);
    const tl::RunSpec spec{.mode = tl::config_mode(cfg), .config = cfg, .speculation = {}};
    return run_generate(co, [&](const tl::GenerateOptions& o) {
        return tl::run_decode(m.get(), ids.data(), static_cast<int>(ids.size()), spec, o);
    });
}

std::unique_ptr<GenerationStream> stream_py(const PyModel& model, const py::object& prompt, const py::object& config,
                                            int queue_size, py::kwargs kw) {
    const SharedModel m = model.get();
    const CallOptions co = take_call_options(kw);
    tl::GenerateConfig cfg = make_config(config, kw, "generate_stream");
    cfg.grammar = co.grammar.get();
    std::vector<int32_t> ids = prompt_ids(m.get(), prompt);
    if (queue_size < 1) throw py::value_error("queue_size: " + std::to_string(queue_size) + " must be >= 1");
    // Bad settings raise here, in the caller's thread, not on the first next().
    tl::validate_config(m.get(), static_cast<int>(ids.size()), cfg);
    const std::vector<int32_t> p = ids;
    const tl::RunSpec spec{.mode = tl::config_mode(cfg), .config = cfg, .speculation = {}};
    auto call = [m, p, spec, g = co.grammar](const tl::GenerateOptions& o) {
        return tl::run_decode(m.get(), p.data(), static_cast<int>(p.size()), spec, o);
    };
    return std::make_unique<GenerationStream>(std::move(call), std::move(ids), co, static_cast<size_t>(queue_size));
}

py::list batch_py(const PyModel& model, const py::sequence& prompts, const py::object& config, py::kwargs kw) {
    const SharedModel m = model.get();
    const CallOptions co = take_call_options(kw);
    tl::GenerateConfig cfg = make_config(config, kw, "generate_batch");
    cfg.grammar = co.grammar.get();
    if (py::isinstance<py::str>(prompts))
        throw py::type_error("prompts: expected a list of prompts (str or token-id lists), got one str");
    std::vector<std::vector<int32_t>> all;
    for (const auto& p : prompts) all.push_back(prompt_ids(m.get(), p));
    // Every prompt is validated (naming prompts[i]) before any decoding; the prompts run together
    // through the engine's batch scheduler, or one after another with lens=True.
    const bool want_events = co.events || co.lens;
    std::vector<std::vector<tl::TokenEvent>> events(all.size());
    tl::GenerateBatchOptions o;
    o.lens = co.lens;
    o.lens_top_k = co.lens_top_k;
    if (want_events)
        o.observer = [&events](size_t i, const tl::TokenEvent& ev) {
            events[i].push_back(ev);
            return true;
        };
    std::vector<tl::GenerateResult> results;
    {
        py::gil_scoped_release nogil;
        results = tl::generate_batch_ex(m.get(), all, cfg, o);
    }
    py::list out;
    for (size_t i = 0; i < results.size(); ++i) out.append(result_dict(results[i], want_events ? &events[i] : nullptr));
    return out;
}

// A speculative run: the run specification, the models and the grammar it uses, kept alive
// together for a stream's worker thread.
struct SpecCall {
    tl::RunSpec spec;
    SharedModel draft;
    std::shared_ptr<tl::Grammar> grammar;
};

// Speculative entries through the engine's one entry (run_decode): a blocking result dict, or a
// GenerationStream when stream=True.
py::object speculative_call(const PyModel& model, const py::object& prompt, const SpecCall& c, bool stream,
                            int queue_size, const CallOptions& co) {
    const SharedModel m = model.get();
    std::vector<int32_t> ids = prompt_ids(m.get(), prompt);
    if (!stream)
        return run_generate(co, [&](const tl::GenerateOptions& o) {
            return tl::run_decode(m.get(), ids.data(), static_cast<int>(ids.size()), c.spec, o);
        });
    if (queue_size < 1) throw py::value_error("queue_size: " + std::to_string(queue_size) + " must be >= 1");
    const std::vector<int32_t> p = ids;
    auto call = [m, p, c](const tl::GenerateOptions& o) {
        return tl::run_decode(m.get(), p.data(), static_cast<int>(p.size()), c.spec, o);
    };
    return py::cast(std::make_unique<GenerationStream>(std::move(call), std::move(ids), co,
                                                       static_cast<size_t>(queue_size)));
}

// The config fields the self-speculative entries take (the others keep their defaults).
tl::GenerateConfig speculative_config(int max_tokens, float temperature, uint64_t seed, bool ignore_eos) {
    tl::GenerateConfig cfg;
    cfg.max_tokens = max_tokens;
    cfg.temperature = temperature;
    cfg.sample_seed = seed;
    cfg.ignore_eos = ignore_eos;
    return cfg;
}

py::object speculative_py(const PyModel& model, const py::object& prompt, int max_tokens, int draft_loops,
                          int verify_loops, int draft_ahead, float temperature, uint64_t seed, int top_k, float top_p,
                          bool ignore_eos, bool stream, int queue_size, bool events, bool lens, int lens_top_k) {
    SpecCall c;
    c.spec.mode = tl::DecodeMode::Speculative;
    c.spec.config = speculative_config(max_tokens, temperature, seed, ignore_eos);
    c.spec.config.top_k = top_k;
    c.spec.config.top_p = top_p;
    c.spec.speculation = {.verify_loops = verify_loops, .draft_loops = draft_loops, .draft_ahead = draft_ahead};
    return speculative_call(model, prompt, c, stream, queue_size, CallOptions{events, lens, lens_top_k, nullptr});
}

py::object tree_py(const PyModel& model, const py::object& prompt, int max_tokens, int draft_loops, int verify_loops,
                   int draft_ahead, int K_branches, float temperature, uint64_t seed, bool ignore_eos, bool stream,
                   int queue_size, bool events, bool lens, int lens_top_k) {
    SpecCall c;
    c.spec.mode = tl::DecodeMode::Tree;
    c.spec.config = speculative_config(max_tokens, temperature, seed, ignore_eos);
    c.spec.speculation = {.verify_loops = verify_loops, .draft_loops = draft_loops, .draft_ahead = draft_ahead,
                          .branches = K_branches};
    return speculative_call(model, prompt, c, stream, queue_size, CallOptions{events, lens, lens_top_k, nullptr});
}

py::object pipelined_py(const PyModel& model, const py::object& prompt, int max_tokens, int draft_loops,
                        int verify_loops, float temperature, uint64_t seed, int top_k, float top_p, bool ignore_eos,
                        bool stream, int queue_size, bool events) {
    SpecCall c;
    c.spec.mode = tl::DecodeMode::Pipelined;
    c.spec.config = speculative_config(max_tokens, temperature, seed, ignore_eos);
    c.spec.config.top_k = top_k;
    c.spec.config.top_p = top_p;
    c.spec.speculation = {.verify_loops = verify_loops, .draft_loops = draft_loops};
    return speculative_call(model, prompt, c, stream, queue_size, CallOptions{events, false, 5, nullptr});
}

// Draft-model speculation: the target's GenerateConfig, the draft model and its knobs.
py::object draft_py(const PyModel& model, const PyModel& draft, const py::object& prompt, const py::object& config,
                    int gamma, int draft_loops, bool stream, int queue_size, py::kwargs kw) {
    const CallOptions co = take_call_options(kw);
    SpecCall c;
    c.spec.mode = tl::DecodeMode::DraftModel;
    c.spec.config = make_config(config, kw, "generate_draft_speculative");
    c.spec.config.grammar = co.grammar.get();
    c.grammar = co.grammar;
    c.draft = draft.get();
    c.spec.speculation = {.draft_loops = draft_loops, .draft_model = c.draft.get(), .gamma = gamma};
    return speculative_call(model, prompt, c, stream, queue_size, co);
}

}  // namespace

void register_generate(py::module_& m) {
    const std::string cfg_doc = kConfigDoc;

    py::class_<GenerationStream>(
        m, "GenerationStream",
        "Iterator over the TokenEvents of one generation (dicts: token, position, index, piece,\n"
        "depth, prob, lens?). The decode runs on a worker thread; events pass through a bounded\n"
        "queue. Breaking out of the loop (the iterator is released), close(), leaving a with-block\n"
        "or garbage collection aborts the decode (stop_reason CALLBACK_ABORT) and joins the thread.\n"
        "After the last event, .result holds tokens, text and stats. An engine error is raised by\n"
        "the next() that reaches it.")
        .def("__iter__", [](GenerationStream& s) -> GenerationStream& { return s; })
        .def("__next__", &GenerationStream::next)
        .def("abort", &GenerationStream::abort, "Asks the decode to stop after the current token and drops unread events; does not wait.")
        .def("close", &GenerationStream::close, "Aborts the decode (unread events are dropped) and waits for its thread. Idempotent.")
        .def("__enter__", [](GenerationStream& s) -> GenerationStream& { return s; }, py::return_value_policy::reference)
        .def("__exit__", [](GenerationStream& s, py::args) { s.close(); return false; })
        .def_property_readonly("finished", &GenerationStream::finished, "True once the decode has returned.")
        .def_property_readonly("result", &GenerationStream::result,
                               "The result dict (tokens, prompt_ids, output_ids, text, stats) once finished, else None.")
        .def_property_readonly("prompt_ids", &GenerationStream::prompt, "The prompt's token ids.");

    m.def("generate", &generate_py, py::arg("model"), py::arg("prompt"), py::arg("config") = py::none(),
          ("Blocking decode of `prompt` (text or token ids). Returns a dict: tokens (prompt +\n"
           "continuation), prompt_ids, output_ids, text (stop strings excluded), stats (GenerateStats\n"
           "as a dict; stop_reason as a name), and events when events=True or lens=True\n"
           "(lens_top_k=5 entries per depth). With num_return_sequences > 1 also `sequences`: a list\n"
           "of dicts (output_ids, text, stop_reason, score), best first for beam search; the first is\n"
           "the one in output_ids / text (and the only one events report).\n\n" + cfg_doc).c_str());
    m.def("generate_stream", &stream_py, py::arg("model"), py::arg("prompt"), py::arg("config") = py::none(),
          py::arg("queue_size") = 16,
          ("Starts a decode and returns a GenerationStream yielding one event dict per token.\n"
           "queue_size bounds the events buffered ahead of the consumer. lens=True adds the logit\n"
           "lens to each event. Config errors raise here.\n\n" + cfg_doc).c_str());
    m.def("generate_batch", &batch_py, py::arg("model"), py::arg("prompts"), py::arg("config") = py::none(),
          ("Batch decode (the seed's generate_batch) with one shared config: the prompts run together\n"
           "through the engine's batch scheduler (each weight read once per step for all of them;\n"
           "with lens=True or beam search, one after another). Every prompt is validated before any\n"
           "decoding. Returns a list of result dicts, one per prompt, in order; each prompt's tokens\n"
           "equal generate()'s for it alone.\n\n" + cfg_doc).c_str());

    m.def(
        "next_token_distribution",
        [](const PyModel& model, const py::object& tokens, int emitted, const py::object& config, py::kwargs kw) {
            const SharedModel m = model.get();
            const tl::GenerateConfig cfg = make_config(config, kw, "next_token_distribution");
            const std::vector<int32_t> ids = prompt_ids(m.get(), tokens);
            py::gil_scoped_release unlocked;
            return tl::next_token_distribution(m.get(), ids.data(), static_cast<int>(ids.size()), emitted, cfg);
        },
        py::arg("model"), py::arg("tokens"), py::arg("emitted") = 0, py::arg("config") = py::none(),
        ("The distribution decoding draws the token after `tokens` (text or ids) from, as a list of\n"
         "vocab_size floats: the last `emitted` tokens count as output already (the rest as the prompt);\n"
         "the config's logits pipeline, then its sampling warpers (greedy: 1 at the argmax). No grammar.\n\n" +
         cfg_doc).c_str());

    py::class_<PyGrammar>(m, "Grammar",
                          "A GBNF-style grammar for constrained decoding (named rules `name ::= ...`, \"literals\",\n"
                          "[classes], ( groups ), |, ?, *, +, # comments; start rule `root`). Pass it as grammar=\n"
                          "to the generate* functions (GBNF text is accepted there too). Immutable; shareable.")
        .def(py::init([](const std::string& text) {
                 return PyGrammar{std::shared_ptr<tl::Grammar>(tl::Owned<tl::Grammar>(tl::parse_grammar(text))),
                                  text};
             }),
             py::arg("text"), py::call_guard<py::gil_scoped_release>(),
             "Parses GBNF text (releasing the GIL); ValueError 'grammar:LINE:COL: message' when malformed.")
        .def_static(
            "from_file",
            [](const std::string& path) {
                return PyGrammar{std::shared_ptr<tl::Grammar>(tl::Owned<tl::Grammar>(tl::load_grammar_file(path))),
                                 path};
            },
            py::arg("path"), "Loads a grammar file; OSError when unreadable, ValueError when malformed.")
        .def("__repr__", [](const PyGrammar& g) { return "<tinyloop_py.Grammar " + std::to_string(g.source.size()) + " chars>"; });

    m.def(
        "validate_config",
        [](const PyModel& model, const py::object& prompt, const py::object& config, py::kwargs kw) {
            const SharedModel mp = model.get();
            const CallOptions co = take_call_options(kw);
            tl::GenerateConfig cfg = make_config(config, kw, "validate_config");
            cfg.grammar = co.grammar.get();
            const int n = py::isinstance<py::int_>(prompt) ? prompt.cast<int>()
                                                           : static_cast<int>(prompt_ids(mp.get(), prompt).size());
            tl::validate_config(mp.get(), n, cfg);
        },
        py::arg("model"), py::arg("prompt"), py::arg("config") = py::none(),
        ("Checks a config against a model and a prompt (text, ids, or its length as an int) with\n"
         "every rule generate applies; raises ValueError naming the field (NotImplementedError for a\n"
         "feature not in this build). Returns None.\n\n" + cfg_doc).c_str());

    m.def("generate_speculative", &speculative_py, py::arg("model"), py::arg("prompt"), py::kw_only(),
          py::arg("max_tokens") = 64, py::arg("draft_loops") = 0, py::arg("verify_loops") = 0, py::arg("draft_ahead") = 0,
          py::arg("temperature") = 0.0f, py::arg("seed") = 0, py::arg("top_k") = 0, py::arg("top_p") = 1.0f,
          py::arg("ignore_eos") = false, py::arg("stream") = false, py::arg("queue_size") = 16,
          py::arg("events") = false, py::arg("lens") = false, py::arg("lens_top_k") = 5,
          "Chain self-speculative decoding: draft draft_ahead tokens at draft_loops\n"
          "(1 .. verify_loops-1), verify them at verify_loops (2 .. max_loops). A knob left at 0 is the\n"
          "engine's resolver's (resolve_run): verify_loops the model's default depth, draft_loops and\n"
          "draft_ahead the model's recommendation, else the built-in ones. Greedy at temperature 0\n"
          "equals plain greedy decoding at verify_loops,\n"
          "temperature > 0 is lossless rejection sampling (top_k 0 = off, top_p). Returns the\n"
          "generate() result dict (stats has spec_cycles, spec_drafted, spec_tested, spec_accepted,\n"
          "spec_accept_hist, draft_ms, verify_ms, spec_acceptance_rate, spec_mean_accepted; events\n"
          "carry cycle, drafted, accepted, from_verifier), or a GenerationStream when stream=True.");
    m.def("generate_tree_speculative", &tree_py, py::arg("model"), py::arg("prompt"), py::kw_only(),
          py::arg("max_tokens") = 64, py::arg("draft_loops") = 0, py::arg("verify_loops") = 0, py::arg("draft_ahead") = 0,
          py::arg("K_branches") = 0, py::arg("temperature") = 0.0f, py::arg("seed") = 0, py::arg("ignore_eos") = false,
          py::arg("stream") = false, py::arg("queue_size") = 16, py::arg("events") = false, py::arg("lens") = false,
          py::arg("lens_top_k") = 5,
          "Tree self-speculative decoding, grown best-first: draft_ahead nodes run per cycle (1..8),\n"
          "each keeping its K_branches best children (1..8) as candidates, the next node the likeliest\n"
          "accepted path; the run nodes verified in one forward. Knobs left at 0 are the engine's\n"
          "resolver's, as for generate_speculative. Greedy only (temperature > 0 is refused). Returns\n"
          "the generate() result dict, or a GenerationStream when stream=True.");

    m.def("generate_pipelined", &pipelined_py, py::arg("model"), py::arg("prompt"), py::kw_only(),
          py::arg("max_tokens") = 64, py::arg("draft_loops") = 0, py::arg("verify_loops") = 0,
          py::arg("temperature") = 0.0f, py::arg("seed") = 0, py::arg("top_k") = 0, py::arg("top_p") = 1.0f,
          py::arg("ignore_eos") = false, py::arg("stream") = false, py::arg("queue_size") = 16,
          py::arg("events") = false,
          "Self-speculation pipelined over depth: the next token is drafted at draft_loops\n"
          "while the current one runs its deeper passes, every row in flight sharing each sweep of\n"
          "the loop block's weights; a token is emitted when its row reaches verify_loops. Greedy at\n"
          "temperature 0 equals plain greedy decoding at verify_loops; temperature > 0 tests each\n"
          "draft by lossless rejection sampling (top_k 0 = off, top_p), as generate_speculative.\n"
          "Knobs left at 0 are the engine's resolver's, as\n"
          "for generate_speculative. Returns the generate() result dict (stats has spec_sweeps,\n"
          "spec_tested, spec_accepted), or a GenerationStream when stream=True.");
    m.def("generate_draft_speculative", &draft_py, py::arg("model"), py::arg("draft"), py::arg("prompt"),
          py::arg("config") = py::none(), py::kw_only(), py::arg("gamma") = tl::kDraftModelGamma, py::arg("draft_loops") = 0,
          py::arg("stream") = false, py::arg("queue_size") = 16,
          ("Draft-model speculative decoding (seed 002's SpeculativeDecodingBackend): `draft`, a Model\n"
           "with the same vocabulary, drafts gamma (1..32) tokens per cycle at draft_loops (0 = its\n"
           "default), `model` verifies them in one forward. Every config rule applies; greedy output\n"
           "equals generate(model, ...), sampled output has its distribution. A draft whose\n"
           "vocabulary differs raises ValueError. Returns the generate() result dict with the\n"
           "speculative stats, or a GenerationStream when stream=True.\n\n" + cfg_doc).c_str());

    auto cls = py::reinterpret_borrow<py::class_<PyModel, std::shared_ptr<PyModel>>>(m.attr("Model"));
    cls.def(
           "generate",
           [](const PyModel& self, const py::object& prompt, const py::object& config, py::kwargs kw) {
               return generate_py(self, prompt, config, std::move(kw));
           },
           py::arg("prompt"), py::arg("config") = py::none(), "generate(self, prompt, ...): see tinyloop_py.generate.")
        .def(
            "generate_stream",
            [](const PyModel& self, const py::object& prompt, const py::object& config, int queue_size, py::kwargs kw) {
                return stream_py(self, prompt, config, queue_size, std::move(kw));
            },
            py::arg("prompt"), py::arg("config") = py::none(), py::arg("queue_size") = 16,
            "generate_stream(self, prompt, ...): see tinyloop_py.generate_stream.")
        .def(
            "generate_batch",
            [](const PyModel& self, const py::sequence& prompts, const py::object& config, py::kwargs kw) {
                return batch_py(self, prompts, config, std::move(kw));
            },
            py::arg("prompts"), py::arg("config") = py::none(), "See tinyloop_py.generate_batch.");
}

}  // namespace tinyloop_py
