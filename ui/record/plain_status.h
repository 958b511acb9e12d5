// Status lines in words a teacher understands, beside stopReasonText (record/session.h): what a run
// did and why, with no internal names ("exited at pass 2 because the hidden state changed less
// than 0.05 for 2 checks in a row", "70 KB of memory", "passes 5 to 8 were run on the prompt").
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <QString>

#include <tinyloop/tinyloop.h>

namespace tlui {

// The engine's name of a stop reason ("MAX_TOKENS", as the analysis library reports it) in the
// status bar's words (stopReasonText: "reached max_tokens"); an unknown name as it is.
QString stopReasonWords(const std::string& engineName);

// "70 KB", "1.4 MB", "512 bytes".
QString memoryText(std::size_t bytes);

// Why a token stops looping under `cfg`'s early-exit settings: "its top guess stayed the same
// for 2 checks in a row (from pass 2 on)".
QString exitRuleText(const tinyloop::GenerateConfig& cfg);
// One token: "exited at pass 2 because the hidden state changed less than 0.05 for 2 checks in a
// row" or "ran all 6 passes (never settled early)".
QString tokenExitText(int depth, int loops, const tinyloop::GenerateConfig& cfg);
// A whole early-exit run: how many tokens stopped early, where the text stopped (each token of a
// short answer, else where most stopped and the last one), and why. `lastIsEnd`: the last event
// is the end-of-text token (the run stopped there), told apart from the answer. Empty when no
// event is given.
QString earlyExitSummary(const std::vector<tinyloop::TokenEvent>& events, int loops,
                         const tinyloop::GenerateConfig& cfg, bool lastIsEnd = false);

// The depth scrubber's line after an answer at `depth` (moved from `previousDepth`, 0 = first):
// how long it took, which passes were run over the prompt, the memory the kept state holds,
// what changed.
struct ScrubberAnswerFacts {
    int depth = 0, previousDepth = 0;
    int tokens = 0;
    double ms = 0;
    int promptDepthBefore = 0, promptDepthAfter = 0;
    std::size_t keptBytes = 0;
    int changedTokens = 0, firstChange = -1;  // -1: the same answer
};
QString scrubberAnswerText(const ScrubberAnswerFacts& f);

}  // namespace tlui
