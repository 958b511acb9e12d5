// Reading a saved session back (File -> Open session, tinyloop-workbench --session FILE): the JSON
// that sessionToJson writes, checked field by field because the file is untrusted. A refusal names
// the field and what is wrong ("session.events[3].depth: -2 is outside [0, 1024]"); sizes are
// bounded (file, tokens, lens cells), so no file can crash the workbench or exhaust memory.
#pragma once

#include <QString>
#include <nlohmann/json.hpp>

#include "record/session.h"

namespace tlui {

// What a session file may hold at most.
struct SessionBounds {
    static constexpr qint64 fileBytes = 64ll << 20;  // 64 MiB
    static constexpr int tokens = 1 << 16;           // prompt + output ids
    static constexpr int loops = 1024;
    static constexpr int topK = 64;
    static constexpr long long lensCells = 1 << 22;  // positions x loops
    static constexpr int historyRuns = 100000;
};

// The session in `j`, or throws ConfigError naming the field (prefix "session.").
Session sessionFromJson(const nlohmann::json& j);

// Reads and checks `path`; on failure returns false with the reason in *error and leaves *out alone.
bool readSessionFile(const QString& path, Session* out, QString* error);

}  // namespace tlui
