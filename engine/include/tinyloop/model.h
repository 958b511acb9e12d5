// TinyLoop public API, model: errors, model description, lifecycle and owning handles, writing files, tokenizer.
// Part of tinyloop/tinyloop.h, which includes every part: include that one.
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

enum class DType { F32, F16, Q8, Q4, Q2, BF16 };

const char* dtype_name(DType t);              // "f32", "f16", "q8", "q4", "q2", "bf16"
DType parse_dtype(const std::string& name);    // throws InvalidArgument naming the allowed set

// What enters each loop pass after the first (FORMAT.md §1a).
//   None: the state h alone, the plain recurrence of §1 (file version 1).
//   Add:  h + e, e the prelude's output (the embedding when n_pre_blocks is 0): input
//         injection, stored as "loop_input": "add" in a version-2 (or 3) file.
//   Adapter: h = adapter · [h; e] at the start of EVERY pass, the first from the initial state
//         (StateInit; Huginn's recurrence, FORMAT.md §1b, file version 3).
enum class LoopInput { None, Add, Adapter };

const char* loop_input_name(LoopInput v);            // "none", "add", "adapter"
LoopInput parse_loop_input(const std::string& name);  // throws InvalidArgument naming the allowed set

// Norm placement of every block (prelude, loop and coda alike), FORMAT.md §1b.
//   PreNorm:        h += attn(N(h)); h += mlp(N(h))                          (§1)
//   SandwichBranch: h += N'(attn(N(h))); h += N'(mlp(N(h)))   (Ouro, Gemma-2 style)
//   SandwichSum:    h = N'(h + attn(N(h))); h = N'(h + mlp(N(h)))              (Huginn)
enum class BlockKind { PreNorm, SandwichBranch, SandwichSum };
const char* block_kind_name(BlockKind v);             // "pre_norm", "sandwich_branch", "sandwich_sum"
BlockKind parse_block_kind(const std::string& name);  // throws InvalidArgument naming the allowed set

// The initial state s0 of loop_input Adapter (FORMAT.md §1b). Zeros, or Huginn's rule:
// s0[p][i] = scale · std · z(seed, p, i), z a standard normal truncated to [-3, 3] from the
// counter-based generator of §1b (the same bits on every platform and back end).
struct StateInit {
    enum class Kind { Zeros, TruncNormal };
    Kind kind = Kind::Zeros;
    float std = 0.0f;    // > 0 for TruncNormal
    float scale = 1.0f;  // finite for TruncNormal (Huginn: its embed_scale)
    uint64_t seed = 0;
};

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
    // File version 3 (FORMAT.md §1b): the published looped architectures. Defaults are §1's math.
    std::string architecture = "tinyloop";  // a label for display: tinyloop, ouro, huginn, nanbeige
    BlockKind block = BlockKind::PreNorm;
    bool qk_bias = false;        // q += bq, k += bk before RoPE (tensors P.bq, P.bk)
    float embed_scale = 1.0f;    // h = embed[token] · embed_scale
    bool pass_norm = false;      // h = RMSNorm(h, final_norm) after every pass; the head reads h_L
    int n_coda_blocks = 0;       // blocks after the loop (coda.j), read through the final norm twice
    StateInit state_init;        // s0 for loop_input Adapter
    bool exit_gate = false;      // tensors exit_gate.w [d], exit_gate.b [1]: λ_l = σ(w·h_l + b)
};

// Whether a model needs file version 3 (any §1b key away from its default).
bool hparams_need_v3(const HParams& hp);

// One step of an "hf_byte_bpe" pre-tokenizer (FORMAT.md §3b), in the order tokenizer.json lists
// them. kind "split": `pattern` (a PCRE2 pattern, UTF + UCP) with `behavior` one of removed,
// isolated, merged_with_previous, merged_with_next, contiguous, and `invert`; kind "digits":
// `individual_digits`; kind "byte_level": `add_prefix_space`, `use_regex` (the GPT-2 pattern).
struct HfPreStep {
    std::string kind;
    std::string pattern;
    std::string behavior = "isolated";
    bool invert = false;
    bool individual_digits = false;
    bool add_prefix_space = false;
    bool use_regex = false;
};

// An added token of an "hf_byte_bpe" tokenizer, as tokenizer.json's "added_tokens" lists it.
// lstrip, rstrip and single_word are refused when true (not supported).
struct HfAddedToken {
    int32_t id = 0;
    std::string content;
    bool special = false;
    bool normalized = false;
};

// The tokenizer of FORMAT.md §3: type "byte_bpe" (ids 0-255 the bytes, merge k makes 256 + k,
// specials after the merges) or "hf_byte_bpe" (§3b: a Hugging Face tokenizer.json byte-level
// BPE: `vocab` holds the token strings by id exactly as tokenizer.json writes them (GPT-2
// byte<->unicode form; "" for an id the model's vocab does not hold), `merges` are (left, right)
// id pairs by rank whose result is the id of the concatenated strings, `hf_pre` the
// pre-tokenizer, `added_tokens` the added tokens, and prefix/suffix the ids the post-processor
// puts around a single sequence).
struct TokenizerSpec {
    std::string type = "byte_bpe";
    std::string pretokenizer = "tinyloop-ascii-v1";                // byte_bpe only
    std::vector<std::pair<int32_t, int32_t>> merges;              // byte_bpe: merge k makes id 256 + k
    std::vector<std::pair<std::string, int32_t>> special_tokens;  // byte_bpe only
    int32_t eos_id = -1;  // -1: none
    int32_t bos_id = -1;  // -1: none
    // hf_byte_bpe only:
    std::vector<std::string> vocab;
    std::vector<HfPreStep> hf_pre;
    std::vector<HfAddedToken> added_tokens;
    std::vector<int32_t> prefix_ids;  // the post-processor's ids before a single sequence (BOS)
    std::vector<int32_t> suffix_ids;  // ... and after it (EOS)
    bool ignore_merges = false;       // BPE: a whole pre-token found in the vocab is one id
    // Further ids that end generation as eos_id does (generation_config.json's eos_token_id list;
    // FORMAT.md §3b "stop_ids"): each 0 .. ids - 1, distinct, at most 64. Empty: eos_id alone.
    std::vector<int32_t> stop_ids;
};

// Reads a Hugging Face tokenizer.json (byte-level BPE: Ouro/SmolLM2, Huginn) into an
// "hf_byte_bpe" spec, and, when `tokenizer_config_path` is not empty, its tokenizer_config.json
// for bos/eos (bos_token, eos_token) and the chat template (a Jinja string; written to
// *chat_template when that is not null, "" when the file has none). Anything the runtime does not
// support (a normalizer, a model option, an added-token flag, a pre-tokenizer kind) is refused by
// name. Throws Error(InvalidArgument) naming the file and the field ("tokenizer.json:
// model.merges[12]: ...") for unreadable, oversized (> 256 MiB), too deeply nested (> 64) or
// inconsistent input; the result passes Tokenizer validation (patterns compile and do not
// exceed the match limit on probe texts).
TokenizerSpec tokenizer_spec_from_hf(const std::string& tokenizer_json_path,
                                     const std::string& tokenizer_config_path = "",
                                     std::string* chat_template = nullptr);

// A tokenizer outside a model (importers, parity tests). Built once from a spec (validated as a
// loader validates it; vocab_size 0 means "as many ids as the tokenizer has"); encode/decode as
// tinyloop::tokenize/detokenize do for a model holding it. Thread-safe for concurrent const use.
class StandaloneTokenizer {
public:
    explicit StandaloneTokenizer(const TokenizerSpec& spec, int vocab_size = 0);
    ~StandaloneTokenizer();
    StandaloneTokenizer(const StandaloneTokenizer&) = delete;
    StandaloneTokenizer& operator=(const StandaloneTokenizer&) = delete;
    // add_special: put the post-processor's prefix/suffix ids around the result (hf_byte_bpe).
    std::vector<int32_t> encode(std::string_view text, bool parse_special = true,
                                bool add_special = false) const;
    std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
    int n_ids() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
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

// Owning handles: std::unique_ptr with the engine's own free function as deleter, for every
// object the API allocates (Owned<Model>, Owned<Grammar>, Owned<BatchEngine>, Owned<PrefixCache>,
// Owned<ResumeHandle>, Owned<PrefixPool>), so no front end writes its own deleter.
template <class T>
struct Deleter;
template <class T>
using Owned = std::unique_ptr<T, Deleter<T>>;
template <>
struct Deleter<Model> {
    void operator()(Model* model) const noexcept { free_model(model); }
};
using ModelHandle = Owned<Model>;
// load_model into a handle that frees the model when it goes out of scope.
inline ModelHandle load_model_handle(const std::string& path, const LoadOptions& options = {}) {
    return ModelHandle(load_model(path, options));
}
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

// Copies the model file `in_path` to `out_path` (they may be the same file: it is replaced through
// a temporary file and a rename) with the header's "metadata" object replaced by
// `metadata_json` (a JSON object). Every other header field and every tensor byte stay as they
// were; only the header's length, and with it the padding before the tensor data, may change.
// The result is checked by loading it. Throws Error naming the field or the file.
void write_model_metadata(const std::string& in_path, const std::string& out_path,
                          const std::string& metadata_json);

// A model with random weights (tests, benchmarks, the README's demo before a trained model).
// Norm gains are 1 + small noise; matrices ~ N(0, 1/sqrt(cols)). The tokenizer is `tokenizer`
// or, when it has no merges, bytes only plus one <|endoftext|> special token at id 256 (specials
// follow the merges, FORMAT.md §3); ids 257 .. vocab_size-1 are padding and never sampled.
ModelSpec random_model_spec(const HParams& hp, uint64_t seed, DType dtype = DType::F32,
                            int group_size = 32);

// Re-writes a model with every matrix stored as `dtype` (q8/q4/q2: asymmetric groups of
// group_size, range searched to minimise squared error; f16/bf16/f32 also allowed). Norms stay f32.
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
// The ids that end generation: the tokenizer's eos_id and its stop_ids (FORMAT.md §3b), eos first;
// what every decode mode stops on (StopReason EOS).
std::vector<int32_t> stop_token_ids(const Model* model);

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

}  // namespace tinyloop
