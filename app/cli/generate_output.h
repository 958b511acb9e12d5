// How `tinyloop generate` prints: streamed text that never shows a stop string, the per-token
// events (a table on stderr or JSON), the stats object and the timing lines.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tinyloop/tinyloop.h"

namespace tinyloop::cli {

// Prints streamed text, holding back any tail that could still become a stop string (the
// engine leaves stop strings out of the text, so they must never reach the terminal).
class StreamPrinter {
public:
    explicit StreamPrinter(std::vector<std::string> stops) : stops_(std::move(stops)) {}

    void push(const std::string& piece) {
        pending_ += piece;
        size_t keep_from = pending_.size();
        for (size_t i = 0; i < pending_.size() && keep_from == pending_.size(); ++i) {
            std::string_view tail(pending_.data() + i, pending_.size() - i);
            for (const auto& s : stops_) {
                size_t n = std::min(tail.size(), s.size());
                if (tail.substr(0, n) == std::string_view(s).substr(0, n)) {
                    keep_from = i;
                    break;
                }
            }
        }
        write(pending_.substr(0, keep_from));
        pending_.erase(0, keep_from);
    }

    // The engine's final text is the truth; print whatever of it has not been printed.
    void finish(const std::string& text) {
        if (text.compare(0, printed_.size(), printed_) == 0) write(text.substr(printed_.size()));
        pending_.clear();
    }

    const std::string& printed() const { return printed_; }

private:
    void write(const std::string& s) {
        if (s.empty()) return;
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
        printed_ += s;
    }
    std::vector<std::string> stops_;
    std::string pending_, printed_;
};

// The events as a table on stderr (with the lens rows under each token when present).
void print_events_table(const Model* model, const std::vector<TokenEvent>& events);

// num_return_sequences > 1: each output on stdout under a line naming its rank, score (beam) or
// log-probability (sampling), length and stop reason.
void print_sequences(const std::vector<ReturnedSequence>& seqs, const std::string& mode_used);

// The timing lines on stderr. `mode_used` is greedy, sample, beam, speculative or tree.
void print_timing(const GenerateStats& st, const std::string& mode_used, bool speculating,
                  bool interrupted);

}  // namespace tinyloop::cli
