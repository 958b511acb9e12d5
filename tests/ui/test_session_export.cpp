// The exported session JSON parses and matches what the window shows (prompt, config, tokens,
// events, stats, lens, history); the Markdown names the same things; every plot saves as PNG
// and PDF.
#include <QFile>
#include <QImage>
#include <QSignalSpy>
#include <QTest>
#include <nlohmann/json.hpp>
#include <qcustomplot.h>

#include "main/config_panel.h"
#include "main/main_window.h"
#include "ui_test_util.h"

using namespace tlui;
using nlohmann::json;

class TestSessionExport : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_model;

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY(m_dir.isValid());
        m_model = tltest::writeTinyModel(m_dir.path());
    }

    void exportedJsonMatchesTheSession() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        MainWindow w(o);
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(m_model);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        auto c = *w.configPanel()->config();
        c.max_tokens = 9;
        c.ignore_eos = true;
        c.temperature = 0.9f;
        c.sample_seed = 5;
        w.configPanel()->setMode(DecodeMode::Sample);
        w.configPanel()->setConfig(c);
        w.setPrompt("Let there be");
        QSignalSpy settled(&w, &MainWindow::sessionSettled);
        for (int run = 0; run < 2; ++run) {
            QVERIFY(w.generate());
            QVERIFY(tltest::waitFor([&] { return settled.count() == run + 1; }));
        }
        const Session& s = w.session();

        const QString path = m_dir.filePath("session.json");
        QString err;
        QVERIFY2(w.exportSessionJson(path, &err), qPrintable(err));
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray bytes = f.readAll();
        json j = json::parse(bytes.constData(), bytes.constData() + bytes.size(), nullptr, false);
        QVERIFY(!j.is_discarded());
        QCOMPARE(j["format"].get<std::string>(), std::string("tinyloop-workbench-session"));
        QCOMPARE(QString::fromStdString(j["prompt"].get<std::string>()), QString("Let there be"));
        QCOMPARE(j["mode"].get<std::string>(), std::string("sample"));
        QVERIFY(configsEqual(configFromJson(j["config"]), c));
        QCOMPARE(QString::fromStdString(j["model"]["path"].get<std::string>()), w.modelPath());
        const auto promptIds = j["prompt_ids"].get<std::vector<int32_t>>();
        const auto outIds = j["output_ids"].get<std::vector<int32_t>>();
        QCOMPARE(int(promptIds.size()), s.run.promptLen);
        QCOMPARE(int(outIds.size()), 9);
        std::vector<int32_t> all = promptIds;
        all.insert(all.end(), outIds.begin(), outIds.end());
        QVERIFY(all == s.run.tokens);
        QCOMPARE(QString::fromStdString(j["text"].get<std::string>()), s.run.text);
        QCOMPARE(j["stats"]["tokens_emitted"].get<int>(), 9);
        QCOMPARE(j["stats"]["stop_reason"].get<std::string>(), std::string("MAX_TOKENS"));
        QCOMPARE(j["stats"]["prefill_ms"].get<double>(), s.run.stats.prefill_ms);
        QCOMPARE(j["stats"]["depth_per_token"].get<std::vector<int>>(), s.run.stats.depth_per_token);
        QCOMPARE(int(j["events"].size()), 9);
        std::string text;
        for (size_t i = 0; i < 9; ++i) {
            const json& e = j["events"][i];
            QCOMPARE(e["token"].get<int32_t>(), outIds[i]);
            QCOMPARE(e["index"].get<int>(), int(i));
            QCOMPARE(e["depth"].get<int>(), s.events[i].depth);
            QCOMPARE(e["prob"].get<float>(), s.events[i].prob);
            QCOMPARE(int(e["lens"].size()), int(s.events[i].lens.size()));
            QCOMPARE(e["lens"][0]["p_emitted"].get<float>(), s.events[i].lens[0].p_emitted);
            text += e["piece"].get<std::string>();
        }
        QVERIFY(QString::fromStdString(text).startsWith(s.run.text.left(1)));
        QCOMPARE(int(j["lens"]["rows"].size()), 9);
        QCOMPARE(int(j["lens"]["rows"][0].size()), s.lens->loops);
        QCOMPARE(int(j["history"].size()), 2);
        QCOMPARE(j["history"][1]["tokens"].get<int>(), 9);

        const QString md = m_dir.filePath("session.md");
        QVERIFY(w.exportSessionMarkdown(md, &err));
        QFile mf(md);
        QVERIFY(mf.open(QIODevice::ReadOnly));
        const QString mdText = QString::fromUtf8(mf.readAll());
        QVERIFY(mdText.contains("Let there be"));
        QVERIFY(mdText.contains("| tokens emitted | 9 |"));
        QVERIFY(mdText.contains("MAX_TOKENS"));

        // every plot, as PNG and as PDF
        w.resize(1200, 800);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        for (const auto& [name, plot] : w.plots()) {
            const QString stem = m_dir.filePath(QString(name).replace(' ', '_'));
            QVERIFY2(w.exportPlot(name, stem + ".png", &err), qPrintable(name + ": " + err));
            QImage img(stem + ".png");
            QVERIFY2(!img.isNull() && img.width() > 100, qPrintable(name));
            QVERIFY2(w.exportPlot(name, stem + ".pdf", &err), qPrintable(name + ": " + err));
            QFile pdf(stem + ".pdf");
            QVERIFY(pdf.open(QIODevice::ReadOnly));
            QVERIFY2(pdf.read(5) == "%PDF-", qPrintable(name));
        }
    }
};

QTEST_MAIN(TestSessionExport)
#include "test_session_export.moc"
