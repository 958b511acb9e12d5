// The session a user sees: the last run (prompt, config, tokens, events, stats, lens) and the
// history of runs. Exported as JSON and Markdown. Pure data: no engine calls.
#pragma once

#include <optional>
#include <vector>

#include <QString>
#include <nlohmann/json.hpp>

#include "worker/engine_host.h"

namespace tlui {

struct RunSummary {
    quint64 id = 0;
    QString mode;
    int tokens = 0;
    double prefillMs = 0, firstTokenMs = 0, decodeMs = 0, totalMs = 0;
    double tokensPerSecond = 0;
};

struct Session {
    QString modelPath;
    QString modelSummary;  // one line: name, parameters, dtype, back end
    bool finished = false;
    RunResult run;                           // prompt, config, mode, tokens, stats
    std::vector<tinyloop::TokenEvent> events;
    std::optional<tinyloop::LensResult> lens;  // exact lens over prompt + output
    std::vector<RunSummary> history;

    void clearRun() {
        finished = false;
        run = RunResult{};
        events.clear();
        lens.reset();
    }
};

// The session as JSON; its config, stats and events are the engine codec's (tinyloop/json.h).
nlohmann::json sessionToJson(const Session& s);
QString sessionToMarkdown(const Session& s);

// Why a run stopped, in the words of the status bar ("stopped by you", "reached max_tokens", ...);
// exports keep the engine's names (stop_reason_name).
QString stopReasonText(tinyloop::StopReason r);

}  // namespace tlui
