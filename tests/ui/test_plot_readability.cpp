// Plots a class can read: every analysis plot shows a message (not empty axes or a stray
// threshold line) before its first run; legends sit outside the data; axes that count show whole
// numbers; the lens heatmap names its tokens without overlapping labels and keeps its exit markers
// apart at 16 loops x 234 tokens; compute-vs-quality labels never pile up; the sweep draws only
// valid rows and refuses to call a setting "best" (or save it) unless it beats greedy beyond the
// noise; Compare names the mode that beat the baseline and by how much, and which are too close
// to call. Drawn from hand-made results, so no test depends on this machine's speed.
#include <QAction>
#include <QMenuBar>
#include <QTest>
#include <cmath>
#include <qcustomplot.h>

#include "main/main_window.h"
#include "main/presets_panel.h"
#include "plots/depth_plot.h"
#include "plots/lens_heatmap.h"
#include "plots/plot_layout.h"
#include "plots/token_axis.h"
#include "views/analysis_views.h"
#include "views/compare_modes_view.h"
#include "views/compute_quality_view.h"
#include "views/exit_calibration_view.h"
#include "views/speculation_sweep_view.h"
#include "sweep_test_util.h"
#include "ui_test_util.h"

using namespace tlui;
using tltest::sweepCell;

namespace {

// Every tick label of `axis` at its current layout, as pixel extents along the axis.
struct TickLabel {
    double tick;
    QString text;
    double left, right;
};
std::vector<TickLabel> tickLabels(QCPAxis* axis) {
    std::vector<TickLabel> out;
    const QFontMetricsF fm(axis->tickLabelFont());
    const QVector<double> ticks = axis->tickVector();
    const QVector<QString> labels = axis->tickVectorLabels();
    for (int i = 0; i < ticks.size() && i < labels.size(); ++i) {
        const double c = axis->coordToPixel(ticks[i]);
        const double w = fm.horizontalAdvance(labels[i]);
        out.push_back({ticks[i], labels[i], c - w / 2, c + w / 2});
    }
    return out;
}

// The plot rendered: something other than the background in its middle band (the message).
bool messageDrawn(QCustomPlot* plot) {
    const QImage img = plot->toPixmap(400, 240).toImage();
    int ink = 0;
    for (int y = 100; y < 140; ++y)
        for (int x = 40; x < 360; ++x) ink += qGray(img.pixel(x, y)) < 200 ? 1 : 0;
    return ink > 20;
}

bool integerLabels(QCPAxis* axis) {
    for (const TickLabel& t : tickLabels(axis)) {
        bool ok = false;
        t.text.toInt(&ok);
        if (!ok || t.tick != std::round(t.tick)) return false;
    }
    return !axis->tickVector().isEmpty();
}

}  // namespace

class TestPlotReadability : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    std::unique_ptr<MainWindow> m_window;

    AnalysisWindow* open(const QString& kind) { return m_window->analysisViews()->open(kind); }

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY(m_dir.isValid());
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        m_window = std::make_unique<MainWindow>(o);
        m_window->show();
    }
    void cleanupTestCase() { m_window.reset(); }

    void compareSaysWhoWonAndByHowMuch() {
        auto run = [](const char* label, std::vector<double> ms) {
            ModeRun r;
            r.spec.label = label;
            r.stats.tokens_emitted = 10;
            r.time = summarize(std::move(ms));
            return r;
        };
        CompareResult r;
        r.runs = {run("greedy L=6", {100, 104, 102}), run("early exit", {50, 52, 51}), run("tree", {98, 101, 103}),
                  run("greedy L=12", {200, 205, 210})};
        r.baseline = 0;
        const QString v = compareVerdict(r);
        QVERIFY2(v.startsWith("Against the baseline greedy L=6: early exit won, 2.00x as fast beyond the noise"), qPrintable(v));
        QVERIFY2(v.contains("too close to call: tree"), qPrintable(v));
        QVERIFY2(v.contains("slower: greedy L=12 0.50x"), qPrintable(v));
        // nobody faster beyond the noise: said so, no winner named
        r.runs[1] = run("early exit", {95, 101, 108});
        const QString none = compareVerdict(r);
        QVERIFY2(none.contains("no mode was faster beyond the noise") && !none.contains("won"), qPrintable(none));
    }

    void emptyStateBeforeTheFirstRun() {
        for (const QString kind : {"compare", "scrubber", "agreement", "sweep", "calibration", "compute", "kv", "quant"}) {
            AnalysisWindow* v = open(kind);
            QVERIFY(v);
            QTest::qWait(20);
            const auto plots = v->findChildren<QCustomPlot*>();
            QVERIFY2(!plots.isEmpty(), qPrintable(kind));
            for (QCustomPlot* p : plots) {
                QCPItemText* msg = emptyStateItem(p);
                QVERIFY2(msg && msg->text().startsWith("Run"), qPrintable(kind + "/" + p->objectName()));
                QVERIFY2(!p->xAxis->visible() && !p->yAxis->visible(),
                         qPrintable(kind + "/" + p->objectName() + ": empty axes drawn"));
                QVERIFY2(messageDrawn(p), qPrintable(kind + "/" + p->objectName() + ": the message is not drawn"));
            }
        }
        // no diagonal "threshold line" over the calibration's empty axes
        for (int i = 0; i < qobject_cast<ExitCalibrationView*>(open("calibration"))->plot()->itemCount(); ++i) {
            QCPAbstractItem* it = qobject_cast<ExitCalibrationView*>(open("calibration"))->plot()->item(i);
            if (qobject_cast<QCPItemStraightLine*>(it)) QVERIFY(!it->visible());
        }
    }

    void legendsSitOutsideTheData() {
        QCustomPlot plot;
        plot.resize(600, 400);
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        drawCategoryBars(&plot, {"greedy L=4", "greedy L=8", "speculative 2->8"}, {{400, 300, 500}, {380, 290, 480}, {410, 310, 520}},
                         {"a", "b", "c"}, false, "tokens/s");
        plot.replot();
        QVERIFY(plot.legend->visible());
        QVERIFY(plot.legend->layout() == plot.plotLayout());
        QVERIFY(!plot.legend->outerRect().intersects(plot.axisRect()->rect()));
        // every bar's top stays inside the axis rect (no headroom trick hiding under a legend)
        for (int i = 0; i < plot.plottableCount(); ++i) {
            auto* bars = qobject_cast<QCPBars*>(plot.plottable(i));
            for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it)
                QVERIFY(plot.axisRect()->rect().contains(QPoint(int(plot.xAxis->coordToPixel(it->key)),
                                                                int(plot.yAxis->coordToPixel(it->value)) + 1)));
        }
        clearEmptyState(&plot);  // harmless without one
        // on a narrow plot the entries wrap instead of running off its edge
        QCustomPlot narrow;
        narrow.resize(320, 300);
        narrow.show();
        QVERIFY(QTest::qWaitForWindowExposed(&narrow));
        QCOMPARE(narrow.viewport().width(), 320);
        drawCategoryBars(&narrow, {"D=1", "D=2"}, {{60, 70}, {40, 50}, {40, 52}},
                         {"predicted per token (map)", "map replayed as speculation", "measured speculating"}, false, "%");
        narrow.replot();
        narrow.replot();
        int entries = 0;
        for (int i = 0; i < narrow.legend->itemCount(); ++i)
            if (QCPAbstractLegendItem* item = narrow.legend->item(i)) {  // a wrapped grid has empty cells
                ++entries;
                QVERIFY2(narrow.viewport().contains(item->outerRect()), qPrintable(QString::number(i)));
                // squeezed below its size hint, an entry's text is cut
                QVERIFY2(item->outerRect().width() >= item->minimumOuterSizeHint().width(), qPrintable(QString::number(i)));
            }
        QCOMPARE(entries, 3);
    }

    void countingAxesShowWholeNumbers() {
        // before a run the main window's plots say what they will show instead of empty axes
        for (QCustomPlot* p : m_window->findChildren<QCustomPlot*>())
            if (p->objectName() == "depthPlot" || p->objectName() == "lensPlot" || p->objectName() == "timingPlot")
                QVERIFY2(emptyStateItem(p) && messageDrawn(p), qPrintable(p->objectName()));
        DepthPlot depth;
        depth.resize(500, 300);
        depth.show();
        depth.clear(4);
        for (int i = 0; i < 4; ++i) depth.addToken(i, 2 + i % 2);
        depth.refresh();
        QCustomPlot* p = depth.findChild<QCustomPlot*>();
        QVERIFY(!emptyStateItem(p));
        p->yAxis->setRange(0.5, 4.5);  // once read 0.5, 1, 1.5 ... loops
        p->xAxis->setRange(-0.5, 3.5);
        p->replot();
        QVERIFY(integerLabels(p->yAxis));
        QVERIFY(integerLabels(p->xAxis));
        QCustomPlot bare;
        useIntegerTicks(bare.yAxis);
        bare.yAxis->setRange(0, 3);
        bare.replot();
        QVERIFY(integerLabels(bare.yAxis));
    }

    void lensAxisNamesTokensWithoutOverlap() {
        LensHeatmap h;
        h.resize(900, 420);
        h.show();
        QStringList vocab;
        for (int i = 0; i < 50; ++i) vocab << QString(" word%1").arg(i);
        vocab << "\n";
        h.setVocab(vocab);
        h.clear(16);
        const int n = 234;
        for (int k = 0; k < n; ++k) {
            tinyloop::TokenEvent ev;
            ev.token = k % 51;
            ev.depth = 16 - (k % 5);
            h.addEvent(ev);
        }
        h.refresh();
        h.plot()->replot();
        h.plot()->replot();
        const std::vector<TickLabel> labels = tickLabels(h.plot()->xAxis);
        QVERIFY(labels.size() >= 5);          // named, not left bare
        QVERIFY(labels.size() < size_t(n));   // thinned
        for (size_t i = 0; i < labels.size(); ++i) {
            const int k = static_cast<int>(labels[i].tick);
            QCOMPARE(labels[i].text, TokenAxisTicker::displayText(vocab[k % 51]));  // tokens, not numbers
            if (i > 0) QVERIFY2(labels[i - 1].right < labels[i].left, qPrintable(labels[i - 1].text + " / " + labels[i].text));
        }
        QVERIFY(integerLabels(h.plot()->yAxis));
        // exits: a step line that cannot merge into a band, markers only where they fit a cell
        QCOMPARE(h.exitLine()->lineStyle(), QCPGraph::lsStepCenter);
        const double colPx = h.plot()->xAxis->coordToPixel(1) - h.plot()->xAxis->coordToPixel(0);
        QVERIFY(h.exitMarkerSize() < colPx);
        // a short run in the same space: each exit cell gets its own marker
        h.clear(16);
        for (int k = 0; k < 12; ++k) {
            tinyloop::TokenEvent ev;
            ev.token = k;
            ev.depth = 4 + k % 3;
            h.addEvent(ev);
        }
        h.refresh();
        h.plot()->replot();
        QVERIFY(h.exitMarkerSize() >= 5);
        QVERIFY(h.exitMarkerSize() < h.plot()->xAxis->coordToPixel(1) - h.plot()->xAxis->coordToPixel(0));
    }

    void computeLabelsNeverPileUp() {
        auto* v = qobject_cast<ComputeQualityView*>(open("compute"));
        QVERIFY(v);
        std::vector<ComputePoint> pts;
        for (int i = 0; i < 24; ++i) {  // a crowd: near-equal cost and quality
            ComputePoint p;
            p.series = i < 12 ? "early exit hidden_l2" : "early exit kl";
            p.label = (i < 12 ? "hidden_l2<0." : "kl<0.") + std::to_string(i);
            p.mean_depth = 3.0 + 0.02 * i;
            p.nll = 2.0 + 0.001 * (i % 7);
            p.ms = summarize({1.0, 1.1, 1.3});
            p.ms_per_token = p.ms.median;
            pts.push_back(p);
        }
        v->showPoints(pts, 40);
        QTest::qWait(20);
        QCustomPlot* plot = v->plot();
        plot->replot();
        std::vector<QRectF> shown;
        for (QCPItemText* l : v->pointLabels()) {
            if (!l->visible()) continue;
            const QRectF r(l->topLeft->pixelPosition(), l->bottomRight->pixelPosition());
            for (const QRectF& o : shown) QVERIFY2(!r.intersects(o), qPrintable(l->text()));
            for (const ComputePoint& p : pts)
                QVERIFY(!r.contains(QPointF(plot->xAxis->coordToPixel(p.mean_depth), plot->yAxis->coordToPixel(p.nll))));
            shown.push_back(r);
        }
        QVERIFY(!shown.empty());
        // the hidden ones are on hover
        const QPointF at(plot->xAxis->coordToPixel(pts[5].mean_depth), plot->yAxis->coordToPixel(pts[5].nll));
        QVERIFY(v->hoverText(at).contains("hidden_l2<0."));
        QVERIFY(!plot->legend->outerRect().intersects(plot->axisRect()->rect()));
    }

    void sweepDrawsValidRowsAndRefusesANoisyBest() {
        auto* v = qobject_cast<SpeculationSweepView*>(open("sweep"));
        QVERIFY(v);
        SweepResult r;
        r.spec.prompts = {"In the beginning"};
        r.spec.max_tokens = 8;
        r.spec.draft_loops = {1, 2, 8, 9};  // 8 and 9 are not below the verify depth
        r.spec.draft_ahead = {2, 4};
        r.verify_loops = 8;
        const std::vector<double> greedy = {10.0, 10.5, 11.0};
        // the case: one run 1.48x, the next 0.77x
        r.cells = {sweepCell(1, 2, {6.8, 9.0, 14.3}, greedy), sweepCell(1, 4, {12, 12.5, 13}, greedy),
                   sweepCell(2, 2, {11.5, 12, 12.2}, greedy), sweepCell(2, 4, {10.2, 10.8, 11.5}, greedy)};
        r.cells_planned = 4;
        v->showSweep(r);
        QTest::qWait(20);
        // rows: draft_loops 1 and 2 only
        QCustomPlot* map = v->speedupMap();
        map->replot();
        QCPAxis* rows = map->axisRect()->axis(QCPAxis::atLeft);
        QStringList rowLabels;
        for (const QString& s : rows->tickVectorLabels()) rowLabels << s;
        QCOMPARE(rowLabels, QStringList({"1", "2"}));
        QVERIFY(rows->range().upper <= 1.5);
        QVERIFY(!emptyStateItem(map));
        // nothing beats greedy beyond the noise: no "best", and saving says why
        QVERIFY2(v->bestText().startsWith("No best setting"), qPrintable(v->bestText()));
        QString err;
        QVERIFY(v->saveBestPreset(&err).isEmpty());
        QVERIFY2(err.contains("beyond the noise"), qPrintable(err));
        QVERIFY(v->data()["best_cell"].get<int>() < 0);
        // a clear winner is named and saved
        r.cells.push_back(sweepCell(2, 6, {6.0, 6.2, 6.5}, greedy));
        v->showSweep(r);
        QVERIFY2(v->bestText().startsWith("Best:"), qPrintable(v->bestText()));
        const QString name = v->saveBestPreset(&err);
        QVERIFY2(!name.isEmpty(), qPrintable(err));
        QVERIFY(m_window->presetsPanel()->names().contains(name));
        QVERIFY(!v->scatterPlot()->legend->outerRect().intersects(v->scatterPlot()->axisRect()->rect()));
    }
};

QTEST_MAIN(TestPlotReadability)
#include "test_plot_readability.moc"
