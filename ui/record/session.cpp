#include "record/session.h"

#include <QDateTime>

#include <tinyloop/json.h>

namespace tlui {

using nlohmann::json;

json sessionToJson(const Session& s) {
    json j;
    j["format"] = "tinyloop-workbench-session";
    j["version"] = 2;
    j["exported_at"] = QDateTime::currentDateTimeUtc().toString(Qt::ISODate).toStdString();
    j["model"] = json{{"path", s.modelPath.toStdString()}, {"summary", s.modelSummary.toStdString()}};
    j["prompt"] = s.run.prompt.toStdString();
    j["mode"] = modeName(s.run.mode);
    j["config"] = configToJson(s.run.config);
    j["speculation"] = knobsToJson(s.run.speculation);
    j["grammar_file"] = s.run.grammarFile.toStdString();
    j["loops"] = s.run.loops;
    std::vector<int32_t> promptIds(s.run.tokens.begin(),
                                   s.run.tokens.begin() + std::min<size_t>(s.run.promptLen, s.run.tokens.size()));
    std::vector<int32_t> outIds(s.run.tokens.begin() + promptIds.size(), s.run.tokens.end());
    j["prompt_ids"] = promptIds;
    j["output_ids"] = outIds;
    j["text"] = s.run.text.toStdString();
    j["finished"] = s.finished;
    j["stats"] = tinyloop::stats_to_json(s.run.stats);
    json ev = json::array();
    for (const auto& e : s.events) ev.push_back(tinyloop::event_to_json(e));
    j["events"] = ev;
    if (s.run.hasSpeculative) {
        json cyc = json::array();
        for (const auto& c : s.run.cycles) cyc.push_back(json{{"drafted", c.drafted}, {"accepted", c.accepted}});
        j["speculative_cycles"] = cyc;
    }
    if (s.lens) {
        const auto& L = *s.lens;
        json cells = json::array();
        // one row per emitted token: the lens at the position that predicted it, depth 1..loops
        const int first = std::max(s.run.promptLen - 1, 0);
        for (size_t k = 0; k < outIds.size(); ++k) {
            const int pos = first + static_cast<int>(k);
            if (pos >= L.n_positions) break;
            json row = json::array();
            for (int d = 1; d <= L.loops; ++d) {
                const auto& c = L.at(pos, d);
                json probs = json::array();
                for (float p : c.top_probs) probs.push_back(tinyloop::json_float(p));
                row.push_back(json{{"p_final_argmax", tinyloop::json_float(c.p_final_argmax)},
                                   {"p_next", tinyloop::json_float(c.p_next)},
                                   {"entropy", tinyloop::json_float(c.entropy)},
                                   {"kl_to_final", tinyloop::json_float(c.kl_to_final)},
                                   {"argmax", c.argmax}, {"top_ids", c.top_ids}, {"top_probs", probs}});
            }
            cells.push_back(row);
        }
        j["lens"] = json{{"loops", L.loops}, {"top_k", L.top_k}, {"n_positions", L.n_positions},
                         {"first_position", first}, {"rows", cells}};
    }
    json hist = json::array();
    for (const auto& h : s.history)
        hist.push_back(json{{"id", h.id}, {"mode", h.mode.toStdString()}, {"tokens", h.tokens},
                            {"prefill_ms", h.prefillMs}, {"first_token_ms", h.firstTokenMs},
                            {"decode_ms", h.decodeMs}, {"total_ms", h.totalMs},
                            {"tokens_per_s", h.tokensPerSecond}});
    j["history"] = hist;
    return j;
}

QString sessionToMarkdown(const Session& s) {
    QString md;
    const auto& st = s.run.stats;
    md += "# TinyLoop workbench session\n\n";
    md += QString("- Model: `%1`  \n").arg(s.modelPath);
    if (!s.modelSummary.isEmpty()) md += QString("- %1  \n").arg(s.modelSummary);
    md += QString("- Mode: %1  \n").arg(modeLabel(s.run.mode));
    md += QString("- Exported: %1\n\n").arg(QDateTime::currentDateTimeUtc().toString(Qt::ISODate));
    md += "## Prompt\n\n```text\n" + s.run.prompt + "\n```\n\n";
    md += "## Output\n\n```text\n" + s.run.text + "\n```\n\n";
    md += "## Stats\n\n| field | value |\n| --- | --- |\n";
    md += QString("| prompt tokens | %1 |\n").arg(st.prompt_tokens);
    md += QString("| tokens emitted | %1 |\n").arg(st.tokens_emitted);
    md += QString("| stop reason | %1 |\n").arg(tinyloop::stop_reason_name(st.stop_reason));
    md += QString("| prefill | %1 ms |\n").arg(st.prefill_ms, 0, 'f', 2);
    md += QString("| first token | %1 ms |\n").arg(st.first_token_ms, 0, 'f', 2);
    md += QString("| decode | %1 ms |\n").arg(st.decode_ms, 0, 'f', 2);
    md += QString("| decode rate | %1 tok/s |\n").arg(st.decode_tokens_per_s(), 0, 'f', 1);
    md += QString("| loops used | %1 |\n\n").arg(st.loops_used);
    md += "## Config\n\n```json\n" + QString::fromStdString(configToJson(s.run.config).dump(2)) + "\n```\n\n";
    md += "## Tokens\n\n| # | id | text | depth | p |\n| --- | --- | --- | --- | --- |\n";
    for (const auto& e : s.events) {
        QString piece = QString::fromStdString(e.piece).toHtmlEscaped();
        piece.replace('|', "\\|").replace('\n', "\\n");
        md += QString("| %1 | %2 | `%3` | %4 | %5 |\n").arg(e.index).arg(e.token).arg(piece).arg(e.depth).arg(e.prob, 0, 'f', 4);
    }
    if (!s.history.empty()) {
        md += "\n## Runs\n\n| run | mode | tokens | prefill ms | decode ms | tok/s |\n| --- | --- | --- | --- | --- | --- |\n";
        for (const auto& h : s.history)
            md += QString("| %1 | %2 | %3 | %4 | %5 | %6 |\n").arg(h.id).arg(h.mode).arg(h.tokens)
                      .arg(h.prefillMs, 0, 'f', 2).arg(h.decodeMs, 0, 'f', 2).arg(h.tokensPerSecond, 0, 'f', 1);
    }
    return md;
}

QString stopReasonText(tinyloop::StopReason r) {
    using R = tinyloop::StopReason;
    switch (r) {
    case R::EOS: return "the model ended the text (its end-of-sequence token)";
    case R::STOP_SEQUENCE: return "a stop sequence matched";
    case R::MAX_TOKENS: return "reached max_tokens";
    case R::CALLBACK_ABORT: return "stopped by you";
    case R::GRAMMAR_DEAD_END: return "the grammar allowed no further token";
    case R::STOP_STRING: return "a stop string appeared";
    case R::MAX_TIME: return "max_time ran out";
    }
    return tinyloop::stop_reason_name(r);
}

}  // namespace tlui
