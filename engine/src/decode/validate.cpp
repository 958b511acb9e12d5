// Every rule a generation request must satisfy, with messages that name the field and the
// allowed range (the seed aborts on these; this runtime throws).
#include <algorithm>
#include <cmath>
#include <string>

#include "model/model.h"
#include "tinyloop/json.h"
#include "tinyloop/mode_rules.h"

namespace tinyloop {

void token_id_outside(const std::string& id, int vocab_size, const std::string& field) {
    throw Error(ErrorCode::InvalidArgument,
                field + ": token id " + id + " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
}

void check_token_id(int32_t id, int vocab_size, const std::string& field) {
    if (id < 0 || id >= vocab_size) token_id_outside(std::to_string(id), vocab_size, field);
}

void check_token_ids(const int32_t* ids, size_t n, int vocab_size, const std::string& field) {
    if (n > 0 && ids == nullptr) throw Error(ErrorCode::InvalidArgument, field + ": must not be null");
    for (size_t i = 0; i < n; ++i)
        if (ids[i] < 0 || ids[i] >= vocab_size) check_token_id(ids[i], vocab_size, field + "[" + std::to_string(i) + "]");
}

namespace {

[[noreturn]] void bad(const std::string& msg) { throw Error(ErrorCode::InvalidArgument, msg); }

std::string num(double x) {
    std::string s = std::to_string(x);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
}

void finite(const std::string& field, float x) {
    if (!std::isfinite(x)) bad(field + ": must be a finite number");
}

// Ids a ban lists, each in the vocabulary, and not all of it (nothing could be emitted).
void banned_ids(const std::string& field, const std::vector<int32_t>& ids, int vocab) {
    check_token_ids(ids.data(), ids.size(), vocab, field);
    std::vector<int32_t> distinct = ids;
    std::sort(distinct.begin(), distinct.end());
    if (std::unique(distinct.begin(), distinct.end()) - distinct.begin() >= vocab)
        bad(field + ": bans every id of the vocabulary [0, " + std::to_string(vocab) + ") (nothing could be emitted)");
}

// Hugging Face's sampling-side GenerationConfig knobs.
void validate_hf_sampling_fields(const GenerateConfig& c, const ConfigLimits& hp) {
    if (c.forced_eos_token_id < -1 || c.forced_eos_token_id >= hp.vocab_size)
        bad("forced_eos_token_id: " + std::to_string(c.forced_eos_token_id) + " is outside [0, " +
            std::to_string(hp.vocab_size) + ") (-1 disables)");
    if (c.forced_eos_token_id >= 0 &&
        std::find(c.suppress_tokens.begin(), c.suppress_tokens.end(), c.forced_eos_token_id) != c.suppress_tokens.end())
        bad("forced_eos_token_id: " + std::to_string(c.forced_eos_token_id) +
            " is also in suppress_tokens (nothing could be emitted as the last token)");
    if (const auto& d = c.exponential_decay_length_penalty) {
        if (d->first < 0 || d->first > hp.max_seq_len)
            bad("exponential_decay_length_penalty: start_index " + std::to_string(d->first) + " is outside [0, " +
                std::to_string(hp.max_seq_len) + "]");
        if (!std::isfinite(d->second) || d->second <= 0.0f || d->second > 10.0f)
            bad("exponential_decay_length_penalty: decay_factor " + num(d->second) + " is outside (0, 10] (1 = no effect)");
    }
    banned_ids("suppress_tokens", c.suppress_tokens, hp.vocab_size);
    banned_ids("begin_suppress_tokens", c.begin_suppress_tokens, hp.vocab_size);
    finite("typical_p", c.typical_p);
    if (!(c.typical_p > 0.0f && c.typical_p <= 1.0f)) bad("typical_p: " + num(c.typical_p) + " is outside (0, 1] (1 disables)");
    finite("epsilon_cutoff", c.epsilon_cutoff);
    if (!(c.epsilon_cutoff >= 0.0f && c.epsilon_cutoff < 1.0f))
        bad("epsilon_cutoff: " + num(c.epsilon_cutoff) + " is outside [0, 1) (0 disables)");
    finite("eta_cutoff", c.eta_cutoff);
    if (!(c.eta_cutoff >= 0.0f && c.eta_cutoff < 1.0f)) bad("eta_cutoff: " + num(c.eta_cutoff) + " is outside [0, 1) (0 disables)");
}

// num_return_sequences, num_beam_groups, diversity_penalty (after beam_size's own range).
void validate_several_outputs(const GenerateConfig& c) {
    const bool beam = c.beam_size >= 2;
    if (c.num_return_sequences < 1 || c.num_return_sequences > 64)
        bad("num_return_sequences: " + std::to_string(c.num_return_sequences) + " is outside [1, 64]");
    if (beam && c.num_return_sequences > c.beam_size)
        bad("num_return_sequences: " + std::to_string(c.num_return_sequences) + " is outside [1, beam_size = " +
            std::to_string(c.beam_size) + "] (beam search returns its best num_return_sequences hypotheses)");
    if (!beam && c.num_return_sequences > 1 && c.temperature <= 0.01f)
        bad("num_return_sequences: " + std::to_string(c.num_return_sequences) +
            " needs sampling (temperature > 0.01) or beam search (beam_size >= 2); greedy decoding has one output");
    if (c.num_beam_groups < 1 || c.num_beam_groups > 64)
        bad("num_beam_groups: " + std::to_string(c.num_beam_groups) + " is outside [1, 64] (1 = plain beam search)");
    if (c.num_beam_groups > 1 && !beam)
        bad("num_beam_groups: " + std::to_string(c.num_beam_groups) +
            " only applies to beam search; set beam_size >= 2 or leave num_beam_groups at 1");
    if (beam && c.beam_size % c.num_beam_groups != 0)
        bad("num_beam_groups: " + std::to_string(c.num_beam_groups) + " must divide beam_size " +
            std::to_string(c.beam_size) + " (each group holds beam_size / num_beam_groups beams)");
    finite("diversity_penalty", c.diversity_penalty);
    if (c.diversity_penalty < 0.0f || c.diversity_penalty > 100.0f)
        bad("diversity_penalty: " + num(c.diversity_penalty) + " is outside [0, 100] (0 disables)");
    if (c.diversity_penalty > 0.0f && c.num_beam_groups < 2)
        bad("diversity_penalty: " + num(c.diversity_penalty) +
            " needs num_beam_groups >= 2 (it penalises a group for the ids earlier groups chose)");
}

// force_words (HF's force_words_ids): beam only, not with groups; bounded counts and lengths;
// each alternative non-empty, in the vocabulary, and no alternative a prefix of another of its
// entry (HF's DisjunctiveConstraint refuses those too).
void validate_force_words(const GenerateConfig& c, const ConfigLimits& hp) {
    constexpr size_t kMaxWords = 16, kMaxAlternatives = 64, kMaxWordTokens = 64;
    if (c.force_words.empty()) return;
    if (c.beam_size < 2)
        bad("force_words: constrained beam search needs beam_size >= 2 (it is " + std::to_string(c.beam_size) +
            "); leave force_words empty otherwise");
    if (c.num_beam_groups > 1)
        bad("force_words: cannot be combined with num_beam_groups " + std::to_string(c.num_beam_groups) +
            " (constrained beam search has one group, as in Hugging Face); set num_beam_groups to 1");
    if (c.force_words.size() > kMaxWords)
        bad("force_words: " + std::to_string(c.force_words.size()) + " entries is outside [0, " + std::to_string(kMaxWords) + "]");
    for (size_t i = 0; i < c.force_words.size(); ++i) {
        const auto& alts = c.force_words[i];
        const std::string f = "force_words[" + std::to_string(i) + "]";
        if (alts.empty()) bad(f + ": must not be empty");
        if (alts.size() > kMaxAlternatives)
            bad(f + ": " + std::to_string(alts.size()) + " alternatives is outside [1, " + std::to_string(kMaxAlternatives) + "]");
        for (size_t a = 0; a < alts.size(); ++a) {
            const auto& w = alts[a];
            const std::string fa = alts.size() == 1 ? f : f + "[" + std::to_string(a) + "]";
            if (w.empty()) bad(fa + ": must not be empty");
            if (w.size() > kMaxWordTokens)
                bad(fa + ": " + std::to_string(w.size()) + " tokens is outside [1, " + std::to_string(kMaxWordTokens) + "]");
            check_token_ids(w.data(), w.size(), hp.vocab_size, fa);
            for (size_t b = 0; b < alts.size(); ++b)
                if (b != a && alts[b].size() >= w.size() && std::equal(w.begin(), w.end(), alts[b].begin()))
                    bad(fa + ": is " + (alts[b].size() == w.size() ? "the same as" : "a prefix of") + " alternative " +
                        std::to_string(b) + " (each alternative must end where no other continues)");
        }
    }
}

}  // namespace

ConfigLimits config_limits(const Model* model) {
    const Model& m = checked(model);
    return {.max_loops = m.hp.max_loops, .max_seq_len = m.max_seq_len, .vocab_size = m.hp.vocab_size};
}

void validate_config(const Model* model, int prompt_len, const GenerateConfig& c) {
    const Model& m = checked(model);
    if (prompt_len < 1) bad("prompt_len: " + std::to_string(prompt_len) + " must be >= 1 (an empty prompt cannot be decoded)");
    if (c.max_tokens < 0) bad("max_tokens: " + std::to_string(c.max_tokens) + " must be >= 0");
    if (static_cast<long long>(prompt_len) + c.max_tokens > m.max_seq_len)
        bad("max_tokens: prompt_len + max_tokens = " + std::to_string(static_cast<long long>(prompt_len) + c.max_tokens) +
            " exceeds max_seq_len " + std::to_string(m.max_seq_len) + " (prompt_len " + std::to_string(prompt_len) +
            ", so max_tokens must be in [0, " + std::to_string(std::max(0, m.max_seq_len - prompt_len)) + "])");
    if (c.loops < 0 || c.loops > m.hp.max_loops)
        bad("loops: " + std::to_string(c.loops) + " is outside [1, " + std::to_string(m.hp.max_loops) +
            "] (0 = the model's default_loops, " + std::to_string(m.hp.default_loops) + ")");
    validate_config_fields(c, config_limits(model));
    if (c.early_exit.patience > 0 && c.early_exit.logit_margin <= 0 && is_gate_criterion(c.early_exit.criterion) &&
        !m.hp.exit_gate)
        bad(std::string("early_exit_criterion: ") + criterion_name(c.early_exit.criterion) +
            " needs a model with an exit gate (hparams.exit_gate is false; FORMAT.md §1b)");
    for (size_t i = 0; i < c.force_words.size(); ++i)
        for (const auto& w : c.force_words[i])
            for (int32_t eos : m.tokenizer.stop_ids())
                if (std::find(w.begin(), w.end(), eos) != w.end())
                    bad("force_words[" + std::to_string(i) + "]: holds the model's EOS id " + std::to_string(eos) +
                        " (a forced word cannot end the text; EOS ends a hypothesis on its own)");
}

void validate_config_fields(const GenerateConfig& c, const ConfigLimits& hp) {
    if (c.max_tokens < 0 || c.max_tokens > hp.max_seq_len)
        bad("max_tokens: " + std::to_string(c.max_tokens) + " is outside [0, " + std::to_string(hp.max_seq_len) + "] (max_seq_len)");
    if (c.loops < 0 || c.loops > hp.max_loops)
        bad("loops: " + std::to_string(c.loops) + " is outside [1, " + std::to_string(hp.max_loops) +
            "] (0 = the model's default_loops)");
    finite("temperature", c.temperature);
    if (c.temperature < 0) bad("temperature: " + num(c.temperature) + " must be >= 0 (0 = greedy)");
    if (!(c.temperature <= 0.01f) && c.top_k < 1)
        bad("top_k: " + std::to_string(c.top_k) + " must be >= 1 when sampling (temperature > 0.01)");
    finite("top_p", c.top_p);
    if (!(c.top_p > 0.0f && c.top_p <= 1.0f)) bad("top_p: " + num(c.top_p) + " is outside (0, 1] (1 disables)");
    finite("min_p", c.min_p);
    if (c.min_p < 0.0f || c.min_p > 1.0f) bad("min_p: " + num(c.min_p) + " is outside [0, 1] (0 disables)");
    if (c.cache_window < 0) bad("cache_window: " + std::to_string(c.cache_window) + " must be >= 0 (0 = unlimited)");
    finite("repetition_penalty", c.repetition_penalty);
    if (c.repetition_penalty <= 0.0f)
        bad("repetition_penalty: " + num(c.repetition_penalty) + " must be > 0 (1 disables)");
    finite("frequency_penalty", c.frequency_penalty);
    if (c.frequency_penalty < -2.0f || c.frequency_penalty > 2.0f)
        bad("frequency_penalty: " + num(c.frequency_penalty) + " is outside [-2, 2]");
    finite("presence_penalty", c.presence_penalty);
    if (c.presence_penalty < -2.0f || c.presence_penalty > 2.0f)
        bad("presence_penalty: " + num(c.presence_penalty) + " is outside [-2, 2]");
    for (size_t i = 0; i < c.logit_bias.size(); ++i) {
        const auto& [id, b] = c.logit_bias[i];
        const std::string f = "logit_bias[" + std::to_string(i) + "]";
        check_token_id(id, hp.vocab_size, f);
        if (!std::isfinite(b) || b < -100.0f || b > 100.0f) bad(f + ": bias " + num(b) + " is outside [-100, 100]");
    }
    for (size_t i = 0; i < c.stop_sequences.size(); ++i) {
        const auto& s = c.stop_sequences[i];
        const std::string f = "stop_sequences[" + std::to_string(i) + "]";
        if (s.empty()) bad(f + ": must not be empty");
        check_token_ids(s.data(), s.size(), hp.vocab_size, f);
    }
    for (size_t i = 0; i < c.stop_strings.size(); ++i)
        if (c.stop_strings[i].empty()) bad("stop_strings[" + std::to_string(i) + "]: must not be empty");

    if (!std::isfinite(c.max_time) || c.max_time < 0) bad("max_time: " + num(c.max_time) + " must be >= 0 seconds (0 = no limit)");
    if (c.no_repeat_ngram_size < 0) bad("no_repeat_ngram_size: " + std::to_string(c.no_repeat_ngram_size) + " must be >= 0 (0 disables)");
    for (size_t i = 0; i < c.bad_words.size(); ++i) {
        const auto& s = c.bad_words[i];
        const std::string f = "bad_words[" + std::to_string(i) + "]";
        if (s.empty()) bad(f + ": must not be empty");
        check_token_ids(s.data(), s.size(), hp.vocab_size, f);
    }

    if (c.min_new_tokens < 0 || c.min_new_tokens > hp.max_seq_len)
        bad("min_new_tokens: " + std::to_string(c.min_new_tokens) + " is outside [0, " + std::to_string(hp.max_seq_len) + "] (0 disables)");
    if (c.min_length < 0 || c.min_length > hp.max_seq_len)
        bad("min_length: " + std::to_string(c.min_length) + " is outside [0, " + std::to_string(hp.max_seq_len) +
            "] (prompt + emitted tokens; 0 disables)");

    validate_hf_sampling_fields(c, hp);

    // Beam search knobs.
    const int stopping = static_cast<int>(c.early_stopping);
    if (stopping < 0 || stopping > 2)
        bad("early_stopping: " + std::to_string(stopping) + " is not one of false (0), true (1), never (2)");
    if (c.beam_size < 2 && c.early_stopping != EarlyStopping::Heuristic)
        bad("early_stopping: only applies to beam search; set beam_size >= 2 or leave early_stopping at false");
    if (c.beam_size < 2 && c.renormalize_logits)
        bad("renormalize_logits: only changes beam search (greedy and sampled choices do not depend on it); "
            "set beam_size >= 2 or leave renormalize_logits off");
    if (c.beam_size < 0 || c.beam_size > 64) bad("beam_size: " + std::to_string(c.beam_size) + " is outside [0, 64]");
    if (c.kv_cache != KVCacheType::F32 && c.kv_cache != KVCacheType::Int8)
        bad("kv_cache: " + std::to_string(static_cast<int>(c.kv_cache)) + " is not one of f32 (0), int8 (1)");
    if (c.kv_sharing.mode == KVSharing::Mode::Compress && (c.kv_sharing.k < 1 || c.kv_sharing.k > 1024))
        bad("kv_sharing: compress-s" + std::to_string(c.kv_sharing.k) + ": k is outside [1, 1024]");
    if (c.beam_size >= 2 && !c.kv_sharing.exact())
        bad("kv_sharing: " + kv_sharing_name(c.kv_sharing) +
            " runs with plain decoding (greedy, sampling, early exit); beam search keeps per-pass (beam_size >= 2)");
    finite("length_penalty", c.length_penalty);
    if (c.beam_size < 2 && c.length_penalty != 1.0f)
        bad("length_penalty: " + num(c.length_penalty) +
            " only applies to beam search; set beam_size >= 2 or leave length_penalty at 1");
    validate_several_outputs(c);
    validate_force_words(c, hp);
    if (c.beam_size >= 2 && c.early_exit.patience > 0)
        bad("beam_size: beam search and early exit cannot be combined (set early_exit_patience to 0)");
    if (c.beam_size >= 2 && c.grammar != nullptr)
        bad("beam_size: beam search and a grammar cannot be combined yet (set grammar to null)");

    validate_early_exit(c.early_exit, hp.max_loops);
}

void validate_early_exit(const EarlyExitPolicy& p, int loops, const std::string& f) {
    if (p.patience < 0) bad(f + "patience: " + std::to_string(p.patience) + " must be >= 0 (0 disables)");
    if (p.min_L < 1 || p.min_L > loops)
        bad(f + "min_L: " + std::to_string(p.min_L) + " is outside [1, " + std::to_string(loops) + "]");
    if (p.peek_every < 1) bad(f + "peek_every: " + std::to_string(p.peek_every) + " must be >= 1");
    finite(f + "logit_margin", p.logit_margin);
    if (p.logit_margin < 0) bad(f + "logit_margin: " + num(p.logit_margin) + " must be >= 0");
    finite(f + "threshold", p.threshold);
    if (p.threshold <= 0) bad(f + "threshold: " + num(p.threshold) + " must be > 0");
    if (static_cast<int>(p.criterion) < 0 || static_cast<int>(p.criterion) > static_cast<int>(EarlyExitCriterion::MinPKL))
        bad(f + "criterion: " + std::to_string(static_cast<int>(p.criterion)) + " is not a criterion");
    // The gate's q is a cumulative probability (FORMAT.md, early exit): only (0, 1] can be reached.
    // Checked when the policy is on (a logit margin > 0 switches the criterion to logit_margin).
    if (p.patience > 0 && p.logit_margin <= 0 && is_gate_criterion(p.criterion) && p.threshold > 1)
        bad(f + "threshold: " + num(p.threshold) + " is outside (0, 1] (the " + criterion_name(p.criterion) +
            " criterion's cumulative exit probability q)");
}

}  // namespace tinyloop
