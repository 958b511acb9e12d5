// The model's recommended settings (docs/FORMAT.md §2, metadata "recommended") as Python sees
// them: Model.recommendation, and the engine's one resolver ("the caller's value, else the
// model's, else the built-in default") for early exit and self-speculation, so a front end in
// Python (the server) applies the same rule as the CLI and the workbench; and the metadata writer.
#include <algorithm>
#include <iterator>

#include "common.h"

namespace tinyloop_py {

namespace tl = tinyloop;

namespace {

const char* const kEarlyExitKeys[] = {"early_exit_criterion", "early_exit_threshold", "early_exit_logit_margin",
                                      "early_exit_patience", "early_exit_min_L", "early_exit_peek_every"};

// resolve_early_exit(model, **early_exit_fields): early exit switched on, each field the caller
// gave kept, every other one the model's (or the built-in default).
py::tuple resolve_early_exit_py(const PyModel& model, py::kwargs kw) {
    const SharedModel m = model.get();
    std::vector<std::string> user;
    for (const auto& [k, v] : kw) {
        const std::string key = k.cast<std::string>();
        if (std::find(std::begin(kEarlyExitKeys), std::end(kEarlyExitKeys), key) == std::end(kEarlyExitKeys))
            throw py::type_error("resolve_early_exit() got an unexpected keyword argument '" + key +
                                 "' (early_exit_criterion, early_exit_threshold, early_exit_logit_margin, "
                                 "early_exit_patience, early_exit_min_L, early_exit_peek_every)");
        user.push_back(key);
    }
    const tl::GenerateConfig given = make_config(py::none(), kw, "resolve_early_exit");
    std::vector<std::pair<std::string, std::string>> source;
    const tl::GenerateConfig c = tl::resolve_early_exit(m.get(), given, user, &source);
    py::dict fields;
    fields["early_exit_criterion"] = tl::criterion_name(c.early_exit.criterion);
    fields["early_exit_threshold"] = c.early_exit.threshold;
    fields["early_exit_logit_margin"] = c.early_exit.logit_margin;
    fields["early_exit_patience"] = c.early_exit.patience;
    fields["early_exit_min_L"] = c.early_exit.min_L;
    fields["early_exit_peek_every"] = c.early_exit.peek_every;
    py::dict from;
    for (const auto& [key, origin] : source) from[py::str(key)] = origin;
    return py::make_tuple(fields, from);
}

py::dict resolve_speculation_py(const PyModel& model, const std::string& mode, int loops, int verify_loops,
                                int draft_loops, int draft_ahead, int branches) {
    const SharedModel m = model.get();
    tl::RunSpec spec;
    if (!tl::parse_decode_mode(mode, &spec.mode) ||
        !tl::self_speculative(spec.mode))
        throw py::value_error("mode: '" + mode + "' is not one of chain, tree, pipelined");
    spec.config.loops = loops;
    spec.speculation.verify_loops = verify_loops;
    spec.speculation.draft_loops = draft_loops;
    spec.speculation.draft_ahead = draft_ahead;
    spec.speculation.branches = branches;
    const tl::SpeculationPolicy k = tl::resolved_speculation(m.get(), spec);
    py::dict d;
    d["verify_loops"] = k.verify_loops;
    d["draft_loops"] = k.draft_loops;
    d["draft_ahead"] = k.draft_ahead;
    d["branches"] = k.branches;
    return d;
}

// resolve_run(model, mode, speculation=None, **config): the engine's resolver (tinyloop::resolve_run).
py::dict resolve_run_py(const PyModel& model, const std::string& mode, const py::object& speculation, py::kwargs kw) {
    const SharedModel m = model.get();
    tl::RunSpec spec;
    if (!tl::parse_decode_mode(mode, &spec.mode))
        throw py::value_error("mode: '" + mode +
                              "' is not one of greedy, sample, early-exit, beam, speculative, tree, pipelined");
    if (spec.mode == tl::DecodeMode::DraftModel)
        throw py::value_error("mode: 'draft-model' needs a draft model: generate_draft() resolves its own");
    std::vector<std::string> user;
    for (const auto& [k, v] : kw) {
        const std::string key = k.cast<std::string>();
        user.push_back(key == "seed" ? "sample_seed" : key);
    }
    spec.config = make_config(py::none(), kw, "resolve_run");
    if (!speculation.is_none()) {
        const nlohmann::json sj = py_to_json(speculation);
        spec.speculation = tl::speculation_from_json(sj, tl::config_limits(m.get()), "speculation.");
        for (auto it = sj.begin(); it != sj.end(); ++it)
            user.push_back("speculation." + (it.key() == "K_branches" ? std::string("branches") : it.key()));
    }
    const tl::ResolvedRun r = tl::resolve_run(m.get(), spec, user);
    py::dict d;
    d["mode"] = tl::decode_mode_name(r.spec.mode);
    d["config"] = json_to_py(tl::config_to_json(r.spec.config));
    d["speculation"] = json_to_py(tl::speculation_to_json(r.spec.speculation));
    py::dict from;
    for (const auto& [key, origin] : r.source) from[py::str(key)] = origin;
    d["source"] = from;
    py::list lines;
    for (const std::string& line : r.messages) lines.append(line);
    d["messages"] = lines;
    return d;
}

}  // namespace

void register_recommendation(py::module_& m) {
    auto cls = py::reinterpret_borrow<py::class_<PyModel, std::shared_ptr<PyModel>>>(m.attr("Model"));
    cls.def_property_readonly(
        "recommendation",
        [](const PyModel& self) {
            return json_to_py(tl::recommendation_to_json(tl::model_recommendation(self.get().get())));
        },
        "The settings the file recommends (metadata 'recommended', docs/FORMAT.md §2) as a dict:\n"
        "{'speculation': {draft_loops, draft_ahead, tree_draft_ahead, branches}, 'early_exit':\n"
        "{criterion, threshold, patience, min_L, peek_every, ...}}, each part only when the file has it.");
    m.def(
        "write_model_metadata",
        [](const std::string& in_path, const std::string& out_path, const std::string& metadata_json) {
            tl::write_model_metadata(in_path, out_path, metadata_json);
        },
        py::arg("in_path"), py::arg("out_path"), py::arg("metadata_json"), py::call_guard<py::gil_scoped_release>(),
        "Copies the model file in_path to out_path (the same path replaces it) with the header's\n"
        "metadata replaced by metadata_json (a JSON object, e.g. with a 'recommended' key); every\n"
        "tensor byte is kept and the result is checked by loading it (`tinyloop recommend --write`).");
    m.def("resolve_early_exit", &resolve_early_exit_py, py::arg("model"),
          "resolve_early_exit(model, **fields) -> (fields, source): early exit switched on, each\n"
          "early_exit_* keyword given kept, every other early-exit field the model's recommendation\n"
          "(when it has one and the criterion is its own), else the built-in default (patience 1,\n"
          "hidden_l2, threshold 0.05, min_L 2, peek_every 1). `fields` holds the six early_exit_*\n"
          "keys as generate() takes them; `source` says 'user', 'model' or 'built-in' per key.");
    m.def("resolve_run", &resolve_run_py, py::arg("model"), py::arg("mode") = "greedy", py::kw_only(),
          py::arg("speculation") = py::none(),
          "resolve_run(model, mode='greedy', speculation=None, **config) -> dict: the engine's resolver\n"
          "(the CLI's and the workbench's): the keywords the caller gave are the user's (generate()'s\n"
          "config keywords; speculation a dict of draft_loops, verify_loops, draft_ahead, branches),\n"
          "every other field the model's recommendation or the built-in default, the mode's rules\n"
          "applied (greedy temperature 0, sample 0.8, beam 4, tree greedy only). Returns {'mode',\n"
          "'config', 'speculation' (the codec's canonical JSON), 'source' ({key: 'user' | 'model' |\n"
          "'built-in' | 'mode'}), 'messages' (one line a field)}. Raises ValueError naming the field.");
    m.def("resolve_speculation", &resolve_speculation_py, py::arg("model"), py::kw_only(), py::arg("mode") = "chain",
          py::arg("loops") = 0, py::arg("verify_loops") = 0, py::arg("draft_loops") = 0, py::arg("draft_ahead") = 0,
          py::arg("branches") = 0,
          "The self-speculation knobs a run uses, each 0 resolved as the engine does: verify_loops from\n"
          "loops (0 = the model's default), draft_loops / draft_ahead / branches from the model's\n"
          "recommendation, else min(2, verify_loops - 1), 4 and 2. mode: 'chain' or 'tree'. Returns\n"
          "{verify_loops, draft_loops, draft_ahead, branches}; the ranges are checked by the run.");
}

}  // namespace tinyloop_py
