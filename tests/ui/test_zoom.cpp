// Presentation mode and the zoom: Ctrl+plus scales the application font (widgets, the token view,
// tooltips) and every plot's fonts, pens and markers by the factor, in windows already open and
// in ones opened later; Ctrl+0 resets it; the factor is remembered in QSettings (this test's
// XDG_CONFIG_HOME); presentation mode is the preset factor with the toolbars hidden and is not
// remembered; --zoom refuses what is out of range. The dark theme reaches the plots.
#include <QAction>
#include <QApplication>
#include <QLabel>
#include <QSettings>
#include <QTest>
#include <QToolBar>
#include <QToolTip>
#include <qcustomplot.h>

#include "main/config_panel.h"
#include "main/main_window.h"
#include "base/theme.h"
#include "main/token_view.h"
#include "base/zoom.h"
#include "plots/depth_plot.h"
#include "plots/plot_look.h"
#include "views/analysis_views.h"
#include "views/analysis_window.h"
#include "ui_test_util.h"

using namespace tlui;

namespace {

double tickSize(QCustomPlot* p) { return p->xAxis->tickLabelFont().pointSizeF(); }

// The plots redraw on the event loop after a change.
void settle() {
    QCoreApplication::processEvents();
    QTest::qWait(30);
}

}  // namespace

class TestZoom : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

    WindowOptions options() const {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        return o;
    }

private slots:
    void initTestCase() {
        // No QStandardPaths test mode: QSettings lives in this test's XDG_CONFIG_HOME (ui_tests.cmake).
        QCoreApplication::setOrganizationName("TinyLoopTest");
        QCoreApplication::setApplicationName("test_zoom");
        QSettings().clear();
        QVERIFY(m_dir.isValid());
    }

    void init() {
        Zoom::instance().setPresentation(false);
        Zoom::instance().setFactor(1.0, false);
        applyTheme(Theme::Light, false);
    }

    void ctrlPlusScalesFontsAndPlotsAndCtrl0Resets() {
        MainWindow w(options());
        w.show();
        QVERIFY(QTest::qWaitForWindowActive(&w));
        Zoom& zoom = Zoom::instance();
        const double base = zoom.baseFont().pointSizeF();
        QVERIFY(base > 0);
        QCustomPlot* plot = w.depthPlot()->plot();
        QCPGraph* requested = plot->graph(0);
        plot->replot();
        const double tick = tickSize(plot), label = plot->xAxis->labelFont().pointSizeF();
        const double pen = requested->pen().widthF(), legend = plot->legend->font().pointSizeF();
        QCOMPARE(tick, base);

        QTest::keyClick(&w, Qt::Key_Plus, Qt::ControlModifier);
        QCOMPARE(zoom.factor(), 1.1);
        settle();
        QCOMPARE(QApplication::font().pointSizeF(), base * 1.1);
        QCOMPARE(w.tokenView()->font().pointSizeF(), base * 1.1);
        QCOMPARE(w.configPanel()->editor("temperature")->font().pointSizeF(), base * 1.1);
        // a label coloured by a style sheet too
        auto* message = w.configPanel()->findChild<QLabel*>("configMessage");
        QVERIFY(message && !message->styleSheet().isEmpty());
        QCOMPARE(message->font().pointSizeF(), base * 1.1);
        QCOMPARE(QToolTip::font().pointSizeF(), base * 1.1);
        QCOMPARE(tickSize(plot), tick * 1.1);
        QCOMPARE(plot->xAxis->labelFont().pointSizeF(), label * 1.1);
        QCOMPARE(plot->legend->font().pointSizeF(), legend * 1.1);
        QCOMPARE(requested->pen().widthF(), pen * 1.1);

        // twice more: 1.25, 1.5; a view opened now starts there, with its plots
        QTest::keyClick(&w, Qt::Key_Plus, Qt::ControlModifier);
        QTest::keyClick(&w, Qt::Key_Plus, Qt::ControlModifier);
        QCOMPARE(zoom.factor(), 1.5);
        AnalysisWindow* view = w.analysisViews()->open("compare");
        QVERIFY(view);
        QVERIFY(QTest::qWaitForWindowExposed(view));
        settle();
        QCOMPARE(view->font().pointSizeF(), base * 1.5);
        const auto viewPlots = view->findChildren<QCustomPlot*>();
        QVERIFY(!viewPlots.isEmpty());
        for (QCustomPlot* p : viewPlots) {
            p->replot();
            QCOMPARE(p->yAxis->labelFont().pointSizeF(), p->font().pointSizeF() * 1.5);
        }
        // Ctrl+minus from the view (the keys work in every window), then Ctrl+0 resets all
        QVERIFY(QTest::qWaitForWindowActive(view));
        QTest::keyClick(view, Qt::Key_Minus, Qt::ControlModifier);
        QCOMPARE(zoom.factor(), 1.25);
        QTest::keyClick(view, Qt::Key_0, Qt::ControlModifier);
        QCOMPARE(zoom.factor(), 1.0);
        settle();
        QCOMPARE(QApplication::font().pointSizeF(), base);
        QCOMPARE(tickSize(plot), tick);
        QCOMPARE(requested->pen().widthF(), pen);
        QCOMPARE(plot->legend->font().pointSizeF(), legend);
        for (QCustomPlot* p : viewPlots) QCOMPARE(p->yAxis->labelFont().pointSizeF(), p->font().pointSizeF());
        view->close();
    }

    void plotCodeKeepsItsOwnValuesUnderTheZoom() {
        // What a plot's code sets after a zoom change is taken at zoom 1, not scaled twice.
        QCustomPlot plot;
        trackPlotLook(&plot);
        Zoom::instance().setFactor(2.0, false);
        QFont f = plot.font();
        f.setPointSizeF(7);
        auto* text = new QCPItemText(&plot);
        text->setFont(f);
        QCPGraph* g = plot.addGraph();
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 5));
        for (int i = 0; i < 3; ++i) plot.replot();
        QCOMPARE(text->font().pointSizeF(), 14.0);
        QCOMPARE(g->scatterStyle().size(), 10.0);
        f.setPointSizeF(9);
        text->setFont(f);
        plot.replot();
        QCOMPARE(text->font().pointSizeF(), 18.0);
        Zoom::instance().setFactor(1.0, false);
        plot.replot();
        QCOMPARE(text->font().pointSizeF(), 9.0);
        QCOMPARE(g->scatterStyle().size(), 5.0);
    }

    void factorIsRememberedAndPresentationIsNot() {
        MainWindow w(options());
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QSettings().remove("view/zoom");
        auto* zoomIn = w.findChild<QAction*>("zoomInAction");
        QVERIFY(zoomIn);
        zoomIn->trigger();
        zoomIn->trigger();
        QCOMPARE(Zoom::instance().factor(), 1.25);
        QSettings().sync();
        // on disk, in this test's config folder
        const QString file = QSettings().fileName();
        QVERIFY2(file.startsWith(qEnvironmentVariable("XDG_CONFIG_HOME")), qPrintable(file));
        QCOMPARE(QSettings(file, QSettings::IniFormat).value("view/zoom").toDouble(), 1.25);
        // the next start
        Zoom::instance().setFactor(1.0, false);
        Zoom::instance().restoreSaved();
        QCOMPARE(Zoom::instance().factor(), 1.25);

        // F5: the presentation factor and no toolbar; it leaves the remembered factor alone
        auto* toolbar = w.findChild<QToolBar*>("mainToolbar");
        QVERIFY(toolbar && toolbar->isVisible());
        QVERIFY(QTest::qWaitForWindowActive(&w));
        QTest::keyClick(&w, Qt::Key_F5);
        QVERIFY(Zoom::instance().presentation());
        QCOMPARE(Zoom::instance().factor(), Zoom::kPresentation);
        QVERIFY(!toolbar->isVisible());
        QVERIFY(w.findChild<QAction*>("presentationAction")->isChecked());
        QCOMPARE(QSettings().value("view/zoom").toDouble(), 1.25);
        QTest::keyClick(&w, Qt::Key_F5);
        QVERIFY(!Zoom::instance().presentation());
        QCOMPARE(Zoom::instance().factor(), 1.25);
        QVERIFY(toolbar->isVisible());
    }

    void zoomOptionRefusesOutOfRange() {
        QString err;
        QCOMPARE(Zoom::parse("1.5", &err).value_or(0), 1.5);
        QCOMPARE(Zoom::parse(" 0.5", &err).value_or(0), 0.5);
        for (const char* bad : {"0.4", "3.01", "abc", "", "nan", "inf", "-1"}) {
            err.clear();
            QVERIFY2(!Zoom::parse(bad, &err), bad);
            QVERIFY2(err.startsWith("--zoom: '") && err.contains("from 0.5 to 3"), qPrintable(err));
        }
        // steps stop at the ends of the range
        for (int i = 0; i < 20; ++i) Zoom::instance().zoomIn();
        QCOMPARE(Zoom::instance().factor(), Zoom::kMax);
        for (int i = 0; i < 20; ++i) Zoom::instance().zoomOut();
        QCOMPARE(Zoom::instance().factor(), Zoom::kMin);
    }

    void darkThemeReachesThePlotsAndIsRemembered() {
        MainWindow w(options());
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QCustomPlot* plot = w.depthPlot()->plot();
        plot->replot();
        QCOMPARE(plot->xAxis->tickLabelColor(), QColor(Qt::black));
        w.findChild<QAction*>("theme_dark")->trigger();
        QCOMPARE(QSettings().value("view/theme").toString(), QString("dark"));
        settle();
        QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 100);
        QVERIFY(plot->xAxis->tickLabelColor().lightness() > 180);  // light text on a dark plot
        QVERIFY(plot->xAxis->basePen().color().lightness() > 180);
        // a coloured pen keeps its colour
        QCOMPARE(plot->graph(0)->pen().color(), QColor(200, 60, 60));
        w.findChild<QAction*>("theme_light")->trigger();
        settle();
        QCOMPARE(plot->xAxis->tickLabelColor(), QColor(Qt::black));
        QCOMPARE(QSettings().value("view/theme").toString(), QString("light"));
        QString err;
        QVERIFY(!parseTheme("blue", &err));
        QVERIFY(err.contains("--theme") && err.contains("light, dark"));
    }
};

QTEST_MAIN(TestZoom)
#include "test_zoom.moc"
