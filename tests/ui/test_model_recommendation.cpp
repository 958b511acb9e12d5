// The model's recommended settings (metadata "recommended") in the workbench: on the bundled
// prose model the config panel shows its early-exit values with a "recommended by the model"
// note (and the model panel lists them), the "Early exit" preset takes them, and a run with the
// panel's defaults exits tokens before the default depth; the calibration and sweep views save
// a recommendation into a copy of the model through write_model_metadata (every tensor byte
// kept), refusing an unwritable path, and a sweep setting not faster than greedy beyond the noise.
#include <cstring>

#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QSignalSpy>
#include <QTest>
#include <QTreeWidget>

#include "main/config_panel.h"
#include "main/model_panel.h"
#include "main/model_paths.h"
#include "main/presets_panel.h"
#include "views/analysis_views.h"
#include "views/exit_calibration_view.h"
#include "views/speculation_sweep_view.h"
#include "sweep_test_util.h"
#include "window_test_util.h"
#include "workbench_fixture.h"

using namespace tlui;
using C = tinyloop::EarlyExitCriterion;

class TestModelRecommendation : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_bundled;  // the shipped kjv f32 file (read only here)
    QString m_copy;     // a copy the window opens and the views write into
    std::unique_ptr<MainWindow> m_window;

    QString text(const char* key) const {
        QWidget* e = m_window->configPanel()->editor(key);
        if (auto* l = qobject_cast<QLineEdit*>(e)) return l->text();
        return qobject_cast<QComboBox*>(e)->currentText();
    }
    void chooseMode(DecodeMode m) {
        QComboBox* box = m_window->configPanel()->modeSelector();
        const int i = box->findData(QString(modeName(m)));
        box->setCurrentIndex(i);
        emit box->activated(i);
    }
    // Every tensor of `b` equals `a`'s, byte for byte, through the engine's reader.
    static bool sameTensors(const QString& a, const QString& b) {
        tinyloop::ModelHandle ma = tinyloop::load_model_handle(a.toStdString());
        tinyloop::ModelHandle mb = tinyloop::load_model_handle(b.toStdString());
        const auto ta = tinyloop::model_info(ma.get()).tensors, tb = tinyloop::model_info(mb.get()).tensors;
        if (ta.size() != tb.size() || ta.empty()) return false;
        for (size_t i = 0; i < ta.size(); ++i) {
            if (ta[i].name != tb[i].name || ta[i].bytes != tb[i].bytes) return false;
            const auto va = tinyloop::tensor_as_f32(ma.get(), ta[i].name), vb = tinyloop::tensor_as_f32(mb.get(), tb[i].name);
            if (va.size() != vb.size() || std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) != 0) return false;
        }
        return true;
    }
    static bool finish(AnalysisWindow* v) {
        QSignalSpy done(v, &AnalysisWindow::workFinished);
        return tltest::waitFor([&] { return done.count() == 1 && !v->isBusy(); }, 120000) && done.at(0).at(0).toBool();
    }

private slots:
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        const StartupModel sm = resolveStartupModel(QString());
        QVERIFY2(!sm.path.isEmpty() && !sm.randomFallback, qPrintable("the bundled model is missing: " + sm.tried.join(", ")));
        m_bundled = sm.path;
        m_copy = m_dir.filePath("kjv-copy.tinyloop");
        QVERIFY(QFile::copy(m_bundled, m_copy));
        QFile::setPermissions(m_copy, QFile::ReadOwner | QFile::WriteOwner);
        m_window = tltest::openTestWorkbench("test_model_recommendation", m_dir);
        QVERIFY(tltest::loadModel(*m_window, m_copy));
    }
    void cleanupTestCase() { m_window.reset(); }

    // The bundled file recommends hidden_l2 < 0.5, patience 1, first probe at depth 1.
    void panelShowsTheModelsEarlyExitValues() {
        tinyloop::ModelHandle m = tinyloop::load_model_handle(m_bundled.toStdString());
        const tinyloop::Recommendation& rec = tinyloop::model_recommendation(m.get());
        QVERIFY(rec.has_early_exit());
        QCOMPARE(text("early_exit_criterion"), QString(criterionName(rec.early_exit.criterion)));
        QCOMPARE(text("early_exit_threshold").toFloat(), rec.early_exit.threshold);
        QCOMPARE(text("early_exit_min_L").toInt(), rec.early_exit.min_L);
        QCOMPARE(text("early_exit_peek_every").toInt(), rec.early_exit.peek_every);
        QCOMPARE(text("early_exit_patience"), QString("0"));  // off until the mode asks for it
        QVERIFY(rec.early_exit.threshold != tinyloop::builtin_early_exit().early_exit.threshold);
        const QString note = m_window->configPanel()->recommendationNote();
        QVERIFY2(note.contains("recommended by the model") && note.contains("hidden_l2"), qPrintable(note));
        auto* noteLabel = m_window->configPanel()->findChild<QLabel*>("recommendationNote");
        QVERIFY(noteLabel && noteLabel->isVisibleTo(m_window->configPanel()));
        // the model panel lists the recommendation
        const auto rows = m_window->modelPanel()->tree()->findItems("early exit", Qt::MatchExactly | Qt::MatchRecursive, 0);
        QCOMPARE(rows.size(), 1);
        QVERIFY2(rows[0]->text(1).contains("hidden_l2 < 0.5"), qPrintable(rows[0]->text(1)));
        // kv_sharing's KV per generated token: what one more generated token adds to a decode's cache
        for (const char* mode : {"last-pass", "compress-s4"}) {
            tinyloop::GenerateConfig c;
            c.kv_sharing = tinyloop::parse_kv_sharing(mode);
            c.ignore_eos = true;
            const std::vector<int32_t> prompt = tinyloop::tokenize(m.get(), "In the beginning");
            c.max_tokens = 2;
            const size_t two = tinyloop::generate_ex(m.get(), prompt.data(), int(prompt.size()), c).stats.kv_cache_bytes;
            c.max_tokens = 1;
            const size_t one = tinyloop::generate_ex(m.get(), prompt.data(), int(prompt.size()), c).stats.kv_cache_bytes;
            const auto share = m_window->modelPanel()->tree()->findItems(mode, Qt::MatchExactly | Qt::MatchRecursive, 0);
            QCOMPARE(share.size(), 1);
            QCOMPARE(share[0]->text(1), ModelPanel::humanBytes(two - one));
        }
    }

    // Mode "Early exit" with the panel's defaults: tokens leave before the default depth 4.
    void earlyExitWithThePanelDefaultsExits() {
        chooseMode(DecodeMode::EarlyExit);
        QCOMPARE(text("early_exit_patience"), QString("1"));
        auto c = *m_window->configPanel()->config();
        c.max_tokens = 24;
        m_window->configPanel()->setConfig(c);
        m_window->setPrompt("In the beginning God created");
        QSignalSpy ended(m_window.get(), &MainWindow::runEnded);
        QVERIFY(m_window->generate());
        QVERIFY(tltest::waitFor([&] { return ended.count() == 1; }, 120000));
        QVERIFY(ended.at(0).at(1).toBool());
        const auto& depths = m_window->session().run.stats.depth_per_token;
        QVERIFY(!depths.empty());
        const int shallow = static_cast<int>(std::count_if(depths.begin(), depths.end(), [](int d) { return d < 4; }));
        QVERIFY2(shallow >= 1, qPrintable(QString("%1 of %2 tokens below depth 4").arg(shallow).arg(depths.size())));
    }

    // The bundled "Early exit" preset names none of the policy's fields: the model's apply. A
    // preset that names them keeps its own.
    void presetsLeaveThePolicyToTheModel() {
        chooseMode(DecodeMode::Greedy);
        m_window->configPanel()->setConfig(tinyloop::GenerateConfig{});  // the built-in values
        QCOMPARE(text("early_exit_threshold").toFloat(), 0.05f);
        QString err;
        QVERIFY2(m_window->presetsPanel()->applyPreset("Early exit", &err), qPrintable(err));
        QCOMPARE(m_window->configPanel()->mode(), DecodeMode::EarlyExit);
        QCOMPARE(text("early_exit_threshold").toFloat(), 0.5f);
        QCOMPARE(text("early_exit_min_L"), QString("1"));
        QCOMPARE(text("early_exit_patience"), QString("1"));
        QCOMPARE(text("loops"), QString("0"));  // the model's default depth, where it was measured
        Preset own;
        own.name = "Own early exit";
        own.mode = DecodeMode::EarlyExit;
        own.config.early_exit.patience = 2;
        own.config.early_exit.criterion = C::KL;
        own.config.early_exit.threshold = 0.2f;
        QVERIFY2(m_window->savePreset(own, &err), qPrintable(err));
        QVERIFY2(m_window->presetsPanel()->applyPreset("Own early exit", &err), qPrintable(err));
        QCOMPARE(text("early_exit_criterion"), QString("kl"));
        QCOMPARE(text("early_exit_threshold").toFloat(), 0.2f);
        QCOMPARE(text("early_exit_patience"), QString("2"));
    }

    void calibrationSavesIntoTheFileKeepingEveryTensorByte() {
        m_window->setPrompt("In the beginning");
        auto* calib = qobject_cast<ExitCalibrationView*>(m_window->analysisViews()->open("calibration"));
        QVERIFY(calib);
        // it starts at the policy the engine resolves for this model, the one Compare and the panel use
        const tinyloop::GenerateConfig want = tinyloop::resolve_early_exit(m_window->loadedModel().get(), {}, {});
        const tinyloop::Recommendation& fileRec = tinyloop::model_recommendation(m_window->loadedModel().get());
        QVERIFY(fileRec.has_early_exit());
        QCOMPARE(calib->policy().criterion, fileRec.early_exit.criterion);
        QCOMPARE(calib->policy().threshold, fileRec.early_exit.threshold);
        QCOMPARE(calib->policy().threshold, want.early_exit.threshold);
        QCOMPARE(calib->policy().patience, want.early_exit.patience);
        QCOMPARE(calib->policy().min_L, want.early_exit.min_L);
        calib->setCriterion(C::KL);  // another criterion than the model's: the model's threshold means nothing there
        QVERIFY(calib->policy().threshold != fileRec.early_exit.threshold || fileRec.early_exit.criterion == C::KL);
        calib->setCriterion(fileRec.early_exit.criterion);  // and back: the model's again
        QCOMPARE(calib->policy().threshold, fileRec.early_exit.threshold);
        QString err;
        QVERIFY(!calib->saveRecommendation(m_copy, &err));  // nothing measured yet
        QVERIFY2(err.contains("run the calibration first"), qPrintable(err));
        calib->setMaxTokens(10);
        calib->setLoops(4);
        calib->run();
        QVERIFY2(finish(calib), qPrintable(calib->lastError()));
        calib->setCriterion(C::KL);
        calib->setThreshold(0.25);
        // a folder that does not exist, and a path the engine cannot write (a folder), are refused
        QVERIFY(!calib->saveRecommendation(m_dir.filePath("no-such-folder/m.tinyloop"), &err));
        QVERIFY2(err.contains("does not exist"), qPrintable(err));
        QVERIFY(calib->saveRecommendation(m_dir.path(), &err));
        QVERIFY(!finish(calib));
        QVERIFY2(calib->lastError().contains("cannot"), qPrintable(calib->lastError()));
        // in place, into the open copy
        QVERIFY2(calib->saveRecommendation(m_copy, &err), qPrintable(err));
        QVERIFY2(finish(calib), qPrintable(calib->lastError()));
        QVERIFY2(calib->statusText().contains("saved"), qPrintable(calib->statusText()));
        QVERIFY(sameTensors(m_bundled, m_copy));
        tinyloop::ModelHandle written = tinyloop::load_model_handle(m_copy.toStdString());
        const tinyloop::Recommendation& rec = tinyloop::model_recommendation(written.get());
        QCOMPARE(rec.early_exit.criterion, C::KL);
        QCOMPARE(rec.early_exit.threshold, 0.25f);
        QCOMPARE(rec.early_exit_loops, 4);
        // the part not measured stays as it was: the bundled file's speculation settings
        tinyloop::ModelHandle bundled = tinyloop::load_model_handle(m_bundled.toStdString());
        const tinyloop::Recommendation& before = tinyloop::model_recommendation(bundled.get());
        QCOMPARE(rec.has_speculation(), before.has_speculation());
        QCOMPARE(rec.chain.draft_loops, before.chain.draft_loops);
        QCOMPARE(rec.chain.draft_ahead, before.chain.draft_ahead);
        QCOMPARE(rec.tree.branches, before.tree.branches);
        QCOMPARE(rec.tree.draft_ahead, before.tree.draft_ahead);
        const auto meta = nlohmann::json::parse(tinyloop::model_info(written.get()).metadata_json);
        QCOMPARE(meta["recommended"]["measured"]["early_exit"]["found_by"].get<std::string>(),
                 std::string("workbench: early-exit calibration view"));
    }

    void sweepSavesOnlyASettingBeyondTheNoise() {
        auto* v = qobject_cast<SpeculationSweepView*>(m_window->analysisViews()->open("sweep"));
        QVERIFY(v);
        SweepResult r;
        r.spec.prompts = {"In the beginning"};
        r.spec.draft_loops = {1, 2};
        r.spec.draft_ahead = {3};
        r.verify_loops = 4;
        const std::vector<double> greedy = {10.0, 10.5, 11.0};
        r.cells = {tltest::sweepCell(1, 3, {6.8, 9.0, 14.3}, greedy)};  // a fast median, inside the noise
        r.cells_planned = 1;
        v->showSweep(r);
        QString err;
        QVERIFY(!v->saveRecommendation(m_copy, &err));
        QVERIFY2(err.contains("beyond the noise"), qPrintable(err));
        r.cells.push_back(tltest::sweepCell(2, 3, {6.0, 6.2, 6.5}, greedy));
        r.cells_planned = 2;
        v->showSweep(r);
        QVERIFY2(v->saveRecommendation(m_copy, &err), qPrintable(err));
        QVERIFY2(finish(v), qPrintable(v->lastError()));
        QVERIFY(sameTensors(m_bundled, m_copy));
        tinyloop::ModelHandle written = tinyloop::load_model_handle(m_copy.toStdString());
        const tinyloop::Recommendation& rec = tinyloop::model_recommendation(written.get());
        QCOMPARE(rec.chain.draft_loops, 2);
        QCOMPARE(rec.chain.draft_ahead, 3);
        QCOMPARE(rec.early_exit.criterion, C::KL);  // the calibration's part kept
    }
};

QTEST_MAIN(TestModelRecommendation)
#include "test_model_recommendation.moc"
