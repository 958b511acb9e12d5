// Self-speculative decoding: the draft is the model at draft_loops, the verifier the same model
// at verify_loops, and verification resumes from the draft's state (FORMAT.md §1).
#pragma once

#include <chrono>

#include "decode.h"
#include "stop.h"

namespace tinyloop {

// Shared checks of SpeculativeConfig / TreeSpeculativeConfig fields.
void validate_spec_common(const Model& m, int prompt_len, int max_tokens, int draft_loops, int verify_loops,
                          int draft_ahead, float temperature);

// Reports the tokens a speculative mode emits: appends them to the result, keeps the stats,
// applies the stop policy (EOS unless ignored, max_tokens) and calls the callback and observer.
class SpecEmitter {
public:
    using Clock = std::chrono::steady_clock;
    SpecEmitter(const Model& m, GenerateResult& res, const GenerateOptions& options, int loops, int max_tokens,
                bool ignore_eos, Clock::time_point t0);
    // One token. cycle -1 is the prefill's token; lens_states ([depth, d], optional) fill the
    // event's lens rows when the options ask for them. Returns false when generation must stop.
    bool emit(int32_t tok, float prob, int cycle, const std::vector<int32_t>& drafted, int accepted,
              bool from_verifier, const std::vector<float>* lens_states = nullptr);
    // Time of the first emitted token (decode_ms counts from there).
    Clock::time_point first_token_time() const { return t_first_; }
    std::string text() const { return text_.text(); }

private:
    const Model& m_;
    GenerateResult& res_;
    const GenerateOptions& options_;
    int loops_, max_tokens_;
    bool ignore_eos_;
    Clock::time_point t0_, t_first_{};
    TextStream text_;
    Workspace ws_;
    std::vector<float> lens_logits_;
};

}  // namespace tinyloop
