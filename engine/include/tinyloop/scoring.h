// TinyLoop public API, scoring, the logit lens, uncertainty and escalation.
// Part of tinyloop/tinyloop.h, which includes every part: include that one.
#pragma once

// GenerateConfig, GenerateResult, GenerateOptions, TokenEvent: tinyloop.h includes this part
// after them, and this include brings them in when the part is included first.
#include "tinyloop/tinyloop.h"

namespace tinyloop {

// ---------------------------------------------------------------------------------------------
// Scoring
// ---------------------------------------------------------------------------------------------

struct ScoreResult {
    std::vector<float> token_logprobs;  // log p(token[i+1] | token[..i]), size n-1
    double total_nll = 0;               // -sum(token_logprobs)
    double perplexity = 0;              // exp(total_nll / (n-1))
    int loops = 0;
};

// Log-probability of every next token of `tokens` at loop depth `loops` (0 = default).
// kv_cache: the layout the prefill's keys and values go through (int8 measures its quality cost).
ScoreResult score(Model* model, const int32_t* tokens, int n, int loops = 0,
                  KVCacheType kv_cache = KVCacheType::F32);

// Teacher-forced scoring with early exit: every position runs the passes the config's early-exit
// policy lets it (early_exit_* fields and loops; exited positions feed deeper passes by state
// propagation, as in generate), and its next-token log-probability is read from the lens at its
// exit depth. depth_used (optional) receives each position's depth (n entries). With
// early_exit_patience = 0 it equals score() at config.loops.
ScoreResult score_early_exit(Model* model, const int32_t* tokens, int n, const GenerateConfig& config,
                             std::vector<int>* depth_used = nullptr);

// What kv_sharing (FORMAT.md §1c) costs and saves on a text. tokens[0..prompt) is the prompt,
// prefilled at full depth as generate prefills it; every later token is fed one at a time as
// generate feeds the tokens it emits (teacher forced, with config's early exit, loops and
// cache_window), and log p(token[i+1] | tokens[..i]) is read after each. The same run with
// per-pass keys/values is the exact reference (with early exit off it equals score() bit for
// bit). bytes: what the cache for n positions holds once the prompt is in (compress has folded
// it), the figure a generate of n - prompt tokens after that prompt reports as kv_cache_bytes.
struct KVSharingScore {
    std::string kv_sharing;       // kv_sharing_name
    int prompt = 0;
    int loops = 0;
    ScoreResult score;            // with kv_sharing
    std::vector<int> depth_used;  // per position (loops unless early exit stopped it)
    double exact_total_nll = 0;   // per-pass
    double delta_nll = 0;         // (score.total_nll - exact_total_nll) / (n - 1): nats per token
    size_t cache_bytes = 0;
    size_t exact_cache_bytes = 0;
    double bytes_per_token = 0;        // cache_bytes / n
    double exact_bytes_per_token = 0;  // exact_cache_bytes / n
};
// prompt: 1 .. n-1; InvalidArgument naming it otherwise (config's fields as validate_config).
KVSharingScore score_kv_sharing(Model* model, const int32_t* tokens, int n, const GenerateConfig& config, int prompt);

// Every early-exit criterion's signal at every position and pass, teacher-forced at full depth
// `loops` (0 = default), computed exactly as the adaptive decode computes it for a row whose
// earlier positions all ran every pass (one row at a time, window 0): the value at (position p,
// pass l) compares p's states h_{l-1} and h_l (h_0: the prelude's output) and their lens logits.
// Smaller = more stable for every criterion, as exit_stable reads it: LogitMargin holds -margin,
// ArgmaxStable 0 (same argmax) or 1. Lets a tool re-score any threshold without generating.
struct ExitSignals {
    int n_positions = 0;
    int loops = 0;
    // [criterion, in EarlyExitCriterion order][position][pass-1]: the five two-pass criteria
    // HiddenL2 .. ArgmaxStable only (not the gate, reverse_kl or minp_kl)
    std::vector<float> values;
    float at(EarlyExitCriterion c, int position, int pass) const {
        return values[(static_cast<size_t>(c) * n_positions + static_cast<size_t>(position)) * loops +
                      static_cast<size_t>(pass - 1)];
    }
};
ExitSignals early_exit_signals(Model* model, const int32_t* tokens, int n, int loops = 0);

// Logits of every position (n x vocab, row-major) at depth `loops`; for tests and tools.
std::vector<float> forward_logits(Model* model, const int32_t* tokens, int n, int loops = 0,
                                  KVCacheType kv_cache = KVCacheType::F32);


// The last position's logits at depth `loops` and its top-k (softmax, temperature 1).
struct LastTokenScore {
    std::vector<float> logits;  // vocab_size
    std::vector<int32_t> top_ids;
    std::vector<float> top_probs;
    int loops = 0;
};
LastTokenScore score_last_token(Model* model, const int32_t* tokens, int n, int loops = 0, int top_k = 10);

// One (position, depth) cell of the logit lens: the readout head · RMSNorm(h_l) at position i,
// which predicts token i+1.
struct LensCell {
    std::vector<int32_t> top_ids;
    std::vector<float> top_probs;
    int32_t argmax = 0;
    float p_final_argmax = 0;  // probability of the final depth's argmax at this depth
    float p_next = -1;         // probability of the actual next token (-1 at the last position)
    float entropy = 0;         // nats
    float kl_to_final = 0;     // KL(lens at l || final), nats
};

struct LensResult {
    int n_positions = 0;
    int loops = 0;
    int top_k = 0;
    std::vector<LensCell> cells;  // [position][depth-1], row-major
    const LensCell& at(int position, int depth) const {
        return cells[static_cast<size_t>(position) * loops + static_cast<size_t>(depth - 1)];
    }
};
// Raw lens logits: [loops][n][vocab] (depth-major); depth `loops` equals forward_logits bit for bit.
std::vector<float> forward_lens_logits(Model* model, const int32_t* tokens, int n, int loops = 0);

// The learned exit gate's λ_l = σ(exit_gate.w · h_l + exit_gate.b) (FORMAT.md §1b) at every pass
// 1..loops and position: [loops][n] (depth-major), from the states the lens reads. Throws
// InvalidArgument naming hparams.exit_gate for a model without the gate.
std::vector<float> exit_gate_per_pass(Model* model, const int32_t* tokens, int n, int loops = 0);

// The lens at every position and every depth 1..loops. At depth == loops it is the model's
// output (bit-identical to forward_logits).
LensResult score_logit_lens(Model* model, const int32_t* tokens, int n, int loops = 0, int top_k = 5);

struct UncertaintyResult {
    int loops = 0;
    std::vector<float> token_logprobs;   // n-1: log p(token[i+1]) at the final depth
    std::vector<float> entropy;          // n: entropy of the final distribution at position i
    std::vector<float> margin;           // n: top-1 minus top-2 probability
    std::vector<int> prediction_depth;   // n: first depth whose argmax equals the final one and stays
};
UncertaintyResult score_with_uncertainty(Model* model, const int32_t* tokens, int n, int loops = 0);

enum class EscalationSignal {
    Entropy,       // escalate when the entropy (nats) exceeds the threshold
    Margin,        // escalate when the top-1/top-2 probability margin is below the threshold
    Disagreement,  // escalate when the argmax at this depth differs from the one at depth - 1
};

struct EscalationConfig {
    std::vector<int> depths = {2, 4, 8};  // increasing rungs, each 1..max_loops
    EscalationSignal signal = EscalationSignal::Entropy;
    float threshold = 2.0f;               // > 0 for Entropy; (0, 1] for Margin; unused for Disagreement
};

struct EscalationResult {
    std::vector<float> token_logprobs;  // n-1: from the depth each position used
    std::vector<int> depth_used;        // n-1
    std::vector<char> escalated;        // n-1: 1 when the position went past the first rung
    double total_nll = 0;
    double perplexity = 0;
    int deepest = 0;                    // deepest rung the sequence state was carried to
    long long passes_run = 0;           // loop passes run, summed over positions
};
// Scores at the first rung; positions whose signal crosses the threshold go on to the next rung,
// reached by deepening the existing state (only the new passes run, over all positions since
// attention needs them); the positions that do not cross it keep their score from that rung.
EscalationResult score_with_consistency_escalation(Model* model, const int32_t* tokens, int n,
                                                   const EscalationConfig& config = {});

}  // namespace tinyloop
