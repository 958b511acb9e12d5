#include <tinyloop_analysis/depth_scrubber.h>

#include <algorithm>
#include <chrono>

namespace tinyloop::analysis {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

[[noreturn]] void bad_arg(const std::string& msg) {
    throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, msg);
}

}  // namespace

std::vector<DiffOp> diff_tokens(const std::vector<int32_t>& from, const std::vector<int32_t>& to) {
    const size_t n = from.size(), m = to.size();
    // lcs[i][j]: LCS length of from[i..] and to[j..]
    std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
    for (size_t i = n; i-- > 0;)
        for (size_t j = m; j-- > 0;)
            lcs[i][j] = from[i] == to[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    std::vector<DiffOp> ops;
    size_t i = 0, j = 0;
    while (i < n || j < m) {
        if (i < n && j < m && from[i] == to[j]) {
            ops.push_back({DiffOp::Same, from[i]});
            ++i, ++j;
        } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
            ops.push_back({DiffOp::Removed, from[i++]});
        } else {
            ops.push_back({DiffOp::Added, to[j++]});
        }
    }
    return ops;
}


DepthScrubber::DepthScrubber(tinyloop::Model* model, std::vector<int32_t> prompt,
                             const tinyloop::GenerateConfig& config, int start_depth)
    : m_model(model), m_prompt(std::move(prompt)), m_config(config) {
    const auto& hp = tinyloop::model_hparams(model);
    if (start_depth < 1 || start_depth > hp.max_loops)
        bad_arg("depth: " + std::to_string(start_depth) + " is outside [1, " + std::to_string(hp.max_loops) + "]");
    tinyloop::GenerateConfig probe = m_config;
    probe.loops = start_depth;
    tinyloop::validate_config(model, static_cast<int>(m_prompt.size()), probe);
    m_handle = tinyloop::create_resume_handle(model, m_prompt.data(), static_cast<int>(m_prompt.size()), start_depth);
}

DepthScrubber::~DepthScrubber() { tinyloop::free_resume_handle(m_handle); }

int DepthScrubber::handle_loops() const { return tinyloop::resume_handle_loops(m_handle); }
size_t DepthScrubber::handle_bytes() const { return tinyloop::resume_handle_bytes(m_handle); }

ScrubAnswer DepthScrubber::answer(int depth) {
    const auto& hp = tinyloop::model_hparams(m_model);
    if (depth < 1 || depth > hp.max_loops)
        bad_arg("depth: " + std::to_string(depth) + " is outside [1, " + std::to_string(hp.max_loops) + "]");
    ScrubAnswer a;
    a.depth = depth;
    a.handle_loops_before = handle_loops();
    tinyloop::GenerateConfig cfg = m_config;
    cfg.loops = depth;
    const auto t0 = Clock::now();
    tinyloop::GenerateResult r = tinyloop::resume_generate(m_handle, cfg);
    a.ms = ms_since(t0);
    a.handle_loops_after = handle_loops();
    a.tokens.assign(r.tokens.begin() + r.prompt_len, r.tokens.end());
    a.text = std::move(r.text);
    a.stats = std::move(r.stats);
    return a;
}

//

}  // namespace tinyloop::analysis
