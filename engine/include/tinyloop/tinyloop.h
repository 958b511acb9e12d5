// TinyLoop runtime: the one public engine header.
//
// Basic usage
// -----------
//     tinyloop::Model* m = tinyloop::load_model("resources/models/tinyloop-kjv/model-f32.tinyloop");
//     std::vector<int32_t> prompt = tinyloop::tokenize(m, "In the beginning");
//     tinyloop::GenerateConfig cfg;          // defaults as the seed's Generation API
//     cfg.max_tokens = 32;
//     std::vector<int32_t> out = tinyloop::generate(m, prompt.data(), (int)prompt.size(), cfg);
//     std::string text = tinyloop::detokenize(m, out.data() + prompt.size(),
//                                             out.size() - prompt.size());
//     tinyloop::free_model(m);
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
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tinyloop {

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

enum class ErrorCode {
    InvalidArgument,  // a config field or argument outside its allowed range
    BadFile,          // a model file that FORMAT.md says a loader must refuse
    Io,               // a file that cannot be opened, read or written
    OutOfMemory,      // an allocation failed
    NotSupported,     // a feature that exists in the API but not (yet) in this build/back end
    Backend,          // a back-end (CUDA) failure
    Internal,         // a broken invariant: a bug
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
public:
    Error(ErrorCode code, const std::string& message)
        : std::runtime_error(message), code_(code) {}
    ErrorCode code() const noexcept { return code_; }

private:
    ErrorCode code_;
};

// ---------------------------------------------------------------------------------------------
// Model description
// ---------------------------------------------------------------------------------------------

enum class DType { F32, F16, Q8, Q4, Q2 };

const char* dtype_name(DType t);              // "f32", "f16", "q8", "q4", "q2"
DType parse_dtype(const std::string& name);    // throws InvalidArgument naming the allowed set

// What enters each loop pass after the first (FORMAT.md §1a).
//   None: the state h alone, the plain recurrence of §1 (file version 1).
//   Add:  h + e, e the prelude's output (the embedding when n_pre_blocks is 0): input
//         injection, stored as "loop_input": "add" in a version-2 file.
enum class LoopInput { None, Add };

const char* loop_input_name(LoopInput v);            // "none", "add"
LoopInput parse_loop_input(const std::string& name);  // throws InvalidArgument naming the allowed set

// The hyperparameters of FORMAT.md §1 (and §1a's loop_input).
struct HParams {
    int vocab_size = 0;
    int d_model = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int head_dim = 0;
    int d_ff = 0;
    int n_pre_blocks = 0;
    int n_loop_layers = 0;
    int default_loops = 0;
    int max_loops = 0;
    int max_seq_len = 0;
    float rope_theta = 10000.0f;
    float norm_eps = 1e-5f;
    bool tie_embeddings = true;
    LoopInput loop_input = LoopInput::None;  // §1a: Add re-injects the prelude output every pass
};

// The byte-level BPE tokenizer of FORMAT.md §3.
struct TokenizerSpec {
    std::string type = "byte_bpe";
    std::string pretokenizer = "tinyloop-ascii-v1";
    std::vector<std::pair<int32_t, int32_t>> merges;          // merge k makes id 256 + k
    std::vector<std::pair<std::string, int32_t>> special_tokens;
    int32_t eos_id = -1;  // -1: none
    int32_t bos_id = -1;  // -1: none
};

struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;  // [rows, cols] or [n]
    int group_size = 0;          // quantized dtypes only
    uint64_t bytes = 0;          // bytes in the file (codes + scales + zeros)
};

struct ModelInfo {
    std::string path;
    HParams hparams;
    TokenizerSpec tokenizer;
    int tokenizer_vocab = 0;            // ids the tokenizer can produce (256 + merges + specials)
    std::vector<TensorInfo> tensors;
    std::string metadata_json;          // the header's "metadata" object, serialised
    uint64_t file_bytes = 0;
    uint64_t weight_bytes = 0;          // resident weight bytes (as stored, never expanded)
    uint64_t parameter_count = 0;
    std::string backend;                // "cpu" or "cuda"
    std::string backend_note;           // why auto chose this back end
    int threads = 0;
};

// ---------------------------------------------------------------------------------------------
// Lifecycle
// ---------------------------------------------------------------------------------------------

enum class Backend { Auto, Cpu, Cuda };

struct LoadOptions {
    Backend backend = Backend::Auto;  // Auto: CUDA when a usable device exists, else CPU
    int threads = 0;                  // worker threads for the CPU back end; 0 = all cores (1..256)
    int max_seq_len = 0;              // 0 = the model's; else 1..model's max_seq_len
    int prefill_chunk = 64;           // prompt tokens per prefill forward, 1..4096
};

struct Model;  // opaque; weights immutable after load

// Loads and validates a .tinyloop file (FORMAT.md). Throws Error(BadFile) naming the file and
// the field for every refusal in FORMAT.md §4, Error(Io) when it cannot be read.
Model* load_model(const std::string& path, const LoadOptions& options = {});
// Frees a model; nullptr is a no-op.
void free_model(Model* model);
// Device memory the model and its buffers hold (0 on the CPU back end).
size_t vram_usage_bytes(const Model* model);
ModelInfo model_info(const Model* model);
const HParams& model_hparams(const Model* model);

// The dequantized weights of one tensor (for tests and tools), row-major.
std::vector<float> tensor_as_f32(const Model* model, const std::string& name);

// ---------------------------------------------------------------------------------------------
// Writing files
// ---------------------------------------------------------------------------------------------

// One tensor to write: values in f32, stored as `dtype` (quantized per FORMAT.md §2 when q*).
struct TensorData {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;
    DType dtype = DType::F32;
    int group_size = 32;  // q8/q4/q2: 32, 64 or 128, dividing the row length
};

struct ModelSpec {
    HParams hparams;
    TokenizerSpec tokenizer;
    std::vector<TensorData> tensors;
    std::string metadata_json = "{}";  // a JSON object
};

// Writes a valid .tinyloop file. Throws InvalidArgument when the spec is inconsistent.
void save_model(const std::string& path, const ModelSpec& spec);

// A model with random weights (tests, benchmarks, the README's demo before a trained model).
// Norm gains are 1 + small noise; matrices ~ N(0, 1/sqrt(cols)). The tokenizer is `tokenizer`
// or, when it has no merges, bytes only plus one <|endoftext|> special token at id 256 (specials
// follow the merges, FORMAT.md §3); ids 257 .. vocab_size-1 are padding and never sampled.
ModelSpec random_model_spec(const HParams& hp, uint64_t seed, DType dtype = DType::F32,
                            int group_size = 32);

// Re-writes a model with every matrix stored as `dtype` (q8/q4/q2: asymmetric groups of
// group_size, range searched to minimise squared error; f16/f32 also allowed). Norms stay f32.
// Metadata is kept, with "quantization" added. Reports each tensor's relative error
// ||W' - W|| / ||W|| (against the input's values) and the file sizes.
struct QuantizeTensorReport {
    std::string name;
    DType from = DType::F32;
    DType to = DType::F32;
    double rel_error = 0;
    uint64_t bytes_in = 0, bytes_out = 0;
};
struct QuantizeReport {
    std::vector<QuantizeTensorReport> tensors;
    uint64_t file_bytes_in = 0, file_bytes_out = 0;
};
QuantizeReport quantize_model_file(const std::string& in_path, const std::string& out_path, DType dtype,
                                   int group_size = 32);

// ---------------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------------

// Encodes UTF-8 (or any bytes) text. Special-token strings are plain text unless parse_special.
std::vector<int32_t> tokenize(const Model* model, std::string_view text,
                              bool parse_special = false);
// Concatenated raw bytes of the ids (may hold invalid or incomplete UTF-8). Throws
// InvalidArgument for an id the tokenizer cannot decode.
std::string detokenize(const Model* model, const int32_t* ids, size_t n);
// Text for a person: invalid UTF-8 replaced by U+FFFD.
std::string detokenize_text(const Model* model, const int32_t* ids, size_t n);
std::string token_bytes(const Model* model, int32_t id);

// Streaming detokenizer: push ids one at a time, get back the text that is complete so far.
// An incomplete UTF-8 sequence is held back until it completes; invalid bytes become U+FFFD.
class StreamDecoder {
public:
    explicit StreamDecoder(const Model* model);
    std::string push(int32_t id);
    std::string flush();  // whatever is held back, invalid bytes replaced

private:
    const Model* model_;
    std::string pending_;
};

// Replaces invalid UTF-8 sequences with U+FFFD.
std::string sanitize_utf8(std::string_view bytes);

// ---------------------------------------------------------------------------------------------
// Generation (the seed's Generation API)
// ---------------------------------------------------------------------------------------------

// Grammar-constrained decoding: a GBNF-style grammar (named rules `name ::= ...`, "literals",
// [classes] with ranges and negation, ( groups ), |, ?, *, +, # comments; start rule `root`).
// A token is allowed when its bytes keep the output inside the grammar; EOS only when the output
// is a whole sentence. When nothing is allowed, decoding stops with GRAMMAR_DEAD_END.
struct Grammar;
// Throws Error(InvalidArgument) "grammar:LINE:COL: message" for a malformed grammar.
Grammar* parse_grammar(const std::string& text);
// Error(Io) naming the path when unreadable; "PATH:LINE:COL: message" when malformed.
Grammar* load_grammar_file(const std::string& path);
// nullptr is a no-op. A Grammar is immutable: any number of calls may share it.
void free_grammar(Grammar* g);

enum class EarlyExitCriterion {
    HiddenL2,   // ||h_l - h_{l-1}|| / ||h_l|| below early_exit_threshold (the seed's default)
    LogitMargin,
    KL,
    EntropyDelta,
    ArgmaxStable,
};

// How the KV cache stores keys and values. Int8: symmetric INT8 codes with one f32 scale per
// (position, layer, kv head), scale = max|x| / 127 (Hugging Face's quantized cache, without its
// f32 residual window): about 3.6x less memory at head_dim 64, logits within ~1e-2 of f32.
enum class KVCacheType { F32, Int8 };
const char* kv_cache_type_name(KVCacheType t);              // "f32", "int8"
KVCacheType parse_kv_cache_type(const std::string& name);   // throws InvalidArgument "kv_cache: ..."
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
    int early_exit_patience = 0;      // 0 disables early exit; > 0: exit after this many stable probes
    int early_exit_min_L = 2;
    int early_exit_peek_every = 1;
    float early_exit_logit_margin = 0.0f;
    EarlyExitCriterion early_exit_criterion = EarlyExitCriterion::HiddenL2;
    float early_exit_threshold = 0.05f;
    uint64_t sample_seed = 0;         // deterministic given seed + config + model
    Grammar* grammar = nullptr;       // constrained decoding (see parse_grammar); not owned
    KVCacheType kv_cache = KVCacheType::F32;  // f32 or int8 (plain decode, beam, batch engine;
                                              // not from prefix caches / resume handles / pools)
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

struct GenerateOptions {
    GenerateTokenCallback on_token;  // the seed's callback (optional)
    TokenObserver observer;          // TokenEvents (optional); return false to abort
    bool lens = false;               // fill TokenEvent::lens (costs one head product per depth)
    int lens_top_k = 5;              // 1..64
    // Optional: filled with the KV provenance of the call by generate_ex, generate_with_prefix,
    // resume_generate and generate_with_pool (plain decoding, early exit included). Beam search
    // refuses it (NotSupported); the speculative entries do not fill it.
    KVProvenance* kv_provenance = nullptr;
};

struct GenerateResult {
    std::vector<int32_t> tokens;  // prompt followed by the continuation
    int prompt_len = 0;
    std::string text;             // continuation text (stop string excluded, U+FFFD for invalid)
    GenerateStats stats;
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

// ---------------------------------------------------------------------------------------------
// Continuous batching
// ---------------------------------------------------------------------------------------------
//
// A BatchEngine accepts requests at any time and advances every active sequence together, one
// decode step per iteration (iteration-level scheduling): each step runs one batched forward
// whose matmuls take all the sequences' rows at once (each weight read once per step), with at
// most prefill_chunk prompt tokens of newly admitted requests mixed in, so a long prompt does
// not stall the running sequences. Each sequence has its own config, stop policy, callbacks and
// KV pages from a shared pool (one pool per KV type, f32 and int8, allocated on first use).
// The kernels are batch-invariant, so every request's tokens equal generate()'s for it alone.
// Early exit (early_exit_patience > 0) runs its decode steps one sequence at a time (its
// prompt still prefills batched); beam search is refused.
//
// Pages: a request is admitted once the pool can reserve pages for its whole length
// (prompt + max_tokens positions at every execution layer of its depth), so a running
// sequence never waits; until then it waits in the queue (first in, first out). A request that
// could not fit even in an empty pool is refused by batch_submit (InvalidArgument naming
// kv_pages). Pages return to the pool when a request finishes.
//
// Threads: batch_submit, batch_cancel, batch_result, batch_stats may be called from any thread;
// batch_step / batch_run_until_idle from one thread at a time (they serialise). Callbacks run on
// the stepping thread with no engine lock held (they may submit or cancel).
struct BatchEngineOptions {
    int kv_pages = 2048;       // pages per KV type in the pool, 1..1048576
    int page_size = 16;        // positions per page (one execution layer), 1..4096
    int max_batch = 64;        // sequences advanced together, 1..4096
    int prefill_chunk = 64;    // prompt tokens prefilled per step over all new requests, 1..4096
};

struct BatchRequest {
    std::vector<int32_t> prompt;
    GenerateConfig config;
    GenerateTokenCallback on_token;  // as generate_stream's; return false to stop (CALLBACK_ABORT)
    TokenObserver observer;          // TokenEvents without lens rows; return false to stop
    // Optional back-pressure: while it returns true the request is skipped by the steps (it keeps
    // its pages and state; the others go on). Called on the stepping thread.
    std::function<bool()> hold;
    // Called once when the request ends (result ready, error empty) or fails (error set).
    std::function<void(uint64_t id, const GenerateResult& result, const std::string& error)> on_done;
};

struct BatchEngineStats {
    int queued = 0;           // submitted, waiting for pages or a batch slot
    int active = 0;           // prefilling or decoding
    int finished = 0;         // results not yet taken
    int pages_total = 0;      // per pool that exists (f32 + int8)
    int pages_free = 0;
    size_t pool_bytes = 0;    // bytes of the pools' storage
    long long steps = 0;      // iterations run
    long long rows = 0;       // forward rows run (decode + prefill)
    int max_active = 0;       // most sequences advanced in one step
};

struct BatchEngine;
// Throws InvalidArgument naming the option and its range.
BatchEngine* create_batch_engine(Model* model, const BatchEngineOptions& options = {});
// nullptr is a no-op. Requests still running are dropped.
void free_batch_engine(BatchEngine* engine);
// Validates the request (as generate would, plus the pool's size) and queues it; returns its id.
uint64_t batch_submit(BatchEngine* engine, BatchRequest request);
// One iteration: admit what fits, one batched forward, one token per decoding sequence.
// Returns the number of requests still queued or active.
int batch_step(BatchEngine* engine);
// Steps until nothing is queued or active.
void batch_run_until_idle(BatchEngine* engine);
// Stops a queued or active request at the next step (stop reason CALLBACK_ABORT; the tokens
// emitted so far are kept). Returns false when the id is unknown or already finished.
bool batch_cancel(BatchEngine* engine, uint64_t id);
// True once the request has finished (its result can be taken).
bool batch_done(const BatchEngine* engine, uint64_t id);
// Takes a finished request's result (once). Throws InvalidArgument when the id is unknown, not
// finished or already taken, and the request's own Error when it failed.
GenerateResult batch_result(BatchEngine* engine, uint64_t id);
BatchEngineStats batch_stats(const BatchEngine* engine);

// Validates a config against a model (every rule generate applies), throwing InvalidArgument.
void validate_config(const Model* model, int prompt_len, const GenerateConfig& config);

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

// Tree drafting: K_branches candidates per draft step, draft_ahead steps deep; the whole tree
// is verified in one forward with a tree attention mask; the longest matching path is accepted.
struct TreeSpeculativeConfig {
    int max_tokens = 64;
    int draft_loops = 2;
    int verify_loops = 8;
    int draft_ahead = 4;      // tree depth, 1 .. 8
    int K_branches = 2;       // candidates per node, 1 .. 8 (tree nodes <= 1024)
    float temperature = 0.0f; // greedy only (temperature > 0 is refused: use the chain mode)
    uint64_t seed = 0;
    bool ignore_eos = false;
};

GenerateResult generate_speculative_ex(Model* model, const int32_t* prompt, int prompt_len,
                                       const SpeculativeConfig& config, const GenerateOptions& options = {});
GenerateResult generate_tree_speculative_ex(Model* model, const int32_t* prompt, int prompt_len,
                                            const TreeSpeculativeConfig& config,
                                            const GenerateOptions& options = {});
std::vector<int32_t> generate_speculative(Model* model, const int32_t* prompt, int prompt_len,
                                          const SpeculativeConfig& config);
std::vector<int32_t> generate_tree_speculative(Model* model, const int32_t* prompt, int prompt_len,
                                               const TreeSpeculativeConfig& config);

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
struct DraftSpeculativeConfig {
    int gamma = 4;         // tokens the draft proposes per cycle, 1 .. 32
    int draft_loops = 0;   // the draft model's loop depth, 1 .. its max_loops; 0 = its default_loops
};

GenerateResult draft_speculative_generate_ex(Model* target, Model* draft, const int32_t* prompt, int prompt_len,
                                             const GenerateConfig& config, const DraftSpeculativeConfig& spec,
                                             const GenerateOptions& options = {});
GenerateResult draft_speculative_generate(Model* target, Model* draft, const int32_t* prompt, int prompt_len,
                                          const GenerateConfig& config, const DraftSpeculativeConfig& spec = {});

// ---------------------------------------------------------------------------------------------
// Decode modes: one run specification, one entry
// ---------------------------------------------------------------------------------------------
//
// A front end describes a run as a RunSpec (the mode, the GenerateConfig, the speculation knobs)
// and calls run_decode, which applies the mode's rules and calls the mode's engine entry:
//   Greedy       generate_ex at temperature 0, beam search and early exit off
//   Sample       generate_ex at config.temperature, beam search and early exit off
//   EarlyExit    generate_ex with early exit, beam search off; early_exit_patience must be >= 1
//   Beam         generate_ex with beam search; beam_size must be >= 2
//   Speculative  generate_speculative_ex with the config's max_tokens, temperature, sample_seed,
//                top_p, ignore_eos and, when sampling, its top_k (the same filters as plain
//                sampling); the config's other fields are unused
//   Tree         generate_tree_speculative_ex (greedy only: temperature > 0.01 is NotSupported)
//   DraftModel   draft_speculative_generate_ex with speculation.draft_model and gamma
// A broken rule throws InvalidArgument naming the field ("beam_size: ...").
enum class DecodeMode { Greedy, Sample, EarlyExit, Beam, Speculative, Tree, DraftModel };
// "greedy", "sample", "early-exit", "beam", "speculative", "tree", "draft-model"
const char* decode_mode_name(DecodeMode mode);

struct SpeculationKnobs {
    int verify_loops = 0;  // Speculative, Tree: verify depth; 0 = config.loops (itself 0 = default_loops)
    int draft_loops = 0;   // Speculative, Tree: draft depth; 0 = min(2, verify_loops - 1)
                           // DraftModel: the draft model's depth; 0 = its default_loops
    int draft_ahead = 4;   // Speculative: tokens drafted per cycle, 1 .. 32; Tree: depth, 1 .. 8
    int branches = 2;      // Tree: candidates per node, 1 .. 8
    Model* draft_model = nullptr;  // DraftModel: a model with the same vocabulary (not owned)
    int gamma = 4;         // DraftModel: tokens drafted per cycle, 1 .. 32
};

struct RunSpec {
    DecodeMode mode = DecodeMode::Greedy;
    GenerateConfig config;
    SpeculationKnobs speculation;
};

// The knobs as run_decode uses them, every 0 ("the default") resolved (draft_loops of DraftModel
// needs speculation.draft_model).
SpeculationKnobs resolved_speculation(const Model* model, const RunSpec& spec);

GenerateResult run_decode(Model* model, const int32_t* prompt, int prompt_len, const RunSpec& spec,
                          const GenerateOptions& options = {});

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

// Every early-exit criterion's signal at every position and pass, teacher-forced at full depth
// `loops` (0 = default), computed exactly as the adaptive decode computes it for a row whose
// earlier positions all ran every pass (one row at a time, window 0): the value at (position p,
// pass l) compares p's states h_{l-1} and h_l (h_0: the prelude's output) and their lens logits.
// Smaller = more stable for every criterion, as exit_stable reads it: LogitMargin holds -margin,
// ArgmaxStable 0 (same argmax) or 1. Lets a tool re-score any threshold without generating.
struct ExitSignals {
    int n_positions = 0;
    int loops = 0;
    std::vector<float> values;  // [criterion, in EarlyExitCriterion order][position][pass-1]
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

// ---------------------------------------------------------------------------------------------
// Caches (reuse of prefill state across calls)
// ---------------------------------------------------------------------------------------------

// A prefix prefilled once at one depth (and cache_window); reused by any prompt that starts with it.
struct PrefixCache;
PrefixCache* create_prefix_cache(Model* model, const int32_t* prefix, int n, int loops = 0, int cache_window = 0);
void free_prefix_cache(PrefixCache* cache);
size_t prefix_cache_bytes(const PrefixCache* cache);
int prefix_cache_length(const PrefixCache* cache);
// Generates as generate_ex would; the prompt must start with the cache's prefix and the config's
// loops and cache_window must equal the cache's. Only the rest of the prompt is prefilled.
GenerateResult generate_with_prefix(Model* model, const PrefixCache* cache, const int32_t* prompt,
                                    int prompt_len, const GenerateConfig& config,
                                    const GenerateOptions& options = {});

// A prompt prefilled at some depth, kept with its states so it can be answered at another depth
// without recomputing the prompt: deeper by running only the new passes, shallower for free.
struct ResumeHandle;
ResumeHandle* create_resume_handle(Model* model, const int32_t* prompt, int prompt_len, int loops = 0);
void free_resume_handle(ResumeHandle* handle);
int resume_handle_loops(const ResumeHandle* handle);   // deepest depth computed so far
size_t resume_handle_bytes(const ResumeHandle* handle);
// Generates from the handle's prompt at config.loops (0 = the handle's depth). When deeper than
// the handle, passes handle+1 .. loops run over the prompt and the handle keeps the deeper state.
GenerateResult resume_generate(ResumeHandle* handle, const GenerateConfig& config,
                               const GenerateOptions& options = {});

// Registered prefixes at one depth; a request reuses the longest one its prompt starts with.
struct PrefixPool;
PrefixPool* create_prefix_pool(Model* model, int loops = 0);
void free_prefix_pool(PrefixPool* pool);
int prefix_pool_add(PrefixPool* pool, const int32_t* prefix, int n);  // returns its index
size_t prefix_pool_bytes(const PrefixPool* pool);
// reused_tokens (optional) receives the length of the prefix that was reused (0 if none).
GenerateResult generate_with_pool(PrefixPool* pool, const int32_t* prompt, int prompt_len,
                                  const GenerateConfig& config, const GenerateOptions& options = {},
                                  int* reused_tokens = nullptr);

}  // namespace tinyloop
