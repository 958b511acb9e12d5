// tinyloop make-random OUT [hyperparameters]: a model with random weights, for tests,
// benchmarks and the README's demo before a trained model exists.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "common.h"

namespace tinyloop::cli {

namespace {

struct IntFlag {
    const char* flag;
    const char* value_name;
    int HParams::*field;
    int def;
    int lo;
    int hi;
    const char* help;
};

// The CLI's own bounds keep the size arithmetic below far from overflow; the engine checks
// consistency (head_dim even, n_heads % n_kv_heads, default_loops <= max_loops, ...).
const IntFlag kIntFlags[] = {
    {"--d-model", "N", &HParams::d_model, 512, 1, 1 << 16, "model width (default 512)"},
    {"--n-heads", "N", &HParams::n_heads, 8, 1, 1024, "attention heads (default 8)"},
    {"--n-kv-heads", "N", &HParams::n_kv_heads, 8, 1, 1024,
     "key/value heads, dividing n_heads (default 8)"},
    {"--head-dim", "N", &HParams::head_dim, 64, 1, 4096, "dimension per head, even (default 64)"},
    {"--d-ff", "N", &HParams::d_ff, 1408, 1, 1 << 18, "MLP hidden width (default 1408)"},
    {"--vocab", "N", &HParams::vocab_size, 4096, 1, 1 << 22,
     "vocabulary size; 257+ for bytes + <|endoftext|> (default 4096)"},
    {"--n-pre", "N", &HParams::n_pre_blocks, 2, 0, 1024, "pre blocks run once (default 2)"},
    {"--n-loop", "N", &HParams::n_loop_layers, 2, 1, 1024, "layers in the shared loop block (default 2)"},
    {"--loops", "L", &HParams::default_loops, 7, 1, 1 << 16, "default loop depth (default 7)"},
    {"--max-loops", "L", &HParams::max_loops, 16, 1, 1 << 16, "deepest loop allowed (default 16)"},
    {"--max-seq-len", "N", &HParams::max_seq_len, 1024, 1, 1 << 22,
     "longest sequence (default 1024)"},
};

constexpr uint64_t kMaxParameters = 2'000'000'000ull;

}  // namespace

CommandSpec make_random_spec() {
    CommandSpec s;
    s.name = "make-random";
    s.synopsis = "OUT [--d-model N ...] [--dtype f32|f16|bf16|q8|q4|q2] [--group-size G] [--seed S]";
    s.summary =
        "Writes a .tinyloop model with random weights to OUT (norm gains 1 + noise, matrices\n"
        "N(0, 1/sqrt(cols))) and a byte tokenizer plus one <|endoftext|> special token.";
    const std::string H = "Hyperparameters", W = "Weights";
    for (const auto& f : kIntFlags)
        s.options.push_back({f.flag, f.value_name, f.help,
                             "an integer in [" + std::to_string(f.lo) + ", " +
                                 std::to_string(f.hi) + "]",
                             false, H});
    s.options.push_back({"--loop-input", "I", "none | add (input injection, a version-2 file; default none)",
                         "one of none, add", false, H});
    s.options.push_back({"--dtype", "T", "f32 | f16 | bf16 | q8 | q4 | q2 (default f32)",
                         "one of f32, f16, bf16, q8, q4, q2", false, W});
    s.options.push_back({"--group-size", "G", "quantization group: 32, 64 or 128 (default 32)",
                         "one of 32, 64, 128", false, W});
    s.options.push_back({"--seed", "S", "random seed, 0..2^64-1 (default 1)",
                         "an integer in [0, 2^64-1]", false, W});
    for (auto& o : common_options()) s.options.push_back(o);
    s.notes =
        "--json prints one object: path, file_bytes, parameter_count, dtype, group_size, seed,\n"
        "hparams. --backend and --threads are accepted for uniformity and unused.\n";
    return s;
}

int run_make_random(const Args& args) {
    const std::string out = args.single_positional("OUT");
    HParams hp;
    for (const auto& f : kIntFlags) hp.*f.field = args.get_int(f.flag, f.lo, f.hi).value_or(f.def);

    if (auto li = args.value("--loop-input")) {
        if (*li != "none" && *li != "add") throw UsageError("--loop-input: expected one of none, add, got '" + *li + "'");
        hp.loop_input = parse_loop_input(*li);
    }
    DType dtype = DType::F32;
    if (auto d = args.value("--dtype")) {
        if (*d != "f32" && *d != "f16" && *d != "bf16" && *d != "q8" && *d != "q4" && *d != "q2")
            throw UsageError("--dtype: expected one of f32, f16, bf16, q8, q4, q2, got '" + *d + "'");
        dtype = parse_dtype(*d);
    }
    const int group = args.get_int("--group-size", 1, 1 << 20).value_or(32);
    if (group != 32 && group != 64 && group != 128)
        throw UsageError("--group-size: expected one of 32, 64, 128, got '" +
                         *args.value("--group-size") + "'");
    const uint64_t seed = args.get_u64("--seed").value_or(1);
    load_options(args);  // validates --backend / --threads even though nothing is loaded

    // Refuse sizes that would only end in an out-of-memory kill.
    const uint64_t d = static_cast<uint64_t>(hp.d_model), q = uint64_t(hp.n_heads) * hp.head_dim,
                   kv = uint64_t(hp.n_kv_heads) * hp.head_dim, ff = static_cast<uint64_t>(hp.d_ff);
    const uint64_t per_block = d * q * 2 + d * kv * 2 + d * ff * 3 + 2 * d;
    const uint64_t estimate = uint64_t(hp.vocab_size) * d * (hp.tie_embeddings ? 1 : 2) +
                              uint64_t(hp.n_pre_blocks + hp.n_loop_layers) * per_block + d;
    if (estimate > kMaxParameters)
        throw UsageError("the model would have " + grouped(estimate) +
                         " parameters; make-random writes at most " + grouped(kMaxParameters));

    ModelSpec spec = random_model_spec(hp, seed, dtype, group);
    save_model(out, spec);

    uint64_t params = 0;
    for (const auto& t : spec.tensors) {
        uint64_t n = 1;
        for (int64_t x : t.shape) n *= static_cast<uint64_t>(x > 0 ? x : 0);
        params += n;
    }
    std::error_code ec;
    const uint64_t bytes = std::filesystem::file_size(out, ec);

    if (args.has("--json")) {
        print_json({{"path", out},
                    {"file_bytes", ec ? 0 : bytes},
                    {"parameter_count", params},
                    {"dtype", dtype_name(dtype)},
                    {"group_size", group},
                    {"seed", seed},
                    {"hparams", hparams_json(spec.hparams)}});
        return 0;
    }
    std::printf("wrote %s: %s parameters, %s, %s\n", out.c_str(), grouped(params).c_str(),
                dtype_name(dtype), human_bytes(ec ? 0 : bytes).c_str());
    return 0;
}

}  // namespace tinyloop::cli
