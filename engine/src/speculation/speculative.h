// Self-speculative decoding: the draft is the model at draft_loops, the verifier the same model
// at verify_loops, and verification resumes from the draft's state (FORMAT.md §1).
#pragma once

#include <string>

#include "decode/decode.h"
#include "decode/emit.h"
#include "decode/sampling.h"

namespace tinyloop {

// Shared checks of SpeculativeConfig / TreeSpeculativeConfig fields.
void validate_spec_common(const Model& m, int prompt_len, int max_tokens, int draft_loops, int verify_loops,
                          int draft_ahead, float temperature);

// The result a speculative mode starts from: the prompt, loops_used = the verify depth, and an
// acceptance histogram of hist_bins bins (0 .. most drafts accepted in a cycle).
GenerateResult speculative_result(const int32_t* prompt, int prompt_len, int max_tokens, int loops, int hist_bins);

// Counts one draft-verify cycle in the stats: drafted tokens (tree: nodes), those compared with
// the verifier, those accepted.
void count_cycle(GenerateStats& st, int drafted, int tested, int accepted);

// Self-speculation's logits pipeline: no penalties, bias, bans or grammar (the config's defaults
// leave them off), so it masks the undecodable ids and samples with temperature, top-k (0: the
// whole vocabulary), top-p and no min-p. Greedy choices take the raw logits (greedy_choice).
GenerateConfig spec_sampling_config(const Model& m, const SpeculativeConfig& c);
// A speculative call's token choice from one row's logits: greedy_choice when the config is
// greedy, else the sampling pipeline's draw from its seeded generator (`probs`, when given,
// receives the distribution drawn from: a draft's q). pipe, rng and z are the ones verification
// (accept_sampled) goes on with.
struct SpecChooser {
    SpecChooser(const Model& model, const SpeculativeConfig& c)
        : m(model), greedy(is_greedy(c.temperature)), sampling(spec_sampling_config(model, c)), pipe(model, sampling),
          rng(c.seed) {}
    SpecChooser(const SpecChooser&) = delete;
    SpecChooser& operator=(const SpecChooser&) = delete;
    TokenChoice operator()(const float* row, std::vector<float>* probs) {
        if (greedy) return greedy_choice(m, row);
        pipe.process(row, {}, {}, nullptr, z);
        return pipe.pick(z, rng, probs);
    }
    const Model& m;
    const bool greedy;
    const GenerateConfig sampling;  // before pipe, which keeps a reference to it
    const LogitsPipeline pipe;
    Rng rng;
    std::vector<float> z;  // scratch
};
// The sampling knobs' ranges when the config samples (top_k >= 0, top_p in (0, 1]); nothing when
// it is greedy. InvalidArgument naming the field.
void check_spec_sampling(const SpeculativeConfig& c);

// Lossless rejection sampling's test of one drafted token (Leviathan et al. 2023): the verifier's
// row through `pipe` gives p; the draft `drafted` was drawn from q. Accepted with probability
// min(1, p/q); else the token is a draw from norm(max(0, p - q)). `prob` is p of the token given.
// z is scratch.
struct SampledVerdict {
    bool accepted = false;
    int32_t token = -1;
    float prob = 0;
};
SampledVerdict accept_sampled(const LogitsPipeline& pipe, Rng& rng, const float* ver_row, int32_t drafted,
                              const std::vector<float>& q, std::vector<float>& z);

// Lossless rejection sampling's draw after a rejection: from norm(max(0, p - q)); from p itself
// when p == q (the rejection then has probability 0; this keeps the draw valid).
int32_t draw_residual(const std::vector<float>& p, const std::vector<float>& q, Rng& rng);

// GenerateOptions::forced_draft applied to a call's drafts (null hook: every call returns the
// draft's own choice). The coins are drawn in the order the drafts are made.
class DraftForcer {
public:
    // Validates the hook (rate in [0, 1], reference ids in the vocabulary; NotSupported when the
    // call samples).
    DraftForcer(const Model& m, const ForcedDraft* hook, int prompt_len, bool greedy);
    bool active() const { return hook_ != nullptr; }
    // The reference token at absolute position `pos`, or -1 past the reference's end.
    int32_t reference_at(int pos) const;
    // One coin: whether the draft at `pos` proposes the reference token (false past its end).
    bool propose_reference(int pos);
    // Chain: the token drafted at position `pos` in place of the draft's own choice `own`.
    int32_t draft(int pos, int32_t own);
    // A token other than `avoid`, `own` when it differs (the forced rejection's proposal).
    int32_t other_than(int32_t avoid, int32_t own) const;

private:
    const ForcedDraft* hook_;
    int prompt_len_;
    int n_ids_;
    Rng rng_;
};

}  // namespace tinyloop
