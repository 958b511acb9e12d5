// Every window fits the screen it opens on: the main window and each Analysis-menu window, at zoom 1
// and in presentation mode, on a 1280x720 and a 1920x1080 screen (the offscreen platform is given
// both screens through its configfile option, side by side); at 1280x720 the config panel shows
// every field's range in full, wrapped, with no sideways scrolling; and every window, filled by a
// real run on the bundled model, shows no layout defect (plots/layout_audit: no cut caption, label
// or combo text, no legend over data or caption), each tab of a plot deck in turn; every step of
// the tour at 1280x720, in both modes, keeps the window, its status bar, the tour's Back / Next /
// Close and the step's own window on the screen (and off the panel), walks by its keys, and gives
// the window back its size when closed.
#include <memory>

#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QFileInfo>
#include <QGuiApplication>
#include <QLabel>
#include <QScreen>
#include <QScrollArea>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollBar>
#include <QStatusBar>
#include <QSettings>
#include <QTabWidget>
#include <QSignalSpy>
#include <QTest>

#include "base/config_json.h"
#include "main/config_panel.h"
#include "main/main_window.h"
#include "base/screen_fit.h"
#include "main/tour.h"
#include "base/zoom.h"
#include "plots/layout_audit.h"
#include "plots/plot_caption.h"
#include "plots/plot_deck.h"
#include "views/analysis_views.h"
#include "views/analysis_window.h"
#include "ui_test_util.h"

using namespace tlui;

namespace {

const QRect kSmall(0, 0, 1280, 720);
const QRect kLarge(1280, 0, 1920, 1080);

QScreen* screenAt(const QRect& g) {
    for (QScreen* s : QGuiApplication::screens())
        if (s->geometry() == g) return s;
    return nullptr;
}

QString describe(const QWidget* w, const QRect& screen) {
    return QString("%1: frame %2,%3 %4x%5 (minimum %6x%7) on a %8x%9 screen at %10,%11")
        .arg(w->objectName()).arg(w->frameGeometry().x()).arg(w->frameGeometry().y())
        .arg(w->frameGeometry().width()).arg(w->frameGeometry().height())
        .arg(w->minimumSizeHint().width()).arg(w->minimumSizeHint().height())
        .arg(screen.width()).arg(screen.height()).arg(screen.x()).arg(screen.y());
}

}  // namespace

class TestScreenFit : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

    // A main window opened on `screen` and sized as main() sizes it (the same call as its --size).
    std::unique_ptr<MainWindow> openOn(const QRect& screen, bool presentation) const {
        Zoom::instance().setPresentation(presentation);
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        auto w = std::make_unique<MainWindow>(o);
        w->move(screen.topLeft() + QPoint(20, 20));
        fitToScreen(w.get(), QSize(1400, 900));
        w->show();
        return w;
    }

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QCoreApplication::setOrganizationName("TinyLoopTest");
        QCoreApplication::setApplicationName("test_screen_fit");
        QSettings().clear();
        QVERIFY(m_dir.isValid());
        QVERIFY2(screenAt(kSmall) && screenAt(kLarge), "the offscreen platform did not take the two screens");
        QCOMPARE(screenAt(kSmall)->availableGeometry(), kSmall);
    }

    void cleanup() { Zoom::instance().setPresentation(false); }

    void fittedFrameStaysInside() {
        // the helper on its own, for any screen: shrunk to it, centred, pushed back inside
        const QRect f = fittedFrame(QSize(1400, 900), QSize(8, 32), kSmall);
        QVERIFY(kSmall.contains(f));
        QCOMPARE(f.size(), kSmall.size());
        const QRect g = fittedFrame(QSize(1100, 760), QSize(8, 32), kLarge, QPoint(3190, 10));
        QVERIFY(kLarge.contains(g));
        QCOMPARE(g.size(), QSize(1108, 792));
        QCOMPARE(g.right(), kLarge.right());
        QCOMPARE(g.top(), kLarge.top());
    }

    void everyWindowFits_data() {
        QTest::addColumn<QRect>("screen");
        QTest::addColumn<bool>("presentation");
        QTest::newRow("1280x720") << kSmall << false;
        QTest::newRow("1280x720 presentation") << kSmall << true;
        QTest::newRow("1920x1080") << kLarge << false;
        QTest::newRow("1920x1080 presentation") << kLarge << true;
    }

    void everyWindowFits() {
        QFETCH(QRect, screen);
        QFETCH(bool, presentation);
        auto window = openOn(screen, presentation);
        MainWindow& w = *window;
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QCOMPARE(w.screen()->geometry(), screen);
        QVERIFY2(screen.contains(w.frameGeometry()), qPrintable(describe(&w, screen)));
        // a long status line (a failed load names the file) wraps instead of widening the window
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(m_dir.filePath(QString(200, 'x') + ".tinyloop"));
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        QTest::qWait(50);
        QVERIFY2(screen.contains(w.frameGeometry()), qPrintable(describe(&w, screen)));
        for (const QString& kind : AnalysisViews::kinds()) {
            AnalysisWindow* v = w.analysisViews()->open(kind);
            QVERIFY(v);
            QVERIFY(QTest::qWaitForWindowExposed(v));
            QVERIFY2(screen.contains(v->frameGeometry()), qPrintable(describe(v, screen)));
            v->close();
        }
    }

    void filledWindowsHaveNoLayoutDefects_data() {
        QTest::addColumn<QRect>("screen");
        QTest::addColumn<bool>("presentation");
        QTest::newRow("1280x720") << kSmall << false;
        QTest::newRow("1280x720 presentation") << kSmall << true;
        QTest::newRow("1920x1080") << kLarge << false;
    }

    void filledWindowsHaveNoLayoutDefects() {
        QFETCH(QRect, screen);
        QFETCH(bool, presentation);
        const QString model = QString(TL_SOURCE_DIR) + "/resources/models/tinyloop-kjv/model-f32.tinyloop";
        if (!QFileInfo::exists(model)) QSKIP("the bundled model is not there");
        auto window = openOn(screen, presentation);
        MainWindow& w = *window;
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QSignalSpy ready(&w, &MainWindow::modelReady);
        QSignalSpy settled(&w, &MainWindow::sessionSettled);
        w.openModel(model);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        auto c = *w.configPanel()->config();
        c.max_tokens = 16;
        w.configPanel()->setConfig(c);
        QVERIFY(w.generate());
        QVERIFY(tltest::waitFor([&] { return settled.count() == 1; }));
        QTest::qWait(100);
        // what a run puts on screen (the lens note, the status line, the tokens) stays inside too
        QVERIFY2(screen.contains(w.frameGeometry()), qPrintable(describe(&w, screen)));
        QStringList defects;
        auto audit = [&defects](QWidget* win, const QString& where) {
            QTest::qWait(150);  // queued replots and relayouts
            for (const QString& d : layoutDefects(win)) defects << where + ": " + d;
            for (PlotDeck* deck : win->findChildren<PlotDeck*>()) {
                if (!deck->tabbed()) continue;
                for (int i = 1; i < deck->tabs()->count(); ++i) {
                    deck->tabs()->setCurrentIndex(i);
                    QTest::qWait(150);
                    for (const QString& d : layoutDefects(win)) defects << where + " tab " + deck->tabs()->tabText(i) + ": " + d;
                }
                deck->tabs()->setCurrentIndex(0);
            }
        };
        for (int tab = 0; tab < w.plotTabs()->count(); ++tab) {
            w.plotTabs()->setCurrentIndex(tab);
            audit(&w, "main window, tab " + w.plotTabs()->tabText(tab));
        }
        for (const QString& kind : AnalysisViews::kinds()) {
            bool finished = false, ok = false;
            w.analysisViews()->demo(kind, "In the beginning God created", 12, QString(), [&](bool good) {
                finished = true;
                ok = good;
            });
            QVERIFY2(tltest::waitFor([&] { return finished; }, 120000), qPrintable(kind));
            QVERIFY2(ok, qPrintable(kind + " could not be filled"));
            AnalysisWindow* v = w.analysisViews()->window(kind);
            QVERIFY(v);
            if (!screen.contains(v->frameGeometry())) defects << "outside the screen: " + describe(v, screen);
            audit(v, "view " + kind);
            v->close();
        }
        for (const QString& d : defects) qWarning("layout defect: %s", qPrintable(d));
        QVERIFY2(defects.isEmpty(), qPrintable(QString("%1 layout defects (listed above); the first: %2")
                                                   .arg(defects.size()).arg(defects.value(0))));
    }

    void tourStaysOnTheScreen_data() {
        QTest::addColumn<bool>("presentation");
        QTest::newRow("1280x720") << false;
        QTest::newRow("1280x720 presentation") << true;
    }

    void tourStaysOnTheScreen() {
        QFETCH(bool, presentation);
        if (bundledModelPath("tinyloop-kjv").isEmpty() || bundledModelPath("tinyloop-digitsum").isEmpty())
            QSKIP("the bundled models are not there");
        const QRect screen = kSmall;
        auto window = openOn(screen, presentation);
        MainWindow& w = *window;
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        const QRect before = w.frameGeometry();
        Tour* tour = w.startTour(0);
        auto inside = [&](const QWidget* x) { return screen.contains(QRect(x->mapToGlobal(QPoint(0, 0)), x->size())); };
        auto where = [](const QWidget* x) {
            const QRect r(x->mapToGlobal(QPoint(0, 0)), x->size());
            return QString("%1 at %2,%3 %4x%5").arg(x->objectName()).arg(r.x()).arg(r.y()).arg(r.width()).arg(r.height());
        };
        for (int step = 0; step < tour->count(); ++step) {
            if (step > 0) {  // the key a presenter presses, sent to the window the last step pointed at
                QWidget* focus = tour->stepWindow();
                focus->activateWindow();
                QTest::keyClick(focus, Qt::Key_Right, Qt::AltModifier);
            }
            QVERIFY2(tltest::waitFor([&] { return tour->current() == step && !tour->isBusy(); }, 120000),
                     qPrintable(QString("step %1 did not finish (at %2)").arg(step + 1).arg(tour->current() + 1)));
            QVERIFY2(tour->stepError().isEmpty(), qPrintable(tour->stepError()));
            QTest::qWait(150);  // the relayout after the step's tab or window came up
            const QString at = QString("step %1: ").arg(step + 1);
            QVERIFY2(screen.contains(w.frameGeometry()), qPrintable(at + describe(&w, screen)));
            QVERIFY2(inside(w.statusBar()), qPrintable(at + "the status bar " + where(w.statusBar())));
            for (const char* name : {"tourBack", "tourNext", "tourClose"}) {
                auto* b = tour->panel()->findChild<QPushButton*>(name);
                QVERIFY(b && b->isVisible());
                QVERIFY2(inside(b), qPrintable(at + where(b) + " leaves the screen"));
            }
            for (const QString& d : layoutDefects(&w)) QFAIL(qPrintable(at + d));
            // the words: every tab a step names is a tab, and "on the right" is where the plots are
            const QString look = PlotCaption::toPlainText(tourSteps()[static_cast<size_t>(step)].look);
            static const QRegularExpression tabName("The ([A-Z][\\w ]+?) tab");
            for (auto m = tabName.globalMatch(look); m.hasNext();) {
                const QString name = m.next().captured(1);
                bool found = false;
                for (int t = 0; t < w.plotTabs()->count(); ++t) found = found || w.plotTabs()->tabText(t) == name;
                QVERIFY2(found, qPrintable(at + "the text names a tab \"" + name + "\" the window does not have"));
            }
            if (look.contains("on the right"))
                QVERIFY2(w.plotTabs()->mapTo(&w, w.plotTabs()->rect().center()).x() > w.width() / 2,
                         qPrintable(at + "the text says the plots are on the right; they are not"));
            if (QWidget* other = tour->stepWindow(); other != &w) {
                QVERIFY2(screen.contains(other->frameGeometry()), qPrintable(at + describe(other, screen)));
                const QRect panel(tour->panel()->mapToGlobal(QPoint(0, 0)), tour->panel()->size());
                QVERIFY2(!other->frameGeometry().intersects(panel),
                         qPrintable(at + describe(other, screen) + " covers the tour panel " + where(tour->panel())));
            }
        }
        QTest::keyClick(&w, Qt::Key_Left, Qt::AltModifier);  // back, by its key
        QVERIFY(tltest::waitFor([&] { return tour->current() == tour->count() - 2 && !tour->isBusy(); }, 120000));
        w.activateWindow();
        QTest::keyClick(&w, Qt::Key_W, Qt::ControlModifier);  // close, by its key
        QVERIFY(!tour->panel()->isVisible());
        QTest::qWait(100);
        QCOMPARE(w.frameGeometry(), before);
        w.analysisViews()->closeAll();
    }

    void configPanelShowsEveryRangeAt1280x720_data() {
        QTest::addColumn<bool>("presentation");
        QTest::newRow("zoom 1") << false;
        QTest::newRow("presentation") << true;
    }

    void configPanelShowsEveryRangeAt1280x720() {
        QFETCH(bool, presentation);
        auto window = openOn(kSmall, presentation);
        MainWindow& w = *window;
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto* scroll = w.configPanel()->findChild<QScrollArea*>("configScroll");
        QVERIFY(scroll);
        QVERIFY(!scroll->horizontalScrollBar()->isVisible());
        QWidget* viewport = scroll->viewport();
        for (const FieldInfo& f : configFields()) {
            auto* range = w.configPanel()->findChild<QLabel*>(QString("range_") + f.key);
            QVERIFY2(range, f.key);
            scroll->ensureWidgetVisible(range);
            const QRect r(range->mapTo(viewport, QPoint(0, 0)), range->size());
            QVERIFY2(r.left() >= 0 && r.right() < viewport->width(), qPrintable(QString("%1's range runs off the panel").arg(f.key)));
            QVERIFY2(range->height() >= range->heightForWidth(range->width()),
                     qPrintable(QString("%1's range is cut: %2 px tall, needs %3").arg(f.key).arg(range->height())
                                    .arg(range->heightForWidth(range->width()))));
            QWidget* editor = w.configPanel()->editor(f.key);
            QVERIFY(editor->mapTo(viewport, QPoint(editor->width(), 0)).x() <= viewport->width());
        }
    }
};

int main(int argc, char** argv) {
    // Two screens side by side for the offscreen platform (it has one 800x600 screen otherwise).
    const QString config = QDir::temp().filePath(QString("tinyloop-test-screens-%1.json").arg(QCoreApplication::applicationPid()));
    QFile f(config);
    if (!f.open(QIODevice::WriteOnly)) return 1;
    f.write(R"({"windowFrameMargins": true, "screens": [
        {"name": "small", "x": 0, "y": 0, "width": 1280, "height": 720, "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1},
        {"name": "large", "x": 1280, "y": 0, "width": 1920, "height": 1080, "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]})");
    f.close();
    qputenv("QT_QPA_PLATFORM", ("offscreen:configfile=" + config).toLocal8Bit());
    int rc = 0;
    {
        QApplication app(argc, argv);
        TestScreenFit t;
        rc = QTest::qExec(&t, argc, argv);
    }
    QFile::remove(config);
    return rc;
}

#include "test_screen_fit.moc"
