// Hugging Face 4.x's ConstraintListState over force_words (see beam_constraints.h).
#include "decode/beam_constraints.h"

#include <algorithm>

namespace tinyloop::beam {

namespace {

size_t longest_alternative(const std::vector<std::vector<int32_t>>& alts) {
    size_t n = 0;
    for (const auto& a : alts) n = std::max(n, a.size());
    return n;
}

}  // namespace

ConstraintState::ConstraintState(const ForcedWords& words) : words_(&words) {
    for (size_t i = 0; i < words.size(); ++i) {
        longest_ = std::max(longest_, static_cast<int>(longest_alternative(words[i])));
        pending_.push_back(static_cast<int>(i));
    }
}

std::vector<int32_t> ConstraintState::next_tokens(const WordProgress& p) const {
    // The trie's children of p.seq, in the order the alternatives first reach them.
    std::vector<int32_t> out;
    for (const auto& alt : (*words_)[static_cast<size_t>(p.word)]) {
        if (alt.size() <= p.seq.size() || !std::equal(p.seq.begin(), p.seq.end(), alt.begin())) continue;
        const int32_t t = alt[p.seq.size()];
        if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    }
    return out;
}

void ConstraintState::reset(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    *this = ConstraintState(*words_);
    for (const auto* part : {&a, &b})
        for (const int32_t t : *part) {
            add(t);
            if (completed_) return;
        }
}

bool ConstraintState::add(int32_t tok) {
    if (completed_) return false;
    if (in_progress_) {
        const std::vector<int32_t> next = next_tokens(*in_progress_);
        if (std::find(next.begin(), next.end(), tok) == next.end()) {  // broken: back to pending, fresh
            pending_.push_back(in_progress_->word);
            in_progress_.reset();
            return false;
        }
        in_progress_->seq.push_back(tok);
        if (next_tokens(*in_progress_).empty()) {  // fulfilled
            ++fulfilled_;
            in_progress_.reset();
            completed_ = pending_.empty();
        }
        return true;
    }
    for (size_t i = 0; i < pending_.size(); ++i) {
        WordProgress p{pending_[i], {}};
        const std::vector<int32_t> next = next_tokens(p);
        if (std::find(next.begin(), next.end(), tok) == next.end()) continue;
        p.seq.push_back(tok);
        if (next_tokens(p).empty()) ++fulfilled_;
        else in_progress_ = std::move(p);
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        completed_ = pending_.empty() && !in_progress_;
        return true;  // one token steps through one entry at most
    }
    return false;
}

std::vector<int32_t> ConstraintState::advance() const {
    if (in_progress_) return next_tokens(*in_progress_);
    std::vector<int32_t> out;  // every pending entry's first ids (repeats kept, as HF's list)
    for (const int w : pending_) {
        const std::vector<int32_t> first = next_tokens(WordProgress{w, {}});
        out.insert(out.end(), first.begin(), first.end());
    }
    return out;
}

int ConstraintState::bank() const {
    int add = 0;
    if (in_progress_) {
        const int len = static_cast<int>(longest_alternative((*words_)[static_cast<size_t>(in_progress_->word)]));
        add = longest_ - (len - static_cast<int>(in_progress_->seq.size()));  // max_seqlen - remaining()
    }
    return fulfilled_ * longest_ + add;
}

}  // namespace tinyloop::beam
