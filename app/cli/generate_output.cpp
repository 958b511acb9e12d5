#include "generate_output.h"

#include <cstdio>
#include <sstream>

#include "common.h"

namespace tinyloop::cli {

void print_events_table(const Model* model, const std::vector<TokenEvent>& events) {
    std::ostringstream o;
    o << "    #    pos      id  depth     prob  piece\n";
    for (const auto& ev : events) {
        char line[128];
        std::snprintf(line, sizeof(line), "%5d %6d %7d %6d %8.4f  ", ev.index, ev.position,
                      ev.token, ev.depth, static_cast<double>(ev.prob));
        o << line << "\"" << display_text(ev.piece) << "\"\n";
        if (!ev.exit_gate.empty()) {  // the exit gate per pass run: lambda (cumulative)
            o << "        gate:";
            for (size_t t = 0; t < ev.exit_gate.size(); ++t) {
                std::snprintf(line, sizeof(line), " %.3f (%.3f)", static_cast<double>(ev.exit_gate[t]),
                              t < ev.exit_gate_cdf.size() ? static_cast<double>(ev.exit_gate_cdf[t]) : 0.0);
                o << line;
            }
            o << "\n";
        }
        for (const auto& l : ev.lens) {
            std::snprintf(line, sizeof(line), "        depth %2d  p=%.4f  H=%.3f  top:", l.depth,
                          static_cast<double>(l.p_emitted), static_cast<double>(l.entropy));
            o << line;
            for (size_t k = 0; k < l.top_ids.size(); ++k) {
                std::string t;
                try {
                    t = token_bytes(model, l.top_ids[k]);
                } catch (const Error&) {
                    t = "<" + std::to_string(l.top_ids[k]) + ">";
                }
                std::snprintf(line, sizeof(line), " %.3f",
                              k < l.top_probs.size() ? static_cast<double>(l.top_probs[k]) : 0.0);
                o << " \"" << display_text(t) << "\"" << line;
            }
            o << "\n";
        }
    }
    std::string s = o.str();
    std::fwrite(s.data(), 1, s.size(), stderr);
}

// The timing lines on stderr. Beam search emits its tokens only once the search ends, so it
// has no per-token decode rate: its line gives the whole search's time and rate instead.
void print_timing(const GenerateStats& st, const std::string& mode_used, bool speculating,
                  bool interrupted) {
    std::fprintf(stderr, "tinyloop: prompt %s, prefill %.2f ms, first token %.2f ms\n",
                 plural(st.prompt_tokens, "token").c_str(), st.prefill_ms, st.first_token_ms);
    const std::string emitted = plural(st.tokens_emitted, "token");
    const char* tail = interrupted ? " (interrupted)" : "";
    if (mode_used == "beam") {
        const double rate = st.total_ms > 0 ? 1000.0 * st.tokens_emitted / st.total_ms : 0.0;
        std::fprintf(stderr,
                     "tinyloop: %s, beam search %.2f ms (%.1f tok/s over the whole search), "
                     "stop %s, loops %d%s\n",
                     emitted.c_str(), st.total_ms, rate, stop_reason_name(st.stop_reason),
                     st.loops_used, tail);
    } else {
        std::fprintf(stderr,
                     "tinyloop: %s, decode %.2f ms (%.1f tok/s), total %.2f ms, stop %s, "
                     "loops %d%s\n",
                     emitted.c_str(), st.decode_ms, st.decode_tokens_per_s(), st.total_ms,
                     stop_reason_name(st.stop_reason), st.loops_used, tail);
    }
    if (speculating && mode_used == "pipelined") {
        std::fprintf(stderr,
                     "tinyloop: pipelined speculation, %s of the loop block, %d/%d drafted tokens accepted "
                     "(%.1f%%), %.2f tokens per sweep\n",
                     plural(st.spec_sweeps, "sweep").c_str(), st.spec_accepted, st.spec_tested,
                     100.0 * st.spec_acceptance_rate(),
                     st.spec_sweeps > 0 ? std::max(0, st.tokens_emitted - 1) / static_cast<double>(st.spec_sweeps) : 0.0);
    } else if (speculating) {
        const std::string kind = mode_used == "tree" ? "tree speculation" : "speculative";
        std::fprintf(stderr,
                     "tinyloop: %s %s, %d/%d drafted tokens accepted (%.1f%%, %.2f per cycle), "
                     "draft %.2f ms, verify %.2f ms\n",
                     kind.c_str(), plural(st.spec_cycles, "cycle").c_str(), st.spec_accepted,
                     st.spec_tested, 100.0 * st.spec_acceptance_rate(), st.spec_mean_accepted(),
                     st.draft_ms, st.verify_ms);
    }
}

void print_sequences(const std::vector<ReturnedSequence>& seqs, const std::string& mode_used) {
    const char* what = mode_used == "beam" ? "score" : "log-prob";
    for (size_t i = 0; i < seqs.size(); ++i) {
        const ReturnedSequence& q = seqs[i];
        std::printf("--- sequence %zu of %zu (%s %.4f, %s, %s)\n", i + 1, seqs.size(), what, q.score,
                    plural(static_cast<int>(q.output.size()), "token").c_str(), stop_reason_name(q.stop_reason));
        std::fputs(q.text.c_str(), stdout);
        if (q.text.empty() || q.text.back() != '\n') std::fputs("\n", stdout);
    }
}

}  // namespace tinyloop::cli
