// The one per-token path of every decode mode: the logits pipeline (LogitsPipeline), the
// grammar's gate (GrammarGate) and the emitter (TokenEmitter: result, stats, stop order,
// callbacks, TokenEvent). Plain decoding and the batch engine run all three through
// TokenDecoder::step; the speculative modes and beam search choose their tokens their own way
// (draft / verify / accept, or the beam) and report every token through a TokenEmitter, so
// the stop order is decided in one place (TokenEmitter::stop_reason).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "forward/forward.h"
#include "grammar/grammar.h"
#include "decode/sampling.h"
#include "decode/stop.h"

namespace tinyloop {

// Milliseconds since t: every decode mode's timings (prefill, draft, verify, total).
inline double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

struct GateTrace;

// A result holding the prompt and nothing emitted yet (stop reason MAX_TOKENS until a rule says
// otherwise), with room for max_tokens more tokens.
GenerateResult prompt_result(const int32_t* prompt, int prompt_len, int max_tokens);

// A token and its probability under the distribution it was chosen from.
struct TokenChoice {
    int32_t token = 0;
    float prob = 0;
};

// The logits pipeline of one sequence, in Hugging Face's order: logit bias (HF's sequence_bias),
// repetition penalty over the context (prompt + output), frequency / presence penalties over the
// output (OpenAI's; HF has none), n-gram and bad-word bans over the context, EOS banned while the
// output is shorter than min_new_tokens or the context than min_length, forced_eos_token_id as the
// last allowed new token, the exponential decay length penalty on EOS, suppress_tokens,
// begin_suppress_tokens at the first new token, the undecodable-id mask, the grammar's mask; then
// the choice: greedy argmax (never a masked id) or a draw from the sampling distribution (HF's
// warpers: temperature, top-k, top-p, min-p, typical-p, epsilon, eta). `config` must outlive the
// pipeline.
class LogitsPipeline {
public:
    LogitsPipeline(const Model& m, const GenerateConfig& config);
    bool greedy() const { return greedy_; }
    // z = `logits` after every processor; `mask` (optional) is the grammar's allowed set;
    // `diversity` (optional, group beam search) one amount per id, subtracted after the logit bias.
    void process(const float* logits, const std::vector<int32_t>& context, const std::vector<int32_t>& output,
                 const std::vector<char>* mask, std::vector<float>& z,
                 const std::vector<float>* diversity = nullptr) const;
    // The distribution a sampler draws from (temperature, top-k, top-p, min-p, typical-p, epsilon,
    // eta); sampling only.
    std::vector<float> probs(const std::vector<float>& z) const;
    // Chooses from processed logits: greedy argmax, or a draw from probs(z) (which `probs_out`,
    // when given, receives).
    TokenChoice pick(const std::vector<float>& z, Rng& rng, std::vector<float>* probs_out = nullptr) const;

private:
    const Model& m_;
    const GenerateConfig& c_;
    bool greedy_;
};

// Greedy argmax over the decodable ids, with its softmax probability.
TokenChoice greedy_choice(const Model& m, const float* logits);

// The grammar side of one sequence: the matcher and the ids it allows next. Inactive (every
// call a no-op) without a grammar.
class GrammarGate {
public:
    GrammarGate(const Grammar* g, const Tokenizer& tok);
    bool active() const { return matcher_.has_value(); }
    // The ids allowed next (nullptr without a grammar).
    const std::vector<char>* mask() const { return matcher_ ? &mask_ : nullptr; }
    // Nothing is allowed next.
    bool dead() const;
    // Takes an emitted token and computes what may follow; returns true when nothing may.
    bool accept(int32_t tok);
    // Takes a token whose following mask is known already (computed on a copy of the matcher).
    bool accept_known(int32_t tok, const std::vector<char>& next);
    // The grammar can take nothing more (EOS then ends the output even under ignore_eos).
    bool at_end() const { return matcher_ && matcher_->at_end(); }
    const GrammarMatcher* matcher() const { return matcher_ ? &*matcher_ : nullptr; }

private:
    std::optional<GrammarMatcher> matcher_;
    std::vector<char> mask_;
};

bool any_allowed(const std::vector<char>& mask);

// The stop rules a mode applies to what it emits. Checked in this order after every token:
// EOS (unless ignore_eos, and then still when the grammar is complete), a stop sequence, a stop
// string, max_tokens, a grammar dead end, max_time; then a callback's abort.
struct StopPolicy {
    int max_tokens = 0;
    bool ignore_eos = false;
    std::vector<std::vector<int32_t>> stop_sequences;
    std::vector<std::string> stop_strings;
    double max_time = 0.0;  // seconds since t0; 0 = no limit
    static StopPolicy from(const GenerateConfig& c);
    // The rules on the token itself, first in the order: EOS (any of the tokenizer's stop ids:
    // eos_id and the file's stop_ids), then a stop sequence that `emitted` (ending with tok)
    // ends with. Beam search ends its hypotheses by them.
    std::optional<StopReason> token_stop(int32_t tok, const Tokenizer& tokenizer, bool grammar_at_end,
                                         const std::vector<int32_t>& emitted) const;
};

// What a mode knows about an emitted token besides its id.
struct EmitInfo {
    float prob = 0;
    int depth = 0;                         // loop depth the token used
    bool dead_end = false;                 // a grammar allows nothing after it
    bool grammar_at_end = false;           // the grammar is complete (EOS stops under ignore_eos)
    const float* lens_states = nullptr;    // [depth, d] states for the event's lens rows
    const GateTrace* exit_gate = nullptr;  // the exit gate of the row behind the token (early_exit.h)
    // Speculative modes (TokenEvent's fields of the same names).
    int cycle = -1;
    const std::vector<int32_t>* drafted = nullptr;
    int accepted = 0;
    bool from_verifier = false;
};

// Reports the tokens of one sequence: appends them to the result, keeps the stats, applies the
// stop policy and calls the callback and the observer (with the event's text piece and lens).
class TokenEmitter {
public:
    using Clock = std::chrono::steady_clock;
    // `on_token` / `observer` may be empty; they and `res` must outlive the emitter. lens_top_k
    // 0: no lens rows.
    TokenEmitter(const Model& m, GenerateResult& res, StopPolicy policy, const GenerateTokenCallback& on_token,
                 const TokenObserver& observer, int lens_top_k, Clock::time_point t0);
    // One token. Returns false when generation must stop (the result's stop reason says why).
    bool emit(int32_t tok, const EmitInfo& info);
    // The tokens emitted so far.
    const std::vector<int32_t>& emitted() const { return emitted_; }
    // The closing fields: decode_ms, loops_used (the mean depth, rounded; `loops` when nothing
    // was emitted), the text and total_ms (since t0).
    void finish(int loops);

private:
    // The stop order: why generation stops after `tok`, if it does.
    std::optional<StopReason> stop_reason(int32_t tok, const EmitInfo& info, bool stop_string_hit) const;
    TokenEvent event(int32_t tok, int position, const EmitInfo& info, bool final_piece);

    const Model& m_;
    GenerateResult& res_;
    StopPolicy policy_;
    const GenerateTokenCallback& on_token_;
    const TokenObserver& observer_;
    int lens_top_k_;
    Clock::time_point t0_, t_first_{};
    TextStream text_;
    std::vector<int32_t> emitted_;
    long long depth_sum_ = 0;
    Workspace ws_;
    std::vector<float> lens_logits_;
};

// The per-token body of plain decoding: logits pipeline -> choice -> grammar -> emitter. One per
// sequence (decode, each request of the batch engine, the first token of draft-model
// speculation). `config`, `res` and the callbacks must outlive it.
class TokenDecoder {
public:
    TokenDecoder(const Model& m, const GenerateConfig& config, GenerateResult& res,
                 const GenerateTokenCallback& on_token, const TokenObserver& observer, int lens_top_k,
                 TokenEmitter::Clock::time_point t0);
    // Chooses the next token from `logits` and emits it with `info` (the row's depth, lens
    // states, ...; the choice fills prob and the grammar fields). Returns false when the
    // sequence stops.
    bool step(const float* logits, EmitInfo info);

    LogitsPipeline pipeline;
    GrammarGate grammar;
    TokenEmitter out;
    Rng rng;

private:
    GenerateResult& res_;
    std::vector<float> z_;
};

}  // namespace tinyloop
