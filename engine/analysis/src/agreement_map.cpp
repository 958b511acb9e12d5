#include <tinyloop_analysis/agreement_map.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace tinyloop::analysis {

namespace {

[[noreturn]] void badArg(const std::string& msg) {
    throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, msg);
}

}  // namespace

AgreementMap agreementFromArgmax(const std::vector<std::vector<int32_t>>& argmax) {
    if (argmax.empty()) throw std::invalid_argument("argmax: no positions");
    const size_t depths = argmax.front().size();
    if (depths == 0) throw std::invalid_argument("argmax[0]: no depths");
    AgreementMap m;
    m.finalDepth = static_cast<int>(depths);
    m.argmax = argmax;
    m.firstAgree.reserve(argmax.size());
    for (size_t j = 0; j < argmax.size(); ++j) {
        if (argmax[j].size() != depths)
            throw std::invalid_argument("argmax[" + std::to_string(j) + "]: " + std::to_string(argmax[j].size()) +
                                        " depths, expected " + std::to_string(depths));
        int first = m.finalDepth;
        for (int d = 1; d <= m.finalDepth; ++d)
            if (argmax[j][static_cast<size_t>(d - 1)] == argmax[j][depths - 1]) {
                first = d;
                break;
            }
        m.firstAgree.push_back(first);
    }
    return m;
}

AgreementMap buildAgreementMap(tinyloop::Model* model, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& continuation, int finalDepth) {
    if (prompt.empty()) badArg("prompt: must hold at least one token");
    if (continuation.empty()) badArg("continuation: must hold at least one token");
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), continuation.begin(), continuation.end());
    // The last continuation token predicts nothing we read, so the lens stops one short of it.
    const int n = static_cast<int>(seq.size()) - 1;
    const tinyloop::LensResult lens = tinyloop::score_logit_lens(model, seq.data(), n, finalDepth, 1);
    std::vector<std::vector<int32_t>> table(continuation.size(), std::vector<int32_t>(static_cast<size_t>(lens.loops)));
    for (size_t j = 0; j < continuation.size(); ++j) {
        const int pos = static_cast<int>(prompt.size()) - 1 + static_cast<int>(j);
        for (int d = 1; d <= lens.loops; ++d) table[j][static_cast<size_t>(d - 1)] = lens.at(pos, d).argmax;
    }
    AgreementMap m = agreementFromArgmax(table);
    m.prompt = prompt;
    m.continuation = continuation;
    return m;
}

double predictedAcceptance(const AgreementMap& map, int draftDepth) {
    if (draftDepth < 1 || draftDepth > map.finalDepth)
        badArg("draft_loops: " + std::to_string(draftDepth) + " is outside [1, " + std::to_string(map.finalDepth) + "]");
    int n = 0, ok = 0;
    for (int j = 1; j < map.positions(); ++j, ++n) ok += map.agrees(j, draftDepth) ? 1 : 0;
    return n > 0 ? double(ok) / n : 0.0;
}

ChainReplay replayChain(const AgreementMap& map, int draftDepth, int draftAhead, int maxTokens) {
    if (draftDepth < 1 || draftDepth >= map.finalDepth)
        badArg("draft_loops: " + std::to_string(draftDepth) + " is outside [1, " + std::to_string(map.finalDepth - 1) + "]");
    if (draftAhead < 1) badArg("draft_ahead: " + std::to_string(draftAhead) + " is outside [1, 32]");
    const int n = map.positions();
    const int cap = maxTokens > 0 ? std::min(maxTokens, n) : n;
    ChainReplay r;
    int e = std::min(1, cap);  // the first token comes from the prefill
    while (e < cap) {
        const int k = std::min(draftAhead, (maxTokens > 0 ? maxTokens : n) - e);
        int drafted = 0, a = 0;
        bool rejected = false;
        for (int i = 0; i < k && e + i < n; ++i) {
            ++drafted;
            if (!rejected && map.agrees(e + i, draftDepth)) ++a;
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

double predictedSpeedup(double alpha, int draftDepth, int verifyDepth, int draftAhead) {
    if (verifyDepth <= 0 || draftAhead <= 0) return 0.0;
    const double a = std::clamp(alpha, 0.0, 1.0);
    const double tokens = a >= 1.0 ? draftAhead : (1.0 - std::pow(a, draftAhead)) / (1.0 - a);
    const double passes = double(draftAhead) * draftDepth + double(verifyDepth - draftDepth);
    return tokens * verifyDepth / passes;
}

nlohmann::json agreementToJson(const AgreementMap& m) {
    nlohmann::json pred = nlohmann::json::object();
    for (int d = 1; d <= m.finalDepth && m.positions() > 0; ++d) pred[std::to_string(d)] = predictedAcceptance(m, d);
    return {{"final_depth", m.finalDepth},
            {"prompt_ids", m.prompt},
            {"continuation_ids", m.continuation},
            {"argmax", m.argmax},
            {"first_agree_depth", m.firstAgree},
            {"predicted_acceptance", pred}};
}

}  // namespace tinyloop::analysis
