#include "decode/emit.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "decode/early_exit.h"
#include "scoring/lens.h"

namespace tinyloop {

namespace {

// Whether the grammar's mask (none: everything) allows `id`.
bool allowed_by(const std::vector<char>* mask, int32_t id) {
    return !mask || (static_cast<size_t>(id) < mask->size() && (*mask)[static_cast<size_t>(id)]);
}

}  // namespace

GenerateResult prompt_result(const int32_t* prompt, int prompt_len, int max_tokens) {
    GenerateResult res;
    res.prompt_len = prompt_len;
    res.tokens.reserve(static_cast<size_t>(prompt_len) + static_cast<size_t>(std::max(0, max_tokens)));
    res.tokens.assign(prompt, prompt + prompt_len);
    res.stats.prompt_tokens = prompt_len;
    res.stats.stop_reason = StopReason::MAX_TOKENS;
    return res;
}

LogitsPipeline::LogitsPipeline(const Model& m, const GenerateConfig& config)
    : m_(m), c_(config), greedy_(is_greedy(config.temperature)) {}

void LogitsPipeline::process(const float* logits, const std::vector<int32_t>& context,
                             const std::vector<int32_t>& output, const std::vector<char>* mask,
                             std::vector<float>& z, const std::vector<float>* diversity) const {
    const int V = m_.hp.vocab_size;
    z.assign(logits, logits + V);
    apply_logit_bias(z.data(), V, c_.logit_bias);  // HF's sequence_bias comes first
    if (diversity)  // then HF's HammingDiversityLogitsProcessor
        for (int j = 0; j < V; ++j) z[static_cast<size_t>(j)] -= (*diversity)[static_cast<size_t>(j)];
    apply_repetition_penalty(z.data(), V, context, c_.repetition_penalty);
    apply_frequency_presence(z.data(), V, output, c_.frequency_penalty, c_.presence_penalty);
    ban_repeated_ngrams(z.data(), V, context, c_.no_repeat_ngram_size);
    ban_bad_words(z.data(), V, context, c_.bad_words);
    // Every stop id is an EOS here, as in HF's processors given a list of eos_token_id.
    const std::vector<int32_t>& stops = m_.tokenizer.stop_ids();
    const int emitted = static_cast<int>(output.size());
    const bool short_output = emitted < c_.min_new_tokens || static_cast<int>(context.size()) < c_.min_length;
    if (short_output)
        for (int32_t eos : stops)
            if (eos < V) z[static_cast<size_t>(eos)] = -std::numeric_limits<float>::infinity();
    // HF forces it at max_length - 1; a grammar that refuses it keeps its own mask.
    const int32_t forced = c_.forced_eos_token_id;
    if (forced >= 0 && emitted == c_.max_tokens - 1 && allowed_by(mask, forced)) force_token(z.data(), V, forced);
    if (const auto& decay = c_.exponential_decay_length_penalty)
        for (int32_t eos : stops) apply_length_decay(z.data(), V, eos, emitted, decay->first, decay->second);
    suppress_ids(z.data(), V, c_.suppress_tokens);
    if (emitted == 0) suppress_ids(z.data(), V, c_.begin_suppress_tokens);
    mask_undecodable(z.data(), V, m_.tokenizer.n_ids());
    if (mask)
        for (size_t j = 0; j < mask->size(); ++j)
            if (!(*mask)[j]) z[j] = -std::numeric_limits<float>::infinity();
}

std::vector<float> LogitsPipeline::probs(const std::vector<float>& z) const {
    return sampling_probs(z.data(), m_.hp.vocab_size, c_.temperature, c_.top_k, c_.top_p, c_.min_p,
                          {c_.typical_p, c_.epsilon_cutoff, c_.eta_cutoff});
}

TokenChoice LogitsPipeline::pick(const std::vector<float>& z, Rng& rng, std::vector<float>* probs_out) const {
    if (greedy_) return greedy_choice(m_, z.data());
    std::vector<float> p = probs(z);
    TokenChoice c;
    c.token = draw(p, rng);
    c.prob = p[static_cast<size_t>(c.token)];
    if (probs_out) *probs_out = std::move(p);
    return c;
}

TokenChoice greedy_choice(const Model& m, const float* logits) {
    const int V = m.hp.vocab_size;
    TokenChoice c;
    c.token = argmax(logits, std::min(V, m.tokenizer.n_ids()));  // never a masked id, even if all are NaN
    c.prob = softmax_prob(logits, V, c.token);
    return c;
}

bool any_allowed(const std::vector<char>& mask) { return std::find(mask.begin(), mask.end(), 1) != mask.end(); }

GrammarGate::GrammarGate(const Grammar* g, const Tokenizer& tok) {
    if (!g) return;
    matcher_.emplace(*g, tok);
    matcher_->allowed(mask_);
}

bool GrammarGate::dead() const { return matcher_ && !any_allowed(mask_); }

bool GrammarGate::accept(int32_t tok) {
    if (!matcher_) return false;
    matcher_->accept(tok);
    matcher_->allowed(mask_);
    return !any_allowed(mask_);
}

bool GrammarGate::accept_known(int32_t tok, const std::vector<char>& next) {
    if (!matcher_) return false;
    matcher_->accept(tok);
    mask_ = next;
    return !any_allowed(mask_);
}

StopPolicy StopPolicy::from(const GenerateConfig& c) {
    return StopPolicy{c.max_tokens, c.ignore_eos, c.stop_sequences, c.stop_strings, c.max_time};
}

TokenEmitter::TokenEmitter(const Model& m, GenerateResult& res, StopPolicy policy, const GenerateTokenCallback& on_token,
                           const TokenObserver& observer, int lens_top_k, Clock::time_point t0)
    : m_(m), res_(res), policy_(std::move(policy)), on_token_(on_token), observer_(observer), lens_top_k_(lens_top_k),
      t0_(t0), text_(m, policy_.stop_strings) {}

std::optional<StopReason> StopPolicy::token_stop(int32_t tok, const Tokenizer& tokenizer, bool grammar_at_end,
                                                 const std::vector<int32_t>& emitted) const {
    if (tokenizer.is_stop(tok) && (!ignore_eos || grammar_at_end)) return StopReason::EOS;
    if (tail_matches(emitted, stop_sequences)) return StopReason::STOP_SEQUENCE;
    return std::nullopt;
}

std::optional<StopReason> TokenEmitter::stop_reason(int32_t tok, const EmitInfo& info, bool stop_string_hit) const {
    const StopPolicy& p = policy_;
    if (auto why = p.token_stop(tok, m_.tokenizer, info.grammar_at_end, emitted_)) return why;
    if (stop_string_hit) return StopReason::STOP_STRING;
    if (static_cast<int>(emitted_.size()) == p.max_tokens) return StopReason::MAX_TOKENS;
    if (info.dead_end) return StopReason::GRAMMAR_DEAD_END;
    if (p.max_time > 0 && ms_since(t0_) >= p.max_time * 1000.0) return StopReason::MAX_TIME;
    return std::nullopt;
}

TokenEvent TokenEmitter::event(int32_t tok, int position, const EmitInfo& info, bool final_piece) {
    TokenEvent ev;
    ev.token = tok;
    ev.position = position;
    ev.index = static_cast<int>(emitted_.size()) - 1;
    ev.piece = text_.take(final_piece);
    ev.depth = info.depth;
    ev.prob = info.prob;
    ev.cycle = info.cycle;
    if (info.drafted) ev.drafted = *info.drafted;
    ev.accepted = info.accepted;
    ev.from_verifier = info.from_verifier;
    if (info.exit_gate) info.exit_gate->to_event(ev.exit_gate, ev.exit_gate_cdf);
    if (lens_top_k_ > 0 && info.lens_states) {
        const int V = m_.hp.vocab_size, d = m_.hp.d_model;
        lens_logits_.resize(static_cast<size_t>(V));
        for (int l = 1; l <= info.depth; ++l) {
            compute_logits(m_, info.lens_states + static_cast<size_t>(l - 1) * d, 1, lens_logits_.data(), ws_);
            ev.lens.push_back(lens_entry(lens_logits_.data(), V, l, lens_top_k_, tok));
        }
    }
    return ev;
}

bool TokenEmitter::emit(int32_t tok, const EmitInfo& info) {
    GenerateStats& st = res_.stats;
    const int position = static_cast<int>(res_.tokens.size());
    res_.tokens.push_back(tok);
    emitted_.push_back(tok);
    st.tokens_emitted = static_cast<int>(emitted_.size());
    st.depth_per_token.push_back(info.depth);
    depth_sum_ += info.depth;
    if (st.tokens_emitted == 1) {
        t_first_ = Clock::now();
        st.first_token_ms = ms_since(t0_);
    }
    const bool stop_hit = text_.push(tok);
    const std::optional<StopReason> why = stop_reason(tok, info, stop_hit);
    if (why) st.stop_reason = *why;
    bool keep = true;
    if (on_token_) keep = on_token_(tok, position);
    if (observer_) keep = observer_(event(tok, position, info, why.has_value())) && keep;
    if (why) return false;
    if (!keep) {
        st.stop_reason = StopReason::CALLBACK_ABORT;
        return false;
    }
    return true;
}

void TokenEmitter::finish(int loops) {
    GenerateStats& st = res_.stats;
    if (st.tokens_emitted > 0) {
        st.decode_ms = ms_since(t_first_);
        st.loops_used = static_cast<int>((depth_sum_ + st.tokens_emitted / 2) / st.tokens_emitted);
    } else {
        st.loops_used = loops;
    }
    res_.text = text_.text();
    st.total_ms = ms_since(t0_);
}

TokenDecoder::TokenDecoder(const Model& m, const GenerateConfig& config, GenerateResult& res,
                           const GenerateTokenCallback& on_token, const TokenObserver& observer, int lens_top_k,
                           TokenEmitter::Clock::time_point t0)
    : pipeline(m, config), grammar(config.grammar, m.tokenizer),
      out(m, res, StopPolicy::from(config), on_token, observer, lens_top_k, t0), rng(config.sample_seed), res_(res) {}

bool TokenDecoder::step(const float* logits, EmitInfo info) {
    pipeline.process(logits, res_.tokens, out.emitted(), grammar.mask(), z_);
    const TokenChoice c = pipeline.pick(z_, rng);
    info.prob = c.prob;
    info.dead_end = grammar.accept(c.token);
    info.grammar_at_end = grammar.at_end();
    return out.emit(c.token, info);
}

}  // namespace tinyloop
