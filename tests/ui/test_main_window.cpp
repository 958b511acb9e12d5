// Opening a corrupt model shows an error dialog and the previous model stays loaded and usable;
// the model panel shows hyperparameters and the metadata's per-depth table; a random model says
// its text is noise; Ctrl+Enter in the prompt generates; recent files are remembered; an empty
// prompt is refused (as the CLI refuses it) and a file that is not a model is called that.
#include <QComboBox>
#include <QFileInfo>
#include <QLabel>
#include <QMessageBox>
#include <QSettings>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTest>
#include <QTreeWidget>

#include "main/config_panel.h"
#include "main/main_window.h"
#include "main/model_panel.h"
#include "main/model_paths.h"
#include "record/session.h"
#include "main/token_view.h"
#include "ui_test_util.h"
#include "window_test_util.h"

using namespace tlui;

class TestMainWindow : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_model;

    static bool treeHas(QTreeWidget* t, const QString& key, const QString& value) {
        for (auto* it : t->findItems(key, Qt::MatchExactly | Qt::MatchRecursive, 0))
            if (it->text(1) == value) return true;
        return false;
    }

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QCoreApplication::setOrganizationName("TinyLoopTest");
        QCoreApplication::setApplicationName("test_main_window");
        QSettings().clear();
        QVERIFY(m_dir.isValid());
        // a model whose metadata carries a per-depth table, like the bundled one
        auto spec = tinyloop::random_model_spec(tltest::tinyHParams(), 11);
        spec.metadata_json = R"({"name": "tiny-test", "per_depth_validation": [
            {"L": 1, "val_loss": 5.5}, {"L": 2, "val_loss": 5.25}, {"L": 3, "val_loss": 5.0}]})";
        m_model = m_dir.filePath("with-meta.tinyloop");
        tinyloop::save_model(m_model.toStdString(), spec);
    }

    void corruptModelShowsErrorAndPreviousStaysUsable() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        MainWindow w(o);
        w.show();
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(m_model);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        QCOMPARE(ready.at(0).at(0).toBool(), true);
        const QString before = w.modelPath();

        const QString corrupt = tltest::writeCorruptModel(m_dir.path());
        w.openModel(corrupt);
        QVERIFY(w.isLoading());
        QVERIFY(tltest::waitFor([&] { return ready.count() == 2; }));
        QCOMPARE(ready.at(1).at(0).toBool(), false);
        // the user sees an error dialog naming the file
        auto* box = w.findChild<QMessageBox*>("errorDialog");
        QVERIFY(box);
        QVERIFY(box->isVisible());
        QVERIFY(box->text().contains("corrupt.tinyloop"));
        QVERIFY(box->text().contains("stays loaded"));
        QVERIFY(!w.lastError().isEmpty());
        box->accept();
        // a missing file too
        w.openModel(m_dir.filePath("does-not-exist.tinyloop"));
        QVERIFY(tltest::waitFor([&] { return ready.count() == 3; }));
        QCOMPARE(ready.at(2).at(0).toBool(), false);

        // the previous model is still the one loaded, and it still generates
        QCOMPARE(w.modelPath(), before);
        QVERIFY(w.hasModel());
        QVERIFY(!w.isLoading());
        auto c = *w.configPanel()->config();
        c.max_tokens = 6;
        c.ignore_eos = true;
        w.configPanel()->setConfig(c);
        QSignalSpy ended(&w, &MainWindow::runEnded);
        QVERIFY(w.generate());
        QVERIFY(tltest::waitFor([&] { return ended.count() == 1; }));
        QCOMPARE(ended.at(0).at(1).toBool(), true);
        QCOMPARE(w.session().run.stats.tokens_emitted, 6);
        QCOMPARE(w.tokenView()->tokenCount(), 6);
    }

    void emptyPromptIsRefused() {
        MainWindow w(tltest::quietWindow(m_dir));
        QVERIFY(tltest::loadModel(w, m_model));
        w.setPrompt(QString());
        QSignalSpy started(w.worker(), &EngineHost::runStarted);
        QVERIFY(!w.generate());
        QVERIFY(!w.isRunning());
        const QString status = w.findChild<QLabel*>("stateLabel")->text();
        QVERIFY2(status.contains("prompt") && status.contains("empty"), qPrintable(status));
        QTest::qWait(100);
        QCOMPARE(started.count(), 0);
        QVERIFY(w.session().events.empty());
        // one character is enough
        w.setPrompt("a");
        QSignalSpy ended(&w, &MainWindow::runEnded);
        auto c = *w.configPanel()->config();
        c.max_tokens = 2;
        w.configPanel()->setConfig(c);
        QVERIFY(w.generate());
        QVERIFY(tltest::waitFor([&] { return ended.count() == 1; }));
    }

    void nonModelFileIsCalledThat() {
        MainWindow w(tltest::quietWindow(m_dir));
        const QString text = m_dir.filePath("notes.txt");
        QFile f(text);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray("These are my lesson notes, not a model. ").repeated(4));
        f.close();
        QVERIFY(!tltest::loadModel(w, text));
        QVERIFY2(w.lastError().contains("not a TinyLoop model") && !w.lastError().contains("allowed TINYLOOP"),
                 qPrintable(w.lastError()));
    }

    void modelPanelShowsTheModel() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        MainWindow w(o);
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(m_model);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        ModelPanel* p = w.modelPanel();
        QVERIFY(treeHas(p->tree(), "d_model", "64"));
        QVERIFY(treeHas(p->tree(), "default_loops / max_loops", "3 / 6"));
        QVERIFY(treeHas(p->tree(), "vocab_size", "300"));
        QVERIFY(treeHas(p->tree(), "loop_input", "none"));
        QVERIFY(!p->tree()->findItems("f32", Qt::MatchExactly | Qt::MatchRecursive, 0).isEmpty());
        QVERIFY(!p->tree()->findItems("resident weights", Qt::MatchExactly | Qt::MatchRecursive, 0).isEmpty());
        QCOMPARE(p->depthTable()->rowCount(), 3);
        QCOMPARE(p->depthTable()->item(1, 1)->text(), QString("5.25"));
        QVERIFY(p->summaryLine().startsWith("tiny-test"));
        QVERIFY(!w.windowTitle().contains("noise"));
        // recent files remember it
        QVERIFY(QSettings().value("recentFiles").toStringList().contains(w.modelPath()));
        // the config limits follow the model
        QCOMPARE(w.configPanel()->limits().max_loops, 6);
    }

    void backEndChoiceReloadsTheModelOrKeepsItWithTheReason() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        MainWindow w(o);
        QVERIFY(tltest::loadModel(w, m_model));
        QSignalSpy ready(&w, &MainWindow::modelReady);  // the reloads below
        ModelPanel* p = w.modelPanel();
        QCOMPARE(p->backendChoiceName(), QString("auto"));
        QVERIFY(p->backendChoice()->isEnabled());
        auto backendRow = [&] {
            for (auto* it : p->tree()->findItems("back end", Qt::MatchExactly | Qt::MatchRecursive, 0)) return it->text(1);
            return QString();
        };
        QVERIFY(!backendRow().isEmpty());

        // The user picks cuda in the panel: the model is loaded again on it, or, where no device
        // is usable (this machine), refused with the engine's reason while the model stays on
        // the back end it was on.
        const int cuda = p->backendChoice()->findData("cuda");
        QVERIFY(cuda >= 0);
        p->backendChoice()->setCurrentIndex(cuda);
        emit p->backendChoice()->activated(cuda);
        QVERIFY(w.isLoading());
        QVERIFY(!p->backendChoice()->isEnabled());  // no second choice while one loads
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        if (ready.at(0).at(0).toBool()) {
            QVERIFY2(backendRow().startsWith("cuda"), qPrintable(backendRow()));
            QCOMPARE(p->backendChoiceName(), QString("cuda"));
        } else {
            QVERIFY2(w.lastError().contains("on the cuda back end"), qPrintable(w.lastError()));
            QVERIFY2(w.lastError().contains("CUDA", Qt::CaseInsensitive), qPrintable(w.lastError()));
            QVERIFY(w.hasModel());
            QCOMPARE(p->backendChoiceName(), QString("auto"));
            QCOMPARE(w.backend(), QString("auto"));
            QVERIFY(backendRow().startsWith("cpu"));
        }
        // cpu: loaded on the CPU, remembered for the next start
        w.setBackend("cpu");
        QVERIFY(tltest::waitFor([&] { return ready.count() == 2; }));
        QVERIFY(ready.at(1).at(0).toBool());
        QVERIFY2(backendRow().startsWith("cpu"), qPrintable(backendRow()));
        QCOMPARE(p->backendChoiceName(), QString("cpu"));
        QCOMPARE(QSettings().value("backend").toString(), QString("cpu"));
        MainWindow next(o);
        QCOMPARE(next.backend(), QString("cpu"));
        QCOMPARE(next.modelPanel()->backendChoiceName(), QString("cpu"));
        // choosing the back end already in use reloads nothing
        w.setBackend("cpu");
        QVERIFY(!w.isLoading());
        QSettings().remove("backend");
    }

    void quantizedFileNamesItsWeightsDtype() {
        // the summary names the dtype of most weights, not that of the last tensor (a norm, f32)
        const QString q4 = QString(TL_SOURCE_DIR) + "/resources/models/tinyloop-kjv/model-q4.tinyloop";
        if (!QFileInfo::exists(q4)) QSKIP("the bundled model is not there");
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        MainWindow w(o);
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(q4);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        QVERIFY2(w.modelPanel()->summaryLine().contains(", q4"), qPrintable(w.modelPanel()->summaryLine()));
        QVERIFY2(!w.modelPanel()->summaryLine().contains("f32"), qPrintable(w.modelPanel()->summaryLine()));
    }

    void randomModelSaysSo() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        MainWindow w(o);
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(tltest::writeTinyModel(m_dir.path(), 3, "random.tinyloop"), true);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        QVERIFY(w.windowTitle().contains("random model: text is noise"));
    }

    void startupModelResolution() {
        const StartupModel given = resolveStartupModel("/some/where.tinyloop");
        QCOMPARE(given.path, QString("/some/where.tinyloop"));
        QVERIFY(!given.randomFallback);
        const StartupModel def = resolveStartupModel(QString());
        // either the bundled model or the build's random demo model (target random_demo_model)
        if (def.path.isEmpty())
            QSKIP(qPrintable("neither the bundled model nor the random demo model is built; looked at " + def.tried.join(", ")));
        QCOMPARE(def.randomFallback, !def.path.endsWith(bundledModelRelativePath()));
    }

    void ctrlEnterGenerates() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        MainWindow w(o);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(m_model);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        auto c = *w.configPanel()->config();
        c.max_tokens = 4;
        w.configPanel()->setConfig(c);
        QSignalSpy ended(&w, &MainWindow::runEnded);
        QWidget* prompt = w.findChild<QWidget*>("prompt");
        QVERIFY(prompt);
        prompt->setFocus();
        QTest::keyClick(prompt, Qt::Key_Return, Qt::ControlModifier);
        QVERIFY(tltest::waitFor([&] { return ended.count() == 1; }));
        QVERIFY(w.session().run.stats.tokens_emitted <= 4);
        QVERIFY(w.tokenView()->lensTooltip(0).contains("depth"));
        // the status bar says why the run stopped in plain words, not the engine's enum name
        auto* state = w.findChild<QLabel*>("stateLabel");
        QVERIFY(state);
        QVERIFY2(state->text().contains(stopReasonText(w.session().run.stats.stop_reason)), qPrintable(state->text()));
        QVERIFY(!state->text().contains(tinyloop::stop_reason_name(w.session().run.stats.stop_reason)));
    }

    void stopReasonsInPlainWords() {
        using R = tinyloop::StopReason;
        QCOMPARE(stopReasonText(R::CALLBACK_ABORT), QString("stopped by you"));
        for (R r : {R::EOS, R::STOP_SEQUENCE, R::MAX_TOKENS, R::CALLBACK_ABORT, R::GRAMMAR_DEAD_END, R::STOP_STRING,
                    R::MAX_TIME}) {
            const QString t = stopReasonText(r);
            QVERIFY(!t.isEmpty());
            QVERIFY2(!t.contains('_') || t.contains("max_"), qPrintable(t));  // words, not an enum name
        }
    }
};

QTEST_MAIN(TestMainWindow)
#include "test_main_window.moc"
