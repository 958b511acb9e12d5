// What the main window does with a config the engine refuses: the config panel marks the field
// the engine names (max_tokens over max_seq_len - prompt, which no field range alone can see), a
// refused run leaves the previous output and plots on screen, the status bar's "not started: ..."
// goes once the field is fixed, and the refusal line neither moves the form nor widens the dock.
#include <QDockWidget>
#include <QLabel>
#include <QLineEdit>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTest>

#include "main/config_panel.h"
#include "main/main_window.h"
#include "main/token_view.h"
#include "plots/depth_plot.h"
#include "plots/lens_heatmap.h"
#include "window_test_util.h"

using namespace tlui;

class TestConfigRefusals : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_model;

    static void setField(MainWindow& w, const char* key, const QString& text) {
        auto* e = qobject_cast<QLineEdit*>(w.configPanel()->editor(key));
        QVERIFY(e);
        e->setText(text);
    }
    static QString status(MainWindow& w) { return w.findChild<QLabel*>("stateLabel")->text(); }

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY(m_dir.isValid());
        m_model = tltest::writeTinyModel(m_dir.path());  // max_seq_len 256
    }

    void aRefusedRunKeepsTheLastOneAndTheStatusClears() {
        MainWindow w(tltest::quietWindow(m_dir));
        QVERIFY(tltest::loadModel(w, m_model));
        w.setPrompt("a b c d");
        auto c = *w.configPanel()->config();
        c.max_tokens = 6;
        c.ignore_eos = true;
        w.configPanel()->setConfig(c);
        QSignalSpy settled(&w, &MainWindow::sessionSettled);
        QSignalSpy ended(&w, &MainWindow::runEnded);
        QVERIFY(w.generate());
        QVERIFY(tltest::waitFor([&] { return settled.count() == 1; }));
        const QString text = w.tokenView()->toPlainText();
        const int tokens = w.heatmap()->tokenCount();
        QVERIFY(tokens > 0);
        const auto events = w.session().events.size();

        // 256 is inside max_tokens' own range [0, max_seq_len] but not with a 4-token prompt:
        // the run starts before the engine's verdict is in, and the engine refuses it.
        setField(w, "max_tokens", "256");
        QVERIFY(w.generate());
        QVERIFY(tltest::waitFor([&] { return ended.count() == 2; }));
        QCOMPARE(ended.back().at(1).toBool(), false);
        QCOMPARE(w.tokenView()->toPlainText(), text);
        QCOMPARE(w.heatmap()->tokenCount(), tokens);
        QVERIFY(w.heatmap()->isExact());
        QCOMPARE(w.session().events.size(), events);
        QVERIFY2(status(w).contains("max_tokens"), qPrintable(status(w)));

        // The engine's verdict marks the field in the panel, and the next Generate is refused there.
        QVERIFY(tltest::waitFor([&] { return w.configPanel()->message().contains("max_tokens"); }));
        QVERIFY(w.configPanel()->editor("max_tokens")->styleSheet().contains("#d33"));
        QVERIFY(!w.generate());
        QVERIFY2(status(w).startsWith("not started: ") && status(w).contains("max_tokens"), qPrintable(status(w)));

        // Fixed, the stale reason leaves the status bar.
        setField(w, "max_tokens", "8");
        QVERIFY2(tltest::waitFor([&] { return !status(w).startsWith("not started"); }, 5000), qPrintable(status(w)));
        QVERIFY(w.configPanel()->message().isEmpty());
        QVERIFY(w.generate());
        QVERIFY(tltest::waitFor([&] { return settled.count() == 3; }));
        QCOMPARE(w.heatmap()->tokenCount(), 8);
    }

    void theRefusalLineMovesNothing() {
        MainWindow w(tltest::quietWindow(m_dir));
        w.resize(1280, 720);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto* dock = w.findChild<QDockWidget*>("configDock");
        QVERIFY(dock);
        QWidget* field = w.configPanel()->editor("max_tokens");  // the form's first row
        auto where = [&] { return field->mapTo(&w, QPoint(0, 0)); };
        QTest::qWait(50);
        const QPoint before = where();
        const int width = dock->width();
        // a short refusal, then a long one (several lines' worth), then none
        for (const char* text : {"-1", "1.5 is not a probability, and this line is long on purpose so that it wraps "
                                       "over several lines of the dock if the label were allowed to grow",
                                 "0.9"}) {
            setField(w, "top_p", text);
            QTest::qWait(50);
            QCOMPARE(where(), before);
            QCOMPARE(dock->width(), width);
        }
        setField(w, "stop_strings", "[\"" + QString(300, 'x') + " " + QString(300, 'y') + "\"");  // malformed: long reason
        QTest::qWait(50);
        QVERIFY(!w.configPanel()->message().isEmpty());
        QCOMPARE(where(), before);
        QCOMPARE(dock->width(), width);
    }
};

QTEST_MAIN(TestConfigRefusals)
#include "test_config_refusals.moc"
