// The JSON codec's result half: GenerateStats, ReturnedSequence and TokenEvent (lens rows, speculative cycles) to
// and from JSON (tinyloop/json.h).
#include <charconv>
#include <cstdlib>

#include "tinyloop/json.h"

namespace tinyloop {

using nlohmann::json;

double json_float(float f) {
    char buf[64];
    auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf) - 1, f);
    if (ec != std::errc()) return static_cast<double>(f);
    *ptr = '\0';
    return std::strtod(buf, nullptr);
}

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& why) {
    throw Error(ErrorCode::InvalidArgument, field + ": " + why);
}

std::vector<double> floats(const std::vector<float>& v) {
    std::vector<double> out;
    out.reserve(v.size());
    for (float x : v) out.push_back(json_float(x));
    return out;
}

// Reads j[key] into x when present, naming the field when its type is wrong.
template <class T>
void take(const json& j, const char* key, T& x) {
    auto it = j.find(key);
    if (it == j.end()) return;
    try {
        x = it->get<T>();
    } catch (const json::exception&) {
        bad(key, "unexpected type " + std::string(it->type_name()));
    }
}

void require_object(const json& j, const char* what) {
    if (!j.is_object()) bad(what, "expected a JSON object");
}

// j["stop_reason"], when present, as a StopReason (its name, as stop_reason_name writes it).
void take_stop_reason(const json& j, StopReason& x) {
    std::string reason = stop_reason_name(x);
    take(j, "stop_reason", reason);
    for (int r = 0; r <= static_cast<int>(StopReason::MAX_TIME); ++r)
        if (reason == stop_reason_name(static_cast<StopReason>(r))) {
            x = static_cast<StopReason>(r);
            return;
        }
    bad("stop_reason", "'" + reason + "' is not a stop reason");
}

}  // namespace

json stats_to_json(const GenerateStats& s) {
    return json{
        {"prefill_ms", s.prefill_ms},
        {"first_token_ms", s.first_token_ms},
        {"decode_ms", s.decode_ms},
        {"total_ms", s.total_ms},
        {"prompt_tokens", s.prompt_tokens},
        {"tokens_emitted", s.tokens_emitted},
        {"stop_reason", stop_reason_name(s.stop_reason)},
        {"loops_used", s.loops_used},
        {"decode_tokens_per_s", s.decode_tokens_per_s()},
        {"depth_per_token", s.depth_per_token},
        {"kv_cache_bytes", s.kv_cache_bytes},
        {"spec_cycles", s.spec_cycles},
        {"spec_drafted", s.spec_drafted},
        {"spec_tested", s.spec_tested},
        {"spec_accepted", s.spec_accepted},
        {"spec_accept_hist", s.spec_accept_hist},
        {"spec_acceptance_rate", s.spec_acceptance_rate()},
        {"spec_mean_accepted", s.spec_mean_accepted()},
        {"draft_ms", s.draft_ms},
        {"verify_ms", s.verify_ms},
        {"spec_sweeps", s.spec_sweeps},
    };
}

GenerateStats stats_from_json(const json& j) {
    require_object(j, "stats");
    GenerateStats s;
    take(j, "prefill_ms", s.prefill_ms);
    take(j, "first_token_ms", s.first_token_ms);
    take(j, "decode_ms", s.decode_ms);
    take(j, "total_ms", s.total_ms);
    take(j, "prompt_tokens", s.prompt_tokens);
    take(j, "tokens_emitted", s.tokens_emitted);
    take(j, "loops_used", s.loops_used);
    take(j, "depth_per_token", s.depth_per_token);
    take(j, "kv_cache_bytes", s.kv_cache_bytes);
    take(j, "spec_cycles", s.spec_cycles);
    take(j, "spec_drafted", s.spec_drafted);
    take(j, "spec_tested", s.spec_tested);
    take(j, "spec_accepted", s.spec_accepted);
    take(j, "spec_accept_hist", s.spec_accept_hist);
    take(j, "draft_ms", s.draft_ms);
    take(j, "verify_ms", s.verify_ms);
    take(j, "spec_sweeps", s.spec_sweeps);
    take_stop_reason(j, s.stop_reason);
    return s;
}

json sequences_to_json(const std::vector<ReturnedSequence>& seqs) {
    json a = json::array();
    for (const auto& q : seqs)
        a.push_back({{"output_ids", q.output}, {"text", q.text}, {"stop_reason", stop_reason_name(q.stop_reason)},
                     {"score", q.score}});
    return a;
}

std::vector<ReturnedSequence> sequences_from_json(const json& j) {
    if (!j.is_array()) bad("sequences", "expected an array of {output_ids, text, stop_reason, score}");
    std::vector<ReturnedSequence> out;
    for (const auto& row : j) {
        require_object(row, "sequences[]");
        ReturnedSequence q;
        take(row, "output_ids", q.output);
        take(row, "text", q.text);
        take(row, "score", q.score);
        take_stop_reason(row, q.stop_reason);
        out.push_back(std::move(q));
    }
    return out;
}

json event_to_json(const TokenEvent& ev) {
    json j = {{"token", ev.token}, {"position", ev.position}, {"index", ev.index},
              {"piece", ev.piece}, {"depth", ev.depth},       {"prob", json_float(ev.prob)}};
    if (ev.cycle >= 0) {
        j["cycle"] = ev.cycle;
        j["drafted"] = ev.drafted;
        j["accepted"] = ev.accepted;
        j["from_verifier"] = ev.from_verifier;
    }
    if (!ev.exit_gate.empty()) {
        j["exit_gate"] = floats(ev.exit_gate);
        j["exit_gate_cdf"] = floats(ev.exit_gate_cdf);
    }
    if (!ev.lens.empty()) {
        json lens = json::array();
        for (const auto& l : ev.lens)
            lens.push_back({{"depth", l.depth},
                            {"top_ids", l.top_ids},
                            {"top_probs", floats(l.top_probs)},
                            {"p_emitted", json_float(l.p_emitted)},
                            {"entropy", json_float(l.entropy)}});
        j["lens"] = lens;
    }
    return j;
}

TokenEvent event_from_json(const json& j) {
    require_object(j, "event");
    TokenEvent ev;
    take(j, "token", ev.token);
    take(j, "position", ev.position);
    take(j, "index", ev.index);
    take(j, "piece", ev.piece);
    take(j, "depth", ev.depth);
    take(j, "prob", ev.prob);
    take(j, "cycle", ev.cycle);
    take(j, "drafted", ev.drafted);
    take(j, "accepted", ev.accepted);
    take(j, "from_verifier", ev.from_verifier);
    take(j, "exit_gate", ev.exit_gate);
    take(j, "exit_gate_cdf", ev.exit_gate_cdf);
    if (ev.exit_gate_cdf.size() != ev.exit_gate.size())
        bad("exit_gate_cdf", std::to_string(ev.exit_gate_cdf.size()) + " entries; expected one per exit_gate entry (" +
                                 std::to_string(ev.exit_gate.size()) + ")");
    for (const std::vector<float>* v : {&ev.exit_gate, &ev.exit_gate_cdf})
        for (float x : *v)
            if (!(x >= 0.0f && x <= 1.0f))
                bad(v == &ev.exit_gate ? "exit_gate" : "exit_gate_cdf",
                    "a value " + std::to_string(x) + " is outside [0, 1] (a probability)");
    auto lens = j.find("lens");
    if (lens == j.end()) return ev;
    if (!lens->is_array()) bad("lens", "expected an array of rows");
    for (const auto& row : *lens) {
        require_object(row, "lens[]");
        LensDepth l;
        take(row, "depth", l.depth);
        take(row, "top_ids", l.top_ids);
        take(row, "top_probs", l.top_probs);
        take(row, "p_emitted", l.p_emitted);
        take(row, "entropy", l.entropy);
        ev.lens.push_back(std::move(l));
    }
    return ev;
}

}  // namespace tinyloop
