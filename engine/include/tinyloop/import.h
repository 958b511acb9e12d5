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
};

struct ImportReport {
    std::string source_architecture;  // "OuroForCausalLM" or "RavenForCausalLM"
    std::string architecture;         // the file's hparams.architecture: "ouro", "huginn"
    int tensors = 0;                  // tensors written
    uint64_t file_bytes = 0;          // size of the output
    uint64_t largest_tensor_bytes = 0;  // the largest source tensor (f32 bytes while converted)
};

// Imports the checkpoint folder `hf_dir` into `out_path` (through out_path.tmp, removed on any
// failure). Throws Error naming the file and field on every refusal.
ImportReport import_hf_checkpoint(const std::string& hf_dir, const std::string& out_path,
                                  const ImportOptions& options = {});

}  // namespace tinyloop
