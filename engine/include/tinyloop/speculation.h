// TinyLoop public API, self-speculative and draft-model speculative decoding.
// Part of tinyloop/tinyloop.h, which includes every part: include that one.
#pragma once

// GenerateConfig, GenerateResult, GenerateOptions, TokenEvent: tinyloop.h includes this part
// after them, and this include brings them in when the part is included first.
#include "tinyloop/tinyloop.h"

namespace tinyloop {

// ---------------------------------------------------------------------------------------------
// Self-speculative decoding (the seed's generate_speculative / generate_tree_speculative)
// ---------------------------------------------------------------------------------------------

// Draft with the same model at draft_loops, verify at verify_loops. Verification resumes from
// the draft's state (only passes draft_loops+1 .. verify_loops are new work). At temperature 0
// the output equals plain greedy decoding at verify_loops, token for token.
struct SpeculativeConfig {
    int max_tokens = 64;      // total emission cap (excludes prompt), >= 0
    int draft_loops = 2;      // draft depth, 1 .. verify_loops - 1
    int verify_loops = 8;     // verify depth, 2 .. max_loops (typically the model's default_loops)
    int draft_ahead = 4;      // tokens drafted per verify cycle, 1 .. 32
    float temperature = 0.0f; // 0 (<= 0.01) greedy; > 0 lossless rejection sampling
    uint64_t seed = 0;        // RNG seed for temperature > 0
    int top_k = 0;            // sampling filter for temperature > 0; 0 = off
    float top_p = 1.0f;       // sampling filter for temperature > 0, (0, 1]
    bool ignore_eos = false;  // keep going past the model's EOS token
};

// Tree drafting, best-first: draft_ahead steps each run one node and keep its K_branches best
// candidates; one verify forward (tree mask) over the run nodes; the longest match is accepted.
struct TreeSpeculativeConfig {
    int max_tokens = 64;
    int draft_loops = 2;
    int verify_loops = 8;
    int draft_ahead = 4;      // nodes run per cycle (the tree's depth at most), 1 .. 8
    int K_branches = 2;       // candidates per run node, 1 .. 8
    float temperature = 0.0f; // greedy only (temperature > 0 is refused: use the chain mode)
    uint64_t seed = 0;
    bool ignore_eos = false;
};

GenerateResult generate_speculative_ex(Model* model, const int32_t* prompt, int prompt_len,
                                       const SpeculativeConfig& config, const GenerateOptions& options = {});
GenerateResult generate_tree_speculative_ex(Model* model, const int32_t* prompt, int prompt_len,
                                            const TreeSpeculativeConfig& config,
                                            const GenerateOptions& options = {});
// Self-speculation pipelined over depth: a wavefront over (token, pass). The row
// of the token at position q drafts the token at q + 1 from its lens at draft_loops; that row
// starts one sweep later and then runs beside q's deeper passes, every sweep reading the loop
// block's weights once for all rows in flight (at passes V, V - D, V - 2D, ...; V =
// verify_loops, D = draft_loops). A token is emitted when its row reaches V, from V's logits; a
// rejected draft's rows are dropped and the verifier's token starts over. Greedy, the output
// equals plain greedy decoding at verify_loops; sampling (temperature > 0, with top_k, top_p and
// seed as the chain uses them), each draft is tested by lossless rejection sampling, so the
// output follows plain sampling's distribution at verify_loops. At full acceptance a token costs
// D sweeps instead of V. draft_ahead is unused (the depths decide the rows in flight);
// GenerateOptions.lens is NotSupported, and forced_draft is greedy only as in the chain. Stats: spec_sweeps (sweeps after the prefill),
// spec_tested / spec_accepted (drafts compared / accepted), one cycle per compared draft.
GenerateResult generate_pipelined_ex(Model* model, const int32_t* prompt, int prompt_len,
                                     const SpeculativeConfig& config, const GenerateOptions& options = {});
std::vector<int32_t> generate_speculative(Model* model, const int32_t* prompt, int prompt_len,
                                          const SpeculativeConfig& config);
std::vector<int32_t> generate_tree_speculative(Model* model, const int32_t* prompt, int prompt_len,
                                               const TreeSpeculativeConfig& config);

// The cost of verification's weight sweep (tinyloop bench --sweep). A verify cycle runs each of
// its passes over all the drafted rows at once; on a memory-bound CPU that pass costs about what
// one row's does when the kernels stream the weights once for all rows. Measured here for every
// k in `rows`: one pass of the loop block (pass 2, from the rows' pass-1 states) over k rows that
// follow a `context`-token prefix in the cache, and the head over those k rows. One warm-up
// round, then `repeat` rounds with the k interleaved; medians reported. Throws InvalidArgument
// for rows outside [1, 64], context outside [1, max_seq_len - max(rows)], repeat outside
// [1, 1000]; NotSupported for a model whose max_loops is 1.
struct SweepCost {
    int rows = 0;
    double pass_ms = 0;                // median milliseconds of one pass over the rows
    double pass_cpu_ms = 0;            // median process CPU milliseconds of that pass (all threads):
                                       // the work's cost, steadier than wall time on a busy machine
    double head_ms = 0;                // median milliseconds of the head (logits) over the rows
    std::vector<double> pass_runs_ms;  // every timed round's pass
};
std::vector<SweepCost> measure_sweep_cost(Model* model, const std::vector<int>& rows, int context = 64,
                                          int repeat = 5);

// ---------------------------------------------------------------------------------------------
// Draft-model speculative decoding (seed 002's SpeculativeDecodingBackend, Leviathan et al. 2023)
// ---------------------------------------------------------------------------------------------

// A second model with the same vocabulary (vocab_size, merges, special tokens, eos/bos) drafts
// `gamma` tokens one at a time from its own KV cache; the target scores all of them and the token
// after them in one batched forward. Every GenerateConfig rule applies to both models' logits
// (penalties, bias, n-gram and bad-word bans, grammar, then temperature/top-k/top-p/min-p), so:
// greedy output equals generate_ex(target, ...) token for token, and sampled output has exactly
// the distribution of sampling the target (accept a draft with min(1, p/q), else draw from
// norm(max(0, p - q)); the bonus token when all are accepted comes from p). Rejected positions
// are rolled back in both caches. Stops as generate does (EOS, stop sequences and strings,
// max_tokens, max_time, grammar dead end, callback). Stats: spec_* as the self-speculation's;
// config.kv_cache applies to both caches and kv_cache_bytes counts both.
// beam_size >= 2 and early exit are refused (NotSupported); a null or vocabulary-mismatched
// draft is refused (InvalidArgument, "draft: ...").
// The tokens a draft model proposes per cycle when a front end leaves gamma out (CLI, binding,
// server, bench: the one default).
inline constexpr int kDraftModelGamma = 4;

struct DraftSpeculativeConfig {
    int gamma = kDraftModelGamma;  // tokens the draft proposes per cycle, 1 .. 32
    int draft_loops = 0;   // the draft model's loop depth, 1 .. its max_loops; 0 = its default_loops
};

GenerateResult draft_speculative_generate_ex(Model* target, Model* draft, const int32_t* prompt, int prompt_len,
                                             const GenerateConfig& config, const DraftSpeculativeConfig& spec,
                                             const GenerateOptions& options = {});
GenerateResult draft_speculative_generate(Model* target, Model* draft, const int32_t* prompt, int prompt_len,
                                          const GenerateConfig& config, const DraftSpeculativeConfig& spec = {});

}  // namespace tinyloop
