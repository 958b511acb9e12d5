// File > Open accepts a Hugging Face checkpoint folder: the worker imports it (progress per
// tensor, Cancel) into the import cache and loads the cached file; a second open of the same folder
// reads the cache (no tensor converted); a cancelled import leaves nothing in the cache and the
// loaded model in place; the main window shows the progress, names the folder and the
// architecture. The folder is a tiny random Ouro written by the test (tests/import's fixture plus
// a byte-level tokenizer.json), so no Python or download is needed.
#include <QAction>
#include <QDir>
#include <QSettings>
#include <QTimer>
#include <QFileInfo>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QStackedWidget>
#include <QTabWidget>
#include <QTest>
#include <QThread>

#include <fstream>

#include <qcustomplot.h>

#include <nlohmann/json.hpp>

#include "hf_folder_fixture.h"
#include "main/config_panel.h"
#include "main/main_window.h"
#include "plots/depth_plot.h"
#include "worker/engine_host.h"
#include "ui_test_util.h"
#include "window_test_util.h"

using namespace tlui;

namespace {

// A byte-level BPE tokenizer.json of 256 ids and no merges (GPT-2's byte-to-unicode table), the
// shape the published models' tokenizers have, small enough for the fixture's vocab of 256.
void writeByteTokenizer(const std::filesystem::path& dir) {
    std::vector<int> bs;
    for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
    for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
    for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
    std::vector<int> cs = bs;
    int extra = 0;
    for (int b = 0; b < 256; ++b)
        if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
            bs.push_back(b);
            cs.push_back(256 + extra++);
        }
    nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
    for (size_t i = 0; i < bs.size(); ++i) {
        const QString ch(QChar(static_cast<char16_t>(cs[i])));
        vocab[ch.toStdString()] = bs[i];
    }
    nlohmann::ordered_json t;
    t["version"] = "1.0";
    t["truncation"] = nullptr;
    t["padding"] = nullptr;
    t["added_tokens"] = nlohmann::ordered_json::array();
    t["normalizer"] = nullptr;
    t["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    t["post_processor"] = nullptr;
    t["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    t["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                  {"ignore_merges", false}, {"vocab", vocab}, {"merges", nlohmann::ordered_json::array()}};
    std::ofstream(dir / "tokenizer.json") << t.dump();
}

QString writeTinyOuroFolder(const QString& parent) {
    const std::filesystem::path dir = std::filesystem::path(parent.toStdString()) / "Tiny-Ouro";
    tlimport::write_tiny_ouro(dir, tlimport::tiny_ouro_config(), tlimport::tiny_ouro_tensors());
    writeByteTokenizer(dir);
    return QString::fromStdString(dir.string());
}

// The tab page that holds a plot (the captioned box withCaption made around it).
QWidget* captionedBox(QWidget* plot) {
    QWidget* w = plot;
    while (w->parentWidget() && !qobject_cast<QStackedWidget*>(w->parentWidget())) w = w->parentWidget();
    return w;
}

QStringList cacheEntries(const QString& cache) {
    return QDir(cache).entryList(QDir::Files | QDir::NoDotAndDotDot);
}

}  // namespace

class TestOpenHfFolder : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_folder;
    QString m_cache;

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        registerEngineMetaTypes();
        QVERIFY(m_dir.isValid());
        m_folder = writeTinyOuroFolder(m_dir.path());
        m_cache = m_dir.path() + "/import-cache";
    }

    // The worker imports once, reporting every tensor, then reads the cache.
    void importsOnceThenReadsTheCache() {
        QThread thread;
        auto* worker = new EngineHost;
        worker->setImportCacheDir(m_cache);
        worker->moveToThread(&thread);
        thread.start();
        QSignalSpy progress(worker, &EngineHost::importProgress);
        QSignalSpy loaded(worker, &EngineHost::modelLoaded);
        QSignalSpy failed(worker, &EngineHost::modelLoadFailed);

        QMetaObject::invokeMethod(worker, "loadModel", Qt::QueuedConnection, Q_ARG(QString, m_folder));
        QVERIFY(tltest::waitFor([&] { return loaded.count() + failed.count() > 0; }));
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().at(1).toString()));
        const auto first = loaded.first().at(0).value<ModelLoaded>();
        QCOMPARE(first.sourceFolder, m_folder);
        QVERIFY(first.importedNow);
        QCOMPARE(QString::fromStdString(first.info.hparams.architecture), QString("ouro"));
        QVERIFY(QFileInfo(QString::fromStdString(first.info.path)).absolutePath() == QFileInfo(m_cache).absoluteFilePath());
        // one report before the first tensor, then one per tensor, the last one complete
        const int count = progress.last().at(2).toInt();
        QVERIFY(count > 10);
        QCOMPARE(progress.count(), count + 1);
        QCOMPARE(progress.last().at(1).toInt(), count);
        QCOMPARE(progress.last().at(3).toDouble(), 1.0);
        QCOMPARE(cacheEntries(m_cache).size(), 1);  // no .tmp left

        progress.clear();
        loaded.clear();
        QMetaObject::invokeMethod(worker, "loadModel", Qt::QueuedConnection, Q_ARG(QString, m_folder));
        QVERIFY(tltest::waitFor([&] { return loaded.count() + failed.count() > 0; }));
        const auto second = loaded.first().at(0).value<ModelLoaded>();
        QVERIFY(!second.importedNow);
        QCOMPARE(progress.count(), 0);  // nothing converted
        QCOMPARE(second.info.path, first.info.path);

        // A changed source file is a new cache entry, never the stale one.
        std::ofstream(std::filesystem::path(m_folder.toStdString()) / "generation_config.json")
            << R"({"eos_token_id": 0})";
        loaded.clear();
        QMetaObject::invokeMethod(worker, "loadModel", Qt::QueuedConnection, Q_ARG(QString, m_folder));
        QVERIFY(tltest::waitFor([&] { return loaded.count() + failed.count() > 0; }));
        QVERIFY(loaded.first().at(0).value<ModelLoaded>().importedNow);
        QCOMPARE(cacheEntries(m_cache).size(), 2);
        std::filesystem::remove(std::filesystem::path(m_folder.toStdString()) / "generation_config.json");

        worker->deleteLater();
        thread.quit();
        thread.wait();
    }

    // Cancel from the GUI thread mid-import: the load fails as cancelled, nothing is cached, and
    // the model loaded before stays.
    void cancelLeavesNothingAndKeepsTheLoadedModel() {
        const QString cache = m_dir.path() + "/cancel-cache";
        QThread thread;
        auto* worker = new EngineHost;
        worker->setImportCacheDir(cache);
        worker->moveToThread(&thread);
        thread.start();
        const QString tiny = tltest::writeTinyModel(m_dir.path());
        QSignalSpy loaded(worker, &EngineHost::modelLoaded);
        QSignalSpy failed(worker, &EngineHost::modelLoadFailed);
        QMetaObject::invokeMethod(worker, "loadModel", Qt::QueuedConnection, Q_ARG(QString, tiny));
        QVERIFY(tltest::waitFor([&] { return loaded.count() == 1; }));

        // Cancel at the first report (before any tensor is written): a direct connection runs on
        // the worker's thread, as the GUI's click would land between two tensors.
        QObject ctx;
        connect(worker, &EngineHost::importProgress, &ctx, [worker](const QString&, int done, int, double) {
            if (done == 0) worker->cancelImport();
        }, Qt::DirectConnection);
        QMetaObject::invokeMethod(worker, "loadModel", Qt::QueuedConnection, Q_ARG(QString, m_folder));
        QVERIFY(tltest::waitFor([&] { return failed.count() == 1; }));
        QVERIFY(failed.first().at(1).toString().contains("import cancelled"));
        QCOMPARE(cacheEntries(cache).size(), 0);
        QCOMPARE(worker->modelPath(), tiny);
        QVERIFY(worker->sharedModel() != nullptr);

        worker->deleteLater();
        thread.quit();
        thread.wait();
    }

    // The window: File > Open Hugging Face folder exists; opening a folder shows the import, names
    // the folder in the title, the architecture in the model panel, and remembers the folder.
    void mainWindowOpensAFolder() {
        qputenv("TINYLOOP_IMPORT_CACHE", (m_dir.path() + "/window-cache").toUtf8());
        MainWindow w(tltest::quietWindow(m_dir));
        QVERIFY(w.findChild<QAction*>("openFolderAction") != nullptr);
        QSignalSpy ready(&w, &MainWindow::modelReady);
        auto* bar = w.findChild<QProgressBar*>();
        int maxSeen = -1;
        QTimer poll;
        connect(&poll, &QTimer::timeout, [&] {
            if (bar && bar->maximum() > 0) maxSeen = std::max(maxSeen, bar->maximum());
        });
        poll.start(1);
        w.openModel(m_folder);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        QVERIFY(ready.first().at(0).toBool());
        QVERIFY(w.windowTitle().contains("Tiny-Ouro (Hugging Face folder)"));
        QVERIFY(QSettings().value("recentFiles").toStringList().value(0) == m_folder);
        QVERIFY(w.modelPath().endsWith(".tinyloop"));  // the views read the cached file
        auto* cancel = w.findChild<QPushButton*>("cancelImportButton");
        QVERIFY(cancel && cancel->isHidden());
        QVERIFY(bar->maximum() == 0);  // back to the busy indicator for runs
        qunsetenv("TINYLOOP_IMPORT_CACHE");
    }

    // The depth plot of the gated model (Ouro's exit gate): under gate_stop, the hovered token's
    // gate per pass that ran, its cumulative curve, the threshold q and the exit pass, equal to
    // what the engine's events recorded; a model without the gate shows no gate plot.
    void depthPlotShowsTheExitGate() {
        qputenv("TINYLOOP_IMPORT_CACHE", (m_dir.path() + "/window-cache").toUtf8());
        MainWindow w(tltest::quietWindow(m_dir));
        QVERIFY(tltest::loadModel(w, m_folder));
        const float q = 0.5f;
        auto c = *w.configPanel()->config();
        c.max_tokens = 12;
        c.ignore_eos = true;
        c.early_exit.patience = 1;
        c.early_exit.min_L = 1;
        c.early_exit.criterion = tinyloop::EarlyExitCriterion::GateStop;
        c.early_exit.threshold = q;
        w.configPanel()->setMode(DecodeMode::EarlyExit);
        w.configPanel()->setConfig(c);
        w.setPrompt("In the beginning");
        QSignalSpy settled(&w, &MainWindow::sessionSettled);
        auto state = [&w] { return w.findChild<QLabel*>("stateLabel")->text() + " / " + w.lastError(); };
        QVERIFY2(w.generate(), qPrintable(state()));
        QVERIFY(tltest::waitFor([&] { return settled.count() == 1; }));
        const auto& events = w.session().events;
        QCOMPARE(int(events.size()), 12);
        DepthPlot* depth = w.depthPlot();
        QVERIFY(depth->hasGate());
        QCustomPlot* gate = depth->gatePlot();
        QVERIFY(!gate->isHidden());
        QCOMPARE(depth->gateToken(), 11);  // the latest token until one is hovered
        auto* lambda = qobject_cast<QCPBars*>(gate->plottable(0));
        QCPGraph* cdf = gate->graph(0);
        QCPGraph* threshold = gate->graph(1);
        QCPGraph* exitPass = gate->graph(2);
        QVERIFY(lambda && cdf && threshold && exitPass);
        const int L = w.session().run.loops;
        QVERIFY(L >= 2);
        for (int t : {0, 5, 11}) {
            depth->selectToken(t);
            const tinyloop::TokenEvent& ev = events[size_t(t)];
            QVERIFY(!ev.exit_gate.empty());
            QCOMPARE(depth->gateToken(), t);
            QCOMPARE(lambda->data()->size(), int(ev.exit_gate.size()));
            QCOMPARE(cdf->data()->size(), int(ev.exit_gate.size()));
            for (int p = 0; p < int(ev.exit_gate.size()); ++p) {
                QCOMPARE(lambda->data()->at(p)->key, double(p + 1));
                QCOMPARE(lambda->data()->at(p)->value, double(ev.exit_gate[size_t(p)]));
                QCOMPARE(cdf->data()->at(p)->value, double(ev.exit_gate_cdf[size_t(p)]));
            }
            // gate_stop ran passes 1..depth; the curve reaches q at the exit pass (or the last pass)
            QCOMPARE(int(ev.exit_gate.size()), ev.depth);
            if (t > 0 && ev.depth < L) QVERIFY(ev.exit_gate_cdf.back() >= q);
            QVERIFY(threshold->visible() && exitPass->visible());
            QCOMPARE(threshold->data()->at(0)->value, double(q));
            QCOMPARE(exitPass->data()->at(0)->key, double(ev.depth));
            QString title;
            for (const QCPTextElement* e : gate->findChildren<QCPTextElement*>()) title += e->text();
            QVERIFY2(title.startsWith(QString("token %1: ").arg(t)) && title.contains("q = 0.5"), qPrintable(title));
        }
        // hovering a bar of the depth plot selects that token's gate
        w.resize(1280, 720);
        w.show();
        w.plotTabs()->setCurrentWidget(captionedBox(depth));
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        depth->plot()->replot();
        const int x = int(depth->plot()->xAxis->coordToPixel(3));
        const int y = int(depth->plot()->yAxis->coordToPixel(0.5));
        QTest::mouseMove(depth->plot(), QPoint(x, y));
        QVERIFY(tltest::waitFor([&] { return depth->gateToken() == 3; }));

        // plain greedy on the same model still records the gate (every pass), with no threshold line
        w.configPanel()->setMode(DecodeMode::Greedy);
        QVERIFY2(w.generate(), qPrintable(state()));
        QVERIFY(tltest::waitFor([&] { return settled.count() == 2; }));
        QVERIFY(depth->hasGate());
        depth->selectToken(2);
        QCOMPARE(lambda->data()->size(), int(w.session().events[2].exit_gate.size()));
        QVERIFY(!threshold->visible());

        // a model without the gate: no gate plot
        QVERIFY(tltest::loadModel(w, tltest::writeTinyModel(m_dir.path())));
        QVERIFY2(w.generate(), qPrintable(state()));
        QVERIFY(tltest::waitFor([&] { return settled.count() == 3; }));
        QVERIFY(!w.session().events.empty());
        QVERIFY(w.session().events[0].exit_gate.empty());
        QVERIFY(!depth->hasGate());
        QVERIFY(gate->isHidden());
        qunsetenv("TINYLOOP_IMPORT_CACHE");
    }
};

QTEST_MAIN(TestOpenHfFolder)
#include "test_open_hf_folder.moc"
