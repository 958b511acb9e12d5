// The scoring family: score, score_last_token, score_logit_lens, score_with_uncertainty,
// score_with_consistency_escalation. Each takes text or token ids and returns a dict.
#include "common.h"

namespace tinyloop_py {

namespace tl = tinyloop;

namespace {

// Runs f(model, ids, n) with the GIL released.
template <class F>
auto with_ids(const PyModel& model, const py::object& tokens, F&& f) {
    const SharedModel m = model.get();
    const std::vector<int32_t> ids = prompt_ids(m.get(), tokens);
    py::gil_scoped_release nogil;
    return f(m.get(), ids.data(), static_cast<int>(ids.size()));
}

py::dict score_py(const PyModel& model, const py::object& tokens, int loops) {
    auto r = with_ids(model, tokens, [&](tl::Model* m, const int32_t* p, int n) { return tl::score(m, p, n, loops); });
    py::dict d;
    d["token_logprobs"] = r.token_logprobs;
    d["total_nll"] = r.total_nll;
    d["perplexity"] = r.perplexity;
    d["loops"] = r.loops;
    return d;
}

py::dict last_py(const PyModel& model, const py::object& tokens, int loops, int top_k, bool logits) {
    auto r = with_ids(model, tokens,
                      [&](tl::Model* m, const int32_t* p, int n) { return tl::score_last_token(m, p, n, loops, top_k); });
    py::dict d;
    if (logits) d["logits"] = r.logits;
    d["top_ids"] = r.top_ids;
    d["top_probs"] = r.top_probs;
    d["loops"] = r.loops;
    return d;
}

py::dict lens_py(const PyModel& model, const py::object& tokens, int loops, int top_k, bool final_only) {
    auto r = with_ids(model, tokens,
                      [&](tl::Model* m, const int32_t* p, int n) { return tl::score_logit_lens(m, p, n, loops, top_k); });
    py::list rows;
    for (int i = 0; i < r.n_positions; ++i) {
        py::list row;
        // final_only: the one depth a caller such as the server's echo logprobs reads; the
        // conversion, done with the GIL held, is then `loops` times shorter.
        for (int l = final_only ? r.loops : 1; l <= r.loops; ++l) {
            const tl::LensCell& c = r.at(i, l);
            py::dict e;
            e["top_ids"] = c.top_ids;
            e["top_probs"] = c.top_probs;
            e["argmax"] = c.argmax;
            e["p_final_argmax"] = c.p_final_argmax;
            e["p_next"] = c.p_next;
            e["entropy"] = c.entropy;
            e["kl_to_final"] = c.kl_to_final;
            row.append(e);
        }
        rows.append(row);
    }
    py::dict d;
    d["n_positions"] = r.n_positions;
    d["loops"] = r.loops;
    d["top_k"] = r.top_k;
    d["cells"] = rows;
    return d;
}

py::dict uncertainty_py(const PyModel& model, const py::object& tokens, int loops) {
    auto r = with_ids(model, tokens,
                      [&](tl::Model* m, const int32_t* p, int n) { return tl::score_with_uncertainty(m, p, n, loops); });
    py::dict d;
    d["loops"] = r.loops;
    d["token_logprobs"] = r.token_logprobs;
    d["entropy"] = r.entropy;
    d["margin"] = r.margin;
    d["prediction_depth"] = r.prediction_depth;
    return d;
}

tl::EscalationSignal parse_signal(const std::string& s) {
    if (s == "entropy") return tl::EscalationSignal::Entropy;
    if (s == "margin") return tl::EscalationSignal::Margin;
    if (s == "disagreement") return tl::EscalationSignal::Disagreement;
    throw py::value_error("signal: '" + s + "' is not one of entropy, margin, disagreement");
}

py::dict escalation_py(const PyModel& model, const py::object& tokens, std::vector<int> depths,
                       const std::string& signal, float threshold) {
    tl::EscalationConfig c;
    c.depths = std::move(depths);
    c.signal = parse_signal(signal);
    c.threshold = threshold;
    auto r = with_ids(model, tokens, [&](tl::Model* m, const int32_t* p, int n) {
        return tl::score_with_consistency_escalation(m, p, n, c);
    });
    py::dict d;
    d["token_logprobs"] = r.token_logprobs;
    d["depth_used"] = r.depth_used;
    std::vector<bool> esc(r.escalated.begin(), r.escalated.end());
    d["escalated"] = esc;
    d["total_nll"] = r.total_nll;
    d["perplexity"] = r.perplexity;
    d["deepest"] = r.deepest;
    d["passes_run"] = r.passes_run;
    return d;
}

// score_kv_sharing(model, tokens, prompt, **config): kv_sharing's bytes and NLL change (FORMAT.md §1c).
py::dict kv_sharing_py(const PyModel& model, const py::object& tokens, int prompt, py::kwargs kw) {
    const tl::GenerateConfig c = make_config(py::none(), kw, "score_kv_sharing");
    auto r = with_ids(model, tokens,
                      [&](tl::Model* m, const int32_t* p, int n) { return tl::score_kv_sharing(m, p, n, c, prompt); });
    py::dict d;
    d["kv_sharing"] = r.kv_sharing;
    d["prompt"] = r.prompt;
    d["loops"] = r.loops;
    d["token_logprobs"] = r.score.token_logprobs;
    d["total_nll"] = r.score.total_nll;
    d["exact_total_nll"] = r.exact_total_nll;
    d["delta_nll"] = r.delta_nll;
    d["depth_used"] = r.depth_used;
    d["cache_bytes"] = r.cache_bytes;
    d["exact_cache_bytes"] = r.exact_cache_bytes;
    d["bytes_per_token"] = r.bytes_per_token;
    d["exact_bytes_per_token"] = r.exact_bytes_per_token;
    return d;
}

}  // namespace

void register_scoring(py::module_& m) {
    m.def("score_kv_sharing", &kv_sharing_py, py::arg("model"), py::arg("tokens"), py::arg("prompt"),
          "kv_sharing on a text (FORMAT.md §1c): tokens[:prompt] prefilled, the rest fed one at a time as\n"
          "generate feeds them, with the config keywords (kv_sharing='last-pass', loops, early_exit_*).\n"
          "Returns {kv_sharing, prompt, loops, token_logprobs, total_nll, exact_total_nll (per-pass),\n"
          "delta_nll (nats per token), depth_used, cache_bytes, exact_cache_bytes, bytes_per_token,\n"
          "exact_bytes_per_token}.");
    m.def("score", &score_py, py::arg("model"), py::arg("tokens"), py::arg("loops") = 0,
          "Log-probability of every next token of `tokens` (text or ids) at depth `loops` (0 = the\n"
          "model's default). Returns {token_logprobs (n-1), total_nll, perplexity, loops}.");
    m.def("score_last_token", &last_py, py::arg("model"), py::arg("tokens"), py::arg("loops") = 0,
          py::arg("top_k") = 10, py::arg("logits") = true,
          "The last position's next-token distribution: {logits (vocab_size floats, when logits=True),\n"
          "top_ids, top_probs (softmax at temperature 1), loops}.");
    m.def("score_logit_lens", &lens_py, py::arg("model"), py::arg("tokens"), py::arg("loops") = 0, py::arg("top_k") = 5,
          py::arg("final_only") = false,
          "The logit lens at every position and depth 1..loops: {n_positions, loops, top_k, cells}, where\n"
          "cells[position][depth-1] = {top_ids, top_probs, argmax, p_final_argmax, p_next (-1 at the\n"
          "last position), entropy, kl_to_final}. Depth == loops is the model's output. final_only=True:\n"
          "cells[position] holds only that last depth's cell.");
    m.def("score_with_uncertainty", &uncertainty_py, py::arg("model"), py::arg("tokens"), py::arg("loops") = 0,
          "Per-position uncertainty: {loops, token_logprobs (n-1), entropy (n), margin (n),\n"
          "prediction_depth (n): first depth whose argmax equals the final one and stays}.");
    m.def("score_with_consistency_escalation", &escalation_py, py::arg("model"), py::arg("tokens"),
          py::arg("depths") = std::vector<int>{2, 4, 8}, py::arg("signal") = "entropy", py::arg("threshold") = 2.0f,
          "Scores at the first rung of `depths`; positions whose signal ('entropy' above threshold,\n"
          "'margin' below it, or 'disagreement' between depths) crosses go on to the next rung.\n"
          "Returns {token_logprobs, depth_used, escalated, total_nll, perplexity, deepest, passes_run}.");

    auto cls = py::reinterpret_borrow<py::class_<PyModel, std::shared_ptr<PyModel>>>(m.attr("Model"));
    cls.def("score", &score_py, py::arg("tokens"), py::arg("loops") = 0, "See tinyloop_py.score.")
        .def("score_last_token", &last_py, py::arg("tokens"), py::arg("loops") = 0, py::arg("top_k") = 10,
             py::arg("logits") = true, "See tinyloop_py.score_last_token.")
        .def("score_logit_lens", &lens_py, py::arg("tokens"), py::arg("loops") = 0, py::arg("top_k") = 5,
             py::arg("final_only") = false, "See tinyloop_py.score_logit_lens.")
        .def("score_with_uncertainty", &uncertainty_py, py::arg("tokens"), py::arg("loops") = 0,
             "See tinyloop_py.score_with_uncertainty.")
        .def("score_with_consistency_escalation", &escalation_py, py::arg("tokens"),
             py::arg("depths") = std::vector<int>{2, 4, 8}, py::arg("signal") = "entropy", py::arg("threshold") = 2.0f,
             "See tinyloop_py.score_with_consistency_escalation.");
}

}  // namespace tinyloop_py
