// After a run the logit-lens heatmap holds exactly tokens x depth cells, equal to the engine's
// lens values (score_logit_lens over prompt + output), for every metric; while streaming it
// shows the TokenEvents' lens rows; each token's exit depth is marked.
#include <QSignalSpy>
#include <QTest>
#include <cmath>
#include <qcustomplot.h>

#include "main/config_panel.h"
#include "plots/depth_plot.h"
#include "plots/lens_heatmap.h"
#include "main/main_window.h"
#include "ui_test_util.h"

using namespace tlui;

class TestLensHeatmap : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_model;

    void runOnce(MainWindow& w, int maxTokens, int loops) {
        QSignalSpy ready(&w, &MainWindow::modelReady);
        w.openModel(m_model);
        QVERIFY(tltest::waitFor([&] { return ready.count() == 1; }));
        auto c = *w.configPanel()->config();
        c.max_tokens = maxTokens;
        c.loops = loops;
        c.ignore_eos = true;
        w.configPanel()->setConfig(c);
        w.setPrompt("In the beginning was");
        QSignalSpy settled(&w, &MainWindow::sessionSettled);
        QVERIFY(w.generate());
        QVERIFY(tltest::waitFor([&] { return settled.count() == 1; }));
        QTest::qWait(100);  // a few frames of the 30 Hz timer
    }

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY(m_dir.isValid());
        m_model = tltest::writeTinyModel(m_dir.path());
    }

    void cellsEqualTheEngineLens() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets");
        o.errorDialogs = false;
        MainWindow w(o);
        const int N = 14, L = 5;
        runOnce(w, N, L);
        const Session& s = w.session();
        QCOMPARE(s.run.stats.tokens_emitted, N);
        QVERIFY(s.lens.has_value());
        LensHeatmap* h = w.heatmap();
        QVERIFY(h->isExact());
        QCOMPARE(h->tokenCount(), N);
        QCOMPARE(h->depthCount(), L);

        // the engine's own lens, computed here independently
        tinyloop::Model* m = tinyloop::load_model(m_model.toStdString());
        const auto lens = tinyloop::score_logit_lens(m, s.run.tokens.data(), int(s.run.tokens.size()), L, 5);
        tinyloop::free_model(m);
        QCOMPARE(lens.n_positions, s.run.promptLen + N);

        for (int metric = 0; metric < 4; ++metric) {
            h->setMetric(static_cast<LensMetric>(metric));
            QCPColorMapData* d = h->colorMap()->data();
            QCOMPARE(d->keySize(), N);
            QCOMPARE(d->valueSize(), L);
            for (int k = 0; k < N; ++k)
                for (int depth = 1; depth <= L; ++depth) {
                    const auto& c = lens.at(s.run.promptLen + k - 1, depth);
                    const float want = metric == 0 ? c.p_final_argmax : metric == 1 ? c.p_next
                                     : metric == 2 ? c.entropy : c.kl_to_final;
                    const float got = float(d->cell(k, depth - 1));
                    QVERIFY2(got == want, qPrintable(QString("metric %1 token %2 depth %3: %4 vs %5")
                                                         .arg(metric).arg(k).arg(depth).arg(got).arg(want)));
                }
        }
        // the final depth's KL to itself is zero
        for (int k = 0; k < N; ++k) QVERIFY(std::fabs(h->value(LensMetric::KLToFinal, k, L)) < 1e-6);
        // exit depth marks: one per token, at the depth it used
        QCPGraph* exits = h->plot()->graph(0);
        QCOMPARE(exits->data()->size(), N);
        for (int k = 0; k < N; ++k) QCOMPARE(int(exits->data()->at(k)->value), s.events[size_t(k)].depth);
        // the depth plot has a bar per token
        QCOMPARE(w.depthPlot()->count(), N);
        // hovering a cell names its top-k
        QVERIFY(h->cellTooltip(0, 1).contains("token 0"));
    }

    void streamingShowsTheEventLensRows() {
        WindowOptions o;
        o.presetDir = m_dir.filePath("presets2");
        o.errorDialogs = false;
        MainWindow w(o);
        const int N = 10, L = 4;
        runOnce(w, N, L);
        const Session& s = w.session();
        // a fresh heatmap fed only the TokenEvents, as during a run
        LensHeatmap h;
        h.clear(L);
        for (const auto& ev : s.events) h.addEvent(ev);
        h.setMetric(LensMetric::ProbEmitted);
        h.refresh();
        QVERIFY(!h.isExact());
        QCOMPARE(h.colorMap()->data()->keySize(), N);
        QCOMPARE(h.colorMap()->data()->valueSize(), L);
        for (int k = 0; k < N; ++k) {
            const auto& ev = s.events[size_t(k)];
            QCOMPARE(int(ev.lens.size()), L);
            for (const auto& row : ev.lens) {
                QCOMPARE(float(h.colorMap()->data()->cell(k, row.depth - 1)), row.p_emitted);
                QCOMPARE(float(h.value(LensMetric::Entropy, k, row.depth)), row.entropy);
                // the streamed rows agree with the exact lens
                const auto& c = s.lens->at(s.run.promptLen + k - 1, row.depth);
                QVERIFY2(std::fabs(c.p_next - row.p_emitted) < 1e-4f,
                         qPrintable(QString("token %1 depth %2: %3 vs %4").arg(k).arg(row.depth).arg(c.p_next).arg(row.p_emitted)));
            }
            QVERIFY(std::isnan(h.value(LensMetric::KLToFinal, k, 1)));  // not known until the run ends
        }
    }
};

QTEST_MAIN(TestLensHeatmap)
#include "test_lens_heatmap.moc"
