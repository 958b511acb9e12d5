// The guided tour (Help -> Tour) on the bundled models: every step runs for real and produces what
// its panel points at, Next and Back move through the steps (also while a step is still running),
// and the buttons end where the steps end. --tour-step N: tour_cli tests in ui_tests.cmake.
#include <QAction>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTest>

#include "main/main_window.h"
#include "main/tour.h"
#include "plots/depth_plot.h"
#include "plots/lens_heatmap.h"
#include "ui_test_util.h"
#include "workbench_fixture.h"
#include "views/analysis_views.h"
#include "views/depth_scrubber_view.h"

using namespace tlui;

class TestTour : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    std::unique_ptr<MainWindow> m_window;
    Tour* m_tour = nullptr;

    QPushButton* button(const char* name) const { return m_tour->panel()->findChild<QPushButton*>(name); }

    // Waits for step `index` to finish; false (and the step's error) when it failed or never ended.
    bool settled(int index) {
        if (!tltest::waitFor([&] { return m_tour->current() == index && !m_tour->isBusy(); }, 120000)) {
            qWarning("step %d did not finish (at %d)", index + 1, m_tour->current() + 1);
            return false;
        }
        if (!m_tour->stepError().isEmpty()) qWarning("step %d: %s", index + 1, qPrintable(m_tour->stepError()));
        return m_tour->stepError().isEmpty();
    }

private slots:
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        QVERIFY2(!bundledModelPath("tinyloop-kjv").isEmpty(), "the bundled model tinyloop-kjv is missing");
        QVERIFY2(!bundledModelPath("tinyloop-digitsum").isEmpty(), "the bundled model tinyloop-digitsum is missing");
        QVERIFY(bundledModelPath("no-such-model").isEmpty());
        m_window = tltest::openTestWorkbench("test_tour", m_dir);
    }
    void cleanupTestCase() { m_window.reset(); }

    void helpTourStartsAtTheFirstStep() {
        QAction* a = m_window->findChild<QAction*>("tourAction");
        QVERIFY(a);
        a->trigger();
        m_tour = m_window->tour();
        QVERIFY(m_tour);
        QVERIFY(m_tour->panel()->isVisible());
        QCOMPARE(m_tour->count(), 5);
        QVERIFY(settled(0));
        QVERIFY(!button("tourBack")->isEnabled());
        QVERIFY(button("tourNext")->isEnabled());
        QVERIFY(m_tour->panel()->findChild<QLabel*>("tourHeading")->text().startsWith("Step 1 of 5"));
        // greedy and the lens: the exact lens of the run, on the lens tab
        QVERIFY(m_window->modelPath().contains("tinyloop-kjv"));
        QCOMPARE(m_window->plotTabs()->currentIndex(), 0);
        QVERIFY(m_window->heatmap()->tokenCount() > 0);
        QVERIFY(m_window->heatmap()->isExact());
        QCOMPARE(m_window->session().run.mode, DecodeMode::Greedy);
    }

    void nextRunsEachStep() {
        QTest::mouseClick(button("tourNext"), Qt::LeftButton);
        QVERIFY(settled(1));
        // the reasoner: the answer (second token) emerges across passes
        QVERIFY(m_window->modelPath().contains("tinyloop-digitsum"));
        QCOMPARE(m_window->heatmap()->metric(), LensMetric::ProbFinal);
        const double early = m_window->heatmap()->value(LensMetric::ProbFinal, 1, 1);
        const double late = m_window->heatmap()->value(LensMetric::ProbFinal, 1, m_window->heatmap()->depthCount());
        QVERIFY2(late > 0.5 && early < late, qPrintable(QString("%1 -> %2").arg(early).arg(late)));

        QTest::mouseClick(button("tourNext"), Qt::LeftButton);
        QVERIFY(settled(2));
        QVERIFY(m_window->modelPath().contains("tinyloop-kjv"));
        QCOMPARE(m_window->session().run.mode, DecodeMode::EarlyExit);
        QCOMPARE(m_window->plotTabs()->currentIndex(), 1);
        QVERIFY(m_window->depthPlot()->count() > 0);
        const QString status = m_window->findChild<QLabel*>("stateLabel")->text();
        QVERIFY2(status.contains("exited early") && status.contains("because its top guess stayed the same"),
                 qPrintable(status));

        QTest::mouseClick(button("tourNext"), Qt::LeftButton);
        QVERIFY(settled(3));
        QCOMPARE(m_window->session().run.mode, DecodeMode::Speculative);
        QCOMPARE(m_window->plotTabs()->currentIndex(), 2);
        QVERIFY(!m_window->session().run.cycles.empty());
        QVERIFY(m_window->session().run.stats.spec_accepted > 0);

        QTest::mouseClick(button("tourNext"), Qt::LeftButton);
        QVERIFY(settled(4));
        auto* scrubber = qobject_cast<DepthScrubberView*>(m_window->analysisViews()->window("scrubber"));
        QVERIFY(scrubber && scrubber->isVisible());
        QVERIFY(scrubber->history().size() >= 4);
        QCOMPARE(scrubber->depth(), 6);
        QCOMPARE(m_tour->stepWindow(), static_cast<QWidget*>(scrubber));
        QVERIFY(!button("tourNext")->isEnabled());
        QVERIFY(button("tourBack")->isEnabled());
    }

    void backRunsTheStepAgain() {
        QTest::mouseClick(button("tourBack"), Qt::LeftButton);
        QVERIFY(settled(3));
        QCOMPARE(m_window->session().run.mode, DecodeMode::Speculative);
        QCOMPARE(m_tour->stepWindow(), static_cast<QWidget*>(m_window.get()));
        // forward again: the scrubber demonstrated a second time starts from a fresh prefill
        m_tour->next();
        QVERIFY(settled(4));
        QCOMPARE(qobject_cast<DepthScrubberView*>(m_window->analysisViews()->window("scrubber"))->history().size(), size_t(4));
    }

    void stepsAskedForWhileRunningAreFollowed() {
        m_tour->goTo(0);
        QVERIFY(m_tour->isBusy());
        m_tour->next();  // while step 1 runs: it stops, then step 2 ... then step 3
        m_tour->next();
        QVERIFY(settled(2));
        QCOMPARE(m_window->session().run.mode, DecodeMode::EarlyExit);
        m_tour->goTo(99);  // clamped to the last step
        QVERIFY(settled(4));
    }

    void closeHidesThePanel() {
        QTest::mouseClick(button("tourClose"), Qt::LeftButton);
        QVERIFY(!m_tour->panel()->isVisible());
        m_window->startTour(2);
        QVERIFY(m_tour->panel()->isVisible());
        QVERIFY(settled(2));
    }
};

QTEST_MAIN(TestTour)
#include "test_tour.moc"
