// The progress of one hypothesis through GenerateConfig::force_words, step for step Hugging Face
// 4.x's ConstraintListState (generation/beam_constraints.py): the entries fulfilled, the one in
// progress and the ones still pending (in HF's order: an entry whose progress breaks goes back
// to the end of the pending list, and the token that broke it is not tried again). An entry of
// one alternative is HF's PhrasalConstraint, of several its DisjunctiveConstraint (a trie of the
// alternatives); both advance by the next tokens of an alternative that continues what the entry
// has matched, and are fulfilled when no alternative continues it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tinyloop::beam {

using ForcedWords = std::vector<std::vector<std::vector<int32_t>>>;  // GenerateConfig::force_words

struct WordProgress {
    int word = 0;                // index into force_words
    std::vector<int32_t> seq;    // the tokens of it matched so far
};

class ConstraintState {
public:
    explicit ConstraintState(const ForcedWords& words);

    // HF's reset(token_ids): from the start over `a` then `b` (stopping once every entry is fulfilled).
    void reset(const std::vector<int32_t>& a, const std::vector<int32_t>& b);
    // HF's add(token_id); returns whether an entry stepped forward.
    bool add(int32_t tok);
    // HF's advance(): the ids that make progress (none once every entry is fulfilled).
    std::vector<int32_t> advance() const;
    // HF's get_bank(): fulfilled entries x the longest entry, plus the in-progress entry's tokens.
    int bank() const;
    bool completed() const { return completed_; }
    WordProgress* in_progress() { return in_progress_ ? &*in_progress_ : nullptr; }

private:
    std::vector<int32_t> next_tokens(const WordProgress& p) const;  // HF's trie next_tokens
    const ForcedWords* words_;
    int longest_ = 0;                          // HF's max_seqlen
    int fulfilled_ = 0;                        // len(complete_constraints)
    std::optional<WordProgress> in_progress_;  // inprogress_constraint
    std::vector<int> pending_;                 // pending_constraints, as indices
    bool completed_ = false;
};

}  // namespace tinyloop::beam
