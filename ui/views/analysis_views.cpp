#include "views/analysis_views.h"

#include <algorithm>
#include <memory>

#include <QAction>
#include <QMenu>
#include <QScreen>
#include <QTimer>
#include <QWidget>

#include "base/screen_fit.h"
#include "views/agreement_map_view.h"
#include "views/compare_modes_view.h"
#include "views/compute_quality_view.h"
#include "views/depth_scrubber_view.h"
#include "views/exit_calibration_view.h"
#include "views/kv_provenance_view.h"
#include "views/quant_across_depth_view.h"
#include "views/speculation_sweep_view.h"
#include "views/step_mode_view.h"

namespace tlui {

namespace {

struct ViewEntry {
    const char* kind;
    const char* text;
    const char* tip;
};

const ViewEntry kEntries[] = {
    {"compare", "&Compare decode modes...", "Several decode modes on one prompt: texts aligned, first divergence, speed, depth, acceptance, time split"},
    {"scrubber", "&Depth scrubber...", "Answer the prompt at any loop depth from one prefill (ResumeHandle), with the diff from the previous depth"},
    {"agreement", "Draft-&agreement map...", "Per position, the first depth whose argmax equals the final one; predicted vs measured acceptance"},
    {"sweep", "Speculation tuning s&weep...", "draft_loops x draft_ahead (x K) on a prompt set: measured and predicted speedup, acceptance, best preset"},
    {"step", "S&tep mode...", "One token at a time: the lens row of each step, take the sampled token or any candidate"},
    {"calibration", "Early-exit &calibration...", "Where each exit criterion would stop, per token, and which tokens that changes"},
    {"compute", "Compute against &quality...", "Mean depth and decode time against NLL: fixed depths, early-exit thresholds, speculation"},
    {"kv", "&KV provenance...", "Which pass wrote each position's KV entries: plain, early exit, prefix cache"},
    {"quant", "Quantization across &depth...", "Two files of one model (f32 vs q8/q4): KL and top-1 agreement of their lenses at every depth"},
};

AnalysisWindow* create(const QString& kind, WorkbenchAccess* wb, QWidget* parent) {
    if (kind == "compare") return new CompareModesView(wb, parent);
    if (kind == "scrubber") return new DepthScrubberView(wb, parent);
    if (kind == "agreement") return new AgreementMapView(wb, parent);
    if (kind == "sweep") return new SpeculationSweepView(wb, parent);
    if (kind == "step") return new StepModeView(wb, parent);
    if (kind == "calibration") return new ExitCalibrationView(wb, parent);
    if (kind == "compute") return new ComputeQualityView(wb, parent);
    if (kind == "kv") return new KvProvenanceView(wb, parent);
    if (kind == "quant") return new QuantAcrossDepthView(wb, parent);
    return nullptr;
}

}  // namespace

AnalysisViews::AnalysisViews(WorkbenchAccess* workbench, QWidget* parent)
    : QObject(parent), m_workbench(workbench), m_parent(parent) {
    setObjectName("analysisViews");
}

const QStringList& AnalysisViews::kinds() {
    static const QStringList k = [] {
        QStringList out;
        for (const ViewEntry& e : kEntries) out << e.kind;
        return out;
    }();
    return k;
}

void AnalysisViews::install(QMenu* menu) {
    for (const ViewEntry& e : kEntries) {
        if (QString(e.kind) == "calibration") menu->addSeparator();  // the views on depth and exits
        QAction* a = menu->addAction(e.text);
        a->setObjectName(QString("viewAction_") + e.kind);
        a->setToolTip(e.tip);
        a->setStatusTip(e.tip);
        const QString kind = e.kind;
        connect(a, &QAction::triggered, this, [this, kind] { open(kind); });
    }
}

AnalysisWindow* AnalysisViews::window(const QString& kind) const {
    auto it = m_windows.find(kind);
    return it == m_windows.end() ? nullptr : it->second.data();
}

void AnalysisViews::closeAll() {
    for (auto& [kind, w] : m_windows)
        if (w) w->close();
}

AnalysisWindow* AnalysisViews::open(const QString& kind) {
    AnalysisWindow* v = window(kind);
    if (!v) {
        v = create(kind, m_workbench, m_parent);
        if (!v) return nullptr;
        v->setObjectName("view_" + kind);
        fitToScreen(v, QSize(1100, 760), availableGeometry(m_parent));  // the screen the workbench is on
        m_windows[kind] = v;
    }
    v->show();
    v->raise();
    v->activateWindow();
    return v;
}

void AnalysisViews::demo(const QString& kind, const QString& prompt, int max_tokens, const QString& out,
                         std::function<void(bool)> done) {
    AnalysisWindow* v = open(kind);
    if (!v) return done(false);
    fitToScreen(v, QSize(1400, 900), availableGeometry(m_parent));
    // One connection per demo, cut when it ends: a window demonstrated again (the tour's Back and
    // Next) must not run the old demo's steps too.
    auto conn = std::make_shared<QMetaObject::Connection>();
    auto finish = [v, out, done, conn](bool ok) {
        QObject::disconnect(*conn);
        QTimer::singleShot(400, v, [v, out, done, ok] {
            bool saved = true;
            if (!out.isEmpty()) {
                QString err;
                saved = v->exportImage(out, &err);
                if (!saved) qWarning("%s", qPrintable(err));
            }
            done(ok && saved);
        });
    };
    auto stage = std::make_shared<int>(0);
    *conn = connect(v, &AnalysisWindow::workFinished, v, [=](bool ok) {
        if (!ok) return finish(false);
        if (v->isBusy()) return;
        ++*stage;
        if (auto* s = qobject_cast<DepthScrubberView*>(v)) {
            // 1 -> 2 -> 4 -> 6: each move deeper runs only the new passes over the prompt
            static const int path[] = {1, 2, 4, 6};
            const size_t n = s->history().size();
            if (n >= 1 && n < 4) return s->setDepth(path[n]);
            if (n >= 4) return finish(true);
            return;  // the prefill; its answer comes next
        }
        if (auto* st = qobject_cast<StepModeView*>(v)) {
            // (the start job's end is busy: its first proposal is already queued)
            if (*stage == 1) return st->takeProposals(std::max(1, max_tokens / 2));
            return finish(true);
        }
        finish(true);
    });
    if (auto* c = qobject_cast<CompareModesView*>(v)) {
        c->setPrompt(prompt);
        c->setMaxTokens(max_tokens);
    } else if (auto* s = qobject_cast<DepthScrubberView*>(v)) {
        s->setPrompt(prompt);
        s->setMaxTokens(max_tokens);
        s->setStartDepth(1);  // a window demonstrated before starts again from a fresh prefill
    } else if (auto* a = qobject_cast<AgreementMapView*>(v)) {
        a->setPrompt(prompt);
        a->setMaxTokens(max_tokens);
    } else if (auto* w = qobject_cast<SpeculationSweepView*>(v)) {
        w->setMaxTokens(max_tokens);
    } else if (auto* st = qobject_cast<StepModeView*>(v)) {
        st->setPrompt(prompt);
        st->setConfig(0, 0.8, 7, max_tokens);
    }
    v->run();
}

}  // namespace tlui
