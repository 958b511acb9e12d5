// The command table, `tinyloop --help`, and app/cli/CLI.md as Markdown built from the same
// help texts (`tinyloop help --markdown > app/cli/CLI.md`; the CTest test
// cli.reference_up_to_date fails when the file and the program disagree).
#include <string>
#include <vector>

#include "commands.h"

namespace tinyloop::cli {

const std::vector<CommandEntry>& command_table() {
    static const std::vector<CommandEntry> table = {
        {"info", info_spec, run_info, "hyperparameters, dtypes, tokenizer, metadata, memory"},
        {"generate", generate_spec, run_generate,
         "generate a continuation: greedy, sample, beam, speculative, tree, draft model"},
        {"score", score_spec, run_score,
         "per-token log-probabilities, perplexity, uncertainty, escalation, early exit"},
        {"lens", lens_spec, run_lens, "logit lens: the prediction at every loop depth, token x depth"},
        {"depths", depths_spec, run_depths, "answer one prompt at several loop depths from one prefill"},
        {"reuse", reuse_spec, run_reuse, "answer prompts that share prefixes through a prefix pool"},
        {"recommend", recommend_spec, run_recommend,
         "find the model's recommended early-exit and speculation settings and store them in its file"},
        {"bench", bench_spec, run_bench,
         "prefill/decode tok/s, GB/s, speedups of early exit and speculation"},
        {"quantize", quantize_spec, run_quantize, "re-write a model as f16, q8, q4 or q2"},
        {"import", import_spec, run_import,
         "write a Hugging Face folder of Ouro or Huginn-0125 as a .tinyloop file"},
        {"export-gguf", export_gguf_spec, run_export_gguf,
         "unroll a model to a llama GGUF for llama.cpp, Ollama, LM Studio"},
        {"serve", serve_spec, nullptr, "OpenAI-compatible HTTP server (Python, over the binding)"},
        {"make-random", make_random_spec, run_make_random,
         "write a model with random weights (tests, demos)"},
    };
    return table;
}

std::string usage_text() {
    std::string s =
        "usage: tinyloop COMMAND [options]\n"
        "       tinyloop COMMAND --help\n"
        "       tinyloop help [COMMAND | --markdown]\n"
        "       tinyloop --version\n\n"
        "TinyLoop runs weight-shared looped transformers (.tinyloop files).\n\nCommands:\n";
    for (const auto& c : command_table()) {
        const std::string name = c.name;
        s += "  " + name + std::string(14 - name.size(), ' ') + c.summary + "\n";
    }
    s += "\n"
         "Every command takes --json (one JSON object on stdout), --backend cpu|cuda|auto and\n"
         "--threads N (1..256; all cores when not given; bench takes a list). serve passes its\n"
         "arguments to the server. A mistake prints one line 'tinyloop COMMAND: message' on\n"
         "stderr, naming the flag and its allowed values, and exits with status 2; Ctrl-C during\n"
         "generate exits 130. 'tinyloop help --markdown' prints this text and every command's\n"
         "--help as Markdown (app/cli/CLI.md).\n"
         "\n"
         "MODEL is a .tinyloop file or a Hugging Face checkpoint folder of Ouro or Huginn-0125:\n"
         "a folder is imported once (as 'tinyloop import', bf16) into the import cache\n"
         "$TINYLOOP_IMPORT_CACHE (else $XDG_CACHE_HOME/tinyloop/imports, else\n"
         "~/.cache/tinyloop/imports) and read from there while it is unchanged.\n"
         "\n"
         "Examples:\n"
         "  tinyloop generate model.tinyloop --prompt \"In the beginning\" --max-tokens 64\n"
         "  tinyloop generate model.tinyloop --prompt \"Q: \" --mode tree --branches 2 --json\n"
         "  tinyloop generate model-f32.tinyloop --prompt \"And God said\" \\\n"
         "      --draft-model model-q4.tinyloop --gamma 4\n"
         "  tinyloop generate model.tinyloop --prompt \"Answer: \" \\\n"
         "      --grammar resources/grammars/answer.gbnf\n"
         "  tinyloop lens model.tinyloop --text \"And God said, Let there be light\"\n"
         "  tinyloop score model.tinyloop --file chapter.txt --escalate 2,4,8 --signal margin\n"
         "  tinyloop quantize model.tinyloop model-q4.tinyloop --dtype q4 --group-size 64\n"
         "  tinyloop export-gguf model.tinyloop model.gguf --loops 6 --dtype q8_0\n"
         "  tinyloop bench --random d_model=512,n_heads=8,d_ff=1408,vocab=4096,loops=7 \\\n"
         "      --dtypes f32,q8,q4 --threads 1,2 --modes plain,early-exit,speculative,tree\n"
         "  tinyloop serve model.tinyloop --port 8080\n";
    return s;
}

std::string reference_markdown() {
    std::string md =
        "# The `tinyloop` command line\n"
        "\n"
        "`tinyloop COMMAND [options]` drives the engine from a shell: scripts, benchmarks, tests\n"
        "and users without a display. This file is generated from the program's own help texts\n"
        "(`tinyloop help --markdown > app/cli/CLI.md`, source in `app/cli/`); the CTest test\n"
        "`cli.reference_up_to_date` fails when the two differ. Each section below is exactly\n"
        "what `tinyloop COMMAND --help` prints.\n"
        "\n"
        "## `tinyloop --help`\n"
        "\n"
        "```text\n" +
        usage_text() + "```\n";
    for (const auto& c : command_table())
        md += "\n## `tinyloop " + std::string(c.name) + "`\n\n```text\n" + help_text(c.spec()) +
              "```\n";
    return md;
}

}  // namespace tinyloop::cli
