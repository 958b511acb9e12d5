#include "record/session_file.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include <QFile>
#include <QFileInfo>

#include <tinyloop/json.h>

namespace tlui {

using nlohmann::json;

namespace {

[[noreturn]] void refuse(const std::string& field, const std::string& why) { throw ConfigError("session." + field, why); }

// Probabilities as floats may round a hair above 1.
constexpr double kProbMax = 1.001;

std::string sub(const std::string& path, const char* key) { return path.empty() ? key : path + "." + key; }
std::string item(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

void needObject(const json& v, const std::string& f) {
    if (!v.is_object()) refuse(f, std::string("expected an object, found ") + v.type_name());
}

const json& member(const json& o, const std::string& path, const char* key) {
    auto it = o.find(key);
    if (it == o.end()) refuse(sub(path, key), "missing");
    return *it;
}

const json* optional(const json& o, const char* key) {
    auto it = o.find(key);
    return it == o.end() || it->is_null() ? nullptr : &*it;
}

const json& needArray(const json& v, const std::string& f, size_t maxSize) {
    if (!v.is_array()) refuse(f, std::string("expected an array, found ") + v.type_name());
    if (v.size() > maxSize)
        refuse(f, std::to_string(v.size()) + " entries; a session holds at most " + std::to_string(maxSize));
    return v;
}

long long integer(const json& v, const std::string& f, long long lo, long long hi) {
    if (!v.is_number_integer()) refuse(f, std::string("expected an integer, found ") + v.type_name());
    const bool huge = v.is_number_unsigned() && v.get<unsigned long long>() > static_cast<unsigned long long>(LLONG_MAX);
    const long long x = huge ? LLONG_MAX : v.get<long long>();
    if (x < lo || x > hi)
        refuse(f, (huge ? v.dump() : std::to_string(x)) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
}

double number(const json& v, const std::string& f, double lo, double hi) {
    if (!v.is_number()) refuse(f, std::string("expected a number, found ") + v.type_name());
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
        refuse(f, v.dump() + " is outside [" + json(lo).dump() + ", " + json(hi).dump() + "]");
    return x;
}

std::string text(const json& v, const std::string& f, size_t maxBytes = 1 << 20) {
    if (!v.is_string()) refuse(f, std::string("expected a string, found ") + v.type_name());
    const auto& s = v.get_ref<const std::string&>();
    if (s.size() > maxBytes) refuse(f, std::to_string(s.size()) + " bytes; at most " + std::to_string(maxBytes));
    return s;
}

std::vector<int32_t> ids(const json& v, const std::string& f, size_t maxSize) {
    std::vector<int32_t> out;
    needArray(v, f, maxSize);
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) out.push_back(static_cast<int32_t>(integer(v[i], item(f, i), 0, INT32_MAX)));
    return out;
}

std::vector<float> probs(const json& v, const std::string& f, size_t maxSize) {
    std::vector<float> out;
    needArray(v, f, maxSize);
    for (size_t i = 0; i < v.size(); ++i) out.push_back(static_cast<float>(number(v[i], item(f, i), 0, kProbMax)));
    return out;
}

// One token event: the engine codec reads it (types), the ranges are checked here.
tinyloop::TokenEvent event(const json& v, const std::string& f, int maxDepth) {
    needObject(v, f);
    tinyloop::TokenEvent ev;
    try {
        ev = tinyloop::event_from_json(v);
    } catch (const tinyloop::Error& e) {
        const ConfigError c = ConfigError::fromEngine(e);
        refuse(f + "." + c.field(), std::string(c.what()).substr(c.field().size() + 2));
    }
    integer(member(v, f, "token"), sub(f, "token"), 0, INT32_MAX);
    integer(member(v, f, "depth"), sub(f, "depth"), 0, maxDepth);
    number(member(v, f, "prob"), sub(f, "prob"), 0, kProbMax);
    if (ev.index < 0 || ev.position < 0) refuse(f, "index and position must be >= 0");
    if (ev.drafted.size() > static_cast<size_t>(SessionBounds::tokens)) refuse(sub(f, "drafted"), "too many drafted tokens");
    if (ev.exit_gate.size() > static_cast<size_t>(maxDepth))
        refuse(sub(f, "exit_gate"), std::to_string(ev.exit_gate.size()) + " passes; at most " + std::to_string(maxDepth));
    if (ev.lens.size() > static_cast<size_t>(maxDepth))
        refuse(sub(f, "lens"), std::to_string(ev.lens.size()) + " rows; at most " + std::to_string(maxDepth));
    for (size_t d = 0; d < ev.lens.size(); ++d) {
        const auto& row = ev.lens[d];
        const std::string rf = item(sub(f, "lens"), d);
        if (row.depth < 1 || row.depth > maxDepth) refuse(rf + ".depth", std::to_string(row.depth) + " is outside [1, " + std::to_string(maxDepth) + "]");
        if (row.top_ids.size() != row.top_probs.size() || row.top_ids.size() > static_cast<size_t>(SessionBounds::topK))
            refuse(rf + ".top_ids", "top_ids and top_probs must have the same length, at most " + std::to_string(SessionBounds::topK));
        for (int32_t id : row.top_ids)
            if (id < 0) refuse(rf + ".top_ids", "token ids are >= 0");
        for (float p : row.top_probs)
            if (!(p >= 0 && p <= kProbMax)) refuse(rf + ".top_probs", "probabilities are in [0, 1]");
    }
    return ev;
}

// The exact lens: rows[k] is the position first_position + k (the one that predicted output token k).
tinyloop::LensResult lens(const json& v, int promptLen, size_t outputs) {
    const std::string f = "lens";
    needObject(v, f);
    tinyloop::LensResult L;
    L.loops = static_cast<int>(integer(member(v, f, "loops"), "lens.loops", 1, SessionBounds::loops));
    L.top_k = static_cast<int>(integer(member(v, f, "top_k"), "lens.top_k", 0, SessionBounds::topK));
    const json& rows = needArray(member(v, f, "rows"), "lens.rows", outputs);
    const int first = optional(v, "first_position")
                          ? static_cast<int>(integer(v["first_position"], "lens.first_position", 0, SessionBounds::tokens))
                          : std::max(promptLen - 1, 0);
    L.n_positions = optional(v, "n_positions")
                        ? static_cast<int>(integer(v["n_positions"], "lens.n_positions", 0, SessionBounds::tokens))
                        : promptLen + static_cast<int>(outputs);
    if (first + static_cast<long long>(rows.size()) > L.n_positions)
        refuse("lens.rows", std::to_string(rows.size()) + " rows from position " + std::to_string(first) +
                                " do not fit in n_positions " + std::to_string(L.n_positions));
    if (static_cast<long long>(L.n_positions) * L.loops > SessionBounds::lensCells)
        refuse("lens", "n_positions x loops is over " + std::to_string(SessionBounds::lensCells) + " cells");
    L.cells.resize(static_cast<size_t>(L.n_positions) * L.loops);
    for (size_t k = 0; k < rows.size(); ++k) {
        const std::string rf = item("lens.rows", k);
        const json& row = needArray(rows[k], rf, static_cast<size_t>(L.loops));
        if (row.size() != static_cast<size_t>(L.loops))
            refuse(rf, std::to_string(row.size()) + " cells; each row has one per depth (" + std::to_string(L.loops) + ")");
        for (int d = 1; d <= L.loops; ++d) {
            const json& c = row[static_cast<size_t>(d - 1)];
            const std::string cf = item(rf, static_cast<size_t>(d - 1));
            needObject(c, cf);
            auto& cell = L.cells[static_cast<size_t>(first + static_cast<int>(k)) * L.loops + static_cast<size_t>(d - 1)];
            cell.p_final_argmax = static_cast<float>(number(member(c, cf, "p_final_argmax"), cf + ".p_final_argmax", 0, kProbMax));
            cell.p_next = static_cast<float>(number(member(c, cf, "p_next"), cf + ".p_next", -1, kProbMax));
            cell.entropy = static_cast<float>(number(member(c, cf, "entropy"), cf + ".entropy", 0, 1e6));
            cell.kl_to_final = static_cast<float>(number(member(c, cf, "kl_to_final"), cf + ".kl_to_final", -1e-3, 1e6));
            cell.argmax = static_cast<int32_t>(integer(member(c, cf, "argmax"), cf + ".argmax", 0, INT32_MAX));
            if (const json* t = optional(c, "top_ids")) cell.top_ids = ids(*t, cf + ".top_ids", SessionBounds::topK);
            if (const json* t = optional(c, "top_probs")) cell.top_probs = probs(*t, cf + ".top_probs", SessionBounds::topK);
            if (cell.top_ids.size() != cell.top_probs.size())
                refuse(cf + ".top_ids", "top_ids and top_probs must have the same length");
        }
    }
    return L;
}

RunSummary historyRun(const json& v, const std::string& f) {
    needObject(v, f);
    RunSummary h;
    h.id = static_cast<quint64>(integer(member(v, f, "id"), sub(f, "id"), 0, LLONG_MAX));
    h.mode = QString::fromStdString(text(member(v, f, "mode"), sub(f, "mode"), 64));
    h.tokens = static_cast<int>(integer(member(v, f, "tokens"), sub(f, "tokens"), 0, INT32_MAX));
    const double ms = 1e12;
    h.prefillMs = number(member(v, f, "prefill_ms"), sub(f, "prefill_ms"), 0, ms);
    h.firstTokenMs = number(member(v, f, "first_token_ms"), sub(f, "first_token_ms"), 0, ms);
    h.decodeMs = number(member(v, f, "decode_ms"), sub(f, "decode_ms"), 0, ms);
    h.totalMs = number(member(v, f, "total_ms"), sub(f, "total_ms"), 0, ms);
    h.tokensPerSecond = number(member(v, f, "tokens_per_s"), sub(f, "tokens_per_s"), 0, 1e12);
    return h;
}

// The run's own fields: prompt, mode, config, knobs, tokens, text, stats, cycles.
void readRun(const json& j, RunResult& run) {
    run.prompt = QString::fromStdString(text(member(j, "", "prompt"), "prompt"));
    const std::string mode = text(member(j, "", "mode"), "mode", 64);
    if (!parseMode(mode, &run.mode)) {
        std::string names;
        for (DecodeMode m : allModes()) names += std::string(names.empty() ? "" : ", ") + modeName(m);
        refuse("mode", "'" + mode + "' is not a decode mode (" + names + ")");
    }
    run.config = configFromJson(member(j, "", "config"), {}, "session.config.");
    if (const json* k = optional(j, "speculation")) run.speculation = knobsFromJson(*k, {}, "session.speculation.");
    else if (const json* old = optional(j, "speculative"))  // sessions written before the codec's name
        run.speculation = knobsFromJson(*old, {}, "session.speculative.");
    if (const json* g = optional(j, "grammar_file")) run.grammarFile = QString::fromStdString(text(*g, "grammar_file", 4096));
    const auto promptIds = ids(member(j, "", "prompt_ids"), "prompt_ids", SessionBounds::tokens);
    const auto outIds = ids(member(j, "", "output_ids"), "output_ids", SessionBounds::tokens - promptIds.size());
    run.tokens = promptIds;
    run.tokens.insert(run.tokens.end(), outIds.begin(), outIds.end());
    run.promptLen = static_cast<int>(promptIds.size());
    run.text = QString::fromStdString(text(member(j, "", "text"), "text", 16u << 20));
    try {
        run.stats = tinyloop::stats_from_json(member(j, "", "stats"));
    } catch (const tinyloop::Error& e) {
        refuse("stats", e.what());
    }
    if (const json* l = optional(j, "loops")) run.loops = static_cast<int>(integer(*l, "loops", 0, SessionBounds::loops));
    if (const json* cyc = optional(j, "speculative_cycles")) {
        run.hasSpeculative = true;
        needArray(*cyc, "speculative_cycles", SessionBounds::tokens);
        for (size_t i = 0; i < cyc->size(); ++i) {
            const std::string f = item("speculative_cycles", i);
            needObject((*cyc)[i], f);
            SpecCycle c;
            c.drafted = static_cast<int>(integer(member((*cyc)[i], f, "drafted"), sub(f, "drafted"), 0, SessionBounds::tokens));
            c.accepted = static_cast<int>(integer(member((*cyc)[i], f, "accepted"), sub(f, "accepted"), 0, c.drafted));
            run.cycles.push_back(c);
        }
    }
}

}  // namespace

Session sessionFromJson(const json& j) {
    needObject(j, "(top level)");
    const std::string format = text(member(j, "", "format"), "format", 256);
    if (format != "tinyloop-workbench-session")
        refuse("format", "'" + format + "' is not a TinyLoop workbench session (expected 'tinyloop-workbench-session')");
    integer(member(j, "", "version"), "version", 1, 2);
    Session s;
    if (const json* m = optional(j, "model")) {
        needObject(*m, "model");
        if (const json* p = optional(*m, "path")) s.modelPath = QString::fromStdString(text(*p, "model.path", 4096));
        if (const json* p = optional(*m, "summary")) s.modelSummary = QString::fromStdString(text(*p, "model.summary", 4096));
    }
    readRun(j, s.run);
    if (const json* f = optional(j, "finished")) {
        if (!f->is_boolean()) refuse("finished", std::string("expected true or false, found ") + f->type_name());
        s.finished = f->get<bool>();
    }
    const size_t outputs = s.run.tokens.size() - static_cast<size_t>(s.run.promptLen);
    const json& events = needArray(member(j, "", "events"), "events", outputs);
    for (size_t i = 0; i < events.size(); ++i) s.events.push_back(event(events[i], item("events", i), SessionBounds::loops));
    if (const json* l = optional(j, "lens")) s.lens = lens(*l, s.run.promptLen, outputs);
    if (s.run.loops == 0) {  // version 1 files: the depth the lens or the events show
        s.run.loops = s.lens ? s.lens->loops : 1;
        for (const auto& e : s.events) s.run.loops = std::max(s.run.loops, e.depth);
    }
    if (const json* h = optional(j, "history")) {
        needArray(*h, "history", SessionBounds::historyRuns);
        for (size_t i = 0; i < h->size(); ++i) s.history.push_back(historyRun((*h)[i], item("history", i)));
    }
    return s;
}

bool readSessionFile(const QString& path, Session* out, QString* error) {
    auto fail = [&](const QString& why) {
        if (error) *error = QString("%1: %2").arg(QFileInfo(path).fileName(), why);
        return false;
    };
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return fail("cannot open: " + f.errorString());
    if (f.size() > SessionBounds::fileBytes)
        return fail(QString("%1 MiB; a session file is at most %2 MiB")
                        .arg(f.size() >> 20).arg(SessionBounds::fileBytes >> 20));
    const QByteArray bytes = f.read(SessionBounds::fileBytes + 1);
    if (bytes.isEmpty()) return fail("the file is empty");
    json j;
    try {
        j = json::parse(bytes.constData(), bytes.constData() + bytes.size());
    } catch (const json::parse_error& e) {
        const bool atEnd = e.byte >= static_cast<size_t>(bytes.size());
        return fail(QString("not valid JSON at byte %1 of %2%3")
                        .arg(e.byte).arg(bytes.size()).arg(atEnd ? " (the file is truncated)" : ""));
    }
    try {
        *out = sessionFromJson(j);
    } catch (const ConfigError& e) {
        return fail(QString::fromStdString(e.what()));
    } catch (const std::exception& e) {  // a check above missed a case: still a refusal, not a crash
        return fail(QString("session: %1").arg(e.what()));
    }
    return true;
}

}  // namespace tlui
