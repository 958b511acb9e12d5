#include "record/plain_status.h"

#include <algorithm>
#include <map>

#include <QStringList>

#include "record/session.h"

namespace tlui {

namespace {

QString times(int n, const char* one, const char* many) { return QString("%1 %2").arg(n).arg(n == 1 ? one : many); }

QString number(double x) { return QString::number(x, 'g', 3); }

// What the criterion watches and what "settled" means for it, for `threshold`.
QString criterionWords(tinyloop::EarlyExitCriterion c, double threshold) {
    using C = tinyloop::EarlyExitCriterion;
    switch (c) {
    case C::HiddenL2: return QString("the hidden state changed less than %1").arg(number(threshold));
    case C::LogitMargin: return QString("its top guess led the next one by more than %1").arg(number(threshold));
    case C::KL: return QString("its guess moved less than %1 (KL) from the pass before").arg(number(threshold));
    case C::EntropyDelta: return QString("its uncertainty (entropy) changed less than %1").arg(number(threshold));
    case C::ArgmaxStable: return QString("its top guess stayed the same");
    case C::GateStop:
    case C::GateSelect:
        return QString("its learned exit gate's cumulative exit probability reached %1").arg(number(threshold));
    case C::ReverseKL: return QString("its guess moved less than %1 (KL, Huginn's direction)").arg(number(threshold));
    case C::MinPKL: return QString("its min-p guess moved less than %1 (KL)").arg(number(threshold));
    }
    return QString("it settled");
}

}  // namespace

QString stopReasonWords(const std::string& engineName) {
    using R = tinyloop::StopReason;
    for (R r : {R::EOS, R::STOP_SEQUENCE, R::MAX_TOKENS, R::CALLBACK_ABORT, R::GRAMMAR_DEAD_END, R::STOP_STRING, R::MAX_TIME})
        if (engineName == tinyloop::stop_reason_name(r)) return stopReasonText(r);
    return QString::fromStdString(engineName);
}

QString memoryText(std::size_t bytes) {
    if (bytes < 1024) return QString("%1 bytes").arg(bytes);
    if (bytes < 1024 * 1024) return QString("%1 KB").arg(double(bytes) / 1024.0, 0, 'f', bytes < 10 * 1024 ? 1 : 0);
    return QString("%1 MB").arg(double(bytes) / (1024.0 * 1024.0), 0, 'f', 1);
}

QString exitRuleText(const tinyloop::GenerateConfig& cfg) {
    const int patience = std::max(1, cfg.early_exit.patience);
    const int every = std::max(1, cfg.early_exit.peek_every);
    QString s = criterionWords(cfg.early_exit.criterion, cfg.early_exit.threshold) + " for " +
                times(patience, "check", "checks in a row");
    s += QString(" (checked %1 from pass %2 on)")
             .arg(every == 1 ? QString("after every pass") : QString("every %1 passes").arg(every))
             .arg(std::max(1, cfg.early_exit.min_L));
    return s;
}

QString tokenExitText(int depth, int loops, const tinyloop::GenerateConfig& cfg) {
    if (depth >= loops) return QString("ran all %1 passes (it never settled early)").arg(loops);
    return QString("exited at pass %1 of %2 because %3").arg(depth).arg(loops).arg(exitRuleText(cfg));
}

QString earlyExitSummary(const std::vector<tinyloop::TokenEvent>& events, int loops,
                         const tinyloop::GenerateConfig& cfg, bool lastIsEnd) {
    if (events.empty()) return QString();
    double sum = 0;
    int early = 0;
    for (const auto& e : events) {
        sum += e.depth;
        if (e.depth < loops) ++early;
    }
    const int n = static_cast<int>(events.size());
    const double mean = sum / n;
    if (early == 0)
        return QString("no token exited early: all %1 ran all %2 passes; none settled because %3. Loosen the "
                       "threshold or the patience to see exits.")
            .arg(n).arg(loops).arg(exitRuleText(cfg));
    // Where the text exited, apart from the end-of-text token: it settles at once and would
    // otherwise be "most" of a short answer (the digit-sum answer exits at pass 8, its end at 2).
    const size_t text = events.size() - (lastIsEnd ? 1 : 0);
    auto pass = [&](const tinyloop::TokenEvent& e) {
        return e.depth < loops ? QString("pass %1").arg(e.depth) : QString("pass %1 (all)").arg(e.depth);
    };
    auto quoted = [](const tinyloop::TokenEvent& e) {
        const QString p = QString::fromStdString(e.piece).simplified();
        return p.isEmpty() ? QString("token %1").arg(e.index + 1) : "'" + p + "'";
    };
    QString where;
    if (text > 0 && text <= 3) {  // a short answer: each of its tokens
        QStringList each;
        for (size_t i = 0; i < text; ++i) each << quoted(events[i]) + " at " + pass(events[i]);
        where = (text == 1 ? "the answer " : "the answer's tokens ") + each.join(", ") + " exited";
    } else if (text > 3) {
        std::map<int, int> byDepth;
        for (size_t i = 0; i < text; ++i) ++byDepth[events[i].depth];
        const auto most = std::max_element(byDepth.begin(), byDepth.end(), [&](const auto& a, const auto& b) {
            return (a.first < loops ? a.second : -1) < (b.first < loops ? b.second : -1);
        });
        where = QString("most exited at pass %1; the last, %2, at %3").arg(most->first).arg(quoted(events[text - 1]), pass(events[text - 1]));
    }
    QString s = QString("%1 of %2 tokens exited early (on average %3 of %4 passes, %5% of the work saved); ")
                    .arg(early).arg(n)
                    .arg(mean, 0, 'f', 1).arg(loops)
                    .arg(100.0 * (1.0 - mean / loops), 0, 'f', 0);
    s += where.isEmpty() ? QString("they exited") : where;
    s += " because " + exitRuleText(cfg);
    if (lastIsEnd) s += QString("; the end-of-text token exited at %1").arg(pass(events.back()));
    return s;
}

QString scrubberAnswerText(const ScrubberAnswerFacts& f) {
    QString s = QString("Answer at depth %1").arg(f.depth);
    if (f.previousDepth > 0) s += QString(" (moved from depth %1)").arg(f.previousDepth);
    s += QString(": %1 in %2 ms. ").arg(times(f.tokens, "token", "tokens")).arg(f.ms, 0, 'f', 1);
    if (f.promptDepthAfter > f.promptDepthBefore) {
        s += f.promptDepthBefore == 0
                 ? QString("The prompt was read with %1. ").arg(times(f.promptDepthAfter, "pass", "passes"))
                 : f.promptDepthAfter == f.promptDepthBefore + 1
                       ? QString("The prompt had been read to depth %1, so only pass %2 was run on it again. ")
                             .arg(f.promptDepthBefore).arg(f.promptDepthAfter)
                       : QString("The prompt had been read to depth %1, so only passes %2 to %3 were run on it. ")
                             .arg(f.promptDepthBefore).arg(f.promptDepthBefore + 1).arg(f.promptDepthAfter);
    } else {
        s += QString("The prompt had already been read to depth %1: nothing was run on it again. ")
                 .arg(f.promptDepthAfter);
    }
    s += QString("Keeping the prompt's state for the next move takes %1 of memory.").arg(memoryText(f.keptBytes));
    if (f.previousDepth > 0)
        s += f.firstChange < 0 ? QString(" Same answer as at depth %1.").arg(f.previousDepth)
                               : QString(" %1 changed from depth %2; the first change is token %3.")
                                     .arg(times(f.changedTokens, "token", "tokens"))
                                     .arg(f.previousDepth)
                                     .arg(f.firstChange + 1);
    return s;
}

}  // namespace tlui
