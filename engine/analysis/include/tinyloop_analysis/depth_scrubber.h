// Depth scrubber: one prompt answered at any loop depth through a ResumeHandle, so moving the
// slider never recomputes the prompt (deeper: only the new passes run; shallower: free), and the
// token diff (LCS) between two answers. No Qt: tests/analysis checks it, the view draws it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <tinyloop/tinyloop.h>

namespace tinyloop::analysis {

// ---------------------------------------------------------------------------------------------
// Token diff (LCS) between two answers
// ---------------------------------------------------------------------------------------------

struct DiffOp {
    enum Kind { Same, Removed, Added };
    Kind kind = Same;
    int32_t token = 0;
};
// Shortest edit script turning `from` into `to` (longest common subsequence; ties keep removals
// before additions). Same + Removed replays `from`; Same + Added replays `to`.
std::vector<DiffOp> diff_tokens(const std::vector<int32_t>& from, const std::vector<int32_t>& to);

// ---------------------------------------------------------------------------------------------
// Depth scrubber
// ---------------------------------------------------------------------------------------------

struct ScrubAnswer {
    int depth = 0;
    std::vector<int32_t> tokens;  // continuation
    std::string text;
    tinyloop::GenerateStats stats;
    int handle_loops_before = 0;    // deepest prompt depth computed before this answer
    int handle_loops_after = 0;     // ... and after (grows only when the answer went deeper)
    double ms = 0;                // wall time of resume_generate
};

class DepthScrubber {
public:
    // Prefills `prompt` once at `start_depth` (create_resume_handle). `config` is the decode config
    // every answer uses, with loops replaced by the slider's depth. Throws tinyloop::Error.
    DepthScrubber(tinyloop::Model* model, std::vector<int32_t> prompt, const tinyloop::GenerateConfig& config,
                  int start_depth);
    ~DepthScrubber();
    DepthScrubber(const DepthScrubber&) = delete;
    DepthScrubber& operator=(const DepthScrubber&) = delete;

    // Answers at `depth` (1..max_loops) through resume_generate; throws tinyloop::Error naming
    // the depth when it is out of range.
    ScrubAnswer answer(int depth);
    int handle_loops() const;
    size_t handle_bytes() const;
    const std::vector<int32_t>& prompt() const { return m_prompt; }
    const tinyloop::GenerateConfig& config() const { return m_config; }

private:
    tinyloop::Model* m_model;
    std::vector<int32_t> m_prompt;
    tinyloop::GenerateConfig m_config;
    tinyloop::ResumeHandle* m_handle = nullptr;
};
}  // namespace tinyloop::analysis
