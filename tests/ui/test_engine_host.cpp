// The worker streams a generation: TokenEvents arrive in order, their count equals
// stats.tokens_emitted and the stats come last; Stop ends the run within one token; a window
// destroyed mid-run shuts down cleanly; the GUI shows a live tokens/s figure.
#include <QSignalSpy>
#include <QTest>
#include <QRegularExpression>
#include <QThread>

#include <atomic>

#include "main/config_panel.h"
#include "worker/engine_host.h"
#include "main/main_window.h"
#include "ui_test_util.h"

using namespace tlui;

class TestEngineHost : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_model;
    QString m_slow;

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        registerEngineMetaTypes();
        QVERIFY(m_dir.isValid());
        m_model = tltest::writeTinyModel(m_dir.path());
        m_slow = tltest::writeSlowModel(m_dir.path());
    }

    void streamsInOrderAndStatsLast() {
        QThread thread;
        auto* worker = new EngineHost;
        worker->moveToThread(&thread);
        thread.start();

        QStringList log;  // what the GUI thread saw, in arrival order
        std::vector<tinyloop::TokenEvent> events;
        RunResult result;
        bool loaded = false, finished = false;
        QObject ctx;
        connect(worker, &EngineHost::modelLoaded, &ctx, [&](const ModelLoaded& m) {
            loaded = true;
            QCOMPARE(m.info.hparams.vocab_size, 300);
            QVERIFY(m.vocab.size() >= 257);
        }, Qt::QueuedConnection);
        connect(worker, &EngineHost::tokenEvent, &ctx, [&](quint64 id, const tinyloop::TokenEvent& ev) {
            QCOMPARE(id, quint64(1));
            events.push_back(ev);
            log << "token";
        }, Qt::QueuedConnection);
        connect(worker, &EngineHost::runFinished, &ctx, [&](const RunResult& r) {
            result = r;
            finished = true;
            log << "stats";
        }, Qt::QueuedConnection);
        connect(worker, &EngineHost::lensReady, &ctx, [&](const LensReady&) { log << "lens"; }, Qt::QueuedConnection);

        QMetaObject::invokeMethod(worker, "loadModel", Qt::QueuedConnection, Q_ARG(QString, m_model));
        QVERIFY(tltest::waitFor([&] { return loaded; }));

        RunRequest req;
        req.id = 1;
        req.prompt = "In the beginning";
        req.config.max_tokens = 24;
        req.config.ignore_eos = true;
        QMetaObject::invokeMethod(worker, "generate", Qt::QueuedConnection, Q_ARG(tlui::RunRequest, req));
        QVERIFY(tltest::waitFor([&] { return finished && log.contains("lens"); }));

        QCOMPARE(int(events.size()), result.stats.tokens_emitted);
        QCOMPARE(result.stats.tokens_emitted, 24);
        for (size_t i = 0; i < events.size(); ++i) {
            QCOMPARE(events[i].index, int(i));
            QCOMPARE(events[i].position, result.promptLen + int(i));
            QCOMPARE(events[i].token, result.tokens[size_t(result.promptLen) + i]);
            QCOMPARE(int(events[i].lens.size()), events[i].depth);  // lens rows on by default
        }
        // every token before the stats, the exact lens after
        QCOMPARE(log.indexOf("stats"), int(events.size()));
        QCOMPARE(log.last(), QString("lens"));

        thread.quit();
        thread.wait();
        delete worker;
    }

    // The workbench's pipelined mode runs (its request asks for lens rows by default, which the
    // wave does not report): the run finishes with plain greedy's tokens, the wave's sweeps in the
    // stats, and the exact lens after it.
    void pipelinedModeRunsInTheWorker() {
        QThread thread;
        auto* worker = new EngineHost;
        worker->moveToThread(&thread);
        thread.start();
        bool loaded = false, lens = false;
        std::vector<RunResult> results;
        QString failure;
        QObject ctx;
        connect(worker, &EngineHost::modelLoaded, &ctx, [&](const ModelLoaded&) { loaded = true; }, Qt::QueuedConnection);
        connect(worker, &EngineHost::runFinished, &ctx, [&](const RunResult& r) { results.push_back(r); },
                Qt::QueuedConnection);
        connect(worker, &EngineHost::runFailed, &ctx, [&](quint64, const QString& m) { failure = m; },
                Qt::QueuedConnection);
        connect(worker, &EngineHost::lensReady, &ctx, [&](const LensReady& l) { lens = l.id == 2; },
                Qt::QueuedConnection);
        QMetaObject::invokeMethod(worker, "loadModel", Qt::QueuedConnection, Q_ARG(QString, m_model));
        QVERIFY(tltest::waitFor([&] { return loaded; }));
        for (const auto mode : {tinyloop::DecodeMode::Greedy, tinyloop::DecodeMode::Pipelined}) {
            RunRequest req;
            req.id = mode == tinyloop::DecodeMode::Greedy ? 1 : 2;
            req.mode = mode;
            req.prompt = "In the beginning";
            req.config.max_tokens = 16;
            req.config.ignore_eos = true;
            QMetaObject::invokeMethod(worker, "generate", Qt::QueuedConnection, Q_ARG(tlui::RunRequest, req));
            QVERIFY(tltest::waitFor([&] { return !failure.isEmpty() || int(results.size()) == int(req.id); }));
            QVERIFY2(failure.isEmpty(), qPrintable(failure));
        }
        QVERIFY(tltest::waitFor([&] { return lens; }));
        QCOMPARE(results[1].tokens, results[0].tokens);
        QVERIFY(results[1].stats.spec_sweeps > 0);
        QCOMPARE(results[0].stats.spec_sweeps, 0);
        thread.quit();
        thread.wait();
        delete worker;
    }

    void aFailedExactLensIsReportedNotAwaitedForEver() {
        // the exact lens after a run can fail (here: top_k beyond score_logit_lens's 64); the
        // worker says so, with the engine's reason, so the window stops waiting for it
        QThread thread;
        auto* worker = new EngineHost;
        worker->moveToThread(&thread);
        thread.start();
        bool loaded = false, finished = false, lens = false;
        QString failure;
        quint64 failedId = 0;
        QObject ctx;
        connect(worker, &EngineHost::modelLoaded, &ctx, [&] { loaded = true; }, Qt::QueuedConnection);
        connect(worker, &EngineHost::runFinished, &ctx, [&](const RunResult&) { finished = true; }, Qt::QueuedConnection);
        connect(worker, &EngineHost::lensReady, &ctx, [&](const LensReady&) { lens = true; }, Qt::QueuedConnection);
        connect(worker, &EngineHost::lensFailed, &ctx, [&](quint64 id, const QString& why) {
            failedId = id;
            failure = why;
        }, Qt::QueuedConnection);
        QMetaObject::invokeMethod(worker, "loadModel", Qt::QueuedConnection, Q_ARG(QString, m_model));
        QVERIFY(tltest::waitFor([&] { return loaded; }));
        RunRequest req;
        req.id = 3;
        req.prompt = "abc";
        req.config.max_tokens = 4;
        req.lens = false;  // no streamed rows: the run itself accepts any top-k
        req.lensTopK = 65;
        QMetaObject::invokeMethod(worker, "generate", Qt::QueuedConnection, Q_ARG(tlui::RunRequest, req));
        QVERIFY(tltest::waitFor([&] { return !failure.isEmpty(); }));
        QVERIFY(finished);
        QVERIFY(!lens);
        QCOMPARE(failedId, quint64(3));
        QVERIFY2(failure.contains("top_k: 65 is outside [1, 64]"), qPrintable(failure));
        thread.quit();
        thread.wait();
        delete worker;
    }

    void stopEndsWithinOneToken() {
        QThread thread;
        auto* worker = new EngineHost;
        worker->moveToThread(&thread);
        thread.start();
        bool loaded = false, finished = false;
        RunResult result;
        QObject ctx;
        connect(worker, &EngineHost::modelLoaded, &ctx, [&] { loaded = true; }, Qt::QueuedConnection);
        connect(worker, &EngineHost::runFinished, &ctx, [&](const RunResult& r) { result = r; finished = true; }, Qt::QueuedConnection);
        // Stop pressed the moment token #5 is emitted (direct: in the worker's thread, like the
        // atomic the Stop button sets): the observer must end the run right after that token.
        std::atomic<int> seen{0};
        connect(worker, &EngineHost::tokenEvent, worker, [&, worker](quint64 id, const tinyloop::TokenEvent& ev) {
            ++seen;
            if (ev.index == 5) worker->requestStop(id);
        }, Qt::DirectConnection);
        QMetaObject::invokeMethod(worker, "loadModel", Qt::QueuedConnection, Q_ARG(QString, m_model));
        QVERIFY(tltest::waitFor([&] { return loaded; }));
        RunRequest req;
        req.id = 7;
        req.prompt = "abc";
        req.config.max_tokens = 200;
        req.config.ignore_eos = true;
        req.exactLens = false;
        QMetaObject::invokeMethod(worker, "generate", Qt::QueuedConnection, Q_ARG(tlui::RunRequest, req));
        QVERIFY(tltest::waitFor([&] { return finished; }));
        QCOMPARE(result.stats.tokens_emitted, 6);
        QCOMPARE(seen.load(), 6);
        QCOMPARE(result.stats.stop_reason, tinyloop::StopReason::CALLBACK_ABORT);

        // a run stopped before it starts never runs
        bool failed = false;
        connect(worker, &EngineHost::runFailed, &ctx, [&](quint64 id, const QString&) { failed = (id == 8); }, Qt::QueuedConnection);
        worker->requestStop(8);
        req.id = 8;
        QMetaObject::invokeMethod(worker, "generate", Qt::QueuedConnection, Q_ARG(tlui::RunRequest, req));
        QVERIFY(tltest::waitFor([&] { return failed; }));
        thread.quit();
        thread.wait();
        delete worker;
    }

    void stopButtonInTheWindow() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets-stop");
        o.errorDialogs = false;
        MainWindow w(o);
        w.show();
        w.activateWindow();
        QVERIFY(QTest::qWaitForWindowActive(&w));
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(m_slow);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        auto c = *w.configPanel()->config();
        c.max_tokens = 4000;
        c.ignore_eos = true;
        w.configPanel()->setConfig(c);
        w.setPrompt("x");
        QSignalSpy ended(&w, &MainWindow::runEnded);
        QVERIFY(w.generate());
        QVERIFY(w.isRunning());
        QVERIFY(tltest::waitFor([&] { return w.session().events.size() >= 3; }));
        QTest::keyClick(w.focusWidget() ? w.focusWidget() : &w, Qt::Key_Escape);  // Esc = Stop
        QVERIFY(tltest::waitFor([&] { return ended.count() == 1; }, 20000));
        QCOMPARE(ended.at(0).at(1).toBool(), true);
        QVERIFY(!w.isRunning());
        QCOMPARE(w.session().run.stats.stop_reason, tinyloop::StopReason::CALLBACK_ABORT);
        QVERIFY(w.session().run.stats.tokens_emitted < 4000);
        QCOMPARE(int(w.session().events.size()), w.session().run.stats.tokens_emitted);
    }

    void liveSpeedAboutOnceASecond() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets-speed");
        o.errorDialogs = false;
        MainWindow w(o);
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(m_slow);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        auto c = *w.configPanel()->config();
        c.max_tokens = 4000;
        c.ignore_eos = true;
        w.configPanel()->setConfig(c);
        w.setPrompt("x");
        QSignalSpy progress(w.worker(), &EngineHost::progress);
        QSignalSpy ended(&w, &MainWindow::runEnded);
        QVERIFY(w.generate());
        // run for ~2.5 s, watching the label the user reads
        QStringList shown;
        QElapsedTimer t;
        t.start();
        while (t.elapsed() < 2500 && ended.count() == 0) {
            QTest::qWait(50);
            if (shown.isEmpty() || shown.last() != w.speedText()) shown << w.speedText();
        }
        w.stop();
        QVERIFY(tltest::waitFor([&] { return ended.count() == 1; }, 20000));
        QCOMPARE(ended.at(0).at(1).toBool(), true);
        const double ms = w.session().run.stats.total_ms;
        QVERIFY2(ms > 1500, "the run was too short to see a live figure");
        QVERIFY(progress.count() >= 1);  // a live figure during the run
        QVERIFY2(shown.size() <= int(ms / 1000.0) + 3, qPrintable(shown.join(" | ")));  // ~once a second
        QVERIFY(shown.join(" ").contains(QRegularExpression("[1-9][0-9.]* tok/s \\(")));
        // no more than one progress report per second of run (and none per token)
        QVERIFY2(progress.count() <= int(ms / 1000.0) + 1, qPrintable(QString("%1 reports in %2 ms").arg(progress.count()).arg(ms)));
        QVERIFY(w.speedText().contains("tok/s"));
    }

    void destroyingTheWindowMidRunIsClean() {
        for (int round = 0; round < 3; ++round) {
            WindowOptions o;
            o.presetDir = m_dir.filePath("presets-destroy");
            o.errorDialogs = false;
            auto* w = new MainWindow(o);
            QSignalSpy ready(w, &MainWindow::modelReady);
            w->openModel(m_slow);
            QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
            auto c = *w->configPanel()->config();
            c.max_tokens = 4000;
            c.ignore_eos = true;
            w->configPanel()->setConfig(c);
            QVERIFY(w->generate());
            QVERIFY(tltest::waitFor([&] { return !w->session().events.empty(); }));
            QVERIFY(w->isRunning());
            QPointer<EngineHost> worker = w->worker();
            QElapsedTimer t;
            t.start();
            if (round == 0) w->close();
            delete w;  // stops the run, joins the thread, frees the model
            QVERIFY2(t.elapsed() < 5000, "shutdown waited for the whole run");
            QVERIFY(worker.isNull());
        }
    }
};

QTEST_MAIN(TestEngineHost)
#include "test_engine_host.moc"
