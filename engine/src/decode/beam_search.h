// The parts of beam search that plain beam search (beam.cpp, Hugging Face's _beam_search),
// diverse group beam search (beam_groups.cpp, HF 4.x's _group_beam_search) and constrained beam
// search (beam_constrained.cpp, HF 4.x's _constrained_beam_search) share: the beams, the
// finished hypotheses, the scoring of continuations, advancing the caches, and reporting the
// winner (and, with num_return_sequences > 1, the runners-up).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "decode/decode.h"
#include "decode/emit.h"
#include "forward/executor.h"

namespace tinyloop::beam {

using Clock = std::chrono::steady_clock;

struct Beam {
    std::vector<int32_t> tokens;  // emitted so far
    double logp = 0;
    std::shared_ptr<ExecSequence> seq;  // its cache, shared until it has to diverge
    std::vector<float> logits;    // next-token logits
};

struct Hyp {
    std::vector<int32_t> tokens;
    double logp = 0;
    double score = 0;
};

struct Cand {
    double logp;
    int beam;
    int32_t tok;
};

// logp / len^length_penalty (len at least 1).
double rank(double logp, size_t len, float length_penalty);

// The best `keep` continuations of every beam (HF's top-k over beams x vocabulary), best first;
// ties go to the lower beam, then the lower id. `diversity` (optional, one amount per id) is
// subtracted after the logit bias (HF's HammingDiversityLogitsProcessor's place). `rows`
// (optional) receives each beam's processed scores over the whole vocabulary.
std::vector<Cand> best_continuations(const Model& m, const LogitsPipeline& pipe, const GenerateConfig& c,
                                     const std::vector<int32_t>& prompt, const std::vector<Beam>& beams, int keep,
                                     const std::vector<float>* diversity = nullptr,
                                     std::vector<std::vector<float>>* rows = nullptr);

// Advances every beam by its new token; a cache shared by several children is forked for all
// but the last one to take it.
void advance(const Model& m, std::vector<Beam>& beams, int prompt_len);

// What every search starts from: its clock, its depth, the result holding the prompt, and the
// stop policy its hypotheses end by (without max_time: the search has no clock).
struct Search {
    Clock::time_point t0;
    int loops;
    GenerateResult res;
    StopPolicy stops;
};
Search start_search(const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& c);

// The prompt's forward: one beam holding the prompt's cache and its next-token logits.
Beam prefill(const Executor& ex, const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& c,
             int loops);

// Reports `best` (best first) into `res`: best[0] through the emitter like any decode (the
// callbacks see it), and with num_return_sequences > 1 the first num_return_sequences of them
// into res.sequences (each through an emitter of its own, for its text and stop reason).
void report(const Model& m, GenerateResult& res, const StopPolicy& stops, const GenerateConfig& c,
            const GenerateOptions& options, int loops, Clock::time_point t0, const std::vector<Hyp>& best);

}  // namespace tinyloop::beam
