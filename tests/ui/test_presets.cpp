// Presets save and load back equal; import/export/delete work; a malformed preset file is
// refused with a message naming the field; the shipped presets are valid; a model opens with
// its default preset; a preset that carries a prompt puts it in the editor (the shipped "Digit
// sum" opens on a held-out problem of the bundled reasoner); a preset records the model it was
// made on (folder and file name, SHA-256) and, loaded with another model open, asks whether to
// open that model or run anyway, naming both; the window's title names the model's folder too; a
// preset applied before the model is in (--preset) keeps its early-exit fields once it loads.
#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QSignalSpy>
#include <QTest>

#include "main/config_panel.h"
#include "main/main_window.h"
#include "main/model_paths.h"
#include "base/preset_store.h"
#include "main/presets_panel.h"
#include "main/prompt_editor.h"
#include "ui_test_util.h"
#include "window_test_util.h"

using namespace tlui;
using nlohmann::json;

class TestPresets : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

    static void writeText(const QString& path, const QByteArray& text) {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write(text);
    }

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QCoreApplication::setOrganizationName("TinyLoopTest");
        QCoreApplication::setApplicationName("test_presets");
        QVERIFY(m_dir.isValid());
    }

    void saveAndLoadBackEqual() {
        PresetStore store(m_dir.filePath("store1"));
        Preset p;
        p.name = "My preset / with odd chars";
        p.description = "for the test";
        p.mode = DecodeMode::Tree;
        p.config.max_tokens = 12;
        p.config.loops = 4;
        p.config.temperature = 0.3f;
        p.config.top_p = 0.9f;
        p.config.stop_strings = {"END"};
        p.config.stop_sequences = {{5, 6}};
        p.config.logit_bias = {{3, 1.5f}};
        p.config.early_exit.criterion = tinyloop::EarlyExitCriterion::ArgmaxStable;
        p.config.sample_seed = 123456789012345ull;
        p.speculation = tinyloop::SpeculationPolicy{.verify_loops = 4, .draft_loops = 1, .draft_ahead = 3, .branches = 2};
        p.grammarFile = "/tmp/answer.gbnf";
        p.config.bad_words = {{7}};
        p.config.max_time = 1.5;
        p.config.kv_cache = tinyloop::KVCacheType::Int8;
        p.prompt = "2479362?\nwith a second line";
        p.modelFile = "tinyloop-digitsum/model-f32.tinyloop";
        p.modelSha256 = QString(64, 'a');
        QString err;
        QVERIFY2(store.save(p, &err), qPrintable(err));
        QVERIFY(store.names().contains(p.name));
        auto back = store.load(p.name, &err);
        QVERIFY2(back.has_value(), qPrintable(err));
        QVERIFY(presetsEqual(*back, p));

        // export, delete, import: the same preset comes back
        const QString out = m_dir.filePath("exported.json");
        QVERIFY2(store.exportFile(p.name, out, &err), qPrintable(err));
        QVERIFY(store.remove(p.name, &err));
        QVERIFY(!store.names().contains(p.name));
        QVERIFY(!store.load(p.name).has_value());
        auto imported = store.importFile(out, &err);
        QVERIFY2(imported.has_value(), qPrintable(err));
        QVERIFY(presetsEqual(*imported, p));
        QVERIFY(store.names().contains(p.name));
    }


    // Presets are written in the engine codec's names ({"mode": "sample", "speculation":
    // {"branches"}}, as the compare view exports a run); a file written before ("sampling",
    // "speculative": {"K_branches"}) reads to the same preset.
    void writtenCanonicalOldFormatStillReads() {
        Preset p;
        p.name = "Canonical";
        p.mode = DecodeMode::Sample;
        p.config.temperature = 0.6f;
        p.speculation = tinyloop::SpeculationPolicy{.verify_loops = 4, .draft_loops = 1, .draft_ahead = 3, .branches = 5};
        const json j = presetToJson(p);
        QCOMPARE(QString::fromStdString(j["mode"].get<std::string>()), QString("sample"));
        QVERIFY(j.contains("speculation") && !j.contains("speculative"));
        QCOMPARE(j["speculation"]["branches"].get<int>(), 5);
        QVERIFY(!j["speculation"].contains("K_branches"));
        // the run part is the engine's own run_spec_to_json
        QVERIFY(j["speculation"] == tinyloop::run_spec_to_json(p)["speculation"]);
        QVERIFY(j["mode"] == tinyloop::run_spec_to_json(p)["mode"]);

        const QString old = m_dir.filePath("old-format.json");
        writeText(old, R"({"format": "tinyloop-preset", "version": 1, "name": "Canonical", "description": "",
                           "mode": "sampling", "config": {"temperature": 0.6}, "grammar_file": "",
                           "speculative": {"draft_loops": 1, "verify_loops": 4, "draft_ahead": 3, "K_branches": 5}})");
        QString err;
        const auto back = PresetStore::readFile(old, &err);
        QVERIFY2(back.has_value(), qPrintable(err));
        QCOMPARE(back->mode, DecodeMode::Sample);
        QCOMPARE(back->speculation.branches, 5);
        QVERIFY(presetsEqual(*back, p));
        QVERIFY(presetToJson(*back) == j);  // saved again: the canonical form
    }
    void panelRoundTripThroughTheEditors() {
        ConfigPanel cfg;
        PresetsPanel panel(&cfg, m_dir.filePath("store2"));
        tinyloop::GenerateConfig c;
        c.max_tokens = 99;
        c.temperature = 0.65f;
        c.top_k = 12;
        c.repetition_penalty = 1.3f;
        c.stop_strings = {"\n\n"};
        cfg.setMode(DecodeMode::Sample);
        cfg.setConfig(c);
        QString err;
        QVERIFY2(panel.saveCurrent("sampler", &err), qPrintable(err));
        cfg.setMode(DecodeMode::Greedy);
        cfg.setConfig(tinyloop::GenerateConfig{});
        QVERIFY2(panel.applyPreset("sampler", &err), qPrintable(err));
        QCOMPARE(cfg.mode(), DecodeMode::Sample);
        QVERIFY(configsEqual(*cfg.config(), c));
        // the shipped presets are installed and valid
        for (const char* shipped : {"Greedy", "Sampling", "Early exit"}) {
            QVERIFY2(panel.names().contains(shipped), shipped);
            QVERIFY2(panel.applyPreset(shipped, &err), qPrintable(err));
        }
        // an invalid editor state is not saved
        auto* e = qobject_cast<QLineEdit*>(cfg.editor("top_p"));
        e->setText("7");
        QVERIFY(!panel.saveCurrent("broken", &err));
        QVERIFY(err.contains("top_p"));
        QVERIFY(!panel.names().contains("broken"));
        QVERIFY(panel.removePreset("sampler", &err));
        QVERIFY(!panel.names().contains("sampler"));
        // a shipped preset the user deleted does not come back at the next start
        QVERIFY(panel.removePreset("Greedy", &err));
        PresetsPanel again(&cfg, m_dir.filePath("store2"));
        QVERIFY(!again.names().contains("Greedy"));
        QVERIFY(again.names().contains("Sampling"));
    }

    void malformedPresetRefusedNamingTheField() {
        PresetStore store(m_dir.filePath("store3"));
        struct Case { const char* text; const char* field; };
        const Case cases[] = {
            {R"({"name": "a", "config": {"top_p": 3}})", "config.top_p"},
            {R"({"name": "a", "config": {"temperature": "hot"}})", "config.temperature"},
            {R"({"name": "a", "config": {"tmperature": 0.5}})", "config.tmperature"},
            {R"({"name": "a", "config": {"max_tokens": 1.5}})", "config.max_tokens"},
            {R"({"name": "a", "config": {"stop_sequences": [[1, -4]]}})", "config.stop_sequences"},
            {R"({"name": "a", "config": {"logit_bias": [[1]]}})", "config.logit_bias"},
            {R"({"name": "a", "config": {"early_exit_criterion": "vibes"}})", "config.early_exit_criterion"},
            {R"({"name": "a", "config": {"kv_cache": "int4"}})", "config.kv_cache"},
            {R"({"name": "a", "mode": "warp"})", "mode"},
            {R"({"name": "", "mode": "greedy"})", "name"},
            {R"({"mode": "greedy"})", "name"},
            {R"({"name": "a", "speculative": {"draft_ahead": 0}})", "speculative.draft_ahead"},
            {R"({"name": "a", "speculation": {"branches": 9}})", "speculation.branches"},
            {R"({"name": "a", "colour": "red"})", "colour"},
            {R"({"name": "a", "config": []})", "config"},
            {R"({"name": "a", "prompt": 3})", "prompt"},
            {R"({"name": "a", "model": "x.tinyloop"})", "model"},
            {R"({"name": "a", "model": {"file": "d/x.tinyloop", "sha256": "abc"}})", "model.sha256"},
            {R"({"name": "a", "model": {"sha256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}})", "model.file"},
            {R"({"name": "a", "model": {"file": "d/x.tinyloop", "sha256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "size": 3}})", "model.size"},
        };
        int i = 0;
        for (const Case& c : cases) {
            const QString path = m_dir.filePath(QString("bad%1.json").arg(i++));
            writeText(path, c.text);
            QString err;
            QVERIFY2(!store.importFile(path, &err).has_value(), c.text);
            // the field, or an element of it ("config.stop_sequences[0][1]: token id -4 ...")
            const bool named = err.contains(QString("field %1:").arg(c.field)) ||
                               err.contains(QString("field %1[").arg(c.field));
            QVERIFY2(named, qPrintable(QString(c.text) + " -> " + err));
        }
        writeText(m_dir.filePath("notjson.json"), "{ this is not json");
        QString err;
        QVERIFY(!store.importFile(m_dir.filePath("notjson.json"), &err).has_value());
        QVERIFY(err.contains("not valid JSON"));
        QVERIFY(store.names().isEmpty());  // nothing refused was stored

        // the panel shows the refusal to the user
        ConfigPanel cfg;
        PresetsPanel panel(&cfg, m_dir.filePath("store4"));
        QVERIFY(!panel.importFrom(m_dir.filePath("bad0.json")));
        QVERIFY(panel.statusText().contains("config.top_p"));
        // a valid file placed by hand under another file name is listed and loads by its name
        writeText(m_dir.filePath("store4/hand.json"), R"({"name": "By hand", "mode": "sampling", "config": {"temperature": 0.5}})");
        panel.reload();
        QVERIFY(panel.names().contains("By hand"));
        QVERIFY2(panel.applyPreset("By hand", &err), qPrintable(err));
        QCOMPARE(cfg.mode(), DecodeMode::Sample);
        QCOMPARE(cfg.config()->temperature, 0.5f);
        // a broken file in the preset directory is refused on load, and the editors keep their values
        writeText(PresetStore(m_dir.filePath("store4")).pathFor("Hand edited"),
                  R"({"name": "Hand edited", "config": {"min_p": -1}})");
        cfg.setConfig(tinyloop::GenerateConfig{});
        QVERIFY(!panel.applyPreset("Hand edited", &err));
        QVERIFY(err.contains("config.min_p"));
        QVERIFY(configsEqual(*cfg.config(), tinyloop::GenerateConfig{}));
    }

    void presetWithAPromptOpensOnIt() {
        ConfigPanel cfg;
        PresetsPanel panel(&cfg, m_dir.filePath("store6"));
        QSignalSpy asked(&panel, &PresetsPanel::promptRequested);
        QString err;
        QVERIFY2(panel.applyPreset("Greedy", &err), qPrintable(err));
        QCOMPARE(asked.count(), 0);  // no prompt in the preset: the editor keeps its text
        QVERIFY2(panel.applyPreset("Digit sum", &err), qPrintable(err));
        QCOMPARE(asked.count(), 1);
        const QString prompt = asked.at(0).at(0).toString();
        QFile heldout(TL_SOURCE_DIR "/resources/models/tinyloop-digitsum/heldout.jsonl");
        QVERIFY(heldout.open(QIODevice::ReadOnly));
        QVERIFY2(QString::fromUtf8(heldout.readAll()).contains("\"prompt\": \"" + prompt + "\""), qPrintable(prompt));
        QCOMPARE(cfg.mode(), DecodeMode::Greedy);
        // the editor of a window shows it
        WindowOptions o;
        o.presetDir = m_dir.filePath("store7");
        o.errorDialogs = false;
        MainWindow w(o);
        QVERIFY(w.presetsPanel()->applyPreset("Digit sum", &err));
        auto* editor = w.findChild<PromptEditor*>();
        QVERIFY(editor);
        QCOMPARE(editor->toPlainText(), prompt);
    }

    void modelOpensWithItsDefaultPreset() {
        const QString model = tltest::writeTinyModel(m_dir.path());
        WindowOptions o;
        o.presetDir = m_dir.filePath("store5");
        o.errorDialogs = false;
        {
            MainWindow w(o);
            QSignalSpy ready(&w, &MainWindow::modelReady);
            w.openModel(model);
            QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
            auto c = *w.configPanel()->config();
            c.max_tokens = 5;
            c.loops = 2;
            w.configPanel()->setConfig(c);
            QVERIFY(w.presetsPanel()->saveCurrent("short and shallow"));
            w.presetsPanel()->setDefaultForModel("short and shallow");
        }
        MainWindow w(o);
        QCOMPARE(w.configPanel()->config()->max_tokens, 64);
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(model);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        QCOMPARE(w.configPanel()->config()->max_tokens, 5);
        QCOMPARE(w.configPanel()->config()->loops, 2);
        PresetStore::setDefaultPresetFor(model, QString());
    }

    void presetAppliedBeforeTheModelKeepsItsEarlyExitFields() {
        // The workbench's --preset is applied at start, before the model loads; loading sets the
        // model's early-exit defaults, which must not replace the criterion the preset names.
        const QString model = tltest::writeTinyModel(m_dir.path());
        WindowOptions o;
        o.presetDir = m_dir.filePath("store8");
        o.errorDialogs = false;
        QDir().mkpath(o.presetDir);
        writeText(o.presetDir + "/kl-exit.json", R"({"format": "tinyloop-preset", "version": 1, "name": "KL exit",
            "mode": "early-exit", "config": {"early_exit_criterion": "kl", "early_exit_threshold": 0.25,
            "early_exit_min_L": 1, "early_exit_patience": 1}})");
        MainWindow w(o);
        QString err;
        QVERIFY2(w.applyPreset("KL exit", &err), qPrintable(err));
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(model);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        const auto c = w.configPanel()->config();
        QVERIFY(c);
        QCOMPARE(w.configPanel()->mode(), DecodeMode::EarlyExit);
        QCOMPARE(c->early_exit.criterion, tinyloop::EarlyExitCriterion::KL);
        QCOMPARE(c->early_exit.threshold, 0.25f);
        QCOMPARE(c->early_exit.min_L, 1);
        QVERIFY(!w.applyPreset("no such preset", &err));
    }

    void presetRemembersTheModelItWasMadeFor() {
        // two models with the same file name in two folders, as the bundled ones are
        QVERIFY(QDir(m_dir.path()).mkpath("alpha") && QDir(m_dir.path()).mkpath("beta"));
        const QString a = QFileInfo(tltest::writeTinyModel(m_dir.filePath("alpha"), 7)).canonicalFilePath();
        const QString b = QFileInfo(tltest::writeTinyModel(m_dir.filePath("beta"), 8)).canonicalFilePath();
        QFile fa(a);
        QVERIFY(fa.open(QIODevice::ReadOnly));
        const QString shaA = QString::fromLatin1(QCryptographicHash::hash(fa.readAll(), QCryptographicHash::Sha256).toHex());
        MainWindow w(tltest::quietWindow(m_dir));
        QVERIFY(tltest::loadModel(w, a));
        QVERIFY2(w.windowTitle().contains("alpha/tiny.tinyloop"), qPrintable(w.windowTitle()));
        auto c = *w.configPanel()->config();
        c.max_tokens = 7;
        w.configPanel()->setConfig(c);
        QVERIFY(w.presetsPanel()->saveCurrent("made on alpha"));
        auto saved = w.presetsPanel()->store().load("made on alpha");
        QVERIFY(saved);
        QCOMPARE(saved->modelFile, QString("alpha/tiny.tinyloop"));
        QCOMPARE(saved->modelSha256, shaA);

        QVERIFY(tltest::loadModel(w, b));
        QVERIFY2(w.windowTitle().contains("beta/tiny.tinyloop"), qPrintable(w.windowTitle()));
        std::vector<ModelMismatch> asked;
        ModelChoice answer = ModelChoice::Cancel;
        w.presetsPanel()->setModelChooser([&](const ModelMismatch& m) {
            asked.push_back(m);
            return answer;
        });
        auto maxTokens = [&] { return w.configPanel()->config()->max_tokens; };
        c.max_tokens = 3;
        w.configPanel()->setConfig(c);
        // cancelled: nothing applied, and the refusal names both models
        QString err;
        QVERIFY(!w.presetsPanel()->applyPreset("made on alpha", &err));
        QCOMPARE(asked.size(), size_t(1));
        QCOMPARE(asked[0].wantedFile, QString("alpha/tiny.tinyloop"));
        QCOMPARE(asked[0].openFile, QString("beta/tiny.tinyloop"));
        QCOMPARE(asked[0].foundPath, a);  // found beside the open model
        QVERIFY2(err.contains("alpha/tiny.tinyloop") && err.contains("beta/tiny.tinyloop"), qPrintable(err));
        QVERIFY(PresetsPanel::mismatchText(asked[0]).contains("Open alpha/tiny.tinyloop"));
        QCOMPARE(maxTokens(), 3);
        // run anyway: applied on the open model, and the panel says it was made for another
        answer = ModelChoice::RunAnyway;
        QVERIFY(w.presetsPanel()->applyPreset("made on alpha", &err));
        QCOMPARE(maxTokens(), 7);
        QCOMPARE(w.modelPath(), b);
        QVERIFY2(w.presetsPanel()->statusText().contains("on beta/tiny.tinyloop, not the alpha/tiny.tinyloop it was made for"),
                 qPrintable(w.presetsPanel()->statusText()));
        // open that model: the window loads it, then applies the preset there
        answer = ModelChoice::OpenThatModel;
        w.configPanel()->setConfig(c);
        QSignalSpy ready(&w, &MainWindow::modelReady);
        QVERIFY(w.presetsPanel()->applyPreset("made on alpha", &err));
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        QCOMPARE(w.modelPath(), a);
        QCOMPARE(maxTokens(), 7);
        QCOMPARE(asked.size(), size_t(3));
        // on its own model nobody is asked
        QVERIFY(w.presetsPanel()->applyPreset("made on alpha", &err));
        QCOMPARE(asked.size(), size_t(3));
    }

    void digitSumPresetOpensTheReasoner() {
        // the issue's classroom case: "Digit sum" loaded while the prose model is open
        const QString kjv = QString(TL_SOURCE_DIR) + "/resources/models/tinyloop-kjv/model-f32.tinyloop";
        const QString digits = QString(TL_SOURCE_DIR) + "/resources/models/tinyloop-digitsum/model-f32.tinyloop";
        if (!QFileInfo::exists(kjv) || !QFileInfo::exists(digits)) QSKIP("the bundled models are not there");
        auto shipped = PresetStore::readFile(":/presets/digit-sum.json");
        QVERIFY(shipped);
        QCOMPARE(shipped->modelFile, QString("tinyloop-digitsum/model-f32.tinyloop"));
        QCOMPARE(shipped->modelSha256, modelSha256(digits));  // a re-exported reasoner needs the preset's hash renewed
        QTemporaryDir dir;
        MainWindow w(tltest::quietWindow(dir));
        QVERIFY(tltest::loadModel(w, kjv));
        const QString kjvTitle = w.windowTitle();
        QString err;
        // no dialogs (tests, screenshot runs): refused, saying why
        QVERIFY(!w.presetsPanel()->applyPreset("Digit sum", &err));
        QVERIFY2(err.contains("tinyloop-digitsum/model-f32.tinyloop") && err.contains("tinyloop-kjv/model-f32.tinyloop"), qPrintable(err));
        QVERIFY(w.findChild<PromptEditor*>()->toPlainText() != "2479362?");
        w.presetsPanel()->setModelChooser([](const ModelMismatch&) { return ModelChoice::OpenThatModel; });
        QSignalSpy ready(&w, &MainWindow::modelReady);
        QVERIFY(w.presetsPanel()->applyPreset("Digit sum", &err));
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        QCOMPARE(QFileInfo(w.modelPath()).canonicalFilePath(), QFileInfo(digits).canonicalFilePath());
        QCOMPARE(w.findChild<PromptEditor*>()->toPlainText(), QString("2479362?"));
        QVERIFY2(w.windowTitle() != kjvTitle && w.windowTitle().contains("tinyloop-digitsum"), qPrintable(w.windowTitle()));
    }
};

QTEST_MAIN(TestPresets)
#include "test_presets.moc"
