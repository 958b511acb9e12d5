// The layout audit's checks that read a plot's own drawing: tick labels over each other or past the
// plot's edge, and captions whose colour words contradict the plot's colour scale. Each check is
// shown to find its defect on a plot made to have it and to stay quiet on one without; the main
// window's Timing tab and the quantization view (filled by a real run on the bundled reasoner)
// pass both, at zoom 1 and in presentation mode.
#include <QFileInfo>
#include <QSignalSpy>
#include <QTest>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "main/main_window.h"
#include "base/zoom.h"
#include "plots/layout_audit.h"
#include "plots/plot_caption.h"
#include "plots/plot_layout.h"
#include "plots/timing_plot.h"
#include "views/analysis_views.h"
#include "views/analysis_window.h"
#include "ui_test_util.h"
#include "window_test_util.h"

using namespace tlui;

namespace {

QStringList matching(const QStringList& all, const QString& word) {
    QStringList out;
    for (const QString& d : all)
        if (d.contains(word)) out << d;
    return out;
}

// A captioned plot with a colour map on `gradient` (low values 0, high 1) and `caption` under it.
struct ColourPlot {
    QWidget* box;
    QCustomPlot* plot;
};
ColourPlot colourPlot(const QString& caption, QCPColorGradient::GradientPreset gradient) {
    auto* plot = new QCustomPlot;
    auto* scale = new QCPColorScale(plot);
    plot->plotLayout()->addElement(0, 1, scale);
    auto* map = new QCPColorMap(plot->xAxis, plot->yAxis);
    map->data()->setSize(4, 4);
    map->data()->setRange(QCPRange(0, 3), QCPRange(0, 3));
    for (int i = 0; i < 16; ++i) map->data()->setCell(i % 4, i / 4, i / 15.0);
    map->setGradient(gradient);
    map->setColorScale(scale);
    map->rescaleDataRange(true);
    QWidget* box = withCaption(plot, caption);
    box->resize(500, 400);
    box->show();
    return {box, plot};
}

}  // namespace

class TestLayoutAudit : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY(m_dir.isValid());
    }
    void cleanup() { Zoom::instance().setPresentation(false); }

    void overlappingTickLabelsAreFound() {
        QWidget box;  // the audit looks at the plots inside a window
        auto* layout = new QVBoxLayout(&box);
        auto* p = new QCustomPlot;
        layout->addWidget(p);
        QCustomPlot& plot = *p;
        QSharedPointer<QCPAxisTickerText> ticks(new QCPAxisTickerText);
        ticks->addTick(0, "a rather long label");
        ticks->addTick(1, "another long label");
        ticks->addTick(2, "a third long label");
        plot.xAxis->setTicker(ticks);
        plot.xAxis->setRange(-0.5, 2.5);
        box.resize(220, 200);
        box.show();
        QVERIFY(QTest::qWaitForWindowExposed(&box));
        plot.replot();
        QVERIFY2(!matching(layoutDefects(&box), "overlap").isEmpty(), qPrintable(layoutDefects(&box).join('\n')));
        // wide enough: the same labels side by side, none over another or past the edge
        box.resize(900, 200);
        QTest::qWait(50);
        plot.replot();
        QVERIFY2(layoutDefects(&box).isEmpty(), qPrintable(layoutDefects(&box).join('\n')));
        // the first label hanging past the plot's left edge is cut
        plot.xAxis->setRange(0, 2.5);
        plot.axisRect()->setAutoMargins(QCP::msNone);
        plot.axisRect()->setMargins(QMargins(2, 10, 10, 40));
        plot.replot();
        QVERIFY2(!matching(layoutDefects(&box), "past the plot's edge").isEmpty(), qPrintable(layoutDefects(&box).join('\n')));
    }

    // Mode names under bars (the compare view's depth plot): the right value axis is shown after
    // the bars are drawn, so the axis rect the labels are fitted to must be the one the replot lays
    // out, not the last one. Before the fit laid the plot out first, ten modes at 1920x1080 (a
    // plot ~390 px wide) were slanted for the wider rect and overlapped by 1 px.
    void categoryLabelsFitBesideARightAxis() {
        const QStringList labels = {"greedy L=64", "greedy L=32", "speculative 2->32", "tree 2->32 K=2",
                                    "pipelined 2->32", "early exit l2<0.10", "early exit l2<0.20",
                                    "early exit gate_stop q=0.05", "early exit gate_select q=0.05",
                                    "sampling T=0.8 seed=7"};
        for (int width : {300, 340, 390, 460, 600}) {
            for (int n : {7, 8, 10}) {
                QWidget box;
                auto* layout = new QVBoxLayout(&box);
                auto* plot = new QCustomPlot;
                layout->addWidget(plot);
                box.resize(width, 420);
                box.show();
                QVERIFY(QTest::qWaitForWindowExposed(&box));
                plot->replot();  // laid out once without the right axis, as a view's plot is before its first run
                const QStringList shown = labels.mid(0, n);
                std::vector<double> depth(static_cast<size_t>(n), 32.0), acc(static_cast<size_t>(n), 50.0);
                drawCategoryBars(plot, shown, {depth, acc}, {"mean depth", "acceptance"}, false, "loops");
                plot->yAxis2->setVisible(true);
                plot->yAxis2->setLabel("acceptance (%)");
                plot->yAxis2->setRange(0, 105);
                plot->replot();
                const QStringList defects = matching(layoutDefects(&box), "overlap");
                QVERIFY2(defects.isEmpty(), qPrintable(QString("%1 px, %2 modes: ").arg(width).arg(n) + defects.join('\n')));
            }
        }
    }

    void timingTabLabelsFitAtEverySize_data() {
        QTest::addColumn<int>("width");
        QTest::addColumn<bool>("presentation");
        // about the Timing tab's width in the main window at 1280x720 and 1920x1080
        QTest::newRow("600 px") << 600 << false;
        QTest::newRow("600 px presentation") << 600 << true;
        QTest::newRow("1000 px") << 1000 << false;
        QTest::newRow("1000 px presentation") << 1000 << true;
    }

    void timingTabLabelsFitAtEverySize() {
        QFETCH(int, width);
        QFETCH(bool, presentation);
        Zoom::instance().setPresentation(presentation);
        TimingPlot timing;
        RunSummary a;
        a.id = 1;
        a.mode = "greedy";
        a.tokens = 24;
        a.prefillMs = 31.5;
        a.firstTokenMs = 12.25;
        a.decodeMs = 480.75;
        a.totalMs = 524.5;
        a.tokensPerSecond = 47.8;
        RunSummary b = a;
        b.id = 2;
        b.tokensPerSecond = 51.2;
        timing.setRuns({a, b});
        timing.resize(width, 420);
        timing.show();
        QVERIFY(QTest::qWaitForWindowExposed(&timing));
        timing.plot()->replot();
        const QStringList defects = layoutDefects(&timing);
        QVERIFY2(defects.isEmpty(), qPrintable(defects.join('\n')));
    }

    void captionColourWordsAreCheckedAgainstTheScale() {
        // gpHot: black at the low end, white at the high end
        QCOMPARE(scaleEndLook(QCPColorGradient(QCPColorGradient::gpHot), true), QString("bright"));
        QCOMPARE(scaleEndLook(QCPColorGradient(QCPColorGradient::gpHot), false), QString("dark"));
        QCOMPARE(scaleEndLook(QCPColorGradient(QCPColorGradient::gpGrayscale), false), QString("dark"));
        {  // the quantization view's old words: a colour without the end it stands for
            ColourPlot p = colourPlot("Each cell a KL. Dark is where quantization changed the model's mind.", QCPColorGradient::gpHot);
            QVERIFY(!matching(layoutDefects(p.box), "without the end of the colour scale").isEmpty());
            delete p.box;
        }
        {  // a colour named for the wrong end
            ColourPlot p = colourPlot("Each cell a KL. Dark (high KL) is where quantization changed the model's mind.", QCPColorGradient::gpHot);
            QVERIFY2(!matching(layoutDefects(p.box), "calls the high end dark").isEmpty(), qPrintable(layoutDefects(p.box).join('\n')));
            delete p.box;
        }
        {  // right, on this scale; the same words on a reversed one are wrong
            const QString words = "Each cell a KL. Bright (high KL) is where it changed; dark (KL near 0) where it agrees.";
            ColourPlot p = colourPlot(words, QCPColorGradient::gpHot);
            QVERIFY2(layoutDefects(p.box).isEmpty(), qPrintable(layoutDefects(p.box).join('\n')));
            delete p.box;
            ColourPlot q = colourPlot(words, QCPColorGradient::gpHot);
            q.plot->findChild<QCPColorScale*>()->setGradient(QCPColorGradient(QCPColorGradient::gpHot).inverted());
            QCOMPARE(matching(layoutDefects(q.box), "the colour scale draws it").size(), 2);
            delete q.box;
        }
    }

    void quantizationViewCaptionMatchesItsScale() {
        const QString model = QString(TL_SOURCE_DIR) + "/resources/models/tinyloop-digitsum/model-f32.tinyloop";
        if (!QFileInfo::exists(model)) QSKIP("the bundled reasoner is not there");
        MainWindow w(tltest::quietWindow(m_dir));
        w.resize(1280, 720);
        w.show();
        QVERIFY(tltest::loadModel(w, model));
        bool finished = false, ok = false;
        w.analysisViews()->demo("quant", "2479362?", 4, QString(), [&](bool good) {
            finished = true;
            ok = good;
        });
        QVERIFY(tltest::waitFor([&] { return finished; }, 120000));
        QVERIFY(ok);
        AnalysisWindow* v = w.analysisViews()->window("quant");
        QVERIFY(v);
        QTest::qWait(150);
        const QStringList defects = matching(layoutDefects(v), "caption");
        QVERIFY2(defects.isEmpty(), qPrintable(defects.join('\n')));
        auto* heat = v->findChild<QCustomPlot*>("klHeatmap");
        QVERIFY(heat && captionOf(heat));
        QVERIFY2(captionOf(heat)->caption().contains("Bright (high KL)"), qPrintable(captionOf(heat)->caption()));
        w.analysisViews()->closeAll();
    }
};

QTEST_MAIN(TestLayoutAudit)
#include "test_layout_audit.moc"
