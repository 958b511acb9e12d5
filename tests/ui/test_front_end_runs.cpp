// The workbench and the command line resolve the same run: for each bundled model and each mode
// the workbench offers, the run the config panel describes after the model is opened and the mode
// picked (nothing else set), resolved as the engine decodes it, equals the config the CLI's
// `generate --json` echoes for the same mode with no other flag (its depth, temperature, beam
// width, early-exit policy and speculation knobs); and again with the depth set (loops 3 in the
// panel, --loops 3): the verify depth is the config's loops first; and the mode the CLI echoes is the
// one the workbench runs. The Python binding is held to the same CLI echo under pytest
// (tests/python/test_front_end_runs.py), so the three front ends agree.
#include <QComboBox>
#include <QDir>
#include <QLineEdit>
#include <QProcess>
#include <QTest>
#include <nlohmann/json.hpp>

#include "base/config_json.h"
#include "main/config_panel.h"
#include "main/main_window.h"
#include "window_test_util.h"

using namespace tlui;
using nlohmann::json;

namespace {

// The CLI's flags for a mode with nothing else set (early exit: the model's policy).
QStringList cliFlags(DecodeMode m) {
    if (m == DecodeMode::EarlyExit) return {"--early-exit", "model"};
    return {"--mode", modeName(m)};
}

// The resolved fields both front ends decide, in the codec's names. The early-exit policy counts
// when early exit is on (patience > 0); off, its fields are unused (the workbench shows the
// model's policy there ready for early-exit mode, the CLI echoes the built-in one).
json decided(const json& config, DecodeMode mode) {
    json out;
    for (const char* k : {"mode", "loops", "temperature", "beam_size", "early_exit_patience"}) out[k] = config.at(k);
    if (config.at("early_exit_patience").get<int>() > 0)
        for (const char* k : {"early_exit_criterion", "early_exit_threshold", "early_exit_min_L", "early_exit_peek_every"})
            out[k] = config.at(k);
    if (tinyloop::self_speculative(mode))
        for (const char* k : {"draft_loops", "verify_loops"}) out[k] = config.at(k);
    if (mode == DecodeMode::Speculative || mode == DecodeMode::Tree) out["draft_ahead"] = config.at("draft_ahead");
    if (mode == DecodeMode::Tree) out["branches"] = config.at("branches");
    return out;
}

// The workbench's run as the engine will decode it (the resolver its worker asks), in the shape
// of the CLI's echo: the mode, the config (its depth resolved) and the resolved speculation knobs.
json workbenchEcho(const tinyloop::Model* model, const tinyloop::RunSpec& spec) {
    const tinyloop::RunSpec r = resolvedRun(model, spec).spec;
    json c = configToJson(r.config);
    c["mode"] = tinyloop::decode_mode_name(r.mode);
    if (r.config.loops == 0) c["loops"] = tinyloop::model_hparams(model).default_loops;
    c["draft_loops"] = r.speculation.draft_loops;
    c["verify_loops"] = r.speculation.verify_loops;
    c["draft_ahead"] = r.speculation.draft_ahead;
    c["branches"] = r.speculation.branches;
    return c;
}

}  // namespace

class TestFrontEndRuns : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY(m_dir.isValid());
        QVERIFY2(QFileInfo(TL_CLI).isExecutable(), TL_CLI);
    }

    void workbenchAndCliResolveTheSameRun_data() {
        QTest::addColumn<QString>("model");
        const QDir models(QString(TL_SOURCE_DIR) + "/resources/models");
        int n = 0;
        for (const QString& d : models.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
            const QString f = models.filePath(d + "/model-q4.tinyloop");  // q4: the smallest file
            if (!QFileInfo::exists(f)) continue;
            QTest::newRow(qPrintable(d)) << f;
            ++n;
        }
        QVERIFY2(n >= 2, "the bundled models (resources/models/*/model-q4.tinyloop)");
        // and a file that recommends nothing: the built-in defaults (early-exit patience 1)
        QTest::newRow("no-recommendation") << tltest::writeTinyModel(m_dir.path());
    }

    void workbenchAndCliResolveTheSameRun() {
        QFETCH(QString, model);
        tinyloop::ModelHandle engineModel = tinyloop::load_model_handle(model.toStdString());
        for (const int loops : {0, 3})  // 0: nothing set; 3: the user sets the depth (--loops 3)
        for (DecodeMode m : allModes()) {
            // a window that opens the model, and the user picks the mode in the selector (a fresh
            // window each: a mode picked before leaves its fields, as the user's own)
            MainWindow w(tltest::quietWindow(m_dir));
            QVERIFY(tltest::loadModel(w, model));
            QComboBox* box = w.configPanel()->modeSelector();
            const int i = box->findData(QString(modeName(m)));
            QVERIFY(i >= 0);
            box->setCurrentIndex(i);
            emit box->activated(i);
            if (loops > 0) qobject_cast<QLineEdit*>(w.configPanel()->editor("loops"))->setText(QString::number(loops));
            QString err;
            const auto run = w.configuredRun(&err);
            QVERIFY2(run.has_value(), qPrintable(err));
            QCOMPARE(run->run.mode, m);
            const json mine = decided(workbenchEcho(engineModel.get(), run->run), m);

            QProcess cli;
            QStringList args = {"generate", model, "--prompt", "In the", "--max-tokens", "0", "--json"};
            args << cliFlags(m);
            if (loops > 0) args << "--loops" << QString::number(loops);
            cli.start(TL_CLI, args);
            QVERIFY(cli.waitForFinished(60000));
            const QByteArray out = cli.readAllStandardOutput();
            QVERIFY2(cli.exitCode() == 0, cli.readAllStandardError().constData());
            const json echo = json::parse(out.toStdString(), nullptr, false);
            QVERIFY2(echo.is_object() && echo.contains("config"), out.constData());
            const json theirs = decided(echo["config"], m);
            QVERIFY2(mine == theirs, qPrintable(QString("%1, mode %2:\n workbench %3\n CLI       %4")
                                                    .arg(QFileInfo(model).dir().dirName() + (loops ? " --loops 3" : ""), modeName(m),
                                                         QString::fromStdString(mine.dump()),
                                                         QString::fromStdString(theirs.dump()))));
        }
    }
};

QTEST_MAIN(TestFrontEndRuns)
#include "test_front_end_runs.moc"
