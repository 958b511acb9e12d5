// Quantization across depth, the data behind its view (no Qt): two files of the same model
// (e.g. f32 and q4) read the same tokens; at every depth and position, each one's logit lens
// (tinyloop::forward_lens_logits) and how far apart they are.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>

namespace tinyloop::analysis {

struct QuantData {
    std::string name_a, name_b;   // the two files
    std::vector<int32_t> tokens;
    std::vector<std::string> pieces;
    int n = 0;
    int loops = 0;
    // [depth-1][position], row-major:
    std::vector<float> p_final_a;   // A's probability of A's final-depth argmax at this depth
    std::vector<float> p_final_b;   // B's probability of B's final-depth argmax at this depth
    std::vector<int32_t> top1_a, top1_b;  // each model's argmax at this depth
    std::vector<float> kl;          // KL(A || B) of the two lens distributions, nats
    std::vector<float> max_abs_diff;  // max over the vocabulary of |logit_A - logit_B|
    size_t at(int depth, int position) const {
        return static_cast<size_t>(depth - 1) * n + static_cast<size_t>(position);
    }
    // Means over positions at one depth.
    double mean_kl(int depth) const;
    double mean_max_abs_diff(int depth) const;
    double mean_p_final_a(int depth) const;
    double mean_p_final_b(int depth) const;
    double top1_agreement(int depth) const;  // fraction of positions whose argmaxes agree
};

// Throws tinyloop::Error(InvalidArgument) naming the field when the two files are not the same
// model shape and tokenizer (vocab_size, d_model, layers, max_loops, merges, special tokens).
void check_same_model(const tinyloop::Model* a, const tinyloop::Model* b);

// The lens of both models over `tokens` at depth `loops` (0 = A's default; 1..max_loops).
QuantData compare_quantized(tinyloop::Model* a, tinyloop::Model* b, const std::vector<int32_t>& tokens, int loops = 0);

// KL(softmax(za) || softmax(zb)) in double.
double kl_logits(const float* za, const float* zb, int vocab);

nlohmann::json quant_json(const QuantData& q);

}  // namespace tinyloop::analysis
