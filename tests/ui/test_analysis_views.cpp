// The analysis windows of the Analysis menu on the bundled model: each opens from the menu, fills
// from real runs on the workbench's one model (shared with the main window through the
// AnalysisJobs lane), shows what tinyloop_analysis computes run directly, cancels, and exports PNG,
// PDF and JSON. The computations themselves are tested in tests/analysis.
#include <algorithm>
#include <fstream>

#include <QAction>
#include <QFileInfo>
#include <QFormLayout>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTest>
#include <QTextBrowser>
#include <nlohmann/json.hpp>
#include <qcustomplot.h>

#include "main/main_window.h"
#include "main/model_paths.h"
#include "main/presets_panel.h"
#include "plots/plot_layout.h"
#include "ui_test_util.h"
#include "views/agreement_map_view.h"
#include "views/analysis_views.h"
#include "views/input_strip.h"
#include "views/compare_modes_view.h"
#include "views/compute_quality_view.h"
#include "views/depth_scrubber_view.h"
#include "views/exit_calibration_view.h"
#include "views/kv_provenance_view.h"
#include "views/quant_across_depth_view.h"
#include "views/speculation_sweep_view.h"
#include "views/step_mode_view.h"
#include "worker/analysis_jobs.h"

using namespace tlui;
using C = tinyloop::EarlyExitCriterion;

namespace {

const char* kPrompt = "And God said, Let there be light: and there was";

tinyloop::GenerateResult plain(tinyloop::Model* m, const std::vector<int32_t>& prompt, const tinyloop::GenerateConfig& c) {
    return tinyloop::generate_ex(m, prompt.data(), static_cast<int>(prompt.size()), c);
}

std::vector<int32_t> continuationOf(const tinyloop::GenerateResult& r) {
    return {r.tokens.begin() + r.prompt_len, r.tokens.end()};
}

}  // namespace

class TestAnalysisViews : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_path;
    tinyloop::Model* m_model = nullptr;
    std::unique_ptr<MainWindow> m_window;

    QString q4Path() const { return QFileInfo(m_path).dir().filePath("model-q4.tinyloop"); }

    static void sameRun(const ModeRun& a, const ModeRun& b) {
        QVERIFY2(a.error.empty(), a.error.c_str());
        QVERIFY2(b.error.empty(), b.error.c_str());
        QCOMPARE(a.tokens, b.tokens);
        QCOMPARE(a.text, b.text);
        QCOMPARE(a.stats.depth_per_token, b.stats.depth_per_token);
        QCOMPARE(a.stats.spec_accepted, b.stats.spec_accepted);
    }

    // The window of `kind`, opened through its Analysis-menu action.
    AnalysisWindow* trigger(const QString& kind) {
        for (QAction* a : m_window->menuBar()->actions())
            if (a->menu() && a->text().remove('&') == "Analysis")
                for (QAction* v : a->menu()->actions())
                    if (v->objectName() == "viewAction_" + kind) {
                        v->trigger();
                        return m_window->analysisViews()->window(kind);
                    }
        return nullptr;
    }

    // Runs the window's main computation; true when it finished without error.
    static bool runAndFinish(AnalysisWindow* v) {
        QSignalSpy done(v, &AnalysisWindow::workFinished);
        v->run();
        if (!tltest::waitFor([&] { return !v->isBusy() && done.count() > 0; }, 240000)) return false;
        return done.back().at(0).toBool();
    }

    void exportAll(AnalysisWindow* v, const QString& stem) {
        for (const char* suffix : {".png", ".pdf", ".json"}) {
            const QString p = m_dir.filePath(stem + suffix);
            QString err;
            const bool ok = QString(suffix) == ".json" ? v->exportJson(p, &err) : v->exportImage(p, &err);
            QVERIFY2(ok, qPrintable(err));
            QVERIFY(QFileInfo(p).size() > 100);
        }
        std::ifstream f(m_dir.filePath(stem + ".json").toStdString());
        QVERIFY(nlohmann::json::parse(f) == v->data());
    }

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QCoreApplication::setOrganizationName("TinyLoopTest");
        QCoreApplication::setApplicationName("test_analysis_views");
        QVERIFY(m_dir.isValid());
        const StartupModel sm = resolveStartupModel(QString());
        QVERIFY2(!sm.path.isEmpty() && !sm.randomFallback,
                 qPrintable("the bundled model is missing; looked at " + sm.tried.join(", ")));
        m_path = sm.path;
        QVERIFY2(QFileInfo::exists(q4Path()), qPrintable(q4Path() + " is missing"));
        m_model = tinyloop::load_model(m_path.toStdString());
        QVERIFY(m_model);
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        m_window = std::make_unique<MainWindow>(o);
        m_window->show();
        QSignalSpy ready(m_window.get(), &MainWindow::modelReady);
        m_window->openModel(m_path);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        QVERIFY(ready.at(0).at(0).toBool());
    }
    void cleanupTestCase() {
        m_window.reset();
        tinyloop::free_model(m_model);
    }

    // Every job runs on the engine host's one model: no window loads a copy.
    void jobsShareTheWorkbenchModel() {
        AnalysisJobs* jobs = m_window->analysisJobs();
        QVERIFY(jobs);
        QObject owner;
        tinyloop::Model* seen = nullptr;
        QSignalSpy done(jobs, &AnalysisJobs::finished);
        jobs->submit(&owner, [&seen](AnalysisJobContext& ctx) { seen = ctx.model; });
        QVERIFY(tltest::waitFor([&] { return done.count() == 1; }));
        QVERIFY(done.at(0).at(1).toBool());
        QVERIFY(seen != nullptr);
        QCOMPARE(seen, m_window->worker()->sharedModel().get());
        // the workbench's own file through modelAt is that model too
        tinyloop::Model* byPath = nullptr;
        const QString path = m_window->modelPath();
        jobs->submit(&owner, [&byPath, path](AnalysisJobContext& ctx) { byPath = ctx.modelAt(path); });
        QVERIFY(tltest::waitFor([&] { return done.count() == 2; }));
        QCOMPARE(byPath, seen);
    }

    void decodeViewsFromTheMenu() {
        MainWindow& w = *m_window;
        w.setPrompt("In the beginning");
        auto* cmp = qobject_cast<CompareModesView*>(trigger("compare"));
        QVERIFY(cmp && cmp->isVisible());
        cmp->setPrompt("In the beginning");
        cmp->setMaxTokens(8);
        QVERIFY(runAndFinish(cmp));
        QVERIFY2(cmp->lastError().isEmpty(), qPrintable(cmp->lastError()));
        QVERIFY(cmp->result());
        // the bundled file recommends early exit and speculation: its modes as it recommends them
        // (greedy at 2D and D, chain, tree and pipelined verified at D with its knobs, its early exit,
        // sampling)
        const tinyloop::Recommendation& rec = tinyloop::model_recommendation(m_model);
        const int D = tinyloop::model_hparams(m_model).default_loops;
        QVERIFY(rec.has_early_exit() && rec.has_speculation());
        QCOMPARE(cmp->result()->runs.size(), size_t(7));
        const auto& runs = cmp->result()->runs;
        QCOMPARE(runs[1].spec.label, "greedy L=" + std::to_string(D));
        QCOMPARE(runs[2].spec.run.mode, tinyloop::DecodeMode::Speculative);
        QCOMPARE(runs[2].spec.run.speculation.draft_loops, rec.chain.draft_loops);
        QCOMPARE(runs[2].spec.run.speculation.draft_ahead, rec.chain.draft_ahead);
        QCOMPARE(runs[3].spec.run.mode, tinyloop::DecodeMode::Tree);
        QCOMPARE(runs[3].spec.run.speculation.branches, rec.tree.branches);
        QCOMPARE(runs[4].spec.run.mode, tinyloop::DecodeMode::Pipelined);
        QCOMPARE(runs[4].spec.run.speculation.draft_loops, rec.chain.draft_loops);
        QVERIFY(runs[4].stats.spec_sweeps > 0);
        QCOMPARE(runs[5].spec.run.mode, tinyloop::DecodeMode::EarlyExit);
        QCOMPARE(runs[5].spec.run.config.early_exit.threshold, rec.early_exit.threshold);
        for (int i : {2, 3, 4, 5}) QVERIFY(runs[size_t(i)].spec.label.find("(model's)") != std::string::npos);
        QVERIFY(runs[5].mean_depth() < D);
        // honest timings by default: one after another, each mode repeated, medians drawn
        QVERIFY(!cmp->result()->concurrent);
        QCOMPARE(cmp->result()->repeats, kDefaultRepeats);
        for (const ModeRun& r : cmp->result()->runs) QCOMPARE(r.time.samples.size(), size_t(kDefaultRepeats));
        QVERIFY(!cmp->statusText().isEmpty());
        // rates and milliseconds on separate plots; acceptance on its own percent axis
        QCOMPARE(cmp->speedPlot()->yAxis->label(), QString("tokens/s"));
        QCOMPARE(cmp->firstTokenPlot()->yAxis->label(), QString("ms"));
        QVERIFY(cmp->depthPlot()->yAxis2->visible());
        QVERIFY(cmp->depthPlot()->yAxis2->label().contains("%"));
        QCOMPARE(cmp->depthPlot()->plottable(1)->valueAxis(), cmp->depthPlot()->yAxis2);
        for (QCustomPlot* p : {cmp->speedPlot(), cmp->firstTokenPlot(), cmp->depthPlot(), cmp->splitPlot()}) {
            p->replot();
            QVERIFY(!emptyStateItem(p));
            if (p->legend->visible()) QVERIFY(!p->legend->outerRect().intersects(p->axisRect()->rect()));
        }
        const std::vector<int32_t> ids = prompt_ids(m_model, "In the beginning");
        for (const ModeRun& r : cmp->result()->runs) sameRun(r, run_mode(m_model, ids, r.spec));
        QCOMPARE(cmp->table()->rowCount(), 7);
        // the aligned texts mark where each mode leaves the baseline (by default the second mode,
        // greedy at the default depth): chain, tree and pipelined are greedy at that depth, token for token
        const QString shown = cmp->textsView()->toPlainText();
        QCOMPARE(cmp->result()->baseline, 1);
        QCOMPARE(cmp->result()->divergence[2], -1);
        QCOMPARE(cmp->result()->divergence[3], -1);
        QCOMPARE(cmp->result()->divergence[4], -1);
        for (size_t i = 0; i < cmp->result()->runs.size(); ++i) {
            if (i == 1) continue;
            const int div = cmp->result()->divergence[i];
            QVERIFY(shown.contains(QString::fromStdString(cmp->result()->runs[i].spec.label)));
            QVERIFY(shown.contains(div < 0 ? QString("[= baseline]") : QString("[diverges at token %1]").arg(div)));
        }
        cmp->setBaseline(0);  // re-based without running again
        QCOMPARE(cmp->result()->baseline, 0);
        QCOMPARE(cmp->result()->divergence[1], first_divergence(cmp->result()->runs[1].tokens, cmp->result()->runs[0].tokens));
        exportAll(cmp, "compare");

        auto* scr = qobject_cast<DepthScrubberView*>(trigger("scrubber"));
        QVERIFY(scr);
        scr->setPrompt("In the beginning");
        scr->setMaxTokens(8);
        scr->setDepth(4);
        QVERIFY(runAndFinish(scr));  // prefill, then the answer at depth 4
        QVERIFY(tltest::waitFor([&] { return scr->history().size() == 1 && !scr->isBusy(); }));
        scr->setDepth(9);
        QVERIFY(tltest::waitFor([&] { return scr->history().size() == 2 && !scr->isBusy(); }));
        tinyloop::GenerateConfig c;
        c.max_tokens = 8;
        c.loops = 9;
        QCOMPARE(scr->history().back().answer.tokens, continuationOf(plain(m_model, ids, c)));
        QCOMPARE(scr->history().back().previousDepth, 4);
        QCOMPARE(scr->history().back().answer.handle_loops_after, 9);
        exportAll(scr, "scrubber");

        auto* agr = qobject_cast<AgreementMapView*>(trigger("agreement"));
        QVERIFY(agr);
        agr->setPrompt("In the beginning");
        agr->setMaxTokens(12);
        agr->setFinalDepth(4);
        agr->setDraftAhead(3);
        QVERIFY(runAndFinish(agr));
        QVERIFY2(agr->lastError().isEmpty(), qPrintable(agr->lastError()));
        QCOMPARE(agr->result()->rows.size(), size_t(3));
        for (const AgreementRow& r : agr->result()->rows) {
            QCOMPARE(r.replay.accepted, r.measured.spec_accepted);
            QVERIFY(r.sameText);
        }
        exportAll(agr, "agreement");

        auto* swp = qobject_cast<SpeculationSweepView*>(trigger("sweep"));
        QVERIFY(swp);
        swp->setPrompts({"In the beginning"});
        swp->setMaxTokens(8);
        swp->setVerifyLoops(4);
        swp->setGrid("1,2", "2,3", "0");
        QVERIFY(runAndFinish(swp));
        QVERIFY2(swp->lastError().isEmpty(), qPrintable(swp->lastError()));
        QCOMPARE(swp->result()->cells.size(), size_t(4));
        {
            // a best cell only beyond the noise; otherwise the save is refused with the reason
            QString err;
            const QString name = swp->saveBestPreset(&err);
            if (swp->result()->best_cell() >= 0) {
                QVERIFY2(!name.isEmpty(), qPrintable(err));
                QVERIFY(w.presetsPanel()->names().contains(name));
            } else {
                QVERIFY(name.isEmpty());
                QVERIFY2(err.contains("beyond the noise"), qPrintable(err));
            }
            for (const SweepCell& c : swp->result()->cells) QCOMPARE(c.time.samples.size(), size_t(kDefaultRepeats));
        }
        exportAll(swp, "sweep");
        // Cancel lands mid-sweep: the view keeps the cells it finished and says so.
        swp->setPrompts({"In the beginning", "And God said"});
        swp->setMaxTokens(24);
        swp->setVerifyLoops(8);
        swp->setGrid("1,2,3,4,5,6,7", "2,4,6,8", "0,2");
        {
            QSignalSpy prog(swp, &AnalysisWindow::jobProgress);
            QSignalSpy done(swp, &AnalysisWindow::workFinished);
            swp->run();
            QVERIFY(tltest::waitFor([&] { return prog.count() >= 4; }, 120000));
            swp->cancel();
            QVERIFY(tltest::waitFor([&] { return done.count() == 1 && !swp->isBusy(); }, 120000));
            QCOMPARE(done.at(0).at(0).toBool(), false);
            QCOMPARE(swp->lastError(), QString("cancelled"));
            QVERIFY(swp->result()->cancelled);
            int runs = 0;
            for (const SweepCell& c : swp->result()->cells) runs += c.runs;
            QVERIFY(runs < swp->result()->cells_planned * 2);
        }

        auto* stp = qobject_cast<StepModeView*>(trigger("step"));
        QVERIFY(stp);
        stp->setPrompt("In the beginning");
        stp->setConfig(4, 0.0, 1, 6);
        auto* takeId = stp->findChild<QPushButton*>("takeIdButton");
        QVERIFY(takeId);
        QVERIFY(!takeId->isEnabled());  // nothing to take a token into before Start
        QVERIFY(runAndFinish(stp));
        QVERIFY(tltest::waitFor([&] { return stp->snapshot().proposal.has_value() && !stp->isBusy(); }));
        QVERIFY(takeId->isEnabled());
        stp->takeProposals(3);
        QVERIFY(tltest::waitFor([&] { return stp->snapshot().steps.size() == 3 && !stp->isBusy(); }));
        const int32_t pick = stp->snapshot().proposal->lens.back().top_ids.back();  // the 8th candidate
        stp->take(pick);
        QVERIFY(tltest::waitFor([&] { return stp->snapshot().steps.size() == 4 && !stp->isBusy(); }));
        QCOMPARE(stp->snapshot().steps.back().chosen, pick);
        c.loops = 4;
        c.max_tokens = 3;
        const auto first3 = continuationOf(plain(m_model, ids, c));
        for (int i = 0; i < 3; ++i) QCOMPARE(stp->snapshot().steps[static_cast<size_t>(i)].chosen, first3[static_cast<size_t>(i)]);
        exportAll(stp, "step");
    }

    void depthAndExitViewsFromTheMenu() {
        MainWindow& w = *m_window;
        tinyloop::Model* m = m_model;
        w.setPrompt(kPrompt);
        const auto prompt = tinyloop::tokenize(m, kPrompt);

        auto* calib = qobject_cast<ExitCalibrationView*>(trigger("calibration"));
        QVERIFY(calib);
        calib->setMaxTokens(12);
        calib->setLoops(8);
        QVERIFY2(runAndFinish(calib), qPrintable(calib->lastError()));
        calib->setCriterion(C::KL);
        calib->setThreshold(0.3);
        {
            const CalibData d = collect_calibration(m, prompt, 12, 8);
            QCOMPARE(calib->calibData()->tokens, d.tokens);
            tinyloop::EarlyExitPolicy p;
            p.patience = 1;
            p.criterion = C::KL;
            p.threshold = 0.3f;
            const auto want = rescore_calibration(d, p);
            QCOMPARE(calib->scored().size(), want.size());
            for (size_t i = 0; i < want.size(); ++i) {
                QCOMPARE(calib->scored()[i].flagged, want[i].flagged);
                QCOMPARE(calib->scored()[i].exit_depth, want[i].exit_depth);
            }
            QCOMPARE(calib->data()["flagged"].get<int>(),
                     static_cast<int>(std::count_if(want.begin(), want.end(), [](auto& t) { return t.flagged; })));
        }
        // the calibration plot gets the room, and its y label fits the axis
        calib->plot()->replot();
        QVERIFY2(calib->plot()->height() >= 300, qPrintable(QString::number(calib->plot()->height())));
        QVERIFY(QFontMetrics(calib->plot()->yAxis->labelFont()).horizontalAdvance(calib->plot()->yAxis->label()) <
                calib->plot()->axisRect()->height());
        exportAll(calib, "calibration");

        auto* comp = qobject_cast<ComputeQualityView*>(trigger("compute"));
        QVERIFY(comp);
        ComputeSettings s;
        s.depths = {1, 4};
        s.exits = {exit_setting(C::HiddenL2, 0.2f)};
        s.specs = {spec_setting(2, 4)};
        s.decode_tokens = 8;
        comp->setSettings(s);
        comp->setText(kPrompt);
        QVERIFY2(runAndFinish(comp), qPrintable(comp->lastError()));
        QCOMPARE(static_cast<int>(comp->points().size()), 4);
        QCOMPARE(comp->points()[1].nll, tinyloop::score(m, prompt.data(), static_cast<int>(prompt.size()), 4).total_nll /
                                            (static_cast<int>(prompt.size()) - 1));
        comp->setTimeAxis(true);
        exportAll(comp, "compute");

        auto* kv = qobject_cast<KvProvenanceView*>(trigger("kv"));
        QVERIFY(kv);
        {  // opened, it runs at the model's default depth: its map has that many passes' rows
            kv->setMaxTokens(4);
            QVERIFY2(runAndFinish(kv), qPrintable(kv->lastError()));
            tinyloop::GenerateConfig c;
            c.max_tokens = 4;
            c.loops = tinyloop::model_hparams(m).default_loops;
            QVERIFY(c.loops != 8);  // the bundled model's 4: tells the default apart from a fixed depth
            QCOMPARE(kv->kvRun().prov.n_layers, run_kv_provenance(m, prompt, c, KvSetup::Plain).prov.n_layers);
        }
        kv->setSetup(KvSetup::EarlyExit);
        kv->setMaxTokens(12);
        kv->setLoops(8);
        kv->setThreshold(0.2);
        QVERIFY2(runAndFinish(kv), qPrintable(kv->lastError()));
        {
            tinyloop::GenerateConfig c;
            c.max_tokens = 12;
            c.loops = 8;
            c.early_exit.patience = 1;
            c.early_exit.threshold = 0.2f;
            const KvRun want = run_kv_provenance(m, prompt, c, KvSetup::EarlyExit);
            QCOMPARE(kv->kvRun().prov.origin, want.prov.origin);
            QCOMPARE(kv->kvRun().live_bytes, want.live_bytes);
            // KV sharing across passes on the run's tokens: the engine's figures, shown in the view
            QCOMPARE(kv->sharing().size(), size_t(4));
            tinyloop::GenerateConfig sc = c;
            sc.kv_sharing = tinyloop::parse_kv_sharing("last-pass");
            const tinyloop::KVSharingScore last = tinyloop::score_kv_sharing(
                m, want.tokens.data(), static_cast<int>(want.tokens.size()), sc, want.prompt_len);
            QCOMPARE(kv->sharing()[0].kv_sharing, std::string("last-pass"));
            QCOMPARE(kv->sharing()[0].delta_nll, last.delta_nll);
            QCOMPARE(kv->sharing()[0].cache_bytes, last.cache_bytes);
            QVERIFY(last.cache_bytes < last.exact_cache_bytes);
            const QString shown = kv->findChild<QLabel*>("kvSharing")->text();
            QVERIFY2(shown.contains("last-pass") && shown.contains(QString::number(last.bytes_per_token, 'f', 0)),
                     qPrintable(shown));
        }
        {  // a legend for the origins' colours, and memory in the KiB its axis says
            QCustomPlot* map = kv->findChild<QCustomPlot*>("kvMap");
            QCustomPlot* mem = kv->findChild<QCustomPlot*>("kvMemory");
            QVERIFY(map->legend->visible() && map->legend->itemCount() == 4);
            QVERIFY(!map->legend->outerRect().intersects(map->axisRect()->rect()));
            QVERIFY(mem->yAxis->label().contains("KiB"));
            QCOMPARE(mem->graph(0)->data()->at(0)->value, static_cast<double>(kv->kvRun().live_bytes[0]) / 1024.0);
        }
        exportAll(kv, "kv");

        auto* quant = qobject_cast<QuantAcrossDepthView*>(trigger("quant"));
        QVERIFY(quant);
        QCOMPARE(QFileInfo(quant->secondPath()).fileName(), QString("model-q4.tinyloop"));
        quant->setMaxTokens(0);
        quant->setLoops(4);
        QVERIFY2(runAndFinish(quant), qPrintable(quant->lastError()));
        {
            tinyloop::Model* q4 = tinyloop::load_model(q4Path().toStdString());
            const QuantData want = compare_quantized(m, q4, prompt, 4);
            tinyloop::free_model(q4);
            QCOMPARE(quant->quantData().kl, want.kl);
            QCOMPARE(quant->quantData().max_abs_diff, want.max_abs_diff);
        }
        {  // the KL heatmap has its colour bar; legends outside the curves
            QCustomPlot* heat = quant->findChild<QCustomPlot*>("klHeatmap");
            QCPColorScale* scale = nullptr;
            for (int i = 0; i < heat->plotLayout()->elementCount(); ++i)
                if (auto* s = qobject_cast<QCPColorScale*>(heat->plotLayout()->elementAt(i))) scale = s;
            QVERIFY(scale && scale->visible());
            QVERIFY(scale->axis()->label().contains("KL"));
            QVERIFY(scale->dataRange().upper > scale->dataRange().lower);
            for (const char* name : {"trajectories", "divergence"}) {
                QCustomPlot* p = quant->findChild<QCustomPlot*>(name);
                p->replot();
                QVERIFY(!p->legend->outerRect().intersects(p->axisRect()->rect()));
            }
        }
        exportAll(quant, "quant");

        // A second file that is not the same model: the view says why, nothing crashes.
        quant->setSecondPath(tltest::writeTinyModel(m_dir.path(), 3, "other.tinyloop"));
        QVERIFY(!runAndFinish(quant));
        QVERIFY(quant->lastError().contains("vocab_size"));
        // ... and shows nothing of the previous pair: no plot, an empty progress bar, the reason
        QVERIFY(!quant->hasData());
        for (const char* name : {"trajectories", "divergence", "klHeatmap"})
            QCOMPARE(quant->findChild<QCustomPlot*>(name)->plottableCount(), 0);
        auto* bar = quant->findChild<QProgressBar*>("progress");
        QVERIFY(bar && bar->value() < bar->maximum());
        QVERIFY(quant->statusText().contains("vocab_size"));
        QVERIFY(!trigger("nonsense"));
    }

    // The Analysis menu is one family: "..." on every entry (each opens a window), one title form,
    // the Run button and the exports in the bottom bar with the same words, and the inputs row
    // labelled in sentence case, each label naming its field.
    void everyViewFollowsOneConvention() {
        for (QAction* a : m_window->menuBar()->actions())
            if (a->menu() && a->text().remove('&') == "Analysis")
                for (QAction* v : a->menu()->actions())
                    if (!v->isSeparator()) QVERIFY2(v->text().endsWith("..."), qPrintable(v->text()));
        for (const QString& kind : AnalysisViews::kinds()) {
            AnalysisWindow* v = trigger(kind);
            QVERIFY(v);
            QVERIFY2(v->windowTitle().endsWith(" - TinyLoop Workbench"), qPrintable(v->windowTitle()));
            QVERIFY(!v->windowTitle().contains(QChar(0x2014)) && !v->windowTitle().contains(QChar(0x2013)));
            QCOMPARE(v->findChildren<QPushButton*>("runButton").size(), 1);
            QCOMPARE(v->findChild<QPushButton*>("exportImageButton")->text(), QString("Export image (PNG/PDF)..."));
            QCOMPARE(v->findChild<QPushButton*>("exportDataButton")->text(), QString("Export data (JSON)..."));
            auto* strip = v->findChild<InputStrip*>();  // the inputs row, scrolling sideways
            QVERIFY(strip);
            auto* inputs = strip->row();
            for (int i = 0; i < inputs->count(); ++i) {
                auto* label = qobject_cast<QLabel*>(inputs->itemAt(i)->widget());
                if (!label) continue;
                const QString t = label->text();
                QVERIFY2(!t.isEmpty() && (t.at(0).isUpper() || t.contains('_')), qPrintable(kind + ": " + t));
                QVERIFY2(label->buddy(), qPrintable(kind + ": " + t));
            }
            for (auto* form : v->findChildren<QFormLayout*>())
                for (int r = 0; r < form->rowCount(); ++r)
                    if (auto* item = form->itemAt(r, QFormLayout::LabelRole))
                        if (auto* label = qobject_cast<QLabel*>(item->widget())) {
                            const QString t = label->text();
                            QVERIFY2(t.isEmpty() || t.at(0).isUpper() || t.contains('_'), qPrintable(kind + ": " + t));
                        }
            v->close();
        }
    }

    // Closing the workbench closes its analysis windows and ends the lane; a window asked to run
    // afterwards says so instead of touching the gone engine.
    void closingTheWorkbenchEndsTheViews() {
        AnalysisWindow* kv = trigger("kv");
        QVERIFY(kv && kv->isVisible());
        m_window->close();
        QVERIFY(!kv->isVisible());
        QVERIFY(m_window->analysisJobs() == nullptr);
        kv->run();
        QVERIFY(!kv->isBusy());
        QVERIFY2(kv->statusText().contains("shut"), qPrintable(kv->statusText()));
        kv->cancel();  // nothing to cancel: no crash
    }
};

QTEST_MAIN(TestAnalysisViews)
#include "test_analysis_views.moc"
