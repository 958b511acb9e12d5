#include <tinyloop_analysis/agreement_map.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace tinyloop::analysis {

namespace {

[[noreturn]] void bad_arg(const std::string& msg) {
    throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, msg);
}

}  // namespace

AgreementMap agreement_from_argmax(const std::vector<std::vector<int32_t>>& argmax) {
    if (argmax.empty()) throw std::invalid_argument("argmax: no positions");
    const size_t depths = argmax.front().size();
    if (depths == 0) throw std::invalid_argument("argmax[0]: no depths");
    AgreementMap m;
    m.final_depth = static_cast<int>(depths);
    m.argmax = argmax;
    m.first_agree.reserve(argmax.size());
    for (size_t j = 0; j < argmax.size(); ++j) {
        if (argmax[j].size() != depths)
            throw std::invalid_argument("argmax[" + std::to_string(j) + "]: " + std::to_string(argmax[j].size()) +
                                        " depths, expected " + std::to_string(depths));
        int first = m.final_depth;
        for (int d = 1; d <= m.final_depth; ++d)
            if (argmax[j][static_cast<size_t>(d - 1)] == argmax[j][depths - 1]) {
                first = d;
                break;
            }
        m.first_agree.push_back(first);
    }
    return m;
}

AgreementMap build_agreement_map(tinyloop::Model* model, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& continuation, int final_depth) {
    if (prompt.empty()) bad_arg("prompt: must hold at least one token");
    if (continuation.empty()) bad_arg("continuation: must hold at least one token");
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), continuation.begin(), continuation.end());
    // The last continuation token predicts nothing we read, so the lens stops one short of it.
    const int n = static_cast<int>(seq.size()) - 1;
    const tinyloop::LensResult lens = tinyloop::score_logit_lens(model, seq.data(), n, final_depth, 1);
    std::vector<std::vector<int32_t>> table(continuation.size(), std::vector<int32_t>(static_cast<size_t>(lens.loops)));
    for (size_t j = 0; j < continuation.size(); ++j) {
        const int pos = static_cast<int>(prompt.size()) - 1 + static_cast<int>(j);
        for (int d = 1; d <= lens.loops; ++d) table[j][static_cast<size_t>(d - 1)] = lens.at(pos, d).argmax;
    }
    AgreementMap m = agreement_from_argmax(table);
    m.prompt = prompt;
    m.continuation = continuation;
    return m;
}

double predicted_acceptance(const AgreementMap& map, int draft_depth) {
    if (draft_depth < 1 || draft_depth > map.final_depth)
        bad_arg("draft_loops: " + std::to_string(draft_depth) + " is outside [1, " + std::to_string(map.final_depth) + "]");
    int n = 0, ok = 0;
    for (int j = 1; j < map.positions(); ++j, ++n) ok += map.agrees(j, draft_depth) ? 1 : 0;
    return n > 0 ? double(ok) / n : 0.0;
}

ChainReplay replay_chain(const AgreementMap& map, int draft_depth, int draft_ahead, int max_tokens) {
    if (draft_depth < 1 || draft_depth >= map.final_depth)
        bad_arg("draft_loops: " + std::to_string(draft_depth) + " is outside [1, " + std::to_string(map.final_depth - 1) + "]");
    if (draft_ahead < 1) bad_arg("draft_ahead: " + std::to_string(draft_ahead) + " is outside [1, 32]");
    const int n = map.positions();
    const int cap = max_tokens > 0 ? std::min(max_tokens, n) : n;
    ChainReplay r;
    int e = std::min(1, cap);  // the first token comes from the prefill
    while (e < cap) {
        const int k = std::min(draft_ahead, (max_tokens > 0 ? max_tokens : n) - e);
        int drafted = 0, a = 0;
        bool rejected = false;
        for (int i = 0; i < k && e + i < n; ++i) {
            ++drafted;
            if (!rejected && map.agrees(e + i, draft_depth)) ++a;
            else rejected = true;
        }
        r.cycles++;
        r.drafted += drafted;
        r.accepted += a;
        e += a + (a < drafted ? 1 : 0);
        if (drafted == 0) break;
    }
    r.emitted = std::min(e, cap);
    return r;
}

double predicted_speedup(double alpha, int draft_depth, int verify_depth, int draft_ahead) {
    if (verify_depth <= 0 || draft_ahead <= 0) return 0.0;
    const double a = std::clamp(alpha, 0.0, 1.0);
    const double tokens = a >= 1.0 ? draft_ahead : (1.0 - std::pow(a, draft_ahead)) / (1.0 - a);
    const double passes = double(draft_ahead) * draft_depth + double(verify_depth - draft_depth);
    return tokens * verify_depth / passes;
}

nlohmann::json agreement_to_json(const AgreementMap& m) {
    nlohmann::json pred = nlohmann::json::object();
    for (int d = 1; d <= m.final_depth && m.positions() > 0; ++d) pred[std::to_string(d)] = predicted_acceptance(m, d);
    return {{"final_depth", m.final_depth},
            {"prompt_ids", m.prompt},
            {"continuation_ids", m.continuation},
            {"argmax", m.argmax},
            {"first_agree_depth", m.first_agree},
            {"predicted_acceptance", pred}};
}

}  // namespace tinyloop::analysis
