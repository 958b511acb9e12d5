// A saved session reopens into the main window as it was: prompt, config, mode, output tokens,
// events and the exact lens (the heatmap's values), without a run; saving it again gives the same
// file. A bad, truncated or oversized file is refused with the reason naming what is wrong, and
// the window keeps what it showed.
#include <QFile>
#include <QSignalSpy>
#include <QTest>
#include <nlohmann/json.hpp>

#include "main/config_panel.h"
#include "main/main_window.h"
#include "record/session_file.h"
#include "main/token_view.h"
#include "plots/lens_heatmap.h"
#include "window_test_util.h"

using namespace tlui;
using nlohmann::json;

namespace {

json readJson(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return json();
    const QByteArray b = f.readAll();
    return json::parse(b.constData(), b.constData() + b.size(), nullptr, false);
}

void writeBytes(const QString& path, const QByteArray& bytes) {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    QCOMPARE(f.write(bytes), qint64(bytes.size()));
}

}  // namespace

class TestSessionReopen : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_model;
    QString m_saved;

    WindowOptions options() const { return tltest::quietWindow(m_dir); }

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY(m_dir.isValid());
        m_model = tltest::writeTinyModel(m_dir.path());
        m_saved = m_dir.filePath("saved.json");
    }

    void saveThenOpenShowsTheSameSession() {
        MainWindow a(options());
        QVERIFY(tltest::loadModel(a, m_model));
        auto c = *a.configPanel()->config();
        c.max_tokens = 7;
        c.ignore_eos = true;
        c.temperature = 0.7f;
        c.sample_seed = 11;
        c.loops = 5;
        a.configPanel()->setMode(DecodeMode::Sample);
        a.configPanel()->setConfig(c);
        a.setPrompt("a b c");
        QSignalSpy settled(&a, &MainWindow::sessionSettled);
        QVERIFY(a.generate());
        QVERIFY(tltest::waitFor([&] { return settled.count() == 1; }));
        QVERIFY(a.session().lens.has_value());
        QString err;
        QVERIFY2(a.exportSessionJson(m_saved, &err), qPrintable(err));

        // A window with no model at all shows the session at once.
        MainWindow b(options());
        QVERIFY2(b.openSession(m_saved, &err), qPrintable(err));
        const Session& s = a.session();
        const Session& r = b.session();
        QCOMPARE(r.run.prompt, QString("a b c"));
        QCOMPARE(b.promptText(), QString("a b c"));
        QCOMPARE(b.configPanel()->mode(), DecodeMode::Sample);
        QVERIFY(configsEqual(*b.configPanel()->config(), c));
        QVERIFY(configsEqual(r.run.config, c));
        QVERIFY(r.run.tokens == s.run.tokens);
        QCOMPARE(r.run.promptLen, s.run.promptLen);
        QCOMPARE(r.run.text, s.run.text);
        QCOMPARE(r.run.stats.tokens_emitted, 7);
        QCOMPARE(r.events.size(), s.events.size());
        for (size_t i = 0; i < s.events.size(); ++i) {
            QCOMPARE(r.events[i].token, s.events[i].token);
            QCOMPARE(r.events[i].depth, s.events[i].depth);
            QCOMPARE(r.events[i].prob, s.events[i].prob);
            QCOMPARE(r.events[i].piece, s.events[i].piece);
            QCOMPARE(r.events[i].lens.size(), s.events[i].lens.size());
            for (size_t d = 0; d < s.events[i].lens.size(); ++d) {
                QCOMPARE(r.events[i].lens[d].p_emitted, s.events[i].lens[d].p_emitted);
                QVERIFY(r.events[i].lens[d].top_ids == s.events[i].lens[d].top_ids);
            }
        }
        // the heatmap: every metric of every cell, exact, as after the run
        QVERIFY(b.heatmap()->isExact());
        QCOMPARE(b.heatmap()->tokenCount(), a.heatmap()->tokenCount());
        QCOMPARE(b.heatmap()->depthCount(), 5);
        for (int m = 0; m < 4; ++m)
            for (int t = 0; t < a.heatmap()->tokenCount(); ++t)
                for (int d = 1; d <= 5; ++d) {
                    const double va = a.heatmap()->value(LensMetric(m), t, d);
                    const double vb = b.heatmap()->value(LensMetric(m), t, d);
                    QVERIFY2(va == vb, qPrintable(QString("metric %1 token %2 depth %3: %4 vs %5").arg(m).arg(t).arg(d).arg(va).arg(vb)));
                }
        QCOMPARE(b.tokenView()->toPlainText(), a.tokenView()->toPlainText());

        // saved again, the file is the same (but for the time it was written)
        const QString again = m_dir.filePath("again.json");
        QVERIFY(b.exportSessionJson(again, &err));
        json j1 = readJson(m_saved), j2 = readJson(again);
        j1.erase("exported_at");
        j2.erase("exported_at");
        QCOMPARE(QString::fromStdString(j2.dump()), QString::fromStdString(j1.dump()));

        // written in the engine codec's names; a file written before ("sampling", "speculative":
        // {"K_branches"}) still reads, to the same session
        QCOMPARE(QString::fromStdString(j1["mode"].get<std::string>()), QString("sample"));
        QVERIFY(j1.contains("speculation") && !j1.contains("speculative"));
        json old = j1;
        old["mode"] = "sampling";
        old["speculative"] = json{{"draft_loops", 1}, {"verify_loops", 4}, {"draft_ahead", 3}, {"K_branches", 5}};
        old.erase("speculation");
        const QString oldPath = m_dir.filePath("old-format.json");
        writeBytes(oldPath, QByteArray::fromStdString(old.dump()));
        Session fromOld;
        QVERIFY2(readSessionFile(oldPath, &fromOld, &err), qPrintable(err));
        QCOMPARE(fromOld.run.mode, DecodeMode::Sample);
        QCOMPARE(fromOld.run.speculation.branches, 5);
        QCOMPARE(fromOld.run.speculation.draft_ahead, 3);
        QVERIFY(fromOld.run.tokens == r.run.tokens);

        // a model loaded after the session keeps the session's config, not the model's default preset
        QVERIFY(tltest::loadModel(b, m_model));
        QVERIFY(configsEqual(*b.configPanel()->config(), c));
        QCOMPARE(b.promptText(), QString("a b c"));
        // with the model's vocabulary in, the tooltips read as after the run
        QCOMPARE(b.heatmap()->cellTooltip(2, 3), a.heatmap()->cellTooltip(2, 3));
        QCOMPARE(b.tokenView()->lensTooltip(2), a.tokenView()->lensTooltip(2));
    }

    void badFilesAreRefusedWithTheReason_data() {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("reason");
        const json good = readJson(m_saved);
        QVERIFY(good.is_object());
        const QByteArray text = QByteArray::fromStdString(good.dump(1));
        auto edited = [&](const std::function<void(json&)>& edit) {
            json j = good;
            edit(j);
            return QByteArray::fromStdString(j.dump());
        };
        auto row = [](const char* name, const QByteArray& bytes, const QString& reason) {
            QTest::newRow(name) << bytes << reason;
        };
        row("empty", QByteArray(), "empty");
        row("truncated", text.left(text.size() / 2), "truncated");
        row("not json", QByteArray("hello, world"), "not valid JSON at byte");
        row("top level array", QByteArray("[1, 2]"), "expected an object");
        row("deeply nested", QByteArray(200000, '['), "truncated");
        row("other format", edited([](json& j) { j["format"] = "tinyloop-preset"; }), "session.format: 'tinyloop-preset' is not a TinyLoop workbench session");
        row("future version", edited([](json& j) { j["version"] = 99; }), "session.version: 99 is outside [1, 2]");
        row("no prompt", edited([](json& j) { j.erase("prompt"); }), "session.prompt: missing");
        row("bad mode", edited([](json& j) { j["mode"] = "warp"; }), "session.mode: 'warp' is not a decode mode");
        row("bad config", edited([](json& j) { j["config"]["top_p"] = 7; }), "session.config.top_p");
        row("id not a number", edited([](json& j) { j["output_ids"][0] = "x"; }), "session.output_ids[0]: expected an integer, found string");
        row("negative depth", edited([](json& j) { j["events"][2]["depth"] = -2; }), "session.events[2].depth: -2 is outside [0, 1024]");
        row("event of wrong type", edited([](json& j) { j["events"][1]["prob"] = "high"; }), "session.events[1].prob");
        row("more events than tokens", edited([](json& j) { j["events"].push_back(j["events"][0]); }), "session.events: 8 entries; a session holds at most 7");
        row("short lens row", edited([](json& j) { j["lens"]["rows"][3].erase(0); }), "session.lens.rows[3]: 4 cells; each row has one per depth (5)");
        row("lens too big", edited([](json& j) { j["lens"]["n_positions"] = 60000; j["lens"]["loops"] = 1000; }), "session.lens: n_positions x loops is over");
        row("probability above 1", edited([](json& j) { j["lens"]["rows"][0][0]["p_next"] = 3.5; }), "session.lens.rows[0][0].p_next: 3.5 is outside");
    }

    void badFilesAreRefusedWithTheReason() {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, reason);
        MainWindow w(options());
        QString err;
        QVERIFY2(w.openSession(m_saved, &err), qPrintable(err));
        const QString bad = m_dir.filePath("bad.json");
        writeBytes(bad, bytes);
        QVERIFY(!w.openSession(bad, &err));
        QVERIFY2(err.startsWith("bad.json: ") && err.contains(reason), qPrintable(err));
        // the window keeps the session it showed
        QCOMPARE(w.promptText(), QString("a b c"));
        QCOMPARE(int(w.session().events.size()), 7);
        QVERIFY(w.heatmap()->isExact());
    }

    void oversizedAndMissingFilesAreRefused() {
        MainWindow w(options());
        QString err;
        const QString big = m_dir.filePath("big.json");
        {
            QFile f(big);
            QVERIFY(f.open(QIODevice::WriteOnly));
            QVERIFY(f.resize(SessionBounds::fileBytes + 1));  // sparse: nothing is read
        }
        QVERIFY(!w.openSession(big, &err));
        QVERIFY2(err.contains("a session file is at most 64 MiB"), qPrintable(err));
        QVERIFY(!w.openSession(m_dir.filePath("nowhere.json"), &err));
        QVERIFY2(err.startsWith("nowhere.json: cannot open"), qPrintable(err));
    }
};

QTEST_MAIN(TestSessionReopen)
#include "test_session_reopen.moc"
