// The config panel round-trips every GenerateConfig field (and the speculative knobs); input
// outside a field's range is refused in place, naming the field, by the engine's own rules
// (validate_config_fields); the engine's validate_config has the final word on the whole config;
// the chosen mode's own controls (early exit, speculation) come first in the panel, in view
// without scrolling.
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QRegularExpression>
#include <QLabel>
#include <QLineEdit>
#include <QScrollArea>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTest>

#include "../config_fixture.h"
#include "main/config_panel.h"
#include "main/main_window.h"
#include "ui_test_util.h"

using namespace tlui;

static tinyloop::GenerateConfig everyFieldChanged() { return tltest::every_config_field_changed(); }

class TestConfigPanel : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

    static void setText(ConfigPanel& p, const char* key, const QString& text) {
        auto* e = qobject_cast<QLineEdit*>(p.editor(key));
        QVERIFY(e);
        e->selectAll();
        QTest::keyClicks(e, text);  // typed, as a user would
        if (text.isEmpty()) e->clear();
    }

private slots:
    void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

    void roundTripsEveryField() {
        ConfigPanel p;
        const auto c = everyFieldChanged();
        p.setConfig(c);
        QVERIFY2(p.isValid(), qPrintable(p.message()));
        QString err;
        auto back = p.config(&err);
        QVERIFY2(back.has_value(), qPrintable(err));
        QCOMPARE(back->max_tokens, c.max_tokens);
        QCOMPARE(back->loops, c.loops);
        QCOMPARE(back->temperature, c.temperature);
        QCOMPARE(back->top_k, c.top_k);
        QCOMPARE(back->top_p, c.top_p);
        QCOMPARE(back->min_p, c.min_p);
        QCOMPARE(back->cache_window, c.cache_window);
        QCOMPARE(back->repetition_penalty, c.repetition_penalty);
        QCOMPARE(back->frequency_penalty, c.frequency_penalty);
        QCOMPARE(back->presence_penalty, c.presence_penalty);
        QVERIFY(back->logit_bias == c.logit_bias);
        QVERIFY(back->stop_sequences == c.stop_sequences);
        QVERIFY(back->stop_strings == c.stop_strings);
        QCOMPARE(back->ignore_eos, c.ignore_eos);
        QCOMPARE(back->max_time, c.max_time);
        QCOMPARE(back->no_repeat_ngram_size, c.no_repeat_ngram_size);
        QVERIFY(back->bad_words == c.bad_words);
        QCOMPARE(back->beam_size, c.beam_size);
        QCOMPARE(back->length_penalty, c.length_penalty);
        QCOMPARE(back->early_stopping, c.early_stopping);
        QCOMPARE(back->renormalize_logits, c.renormalize_logits);
        QCOMPARE(back->min_new_tokens, c.min_new_tokens);
        QCOMPARE(back->min_length, c.min_length);
        QCOMPARE(back->forced_eos_token_id, c.forced_eos_token_id);
        QVERIFY(back->exponential_decay_length_penalty == c.exponential_decay_length_penalty);
        QVERIFY(back->suppress_tokens == c.suppress_tokens);
        QVERIFY(back->begin_suppress_tokens == c.begin_suppress_tokens);
        QCOMPARE(back->typical_p, c.typical_p);
        QCOMPARE(back->epsilon_cutoff, c.epsilon_cutoff);
        QCOMPARE(back->eta_cutoff, c.eta_cutoff);
        QCOMPARE(back->early_exit.patience, c.early_exit.patience);
        QCOMPARE(back->early_exit.min_L, c.early_exit.min_L);
        QCOMPARE(back->early_exit.peek_every, c.early_exit.peek_every);
        QCOMPARE(back->early_exit.logit_margin, c.early_exit.logit_margin);
        QCOMPARE(back->early_exit.criterion, c.early_exit.criterion);
        QCOMPARE(back->early_exit.threshold, c.early_exit.threshold);
        QCOMPARE(back->sample_seed, c.sample_seed);
        QCOMPARE(back->kv_cache, c.kv_cache);
        QVERIFY(back->grammar == nullptr);
        QVERIFY(configsEqual(*back, c));

        // early exit (which the engine refuses together with beam search) round-trips on its own
        auto ee = tinyloop::GenerateConfig{};
        ee.early_exit.patience = 2;
        p.setConfig(ee);
        QVERIFY2(p.isValid(), qPrintable(p.message()));
        QCOMPARE(p.config()->early_exit.patience, 2);
        ee.beam_size = 3;
        p.setConfig(ee);
        QVERIFY(!p.isValid());
        QVERIFY2(p.message().startsWith("beam_size:"), qPrintable(p.message()));

        // forced words (which the engine refuses together with beam groups) round-trip on their
        // own, shown as "ids; ids | ids"
        auto fw = tinyloop::GenerateConfig{};
        fw.beam_size = 4;
        fw.force_words = {{{5, 6}}, {{7}, {8, 9}}};
        p.setConfig(fw);
        QVERIFY2(p.isValid(), qPrintable(p.message()));
        QCOMPARE(qobject_cast<QLineEdit*>(p.editor("force_words"))->text(), QString("5 6; 7 | 8 9"));
        QVERIFY(p.config()->force_words == fw.force_words);
        setText(p, "force_words", "1 2 | 3; 4");
        QVERIFY2(p.isValid(), qPrintable(p.message()));
        QVERIFY((p.config()->force_words == std::vector<std::vector<std::vector<int32_t>>>{{{1, 2}, {3}}, {{4}}}));

        // and the defaults come back as defaults
        p.setConfig(tinyloop::GenerateConfig{});
        QVERIFY(configsEqual(*p.config(), tinyloop::GenerateConfig{}));

        // the JSON form used by presets and exports round-trips too
        QVERIFY(configsEqual(configFromJson(configToJson(c)), c));

        tinyloop::SpeculationPolicy k{.verify_loops = 6, .draft_loops = 3, .draft_ahead = 5, .branches = 3};
        p.setMode(DecodeMode::Tree);
        p.setKnobs(k);
        QVERIFY(p.knobs().has_value());
        QVERIFY(knobsEqual(*p.knobs(), k));
        QCOMPARE(p.mode(), DecodeMode::Tree);
    }

    // The speculative modes' cross-field rules are the engine's (validate_mode_speculation): the
    // draft depth below the verify depth (verify_loops, else loops), the tree at most 8 deep; a
    // knob at 0 is the engine's default, accepted.
    void speculativeCrossFieldRules() {
        ConfigPanel p;
        p.setMode(DecodeMode::Speculative);
        p.setKnobs(tinyloop::SpeculationPolicy{});
        QVERIFY2(p.isValid(), qPrintable(p.message()));
        p.setKnobs(tinyloop::SpeculationPolicy{.verify_loops = 4, .draft_loops = 4});
        QVERIFY(!p.isValid());
        QVERIFY2(p.invalidFields().contains("draft_loops"), qPrintable(p.message()));
        p.setKnobs(tinyloop::SpeculationPolicy{.verify_loops = 4, .draft_loops = 3});
        QVERIFY2(p.isValid(), qPrintable(p.message()));
        // verify_loops 0: the config's loops is the verify depth
        p.setKnobs(tinyloop::SpeculationPolicy{.draft_loops = 3});
        QVERIFY2(p.isValid(), qPrintable(p.message()));
        setText(p, "loops", "3");
        QVERIFY(!p.isValid());
        QVERIFY2(p.message().contains("draft_loops"), qPrintable(p.message()));
        setText(p, "loops", "0");
        p.setKnobs(tinyloop::SpeculationPolicy{.draft_ahead = 9});
        QVERIFY2(p.isValid(), qPrintable(p.message()));  // chain: up to 32
        p.setMode(DecodeMode::Tree);
        QVERIFY(!p.isValid());
        QVERIFY2(p.invalidFields().contains("draft_ahead"), qPrintable(p.message()));
        p.setKnobs(tinyloop::SpeculationPolicy{.draft_ahead = 8});
        QVERIFY2(p.isValid(), qPrintable(p.message()));
        // outside a speculative mode the knobs are not checked against each other
        p.setKnobs(tinyloop::SpeculationPolicy{.verify_loops = 2, .draft_loops = 5});
        p.setMode(DecodeMode::Greedy);
        QVERIFY2(p.isValid(), qPrintable(p.message()));
    }

    void everyFieldHasRangeAndTooltip() {
        ConfigPanel p;
        for (const FieldInfo& f : configFields()) {
            QWidget* e = p.editor(f.key);
            QVERIFY2(e, f.key);
            QVERIFY2(e->toolTip().contains(QString(f.tooltip).left(20).toHtmlEscaped()), f.key);
        }
        QVERIFY(p.editor("temperature")->toolTip().contains("means greedy argmax"));
        QCOMPARE(p.modeSelector()->count(), 7);
    }

    void refusesOutOfRangeInPlace() {
        ConfigPanel p;
        ConfigLimits lim;
        lim.max_loops = 6;
        lim.max_seq_len = 256;
        lim.vocab_size = 300;
        p.setLimits(lim);
        QVERIFY(p.isValid());
        auto* label = p.findChild<QLabel*>("configMessage");
        QVERIFY(label);

        struct Bad { const char* key; const char* text; const char* why; };
        const Bad cases[] = {
            {"top_p", "1.5", "outside (0, 1]"},
            {"top_p", "0", "outside (0, 1]"},
            {"temperature", "-0.1", "must be >= 0"},
            {"loops", "7", "outside [1, 6]"},
            {"max_tokens", "abc", "not an integer"},
            {"max_tokens", "300", "outside [0, 256]"},
            {"min_p", "2", "outside [0, 1]"},
            {"frequency_penalty", "2.5", "outside [-2, 2]"},
            {"repetition_penalty", "0", "must be > 0"},
            {"early_exit_min_L", "0", "outside [1, 6]"},
            {"early_exit_threshold", "0", "must be > 0"},
            {"beam_size", "65", "outside [0, 64]"},
            {"logit_bias", "400:1", "token id"},
            {"logit_bias", "5:150", "bias"},
            {"logit_bias", "5", "expected id:bias"},
            {"stop_sequences", "1 2; x", "not a token id"},
            {"stop_sequences", "999", "token id"},
            {"stop_strings", "[\"a\", 3]", "expected a string"},
            {"stop_strings", "not json", "JSON array"},
            {"sample_seed", "-1", "not an integer"},
            {"max_time", "-1", "must be >= 0"},
            {"no_repeat_ngram_size", "-2", "must be >= 0"},
            {"min_new_tokens", "-1", "outside [0"},
            {"min_length", "x", "not an integer"},
            {"bad_words", "1;;2", "must not be empty"},
            {"forced_eos_token_id", "-2", "outside [0"},
            {"exponential_decay_length_penalty", "3", "start_index, decay_factor"},
            {"exponential_decay_length_penalty", "3, 0", "decay_factor 0 is outside (0, 10]"},
            {"suppress_tokens", "1 x", "not a token id"},
            {"begin_suppress_tokens", "999", "token id"},
            {"typical_p", "0", "outside (0, 1]"},
            {"epsilon_cutoff", "1", "outside [0, 1)"},
            {"eta_cutoff", "-0.1", "outside [0, 1)"},
            {"force_words", "5 | x", "not a token id"},
            {"force_words", "5 |", "must not end with '|'"},
            {"force_words", "5 | | 6", "must not be empty"},
            {"force_words", "5", "needs beam_size >= 2"},
            {"grammar", "/no/such/file.gbnf", "no such file"},
            {"length_penalty", "0.5", "only applies to beam search"},
        };
        for (const Bad& b : cases) {
            p.setConfig(tinyloop::GenerateConfig{});
            p.setGrammarFile(QString());
            QVERIFY2(p.isValid(), qPrintable(p.message()));
            setText(p, b.key, b.text);
            const QString ctx = QString("%1=%2: '%3'").arg(b.key, b.text, p.message());
            QVERIFY2(!p.isValid(), qPrintable(ctx));
            QVERIFY2(p.invalidFields().contains(b.key), qPrintable(ctx));
            QVERIFY2(p.message().startsWith(QString(b.key) + ":"), qPrintable(ctx));
            QVERIFY2(p.message().contains(b.why), qPrintable(ctx));
            QVERIFY2(label->isVisibleTo(&p) && label->text() == p.message(), qPrintable(ctx));
            QVERIFY2(p.editor(b.key)->styleSheet().contains("#d33"), qPrintable(ctx));  // red border
            QString err;
            QVERIFY2(!p.config(&err).has_value(), qPrintable(ctx));
            QVERIFY2(err.startsWith(b.key), qPrintable(ctx + " / " + err));
        }
        // fixing the field clears the refusal
        setText(p, "length_penalty", "1");
        QVERIFY2(p.isValid(), qPrintable(p.message()));
        QVERIFY(p.editor("length_penalty")->styleSheet().isEmpty());
        QVERIFY(label->text().isEmpty());  // the line stays laid out (no reflow), empty

        // The engine's rules, not a copy: top_k counts only when sampling.
        tinyloop::GenerateConfig sampling;
        sampling.temperature = 0.7f;
        p.setConfig(sampling);
        setText(p, "top_k", "0");
        QVERIFY2(p.message().startsWith("top_k:") && p.message().contains("must be >= 1 when sampling"),
                 qPrintable(p.message()));
        p.setConfig(tinyloop::GenerateConfig{});
        setText(p, "top_k", "0");
        QVERIFY2(p.isValid(), qPrintable(p.message()));
    }

    void modeControlsComeFirst() {
        ConfigPanel p;
        p.resize(420, 300);
        p.show();
        QVERIFY(QTest::qWaitForWindowExposed(&p));
        auto* scroll = p.findChild<QScrollArea*>("configScroll");
        QVERIFY(scroll);
        // in view: inside the scroll area's viewport as it is scrolled now, without the user scrolling
        auto inView = [&](const char* key) {
            QWidget* e = p.editor(key);
            QApplication::processEvents();
            const QRect r(e->mapTo(scroll->viewport(), QPoint(0, 0)), e->size());
            return scroll->viewport()->rect().contains(r);
        };
        QCOMPARE(p.firstGroup()->objectName(), QString("generateGroup"));
        QVERIFY(!inView("early_exit_criterion"));
        scroll->verticalScrollBar()->setValue(scroll->verticalScrollBar()->maximum() / 2);  // scrolled away meanwhile
        p.setMode(DecodeMode::EarlyExit);
        QCOMPARE(p.firstGroup()->objectName(), QString("earlyExitGroup"));
        QVERIFY2(inView("early_exit_criterion"), "the early-exit criterion is not in view in the early-exit mode");
        QVERIFY(p.firstGroup()->isAncestorOf(p.editor("early_exit_patience")));
        p.setMode(DecodeMode::Speculative);
        QCOMPARE(p.firstGroup()->objectName(), QString("speculativeGroup"));
        QVERIFY(inView("draft_loops"));
        QVERIFY(!inView("early_exit_criterion"));
        p.setMode(DecodeMode::Tree);
        QCOMPARE(p.firstGroup()->objectName(), QString("speculativeGroup"));
        p.setMode(DecodeMode::Greedy);
        QCOMPARE(p.firstGroup()->objectName(), QString("generateGroup"));
    }

    void modeSelectorMakesTheModeRunnable() {
        ConfigPanel p;
        QComboBox* m = p.modeSelector();
        const int beam = m->findData("beam");
        m->setCurrentIndex(beam);
        emit m->activated(beam);
        QVERIFY(p.config()->beam_size >= 2);
        const int ee = m->findData("early-exit");
        m->setCurrentIndex(ee);
        emit m->activated(ee);
        QVERIFY(p.config()->early_exit.patience >= 1);
        QCOMPARE(p.config()->beam_size, 0);
        const int s = m->findData("sample");
        m->setCurrentIndex(s);
        emit m->activated(s);
        QVERIFY(p.config()->temperature > 0.01f);
        QCOMPARE(p.mode(), DecodeMode::Sample);
    }

    void engineHasTheFinalWord() {
        // max_tokens within max_seq_len passes the field check, but prompt + max_tokens does not:
        // only validate_config (asked through the worker) knows the prompt length.
        QVERIFY(m_dir.isValid());
        const QString model = tltest::writeTinyModel(m_dir.path());
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        MainWindow w(o);
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(model);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        w.setPrompt("a prompt of several tokens");
        auto c = *w.configPanel()->config();
        c.max_tokens = 256;
        w.configPanel()->setConfig(c);
        QVERIFY(w.configPanel()->isValid());
        QVERIFY(tltest::waitFor([&] { return w.configPanel()->message().startsWith("engine: max_tokens"); }, 10000));
        QVERIFY(w.configPanel()->message().contains("max_seq_len"));
        // and Generate is refused there, with the same reason (a run that starts before the
        // verdict is in and is refused by the engine: test_config_refusals)
        QSignalSpy ended(&w, &MainWindow::runEnded);
        QVERIFY(!w.generate());
        QCOMPARE(ended.count(), 0);
        QVERIFY(w.findChild<QLabel*>("stateLabel")->text().contains("max_tokens"));
        c.max_tokens = 8;
        w.configPanel()->setConfig(c);
        QVERIFY(tltest::waitFor([&] { return w.configPanel()->message().isEmpty(); }, 10000));
    }

    void floatFieldsShowTheShortestDecimal() {
        // 0.05f is 0.0500000007 at 9 digits: a field shows "0.05", and reads back the same float
        ConfigPanel p;
        tinyloop::GenerateConfig c;
        c.temperature = 0.8f;
        c.top_p = 0.95f;
        c.min_p = 0.01f;
        c.repetition_penalty = 1.1f;
        c.early_exit.threshold = 0.05f;
        c.logit_bias = {{5, 0.3f}, {7, -1.7f}};
        p.setConfig(c);
        auto text = [&](const char* key) { return qobject_cast<QLineEdit*>(p.editor(key))->text(); };
        QCOMPARE(text("temperature"), QString("0.8"));
        QCOMPARE(text("top_p"), QString("0.95"));
        QCOMPARE(text("min_p"), QString("0.01"));
        QCOMPARE(text("repetition_penalty"), QString("1.1"));
        QCOMPARE(text("early_exit_threshold"), QString("0.05"));
        QCOMPARE(text("logit_bias"), QString("5:0.3, 7:-1.7"));
        const auto back = p.config();
        QVERIFY(back);
        QCOMPARE(back->early_exit.threshold, 0.05f);
        QVERIFY(back->logit_bias == c.logit_bias);
        // every bundled preset, every field
        const QRegularExpression artefact("\\d\\.\\d*(0{5,}|9{5,})\\d");
        for (const QString& file : QDir(QString(TL_SOURCE_DIR) + "/resources/presets").entryList({"*.json"})) {
            QFile f(QString(TL_SOURCE_DIR) + "/resources/presets/" + file);
            QVERIFY(f.open(QIODevice::ReadOnly));
            const auto j = nlohmann::json::parse(f.readAll().toStdString());
            p.setConfig(configFromJson(j.at("config")));
            for (const FieldInfo& fi : configFields())
                if (auto* e = qobject_cast<QLineEdit*>(p.editor(fi.key)))
                    QVERIFY2(!artefact.match(e->text()).hasMatch(), qPrintable(file + ": " + fi.key + " = " + e->text()));
        }
    }
};

QTEST_MAIN(TestConfigPanel)
#include "test_config_panel.moc"
