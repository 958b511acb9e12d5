// Reading and writing .tinyloop files (FORMAT.md §2, refusals of §4).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"

namespace tinyloop {

// Reads, validates and maps a file. Every refusal throws Error(BadFile) whose message starts
// with the path and names the field, e.g. "m.tinyloop: tensors.loop.0.wq.shape: expected
// [384, 384], got [384, 383]". Error(Io) when the file cannot be read.
std::unique_ptr<Model> read_model_file(const std::string& path);

// One tensor FORMAT.md §2 requires for a set of hyperparameters. expected_tensors lists them in
// the canonical file order: embed, pre.0.* … , loop.0.* … , final_norm, head (when untied);
// per block attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down. Shared with the writer.
struct ExpectedTensor {
    std::string name;
    std::vector<int64_t> shape;  // [rows, cols], or [d] for a norm
    bool is_norm = false;        // norm gains are always f32
};
std::vector<ExpectedTensor> expected_tensors(const HParams& hp);

// Empty when hp is valid; else the first problem as "hparams.<field>: <value>, allowed <range>".
// Bounds: vocab_size 256..2^20, d_model 1..65536, n_heads 1..4096, n_kv_heads divides n_heads,
// head_dim even 2..4096, n_heads*head_dim <= 2^18, d_ff 1..2^20, n_pre_blocks 0..1024,
// n_loop_layers 1..1024, max_loops 1..1024, default_loops 1..max_loops, max_seq_len 1..2^20,
// rope_theta finite > 0, norm_eps in (0, 1], loop_input none or add.
std::string hparams_problem(const HParams& hp);

// The version a file with these hyperparameters and tensor dtypes is written as (FORMAT.md §2,
// "version"): the highest any of its features requires, 1 when none. One line per reason:
// loop_input "add" needs 2, a §1b key away from its default, a bf16 tensor or an hf_byte_bpe tokenizer (§3b) needs 3. The
// writer stores exactly this, so files without the newer features stay byte-identical.
uint32_t required_version(const HParams& hp, const std::vector<DType>& tensor_dtypes,
                          const std::string& tokenizer_type = "");

// The header's "hparams" object as the writer stores it (version-1/2 keys always, each
// version-3 key only when away from its default), for writers that stream (the importer).
nlohmann::ordered_json hparams_json(const HParams& hp);

}  // namespace tinyloop
