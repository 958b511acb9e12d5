// What an import writes: the file's hyperparameters and, for every output tensor, how its values
// are made from the checkpoint's tensors (a copy, a row slice of a fused matrix, the RoPE row
// permutation). Built from config.json and the safetensors headers before any weight is read,
// so every refusal comes before the output is opened.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "import/safetensors.h"
#include "tinyloop/tinyloop.h"

namespace tinyloop {

struct PlanTensor {
    std::string name;             // the .tinyloop tensor name (FORMAT.md §2)
    std::vector<int64_t> shape;   // [rows, cols], or [n] for a vector
    bool vector = false;          // norms, biases, the exit gate: always stored f32
    std::vector<const StTensor*> sources;
    std::function<void(float*)> fill;  // writes numel(shape) values
};

struct ImportPlan {
    std::string source_architecture;  // config.json architectures[0]
    std::string architecture;         // "ouro", "huginn"
    HParams hp;                       // with the version-3 fields (FORMAT.md §1b)
    std::vector<PlanTensor> tensors;  // in file order: expected_tensors(hp)
    nlohmann::ordered_json notes = nlohmann::ordered_json::object();  // fields read but without effect here, and why
};

// Maps config.json (already parsed; `config_path` names it in messages) and the checkpoint's
// tensors to a plan. Throws Error(BadFile) naming config.json's field or the safetensors file's
// tensor for anything it cannot map exactly.
ImportPlan plan_hf_import(const nlohmann::json& config, const std::string& config_path,
                          const SafetensorsSet& st, const ImportOptions& options);

}  // namespace tinyloop
