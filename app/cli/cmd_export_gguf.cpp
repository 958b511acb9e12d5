// tinyloop export-gguf MODEL OUT.gguf --loops L [--dtype f32|f16|bf16|q8_0|q4_0]: the looped model
// unrolled to an ordinary llama GGUF (llama.cpp, Ollama, LM Studio run it): n_pre_blocks +
// L * n_loop_layers blocks, the shared block's weights written once per pass. Our RoPE rotates
// the pairs (i, i + head_dim/2) of each head (docs/FORMAT.md §1), llama.cpp's llama
// architecture the adjacent pairs (2i, 2i+1), so each head's rows of wq and wk are permuted:
// new row 2i = old row i, new row 2i+1 = old row i + head_dim/2 (q·k is unchanged, since q and
// k get the same permutation). The byte-level BPE tokenizer goes in as a "gpt2" tokenizer.
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "commands.h"
#include "common.h"
#include "gguf_writer.h"

namespace tinyloop::cli {

namespace {

using gguf::TensorType;

const char* kDtypeExpect = "one of f32, f16, bf16, q8_0, q4_0";

TensorType parse_gguf_dtype(const std::string& s) {
    if (s == "f32") return TensorType::F32;
    if (s == "f16") return TensorType::F16;
    if (s == "bf16") return TensorType::BF16;
    if (s == "q8_0") return TensorType::Q8_0;
    if (s == "q4_0") return TensorType::Q4_0;
    throw UsageError(std::string("--dtype: expected ") + kDtypeExpect + ", got '" + s + "'");
}

// Without --dtype: the GGUF type nearest to the model's matrices (those of loop.0.wq).
TensorType default_gguf_dtype(const ModelInfo& info) {
    for (const TensorInfo& t : info.tensors)
        if (t.name == "loop.0.wq") {
            switch (t.dtype) {
                case DType::F32: return TensorType::F32;
                case DType::F16: return TensorType::F16;
                case DType::BF16: return TensorType::BF16;
                case DType::Q8: return TensorType::Q8_0;
                case DType::Q4:
                case DType::Q2: return TensorType::Q4_0;
            }
        }
    return TensorType::F32;
}

// GPT-2's byte-to-unicode map: the printable bytes stand for themselves, the others take the
// code points 256, 257, ... in byte order. A token's text is its bytes through this map.
std::vector<std::string> byte_symbols() {
    std::vector<std::string> sym(256);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        const int cp = printable ? b : next++;
        std::string u;
        if (cp < 0x80) {
            u += static_cast<char>(cp);
        } else {
            u += static_cast<char>(0xC0 | (cp >> 6));
            u += static_cast<char>(0x80 | (cp & 0x3F));
        }
        sym[b] = u;
    }
    return sym;
}

// llama.cpp's token types (llama_token_type).
constexpr int32_t kTokenNormal = 1, kTokenControl = 3, kTokenUnused = 5;

void add_tokenizer(gguf::Writer& w, const ModelInfo& info) {
    const TokenizerSpec& tok = info.tokenizer;
    const int vocab = info.hparams.vocab_size;
    const std::vector<std::string> sym = byte_symbols();
    std::vector<std::string> text(vocab);
    std::vector<int32_t> type(vocab, kTokenUnused);
    for (int b = 0; b < 256 && b < vocab; ++b) {
        text[b] = sym[b];
        type[b] = kTokenNormal;
    }
    std::vector<std::string> merges;
    for (size_t k = 0; k < tok.merges.size(); ++k) {
        const auto [a, b] = tok.merges[k];
        const size_t id = 256 + k;
        text[id] = text[a] + text[b];
        type[id] = kTokenNormal;
        merges.push_back(text[a] + " " + text[b]);
    }
    for (const auto& [s, id] : tok.special_tokens) {
        text[id] = s;
        type[id] = kTokenControl;
    }
    for (int id = 0; id < vocab; ++id)
        if (type[id] == kTokenUnused) text[id] = "<|unused_" + std::to_string(id) + "|>";
    w.add_string("tokenizer.ggml.model", "gpt2");
    // GPT-2's pretokenizer: ours (FORMAT.md §3) splits digits one by one and counts bytes >=
    // 0x80 as letters. The chunks differ, but merges never learned across our chunk borders
    // (digit pairs, a letter after an apostrophe) do not apply, so the ids agree on the texts of
    // tests/llama_cpp; a text that splits differently in some other way could still differ.
    w.add_string("tokenizer.ggml.pre", "gpt-2");
    w.add_string_array("tokenizer.ggml.tokens", text);
    w.add_i32_array("tokenizer.ggml.token_type", type);
    w.add_string_array("tokenizer.ggml.merges", merges);
    if (tok.eos_id >= 0) w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tok.eos_id));
    if (tok.bos_id >= 0) w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tok.bos_id));
    w.add_bool("tokenizer.ggml.add_bos_token", false);
    w.add_bool("tokenizer.ggml.add_eos_token", false);
}

// Each head's rows reordered from our half-split RoPE pairs to llama.cpp's adjacent pairs.
std::vector<float> permute_rope_rows(const std::vector<float>& w, int heads, int head_dim, int cols) {
    std::vector<float> out(w.size());
    const int half = head_dim / 2;
    for (int h = 0; h < heads; ++h)
        for (int i = 0; i < half; ++i)
            for (int k = 0; k < 2; ++k) {
                const size_t from = (static_cast<size_t>(h) * head_dim + i + k * half) * cols;
                const size_t to = (static_cast<size_t>(h) * head_dim + 2 * i + k) * cols;
                std::copy(w.begin() + from, w.begin() + from + cols, out.begin() + to);
            }
    return out;
}

struct ExportSummary {
    int layers = 0;
    size_t tensors = 0;
    uint64_t file_bytes = 0;
};

ExportSummary export_gguf(const Model* model, const ModelInfo& info, const std::string& out, int loops,
                          TensorType dtype) {
    const HParams& hp = info.hparams;
    gguf::Writer w;
    const int layers = hp.n_pre_blocks + loops * hp.n_loop_layers;
    w.add_string("general.architecture", "llama");
    w.add_string("general.name", std::filesystem::path(info.path).stem().string() + " unrolled to " +
                                     std::to_string(loops) + " loops");
    const uint32_t file_type = dtype == TensorType::F32 ? 0 : dtype == TensorType::F16 ? 1
                               : dtype == TensorType::BF16 ? 32 : dtype == TensorType::Q4_0 ? 2 : 7;  // llama_ftype
    w.add_u32("general.file_type", file_type);
    w.add_u32("llama.context_length", static_cast<uint32_t>(hp.max_seq_len));
    w.add_u32("llama.embedding_length", static_cast<uint32_t>(hp.d_model));
    w.add_u32("llama.block_count", static_cast<uint32_t>(layers));
    w.add_u32("llama.feed_forward_length", static_cast<uint32_t>(hp.d_ff));
    w.add_u32("llama.attention.head_count", static_cast<uint32_t>(hp.n_heads));
    w.add_u32("llama.attention.head_count_kv", static_cast<uint32_t>(hp.n_kv_heads));
    w.add_u32("llama.attention.key_length", static_cast<uint32_t>(hp.head_dim));
    w.add_u32("llama.attention.value_length", static_cast<uint32_t>(hp.head_dim));
    w.add_u32("llama.rope.dimension_count", static_cast<uint32_t>(hp.head_dim));
    w.add_f32("llama.rope.freq_base", hp.rope_theta);
    w.add_f32("llama.attention.layer_norm_rms_epsilon", hp.norm_eps);
    w.add_u32("llama.vocab_size", static_cast<uint32_t>(hp.vocab_size));
    add_tokenizer(w, info);

    // Each source tensor's bytes are made once and written once per pass that uses them.
    std::map<std::string, std::shared_ptr<std::vector<uint8_t>>> cache;
    auto add = [&](const std::string& gguf_name, const std::string& src, TensorType type) {
        std::vector<int64_t> shape;
        for (const TensorInfo& t : info.tensors)
            if (t.name == src) shape = t.shape;
        const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
        if (cols % gguf::block_values(type) != 0)
            throw UsageError(std::string("--dtype ") + gguf::type_name(type) + ": the rows of " + src + " have " +
                             std::to_string(cols) + " values, not a multiple of its block of " +
                             std::to_string(gguf::block_values(type)) + " (use f32 or f16)");
        w.add_tensor(gguf_name, rows, cols, type, [&cache, model, src, type, rows, cols, &hp] {
            auto& slot = cache[src];
            if (!slot) {
                std::vector<float> v = tensor_as_f32(model, src);
                const bool q = src.size() > 3 && src.compare(src.size() - 3, 3, ".wq") == 0;
                const bool k = src.size() > 3 && src.compare(src.size() - 3, 3, ".wk") == 0;
                if (q || k) v = permute_rope_rows(v, q ? hp.n_heads : hp.n_kv_heads, hp.head_dim, static_cast<int>(cols));
                slot = std::make_shared<std::vector<uint8_t>>(gguf::encode(v.data(), static_cast<size_t>(rows * cols), type));
            }
            return *slot;
        });
    };
    add("token_embd.weight", "embed", dtype);
    for (int i = 0; i < layers; ++i) {
        const std::string p = i < hp.n_pre_blocks ? "pre." + std::to_string(i)
                                                  : "loop." + std::to_string((i - hp.n_pre_blocks) % hp.n_loop_layers);
        const std::string b = "blk." + std::to_string(i) + ".";
        add(b + "attn_norm.weight", p + ".attn_norm", TensorType::F32);
        add(b + "attn_q.weight", p + ".wq", dtype);
        add(b + "attn_k.weight", p + ".wk", dtype);
        add(b + "attn_v.weight", p + ".wv", dtype);
        add(b + "attn_output.weight", p + ".wo", dtype);
        add(b + "ffn_norm.weight", p + ".mlp_norm", TensorType::F32);
        add(b + "ffn_gate.weight", p + ".w_gate", dtype);
        add(b + "ffn_up.weight", p + ".w_up", dtype);
        add(b + "ffn_down.weight", p + ".w_down", dtype);
    }
    add("output_norm.weight", "final_norm", TensorType::F32);
    if (!hp.tie_embeddings) add("output.weight", "head", dtype);  // tied: llama.cpp reads token_embd

    ExportSummary s;
    s.layers = layers;
    s.tensors = 2 + static_cast<size_t>(layers) * 9 + (hp.tie_embeddings ? 0 : 1);
    s.file_bytes = w.write(out);
    return s;
}

}  // namespace

CommandSpec export_gguf_spec() {
    CommandSpec s;
    s.name = "export-gguf";
    s.synopsis = "MODEL OUT --loops L [--dtype f32|f16|bf16|q8_0|q4_0] [--json]";
    s.summary =
        "Writes OUT: MODEL at loop depth L unrolled to an ordinary llama GGUF, n_pre_blocks +\n"
        "L x n_loop_layers blocks (the shared block written once per pass), with its tokenizer,\n"
        "for llama.cpp, Ollama or LM Studio. Q/K rows are permuted to llama.cpp's adjacent-pair\n"
        "RoPE. A version-2 model (loop_input \"add\") is refused: a llama block stack cannot add\n"
        "the prelude's output back at every pass. An existing OUT is replaced.";
    const std::string E = "Export";
    s.options = {
        {"--loops", "L", "loop depth to unroll, 1..max_loops (required)", "an integer in [1, max_loops]", false, E},
        {"--dtype", "T",
         "f32 | f16 | bf16 | q8_0 | q4_0: the matrices' GGUF type (default: nearest to MODEL's: f32,\n"
         "f16, bf16, q8 -> q8_0, q4/q2 -> q4_0); norms stay f32",
         kDtypeExpect, false, E},
    };
    for (auto& o : common_options()) s.options.push_back(o);
    s.notes =
        "Quantized matrices are dequantized and re-quantized to ggml's symmetric blocks of 32\n"
        "(Q8_0, Q4_0), so a q4 model exported as q4_0 carries both roundings. The tokenizer is a\n"
        "GGUF \"gpt2\" byte-level BPE with GPT-2's pretokenizer, written differently from ours\n"
        "(each digit alone, bytes >= 0x80 as letters) but giving our ids on the texts the\n"
        "llama.cpp parity test checks (numbers, contractions, non-ASCII, runs of whitespace).\n"
        "--json prints one object: input, output, loops, layers, dtype, tensors, file_bytes.\n"
        "--backend and --threads are accepted for uniformity and unused.\n";
    return s;
}

int run_export_gguf(const Args& args) {
    const auto [in, out] = in_out_positionals(args, "MODEL");
    const std::optional<int> loops = loops_flag(args);
    if (!loops) throw UsageError("missing --loops (the loop depth to unroll, 1..max_loops)");
    const std::optional<std::string> dflag = args.value("--dtype");
    std::optional<TensorType> dtype;
    if (dflag) dtype = parse_gguf_dtype(*dflag);
    load_options(args);  // validates --backend / --threads even though nothing runs

    check_output_path(in, out);
    LoadOptions lo;
    lo.backend = Backend::Cpu;
    lo.threads = 1;
    ModelHandle model = open_model(in, lo);
    const ModelInfo info = model_info(model.get());
    const HParams& hp = info.hparams;
    if (hparams_need_v3(hp))
        throw UsageError("model '" + in + "' is a version-3 file (architecture " + hp.architecture +
                         ": block kind, pass norm, coda, adapter or exit gate of FORMAT.md §1b), which an "
                         "unrolled llama GGUF cannot express; only version-1 models export");
    if (hp.loop_input != LoopInput::None)
        throw UsageError("model '" + in + "' is a version-2 file (loop_input \"add\": the prelude's output is "
                         "added back at every pass), which a llama GGUF cannot express; only version-1 "
                         "models export");
    if (*loops > hp.max_loops)
        throw UsageError("--loops: " + std::to_string(*loops) + " is outside [1, " + std::to_string(hp.max_loops) +
                         "] (1..max_loops of this model)");
    const TensorType type = dtype.value_or(default_gguf_dtype(info));
    const ExportSummary s = export_gguf(model.get(), info, out, *loops, type);

    if (args.has("--json")) {
        print_json({{"input", in},
                    {"output", out},
                    {"loops", *loops},
                    {"layers", s.layers},
                    {"dtype", gguf::type_name(type)},
                    {"tensors", s.tensors},
                    {"file_bytes", s.file_bytes}});
        return 0;
    }
    std::ostringstream o;
    o << "wrote " << out << ": " << human_bytes(s.file_bytes) << " (" << grouped(s.file_bytes)
      << " bytes), llama GGUF, " << s.layers << " blocks (" << hp.n_pre_blocks << " prelude + " << *loops
      << " loops x " << hp.n_loop_layers << "), " << s.tensors << " tensors, matrices "
      << gguf::type_name(type) << "\n";
    const std::string text = o.str();
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
}

}  // namespace tinyloop::cli
