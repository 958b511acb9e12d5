// Self-speculative decoding: the draft is the model at draft_loops, the verifier the same model
// at verify_loops, and verification resumes from the draft's state (FORMAT.md §1).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "decode.h"
#include "stop.h"

namespace tinyloop {

// Shared checks of SpeculativeConfig / TreeSpeculativeConfig fields.
void validate_spec_common(const Model& m, int prompt_len, int max_tokens, int draft_loops, int verify_loops,
                          int draft_ahead, float temperature);

// The stop policy a speculative mode applies to what it emits. The self-speculative modes stop on
// EOS and max_tokens only; draft-model speculation has generate's whole policy.
struct SpecStopPolicy {
    int max_tokens = 0;
    bool ignore_eos = false;
    std::vector<std::vector<int32_t>> stop_sequences;
    std::vector<std::string> stop_strings;
    double max_time = 0.0;  // seconds since t0; 0 = no limit
};

// Reports the tokens a speculative mode emits: appends them to the result, keeps the stats,
// applies the stop policy (in generate's order: EOS, stop sequence, stop string, max_tokens,
// grammar dead end, max_time) and calls the callback and observer.
class SpecEmitter {
public:
    using Clock = std::chrono::steady_clock;
    SpecEmitter(const Model& m, GenerateResult& res, const GenerateOptions& options, int loops,
                SpecStopPolicy policy, Clock::time_point t0);
    // One token. cycle -1 is the prefill's token; lens_states ([depth, d], optional) fill the
    // event's lens rows when the options ask for them. `dead_end`: a grammar allows nothing
    // after this token; `grammar_at_end`: the grammar is complete, so EOS stops even when
    // ignore_eos is set. Returns false when generation must stop.
    bool emit(int32_t tok, float prob, int cycle, const std::vector<int32_t>& drafted, int accepted,
              bool from_verifier, const std::vector<float>* lens_states = nullptr, bool dead_end = false,
              bool grammar_at_end = false);
    // The tokens emitted so far.
    const std::vector<int32_t>& emitted() const { return emitted_; }
    // Time of the first emitted token (decode_ms counts from there).
    Clock::time_point first_token_time() const { return t_first_; }
    std::string text() const { return text_.text(); }

private:
    const Model& m_;
    GenerateResult& res_;
    const GenerateOptions& options_;
    int loops_;
    SpecStopPolicy policy_;
    Clock::time_point t0_, t_first_{};
    TextStream text_;
    std::vector<int32_t> emitted_;
    Workspace ws_;
    std::vector<float> lens_logits_;
};

}  // namespace tinyloop
