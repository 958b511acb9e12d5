// The pieces of the logits pipeline (LogitsPipeline in emit.h runs them in Hugging Face's order:
// logit bias, repetition penalty, frequency and presence penalties, bans, mask of ids the
// tokenizer cannot produce), then temperature, top-k, top-p, min-p and the draw.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "forward/backend.h"  // argmax, mask_undecodable (the host helpers the back ends share)
#include "tinyloop/tinyloop.h"

namespace tinyloop {

// Penalties and bias, in place. `context` is prompt + emitted (repetition penalty, as HF's
// input_ids); `emitted` the continuation so far (frequency/presence, as OpenAI's).
void apply_repetition_penalty(float* logits, int vocab, const std::vector<int32_t>& context, float penalty);
void apply_frequency_presence(float* logits, int vocab, const std::vector<int32_t>& emitted,
                              float frequency, float presence);
void apply_logit_bias(float* logits, int vocab, const std::vector<std::pair<int32_t, float>>& bias);
// Hugging Face's no_repeat_ngram_size: -inf for every token that would complete an n-gram
// already present in `context`.
void ban_repeated_ngrams(float* logits, int vocab, const std::vector<int32_t>& context, int n);
// Hugging Face's bad_words_ids: -inf for the last token of each sequence whose other tokens
// are the tail of `context` (single-token sequences always).
void ban_bad_words(float* logits, int vocab, const std::vector<int32_t>& context,
                   const std::vector<std::vector<int32_t>>& bad_words);
// Hugging Face's suppress_tokens / begin_suppress_tokens: -inf for each id in `ids`.
void suppress_ids(float* logits, int vocab, const std::vector<int32_t>& ids);
// Hugging Face's ForcedEOSTokenLogitsProcessor: every logit -inf but `forced`, which becomes 0.
void force_token(float* logits, int vocab, int32_t forced);
// Hugging Face's ExponentialDecayLengthPenalty once `emitted` > start_index: the EOS logit s
// becomes s + |s| * (factor^(emitted - start_index) - 1) (so a negative s also rises when
// factor > 1); a non-finite s is left alone; the result is capped at the float range.
void apply_length_decay(float* logits, int vocab, int32_t eos, int emitted, int start_index, float factor);

bool is_greedy(float temperature);  // temperature <= 0.01

// Hugging Face's last three sampling warpers, each on the distribution the ones before it left
// (min_tokens_to_keep 1: there is no beam sampling here). 1 / 0 / 0 disable them.
struct SamplingCutoffs {
    float typical_p = 1.0f;       // TypicalLogitsWarper(mass)
    float epsilon_cutoff = 0.0f;  // EpsilonLogitsWarper
    float eta_cutoff = 0.0f;      // EtaLogitsWarper
};

// The exact distribution the sampler draws from: softmax(logits / T) restricted by top-k, then
// top-p (keep the smallest prefix of the sorted tokens whose mass reaches top_p), then min-p
// (drop p < min_p * p_max), then typical-p, epsilon and eta (HF's order), renormalised. Zero
// mass on removed tokens. temperature > 0.
std::vector<float> sampling_probs(const float* logits, int vocab, float temperature, int top_k,
                                  float top_p, float min_p, const SamplingCutoffs& cutoffs = {});

// The warpers of SamplingCutoffs on weights `w` (any positive scale; 0 = removed), in place:
// a removed token's weight becomes 0. One token always stays (HF's min_tokens_to_keep 1: the most
// typical one for typical-p, the most probable one for epsilon and eta).
void keep_typical(std::vector<double>& w, double mass);
void keep_above_epsilon(std::vector<double>& w, double epsilon);
void keep_above_eta(std::vector<double>& w, double eta);

// Deterministic portable RNG: uniform double in [0, 1).
class Rng {
public:
    explicit Rng(uint64_t seed) : gen_(seed) {}
    double uniform() { return static_cast<double>(gen_() >> 11) * (1.0 / 9007199254740992.0); }

private:
    std::mt19937_64 gen_;
};

// Draws an index from probabilities (need not sum exactly to 1), scanning in index order.
int32_t draw(const std::vector<float>& probs, Rng& rng);

// softmax probability of `id` under plain logits (temperature 1).
float softmax_prob(const float* logits, int vocab, int32_t id);

}  // namespace tinyloop
