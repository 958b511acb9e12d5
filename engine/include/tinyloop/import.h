// TinyLoop public API, import: a Hugging Face checkpoint folder of a published looped model
// (OuroForCausalLM, RavenForCausalLM = Huginn-0125) written as a .tinyloop file (version 3).
// Part of tinyloop/tinyloop.h, which includes every part: include that one.
//
//   tinyloop::ImportOptions o;
//   o.dtype = "q4";
//   o.progress = [](const tinyloop::ImportProgress& p) { ... };  // once per tensor
//   tinyloop::ImportReport r = tinyloop::import_hf_checkpoint("Ouro-1.4B/", "ouro.tinyloop", o);
//
// The folder holds config.json, model.safetensors (or model.safetensors.index.json and its
// shards; BF16, F16 or F32), tokenizer.json, and optionally tokenizer_config.json and
// generation_config.json. Tensors are converted one at a time from memory-mapped shards, so the
// peak memory is about one tensor in f32 plus its encoded form, not the model.
// Every config field is either mapped, checked to have the value the math here implements, or
// refused by name; so is every tensor. Refusals throw Error(BadFile) "FILE: field: problem,
// allowed ...", Error(Io) when a file cannot be read or written.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

namespace tinyloop {

struct ImportProgress {
    int index = 0;             // tensors written so far (0 .. count)
    int count = 0;             // tensors in the output
    std::string name;          // the tensor just written ("" before the first)
    uint64_t bytes_done = 0;   // source bytes converted so far
    uint64_t bytes_total = 0;  // source bytes to convert
};

struct ImportOptions {
    // Stored dtype of every matrix: "bf16" (default: exact to a bf16 checkpoint), "f32", "f16",
    // "q8", "q4". Norm gains, biases and the exit gate stay f32.
    std::string dtype = "bf16";
    int group_size = 32;  // q8/q4: 32, 64 or 128, dividing every matrix's row length
    int loops = 0;        // default_loops; 0 = the checkpoint's (Ouro total_ut_steps, Huginn mean_recurrence); 1..1024
    // Huginn's initial state: "model" (its truncated-normal rule, seeded) or "zeros"
    // (the published code with init_scale=0).
    std::string state_init = "model";
    // Threads that quantize q8/q4 matrices (blocks of rows); 0 = all cores; 1..256. The output is
    // the same bytes for every count.
    int threads = 0;
    std::function<void(const ImportProgress&)> progress;  // called on the calling thread
    // Set (from any thread) to stop: the import stops before the next tensor, removes its partial
    // output and returns a report with cancelled = true (nothing is written at out_path).
    const std::atomic<bool>* cancel = nullptr;
};

struct ImportReport {
    std::string source_architecture;  // "OuroForCausalLM" or "RavenForCausalLM"
    std::string architecture;         // the file's hparams.architecture: "ouro", "huginn"
    int tensors = 0;                  // tensors written
    uint64_t file_bytes = 0;          // size of the output
    uint64_t largest_tensor_bytes = 0;  // the largest source tensor (f32 bytes while converted)
    bool cancelled = false;           // stopped through ImportOptions::cancel; nothing written
    bool cached = false;              // import_hf_cached: the cache already held this import
    std::string path;                 // the file written (or found in the cache)
};

// Imports the checkpoint folder `hf_dir` into `out_path` (through out_path.tmp, removed on any
// failure). Throws Error naming the file and field on every refusal.
ImportReport import_hf_checkpoint(const std::string& hf_dir, const std::string& out_path,
                                  const ImportOptions& options = {});

// The import cache: a folder opened again is not converted again (the workbench's File > Open,
// `tinyloop generate FOLDER`). An import is kept as
//   CACHE/<folder name>-<dtype>-<16 hex digits>.tinyloop
// where the digits hash the folder's absolute path, the name, size and modification time of each
// file in it, and the options that change the output's bytes (dtype, group_size, loops,
// state_init; not threads, which never do). Changing any source file or option is a new entry;
// a stale entry is never read. CACHE is `cache_dir` when given, else $TINYLOOP_IMPORT_CACHE, else
// $XDG_CACHE_HOME/tinyloop/imports, else $HOME/.cache/tinyloop/imports (created when needed).
std::string default_import_cache_dir();
std::string import_cache_path(const std::string& hf_dir, const ImportOptions& options = {},
                              const std::string& cache_dir = "");
// The cached file when there is one (report.cached = true, nothing converted; progress is not
// called), else import_hf_checkpoint into the cache (its refusals and cancel as there).
ImportReport import_hf_cached(const std::string& hf_dir, const ImportOptions& options = {},
                              const std::string& cache_dir = "");

}  // namespace tinyloop
