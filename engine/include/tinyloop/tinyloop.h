// TinyLoop runtime: the public engine header. Include this one; it includes every part:
//   tinyloop/model.h        errors, model description, lifecycle (load_model, ModelHandle),
//                           writing files, tokenizer
//   tinyloop/grammar.h      grammar-constrained decoding
//   tinyloop/tinyloop.h     generation: GenerateConfig, GenerateStats, TokenEvent, generate*
//   tinyloop/batch.h        continuous batching (BatchEngine)
//   tinyloop/speculation.h  self-speculative (chain, tree) and draft-model speculative decoding
//   tinyloop/run_spec.h     decode modes: RunSpec and run_decode
//   tinyloop/scoring.h      scoring, logit lens, uncertainty, escalation
//   tinyloop/caches.h       PrefixCache, ResumeHandle, PrefixPool
//
// Basic usage
// -----------
//     tinyloop::ModelHandle model = tinyloop::load_model_handle("resources/models/tinyloop-kjv/model-f32.tinyloop");
//     tinyloop::Model* m = model.get();
//     std::vector<int32_t> prompt = tinyloop::tokenize(m, "In the beginning");
//     tinyloop::GenerateConfig cfg;          // defaults as the seed's Generation API
//     cfg.max_tokens = 32;
//     std::vector<int32_t> out = tinyloop::generate(m, prompt.data(), (int)prompt.size(), cfg);
//     std::string text = tinyloop::detokenize(m, out.data() + prompt.size(),
//                                             out.size() - prompt.size());
//     // the handle frees the model (tinyloop::free_model) when it goes out of scope
//
// Errors: every function throws tinyloop::Error (code + message naming the field and the
// allowed range) on bad input; nothing in the engine aborts or exits.
//
// Threads: a Model's weights are immutable after load_model. Every call allocates its own
// working memory (KV cache, activations), so any number of threads may call generate/score on
// one Model at the same time. free_model must not race with calls on the same Model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tinyloop/model.h"
#include "tinyloop/grammar.h"

namespace tinyloop {

// ---------------------------------------------------------------------------------------------
// Generation (the seed's Generation API)
// ---------------------------------------------------------------------------------------------

enum class EarlyExitCriterion {
    HiddenL2,   // ||h_l - h_{l-1}|| / ||h_l|| below early_exit_threshold (the seed's default)
    LogitMargin,
    KL,
    EntropyDelta,
    ArgmaxStable,
    // The learned exit gate (hparams.exit_gate, Ouro; FORMAT.md §1b): exit at the first pass t with
    // 1 − Π_{j≤t}(1 − λ_j) >= early_exit_threshold (q in (0, 1]). GateStop stops the pass loop
    // there (deeper keys/values by state propagation); GateSelect runs every pass and reads the
    // token at pass t (Hugging Face's Ouro code). Patience, min_L and peek_every do not apply.
    GateStop,
    GateSelect,
    // Huginn's "kl": KL(p_{l−1} ‖ p_l) (KL above is KL(p_l ‖ p_{l−1})).
    ReverseKL,
    // Huginn's "minp-kl": KL(m_{l−1} ‖ m_l), m = softmax with every p < 0.1·max p set to 1/V, renormalised.
    MinPKL,
};
bool is_gate_criterion(EarlyExitCriterion c);

// The early-exit policy: one value for decoding (GenerateConfig::early_exit), the model's
// recommendation (Recommendation::early_exit), exit calibration (tinyloop_analysis) and every
// front end. Its JSON form is the codec's early_exit_policy_to_json / _from_json (tinyloop/json.h);
// inside a config's JSON the same fields are the flat keys early_exit_patience, ... (the seed's).
struct EarlyExitPolicy {
    int patience = 0;        // >= 0; 0 disables early exit; n: exit after n stable probes in a row
                             // (a model's recommendation: 1 .. 16)
    int min_L = 2;           // first probed pass, 1 .. max_loops (the depth run)
    int peek_every = 1;      // probe cadence past min_L, 1 .. max_loops
    EarlyExitCriterion criterion = EarlyExitCriterion::HiddenL2;
    float threshold = 0.05f; // > 0; logit_margin: the margin to reach; gates: the cumulative probability q in (0, 1]
    // The seed's shorthand, kept for its configs: > 0 means criterion logit_margin at this threshold
    // (effective_exit_policy folds it in). >= 0; 0 = unused.
    float logit_margin = 0.0f;
    bool enabled() const { return patience > 0; }
};
// The policy as decoding and calibration apply it: logit_margin > 0 folded into criterion
// LogitMargin with that threshold (and logit_margin then 0).
EarlyExitPolicy effective_exit_policy(const EarlyExitPolicy& p);
// Throws InvalidArgument naming the field ("early_exit_min_L: 9 is outside [1, 8]") when a field
// is out of range; `loops` bounds min_L (the model's max_loops for a config, the depth run for
// calibration). `prefix` is put before each
// field name ("early_exit_" for a config's flat keys, "" for the policy's own JSON names).
void validate_early_exit(const EarlyExitPolicy& p, int loops, const std::string& prefix = "early_exit_");

// The exit rule, the one decoding (decode_step_adaptive) and exit calibration
// (tinyloop_analysis::rescore_calibration) both apply, on an effective policy:
//   a pass is probed from min_L on, every peek_every passes, never at the last pass `loops`;
//   a probe is stable when the criterion's signal says so (exit_stable);
//   the token exits at the probe that makes `patience` stable probes in a row.
// exit_signal's units: smaller = more stable; LogitMargin gives -margin, ArgmaxStable 0 or 1.
bool exit_stable(const EarlyExitPolicy& p, float signal);
bool exit_probe_at(const EarlyExitPolicy& p, int pass, int loops);
// One probe: updates the run of stable probes `stable` with `signal`; true when the token exits here.
bool exit_after_probe(const EarlyExitPolicy& p, float signal, int& stable);

// How the KV cache stores keys and values. Int8: symmetric INT8 codes with one f32 scale per
// (position, layer, kv head), scale = max|x| / 127 (Hugging Face's quantized cache, without its
// f32 residual window): about 3.6x less memory at head_dim 64, logits within ~1e-2 of f32.
enum class KVCacheType { F32, Int8 };
const char* kv_cache_type_name(KVCacheType t);              // "f32", "int8"
KVCacheType parse_kv_cache_type(const std::string& name);   // throws InvalidArgument "kv_cache: ..."
// How the KV cache keeps the keys and values of a position across passes (kv_sharing; FORMAT.md
// §1c has the exact rules). PerPass: one entry per (pass, layer), exact (the default). LastPass
// (Ouro's decode-time reuse): prompt positions keep per-pass entries, every generated position
// keeps one entry per loop layer, written by each pass in turn (the last pass's stays) and read
// by every pass of later tokens. LatestM4 (Huginn's cache_lookup_strategy "latest-m4"): a
// position that exited early at pass e is read, at a deeper pass, at its pass-e entry of the same
// loop layer (no state propagation; full-depth positions are read exactly). Compress
// (Huginn's "compress-s{k}"): loop entry s = (pass-1)·n_loop_layers + layer goes to ring slot
// s mod k of its position (Huginn's (s−2) mod k + 2 with its two prelude slots), a later write
// replacing the slot's entry; the prompt is computed exactly and then folded into the slots.
struct KVSharing {
    enum class Mode { PerPass, LastPass, LatestM4, Compress };
    Mode mode = Mode::PerPass;
    int k = 0;  // Compress only: ring slots per position, 1..1024
    bool operator==(const KVSharing&) const = default;
    bool exact() const { return mode == Mode::PerPass; }
};
std::string kv_sharing_name(const KVSharing& s);  // "per-pass", "last-pass", "latest-m4", "compress-s8"
// Throws InvalidArgument "kv_sharing: '...' is not one of per-pass, last-pass, latest-m4,
// compress-s{k} with k in [1, 1024]".
KVSharing parse_kv_sharing(const std::string& name);
// Beam search's end (HF early_stopping): Heuristic = false (stop when the best live beam, scored at
// its current length, cannot beat the worst of beam_size finished), WhenFull = true, Never.
enum class EarlyStopping { Heuristic, WhenFull, Never };

struct GenerateConfig {
    int max_tokens = 64;              // upper bound on emitted tokens, >= 0
    int loops = 0;                    // loop depth 1..max_loops; 0 = model's default_loops
    float temperature = 0.0f;         // >= 0; <= 0.01 means greedy argmax
    int top_k = 50;                   // >= 1 when sampling; ignored when greedy
    float top_p = 1.0f;               // (0, 1]; 1 disables; applied after top_k
    float min_p = 0.0f;               // [0, 1]; drop tokens with p < min_p * p_max; 0 disables
    int cache_window = 0;             // sliding-window cap on attended positions; 0 = unlimited
    float repetition_penalty = 1.0f;  // > 0; HF convention over prompt + emitted; 1 disables
    float frequency_penalty = 0.0f;   // [-2, 2]; minus penalty * count(token in emitted)
    float presence_penalty = 0.0f;    // [-2, 2]; minus penalty if token in emitted
    std::vector<std::pair<int32_t, float>> logit_bias;  // added before the penalties (HF); [-100, 100]
    std::vector<std::vector<int32_t>> stop_sequences;   // token tail match, included in output
    std::vector<std::string> stop_strings;  // text match, excluded from the text (OpenAI stop)
    bool ignore_eos = false;          // keep going past the model's EOS token
    double max_time = 0.0;            // seconds of wall clock for the call, >= 0; 0 = no limit
    int no_repeat_ngram_size = 0;     // >= 0; n > 0 bans a token that would repeat an n-gram of
                                      // prompt + emitted (Hugging Face convention)
    std::vector<std::vector<int32_t>> bad_words;  // token sequences never emitted (each non-empty)
    int beam_size = 0;                // 0 or 1 = sampling; >= 2 beam search, 2..64
    float length_penalty = 1.0f;      // beam only
    EarlyStopping early_stopping = EarlyStopping::Heuristic;  // beam only (HF's default false)
    bool renormalize_logits = false;  // beam: log-softmax again after the processors (HF)
    int min_new_tokens = 0, min_length = 0;  // >= 0; EOS banned until emitted / prompt + emitted reach it
    // Hugging Face's sampling-side GenerationConfig knobs, in HF's processor order.
    int32_t forced_eos_token_id = -1;  // -1 off; else 0..vocab-1, the only id allowed as the last
                                       // allowed new token (emitted count == max_tokens - 1)
    // (start_index, decay_factor): once more than start_index tokens were emitted, EOS's score s
    // becomes s + |s| * (decay_factor^(emitted - start_index) - 1); start_index 0..max_seq_len,
    // decay_factor (0, 10]; nullopt off (HF's exponential_decay_length_penalty)
    std::optional<std::pair<int, float>> exponential_decay_length_penalty;
    std::vector<int32_t> suppress_tokens;        // ids always banned (0..vocab-1)
    std::vector<int32_t> begin_suppress_tokens;  // ids banned for the first emitted token
    float typical_p = 1.0f;           // (0, 1]; sampling only: locally typical filter; 1 disables
    float epsilon_cutoff = 0.0f;      // [0, 1); sampling only: drop p < epsilon_cutoff; 0 disables
    float eta_cutoff = 0.0f;          // [0, 1); sampling only: drop p < min(eta, sqrt(eta) e^-H); 0 disables
    // Several outputs (HF num_return_sequences), 1..64: beam search returns the best N finished
    // hypotheses (N <= beam_size), sampling N independent draws (sequence i seeded sample_seed + i);
    // greedy refuses N > 1. GenerateResult::sequences holds them.
    int num_return_sequences = 1;
    // Diverse (group) beam search, HF's num_beam_groups / diversity_penalty: the beams split into
    // num_beam_groups groups of beam_size / num_beam_groups; each group is a beam search of its
    // own whose scores lose diversity_penalty x (how often earlier groups chose a token this step).
    int num_beam_groups = 1;          // 1..beam_size, dividing beam_size; 1 = plain beam search
    float diversity_penalty = 0.0f;   // >= 0; > 0 needs num_beam_groups >= 2
    // Constrained beam search (HF's force_words_ids): every entry must appear in the output. An
    // entry is a list of alternatives (token sequences), any one of which fulfils it: one
    // alternative is HF's PhrasalConstraint, several its DisjunctiveConstraint. Beam only.
    std::vector<std::vector<std::vector<int32_t>>> force_words;
    EarlyExitPolicy early_exit;       // adaptive depth per token; patience 0 (the default) = off
    uint64_t sample_seed = 0;         // deterministic given seed + config + model
    Grammar* grammar = nullptr;       // constrained decoding (see parse_grammar); not owned
    KVCacheType kv_cache = KVCacheType::F32;  // f32 or int8 (plain decode, beam, batch engine;
                                              // not from prefix caches / resume handles / pools)
    KVSharing kv_sharing;             // per-pass (exact, default), last-pass, latest-m4, compress-s{k};
                                      // plain decode (greedy / sample, early exit) and score_kv_sharing
};

enum class StopReason {
    EOS,
    STOP_SEQUENCE,
    MAX_TOKENS,
    CALLBACK_ABORT,
    GRAMMAR_DEAD_END,
    STOP_STRING,
    MAX_TIME,
};
const char* stop_reason_name(StopReason r);

struct GenerateStats {
    double prefill_ms = 0;       // prompt -> first-token logits ready
    double first_token_ms = 0;   // call entry -> first token emitted
    double decode_ms = 0;        // steady-state decode loop (after the first token)
    double total_ms = 0;         // call entry -> return
    int prompt_tokens = 0;
    int tokens_emitted = 0;      // excludes the prompt
    StopReason stop_reason = StopReason::MAX_TOKENS;
    int loops_used = 0;          // effective loop depth (mean over tokens, rounded, if adaptive)
    std::vector<int> depth_per_token;  // loop depth each emitted token used
    // Speculative modes (zero otherwise).
    int spec_cycles = 0;               // draft-verify cycles
    int spec_drafted = 0;              // tokens (tree: nodes) drafted
    int spec_tested = 0;               // drafted tokens compared with the verifier
    int spec_accepted = 0;             // drafted tokens accepted
    std::vector<int> spec_accept_hist; // [k] = cycles that accepted k drafted tokens
    double draft_ms = 0;               // time drafting
    int spec_sweeps = 0;               // pipelined speculation: sweeps of the loop block after the prefill
    double verify_ms = 0;              // time verifying
    size_t kv_cache_bytes = 0;         // bytes the call's KV cache held (batch engine: its pages)
    double spec_acceptance_rate() const { return spec_tested > 0 ? double(spec_accepted) / spec_tested : 0.0; }
    double spec_mean_accepted() const { return spec_cycles > 0 ? double(spec_accepted) / spec_cycles : 0.0; }
    double decode_tokens_per_s() const {
        return decode_ms > 0 && tokens_emitted > 1 ? (tokens_emitted - 1) * 1000.0 / decode_ms
                                                   : 0.0;
    }
};

// The seed's callback: after each emitted token; return false to abort (the token is kept).
using GenerateTokenCallback = std::function<bool(int32_t token, int position)>;

// One lens entry: the readout at one loop depth for one emitted position.
struct LensDepth {
    int depth = 0;
    std::vector<int32_t> top_ids;
    std::vector<float> top_probs;
    float p_emitted = 0;  // probability of the token that was emitted
    float entropy = 0;    // nats
};

// What the workbench sees per emitted token.
struct TokenEvent {
    int32_t token = 0;
    int position = 0;          // absolute position of the token in the sequence
    int index = 0;             // 0-based index among emitted tokens
    std::string piece;         // text completed by this token (UTF-8 safe, may be empty)
    int depth = 0;             // loop depth the token used
    float prob = 0;            // probability of the token under the final (sampling) distribution
    std::vector<LensDepth> lens;  // per depth 1..depth, when GenerateOptions::lens
    // A model with the learned exit gate (hparams.exit_gate, Ouro; FORMAT.md §1b), with an
    // observer: the gate of the row that produced this token, at every pass t = 1.. that ran
    // (depth passes; every pass under gate_select and plain decoding): λ_t = σ(w·h_t + b), and
    // the cumulative exit probability 1 − Π_{j≤t}(1 − λ_j) the gate criteria compare with q.
    // Plain decoding and early exit fill them (the speculative modes, beam search and the batch
    // engine do not yet); empty for a model without the gate.
    std::vector<float> exit_gate;
    std::vector<float> exit_gate_cdf;
    // Speculative modes: the cycle this token belongs to (-1 otherwise), the tokens drafted in
    // that cycle (the accepted path's candidates for tree), how many of them were accepted, and
    // whether this token is the verifier's own (the correction after a rejection) rather than
    // an accepted draft.
    int cycle = -1;
    std::vector<int32_t> drafted;
    int accepted = 0;
    bool from_verifier = false;
};

using TokenObserver = std::function<bool(const TokenEvent& ev)>;

// Where the keys/values of one (execution layer, position) row of a decode's KV cache came from.
enum class KVOrigin : uint8_t {
    None = 0,        // never written (the last emitted token is not run; a call that stopped)
    Computed = 1,    // computed by the layer from the position's own state at that depth
    Propagated = 2,  // early exit: written from the exited state h_e for every pass after e
    Reused = 3,      // copied from a PrefixCache / ResumeHandle / PrefixPool entry, not recomputed
};
const char* kv_origin_name(KVOrigin o);  // "none", "computed", "propagated", "reused"

// KV provenance of one decode, recorded where the decode writes its cache.
struct KVProvenance {
    int n_layers = 0;      // execution layers: n_pre_blocks + loops * n_loop_layers
    int n_positions = 0;   // prompt + emitted tokens
    int n_pre_blocks = 0;
    int n_loop_layers = 0;
    std::vector<KVOrigin> origin;   // [layer][position], row-major
    size_t kv_bytes_allocated = 0;  // the call's KV cache (keys + values, every layer)
    size_t kv_bytes_written = 0;    // rows written (any origin other than None), keys + values
    KVOrigin at(int layer, int position) const {
        return origin[static_cast<size_t>(layer) * n_positions + static_cast<size_t>(position)];
    }
};

// A measurement hook for self-speculation (chain and tree, greedy only): random weights give a
// shallow draft no meaningful acceptance, so `tinyloop bench --forced-acceptance` and the tests
// force one. The draft still runs its passes; only its proposal changes: the token it drafts at
// continuation index i (0 = the first token after the prompt) is reference[i] with probability
// `rate` (one seeded coin per drafted token) and otherwise a token other than reference[i] (the
// draft's own choice when it differs). The verifier still decides and every emitted token is the
// verifier's, so the output is always exactly what the speculative mode emits without the hook;
// with reference = plain greedy decoding's output the acceptance is real and equals `rate` per
// compared token. Past the end of reference the draft proposes its own choice.
struct ForcedDraft {
    std::vector<int32_t> reference;  // the tokens to propose (ids in the vocabulary)
    double rate = 0.0;               // probability of proposing reference[i], [0, 1]
    uint64_t seed = 0;               // the coins' seed
};

struct GenerateOptions {
    GenerateTokenCallback on_token;  // the seed's callback (optional)
    TokenObserver observer;          // TokenEvents (optional); return false to abort
    bool lens = false;               // fill TokenEvent::lens (costs one head product per depth)
    int lens_top_k = 5;              // 1..64
    // Optional: filled with the KV provenance of the call by generate_ex, generate_with_prefix,
    // resume_generate and generate_with_pool (plain decoding, early exit included). Beam search
    // refuses it (NotSupported); the speculative entries do not fill it.
    KVProvenance* kv_provenance = nullptr;
    // Optional: ForcedDraft, honoured by generate_speculative_ex and generate_tree_speculative_ex
    // at temperature 0 (refused with NotSupported when sampling; other entries ignore it).
    const ForcedDraft* forced_draft = nullptr;
};

// One of the outputs of a run with num_return_sequences > 1 (GenerateResult::sequences).
struct ReturnedSequence {
    std::vector<int32_t> output;  // the continuation (no prompt)
    std::string text;             // its text (stop string excluded)
    StopReason stop_reason = StopReason::MAX_TOKENS;
    double score = 0;             // beam: sum of log-probs / len^length_penalty (HF sequences_scores);
                                  // sampling: sum of the drawn tokens' log-probabilities
};

struct GenerateResult {
    std::vector<int32_t> tokens;  // prompt followed by the continuation
    int prompt_len = 0;
    std::string text;             // continuation text (stop string excluded, U+FFFD for invalid)
    GenerateStats stats;
    // num_return_sequences > 1: every output, best first for beam search, in seed order for
    // sampling; sequences[0] is the one in tokens / text / stats (events and callbacks report it
    // alone). Empty when num_return_sequences is 1.
    std::vector<ReturnedSequence> sequences;
};

// The engine entry for every plain decode; the seed's functions below wrap it.
GenerateResult generate_ex(Model* model, const int32_t* prompt, int prompt_len,
                           const GenerateConfig& config, const GenerateOptions& options = {});

// Blocking decode. Returns prompt followed by the emitted tokens.
std::vector<int32_t> generate(Model* model, const int32_t* prompt, int prompt_len,
                              const GenerateConfig& config);

// Decode with a per-token callback and optional stats.
std::vector<int32_t> generate_stream(Model* model, const int32_t* prompt, int prompt_len,
                                     const GenerateConfig& config,
                                     const GenerateTokenCallback& on_token,
                                     GenerateStats* stats = nullptr);

// Batch decode: the flat concatenation of (prompt + continuation) for each prompt.
// output_lengths (optional) receives each prompt's prompt+continuation length. Runs the prompts
// together through a BatchEngine (below; beam search runs them one after another); each
// prompt's tokens equal generate()'s for it alone.
std::vector<int32_t> generate_batch(Model* model, const std::vector<std::vector<int32_t>>& prompts,
                                    const GenerateConfig& config,
                                    std::vector<int>* output_lengths = nullptr);
// generate_batch with each prompt's whole GenerateResult (tokens, text, stats, stop reason), in
// prompt order. observer (optional) receives (prompt index, TokenEvent) on the calling thread;
// returning false stops that prompt only (CALLBACK_ABORT). The prompts run together through a
// BatchEngine; with lens = true (TokenEvent::lens filled, lens_top_k entries per depth) or beam
// search they run one after another through generate_ex. Tokens equal generate()'s either way.
struct GenerateBatchOptions {
    std::function<bool(size_t prompt_index, const TokenEvent& ev)> observer;
    bool lens = false;
    int lens_top_k = 5;
};
std::vector<GenerateResult> generate_batch_ex(Model* model, const std::vector<std::vector<int32_t>>& prompts,
                                              const GenerateConfig& config, const GenerateBatchOptions& options = {});
// Splits generate_batch's flat result back into per-prompt outputs.
std::vector<std::vector<int32_t>> split_batch_output(const std::vector<int32_t>& flat,
                                                     const std::vector<int>& output_lengths);

// The one token-id range rule: throws InvalidArgument "FIELD: token id X is outside the
// vocabulary [0, V)" when id is not in [0, vocab_size); check_token_ids names the first bad
// entry as FIELD[i]. Every room that takes ids (decode, caches, scoring, config validation, the
// analysis stepper, the CLI's --ids flags) asks it.
void check_token_id(int32_t id, int vocab_size, const std::string& field);
void check_token_ids(const int32_t* ids, size_t n, int vocab_size, const std::string& field);

// Validates a config against a model (every rule generate applies), throwing InvalidArgument.
void validate_config(const Model* model, int prompt_len, const GenerateConfig& config);

// The distribution decode draws the token after `tokens` from: tokens[0 .. n - emitted) is the
// prompt, the last `emitted` were output already. The config's logits pipeline (bias, penalties,
// bans, min length, forced EOS, length decay, suppression) then its sampling warpers (temperature,
// top-k, top-p, min-p, typical-p, epsilon, eta); a greedy config: 1 at the argmax. No grammar;
// CPU back end. For tests and tools that compare it with another implementation.
std::vector<float> next_token_distribution(Model* model, const int32_t* tokens, int n, int emitted,
                                           const GenerateConfig& config);

}  // namespace tinyloop

// The parts that build on the generation types above.
#include "tinyloop/batch.h"
#include "tinyloop/speculation.h"
#include "tinyloop/run_spec.h"
#include "tinyloop/scoring.h"
#include "tinyloop/caches.h"
#include "tinyloop/import.h"
