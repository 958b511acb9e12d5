// The plots a user reads after a run: speculative acceptance (per cycle, histogram, overall rate
// equal to the engine's counters; greedy speculation gives greedy's text), the depth used per
// token under early exit, and the tokens/s history growing by one point per run.
#include <QFile>
#include <QLabel>
#include <QSignalSpy>
#include <QTest>
#include <qcustomplot.h>

#include "main/config_panel.h"
#include "plots/depth_plot.h"
#include "main/main_window.h"
#include "plots/speculative_plot.h"
#include "plots/timing_plot.h"
#include "ui_test_util.h"

using namespace tlui;

class TestPlots : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_model;

    static bool run(MainWindow& w) {
        QSignalSpy settled(&w, &MainWindow::sessionSettled);
        if (!w.generate()) return false;
        return tltest::waitFor([&] { return settled.count() == 1; });
    }

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY(m_dir.isValid());
        m_model = tltest::writeTinyModel(m_dir.path());
    }

    void speculativeAcceptance() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        MainWindow w(o);
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(m_model);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        auto* spec = w.findChild<SpeculativePlot*>();
        QVERIFY(spec);
        QVERIFY(!spec->hasData());
        QVERIFY(spec->placeholderText().contains("speculative mode"));

        auto c = *w.configPanel()->config();
        c.max_tokens = 24;
        c.ignore_eos = true;
        w.configPanel()->setConfig(c);
        w.setPrompt("In the beginning");
        QVERIFY(run(w));  // greedy first
        const std::vector<int32_t> greedy = w.session().run.tokens;

        w.configPanel()->setMode(DecodeMode::Speculative);
        w.configPanel()->setKnobs(tinyloop::SpeculationPolicy{.verify_loops = 0, .draft_loops = 1, .draft_ahead = 3, .branches = 2});
        QVERIFY2(run(w), qPrintable(w.lastError()));
        const auto& s = w.session();
        QVERIFY2(s.run.tokens == greedy, "greedy speculation must reproduce greedy decoding");
        QVERIFY(s.run.stats.spec_cycles > 0);
        QVERIFY(spec->hasData());
        QCOMPARE(spec->overallRate(), s.run.stats.spec_acceptance_rate());
        QCOMPARE(int(s.run.cycles.size()), s.run.stats.spec_cycles);
        auto* rate = spec->findChild<QLabel*>("specRate");
        QVERIFY(rate->text().contains(QString::number(s.run.stats.spec_acceptance_rate() * 100.0, 'f', 1) + "%"));
        // per-cycle bars: one per cycle
        auto* accepted = qobject_cast<QCPBars*>(spec->plot()->plottable(1));
        QVERIFY(accepted);
        QCOMPARE(accepted->data()->size(), s.run.stats.spec_cycles);

        // tree: same text, too
        w.configPanel()->setMode(DecodeMode::Tree);
        w.configPanel()->setKnobs(tinyloop::SpeculationPolicy{.verify_loops = 0, .draft_loops = 1, .draft_ahead = 2, .branches = 2});
        QVERIFY2(run(w), qPrintable(w.lastError()));
        QVERIFY(w.session().run.tokens == greedy);
        QVERIFY(spec->hasData());
    }

    void depthAndTimingHistory() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets2");
        o.errorDialogs = false;
        MainWindow w(o);
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(m_model);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        auto c = *w.configPanel()->config();
        c.max_tokens = 16;
        c.ignore_eos = true;
        c.loops = 6;
        c.early_exit.patience = 1;
        c.early_exit.min_L = 1;
        c.early_exit.criterion = tinyloop::EarlyExitCriterion::ArgmaxStable;
        w.configPanel()->setMode(DecodeMode::EarlyExit);
        w.configPanel()->setConfig(c);
        QVERIFY2(run(w), qPrintable(w.lastError()));
        const auto& s = w.session();
        QCOMPARE(w.depthPlot()->count(), 16);
        auto* bars = qobject_cast<QCPBars*>(w.depthPlot()->plot()->plottable(0));
        QVERIFY(bars);
        QCOMPARE(bars->data()->size(), 16);
        for (int k = 0; k < 16; ++k) {
            QCOMPARE(int(bars->data()->at(k)->value), s.run.stats.depth_per_token[size_t(k)]);
            QVERIFY(s.run.stats.depth_per_token[size_t(k)] <= 6);
        }
        // timing: a point per run
        auto* timing = w.findChild<TimingPlot*>();
        QVERIFY(timing);
        QVERIFY(run(w));
        QCOMPARE(int(w.session().history.size()), 2);
        QCPGraph* rate = timing->plot()->graph(0);
        QCOMPARE(rate->data()->size(), 2);
        QCOMPARE(rate->data()->at(1)->value, w.session().run.stats.decode_tokens_per_s());
        QVERIFY(timing->findChild<QLabel*>("timingSummary")->text().contains("prefill"));
    }

    void grammarConstrainsTheOutput() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets3");
        o.errorDialogs = false;
        MainWindow w(o);
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(m_model);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        const QString g = m_dir.filePath("yesno.gbnf");
        {
            QFile f(g);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("root ::= (\"yes\" | \"no\") \".\"\n");
        }
        w.configPanel()->setGrammarFile(g);
        QVERIFY2(w.configPanel()->isValid(), qPrintable(w.configPanel()->message()));
        QVERIFY2(run(w), qPrintable(w.lastError()));
        const QString text = w.session().run.text;
        QVERIFY2(text == "yes." || text == "no.", qPrintable(text));
        // a malformed grammar: the engine's located message reaches the panel
        {
            QFile f(g);
            QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
            f.write("root ::= (\"yes\"\n");
        }
        QSignalSpy ended(&w, &MainWindow::runEnded);
        QVERIFY(w.generate());
        QVERIFY(tltest::waitFor([&] { return ended.count() == 1; }));
        QCOMPARE(ended.at(0).at(1).toBool(), false);
        QVERIFY2(w.lastError().contains("yesno.gbnf:"), qPrintable(w.lastError()));
        QVERIFY(w.configPanel()->message().contains("yesno.gbnf:"));
    }
};

QTEST_MAIN(TestPlots)
#include "test_plots.moc"
