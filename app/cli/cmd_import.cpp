// tinyloop import HF_DIR OUT [--dtype ...] [--loops N]: a Hugging Face checkpoint folder of a
// published looped model (Ouro, Huginn-0125) written as a .tinyloop file (import_hf_checkpoint).
// A progress bar on a terminal, one line per tenth of the work otherwise.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "common.h"

namespace tinyloop::cli {

CommandSpec import_spec() {
    CommandSpec s;
    s.name = "import";
    s.synopsis = "HF_DIR OUT [--dtype bf16|f32|f16|q8|q4] [--group-size 32|64|128] [--loops N] [--state-init model|zeros] [--json]";
    s.summary =
        "Writes OUT (a version-3 .tinyloop file) from the Hugging Face folder HF_DIR of a published\n"
        "looped model: OuroForCausalLM (Ouro-1.4B/2.6B) or RavenForCausalLM (Huginn-0125). Reads\n"
        "config.json, model.safetensors or the shards of model.safetensors.index.json (BF16, F16,\n"
        "F32; memory-mapped, converted one tensor at a time), tokenizer.json, tokenizer_config.json\n"
        "(chat template) and generation_config.json (into metadata). Every config field and tensor\n"
        "is mapped, checked or refused by name (exit 2): nothing is silently ignored. Huginn's\n"
        "interleaved RoPE is turned into the half-split form by permuting the rows of wq/wk (and\n"
        "bq/bk), which leaves q.k unchanged; its fused Wqkv and fc are split. An existing OUT is\n"
        "replaced.";
    const std::string G = "Import";
    s.options = {
        {"--dtype", "T", "stored matrix dtype: bf16 (default, exact to a bf16 checkpoint), f32, f16, q8, q4",
         "one of bf16, f32, f16, q8, q4", false, G},
        {"--group-size", "G", "q8/q4 values per quantization group: 32, 64 or 128 (default 32)", "one of 32, 64, 128",
         false, G},
        {"--loops", "N", "default loop count of the file (default: total_ut_steps / mean_recurrence)",
         "an integer in 1..1024", false, G},
        {"--state-init", "S", "Huginn's initial state: model (its seeded truncated normal, default) or zeros",
         "one of model, zeros", false, G},
    };
    for (auto& o : common_options()) s.options.push_back(o);
    s.notes =
        "--json prints one object: input, output, source_architecture, architecture, dtype, tensors,\n"
        "file_bytes, largest_tensor_bytes, seconds. --threads is the number of threads that quantize\n"
        "q8/q4 (default: all cores; the file is the same bytes for any count); --backend is accepted\n"
        "for uniformity and unused.\n";
    return s;
}

namespace {

// A bar redrawn in place on a terminal; on a pipe, a line at every tenth.
class Progress {
public:
    Progress() : tty_(::isatty(STDERR_FILENO) == 1) {}
    void operator()(const ImportProgress& p) {
        const double f = p.bytes_total ? double(p.bytes_done) / double(p.bytes_total) : 1.0;
        if (tty_) {
            const int w = 30, fill = static_cast<int>(f * w + 0.5);
            std::fprintf(stderr, "\r[%s%s] %3d%% %d/%d %-32.32s", std::string(fill, '#').c_str(),
                         std::string(w - fill, ' ').c_str(), static_cast<int>(f * 100 + 0.5), p.index, p.count,
                         p.name.c_str());
            if (p.index == p.count) std::fputc('\n', stderr);
        } else {
            const int tenth = static_cast<int>(f * 10);
            if ((tenth > last_tenth_ && tenth < 10) || p.index == p.count) {
                last_tenth_ = tenth;
                std::fprintf(stderr, "import: %3d%% (%d/%d tensors)\n", static_cast<int>(f * 100 + 0.5), p.index, p.count);
            }
        }
        std::fflush(stderr);
    }

private:
    bool tty_;
    int last_tenth_ = -1;
};

}  // namespace

int run_import(const Args& args) {
    const auto [in, out] = in_out_positionals(args, "HF_DIR");
    ImportOptions o;
    if (auto d = args.value("--dtype")) {
        if (*d != "bf16" && *d != "f32" && *d != "f16" && *d != "q8" && *d != "q4")
            throw UsageError("--dtype: expected one of bf16, f32, f16, q8, q4, got '" + *d + "'");
        o.dtype = *d;
    }
    o.group_size = args.get_int("--group-size", 1, 1 << 20).value_or(32);
    if (o.group_size != 32 && o.group_size != 64 && o.group_size != 128)
        throw UsageError("--group-size: expected one of 32, 64, 128, got '" + *args.value("--group-size") + "'");
    o.loops = args.get_int("--loops", 1, 1024).value_or(0);
    if (auto s = args.value("--state-init")) {
        if (*s != "model" && *s != "zeros") throw UsageError("--state-init: expected model or zeros, got '" + *s + "'");
        o.state_init = *s;
    }
    o.threads = load_options(args).threads;  // --backend is validated and unused
    std::error_code ec;
    if (!std::filesystem::is_directory(in, ec)) throw UsageError("HF_DIR '" + in + "' is not a folder");
    check_output_path(in, out);
    const bool json = args.has("--json");
    Progress bar;
    if (!json) o.progress = [&bar](const ImportProgress& p) { bar(p); };
    const auto t0 = std::chrono::steady_clock::now();
    const ImportReport r = import_hf_checkpoint(in, out, o);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (json) {
        print_json({{"input", in},
                    {"output", out},
                    {"source_architecture", r.source_architecture},
                    {"architecture", r.architecture},
                    {"dtype", o.dtype},
                    {"tensors", r.tensors},
                    {"file_bytes", r.file_bytes},
                    {"largest_tensor_bytes", r.largest_tensor_bytes},
                    {"seconds", secs}});
        return 0;
    }
    std::printf("wrote %s: %s, %s (%s bytes), %d tensors, %s, %.1f s\n", out.c_str(), r.source_architecture.c_str(),
                human_bytes(r.file_bytes).c_str(), grouped(r.file_bytes).c_str(), r.tensors, o.dtype.c_str(), secs);
    return 0;
}

}  // namespace tinyloop::cli
