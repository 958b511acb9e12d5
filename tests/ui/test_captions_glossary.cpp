// The words of the workbench: a caption under every plot (main window and every analysis view),
// every glossary link resolving, the glossary holding every term the UI's labels use and finding
// it by search, and the plain-language status lines (early exit, the depth scrubber).
#include <QAction>
#include <QComboBox>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QRegularExpression>
#include <QTableWidget>
#include <QTest>
#include <qcustomplot.h>

#include "base/config_json.h"
#include "base/glossary.h"
#include "base/glossary_dialog.h"
#include "main/main_window.h"
#include "record/plain_status.h"
#include "main/tour.h"
#include "plots/lens_heatmap.h"
#include "plots/plot_caption.h"
#include "ui_test_util.h"
#include "workbench_fixture.h"
#include "views/analysis_views.h"
#include "views/analysis_window.h"

using namespace tlui;

namespace {

// The glossary terms a caption or panel text links to.
QStringList linkedTerms(const QString& richText) {
    QStringList out;
    static const QRegularExpression re("href='glossary:([^']+)'");
    for (auto it = re.globalMatch(richText); it.hasNext();) out << it.next().captured(1);
    return out;
}

}  // namespace

class TestCaptionsGlossary : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    std::unique_ptr<MainWindow> m_window;

    // Every plot (and the step view's lens table) under `w` has a caption, and every term the
    // caption links to is in the glossary. Returns how many plots were checked.
    int checkCaptions(QWidget* w) {
        QList<QWidget*> plots;
        for (QCustomPlot* p : w->findChildren<QCustomPlot*>()) plots << p;
        if (QWidget* lens = w->findChild<QTableWidget*>("lensRow")) plots << lens;
        for (QWidget* p : plots) {
            const PlotCaption* c = captionOf(p);
            if (!c) {
                QTest::qFail(qPrintable(QString("%1 / %2 has no caption").arg(w->objectName(), p->objectName())), __FILE__, __LINE__);
                return -1;
            }
            if (c->caption().trimmed().size() < 40) {
                QTest::qFail(qPrintable(QString("%1 / %2: caption too short: %3").arg(w->objectName(), p->objectName(), c->caption())),
                             __FILE__, __LINE__);
                return -1;
            }
            for (const QString& t : linkedTerms(c->text()))
                if (!findGlossaryEntry(t)) {
                    QTest::qFail(qPrintable(QString("%1 links to '%2', not in the glossary").arg(p->objectName(), t)), __FILE__, __LINE__);
                    return -1;
                }
        }
        return static_cast<int>(plots.size());
    }

private slots:
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        m_window = tltest::openTestWorkbench("test_captions_glossary", m_dir);
    }
    void cleanupTestCase() { m_window.reset(); }

    void everyPlotHasACaption() {
        const int mainPlots = checkCaptions(m_window.get());
        QVERIFY(mainPlots >= 4);  // lens, depth, speculative, timing
        int viewPlots = 0;
        for (const QString& kind : AnalysisViews::kinds()) {
            AnalysisWindow* v = m_window->analysisViews()->open(kind);
            QVERIFY2(v, qPrintable(kind));
            const int n = checkCaptions(v);
            QVERIFY2(n >= 1, qPrintable(kind + ": no plot found"));
            viewPlots += n;
            v->close();
        }
        QVERIFY(viewPlots >= 14);
        // the one helper: a plot added without it has no caption
        QCustomPlot bare;
        QVERIFY(captionOf(&bare) == nullptr);
    }

    void captionMarkupLinksTheGlossary() {
        PlotCaption c("[[KL]] per [[loop pass|pass]], read <up>");
        QCOMPARE(c.caption(), QString("KL per pass, read <up>"));
        QCOMPARE(linkedTerms(c.text()), QStringList({"KL", "loop pass"}));
        QVERIFY(c.text().contains("&lt;up&gt;"));
        emit c.linkActivated("glossary:loop pass");  // a click on the link
        auto* g = c.findChild<GlossaryDialog*>("glossaryDialog");
        QVERIFY(g && g->isVisible());
        QCOMPARE(g->currentTerm(), QString("loop pass"));
        QVERIFY(g->currentText().contains("shared block"));
        delete g;  // the next one belongs to the main window
        // Help -> Glossary in the main window
        QAction* help = m_window->findChild<QAction*>("glossaryAction");
        QVERIFY(help);
        help->trigger();
        auto* fromMenu = m_window->findChild<GlossaryDialog*>("glossaryDialog");
        QVERIFY(fromMenu && fromMenu->isVisible());
        fromMenu->close();
    }

    void tourTextsLinkKnownTerms() {
        for (const TourStep& s : tourSteps()) {
            QVERIFY(!s.look.isEmpty());
            for (const QString& t : linkedTerms(PlotCaption::toRichText(s.look)))
                QVERIFY2(findGlossaryEntry(t), qPrintable(s.title + " links to " + t));
        }
    }

    // The list is taken from the UI: the config panel's field labels (the engine's field table and
    // the speculative knobs), the mode selector, the early-exit criteria, the lens metrics, the
    // Analysis menu, the main plot tabs; then the terms the issue names.
    void glossaryHasEveryTermTheUiUses() {
        QStringList terms;
        for (const FieldInfo& f : configFields()) terms << f.key;
        for (DecodeMode m : allModes()) terms << modeLabel(m);
        for (int c = 0; c <= static_cast<int>(tinyloop::EarlyExitCriterion::MinPKL); ++c) terms << criterionName(static_cast<tinyloop::EarlyExitCriterion>(c));
        auto* metric = m_window->heatmap()->findChild<QComboBox*>();
        QVERIFY(metric);
        for (int i = 0; i < metric->count(); ++i) terms << metric->itemText(i).remove(QRegularExpression(" \\(.*\\)$"));
        for (QAction* a : m_window->menuBar()->actions())
            if (a->menu() && a->text().remove('&') == "Analysis")
                for (QAction* v : a->menu()->actions())
                    if (!v->isSeparator()) terms << v->text().remove('&').remove("...");
        terms << "Logit lens" << "Speculative";
        terms << "loop pass" << "depth" << "prelude" << "logit lens" << "KL" << "early exit" << "hidden_l2" << "patience"
              << "propagated keys/values" << "self-speculation" << "draft_loops" << "draft_ahead" << "acceptance"
              << "tree width" << "KV cache" << "int8 KV" << "q8" << "q4" << "top-k" << "top-p" << "min-p" << "temperature"
              << "repetition penalty" << "beam" << "length penalty" << "entropy" << "prefill" << "decode" << "tok/s"
              << "first token" << "NLL" << "predicted acceptance" << "measured acceptance" << "prefix cache" << "speedup"
              << "cycle" << "bonus token" << "argmax" << "EOS" << "logit" << "hidden state" << "perplexity"
              << "exit gate" << "exit probability" << "cumulative exit probability" << "threshold q";
        // the axes and the model panel
        terms << "execution layer" << "nats" << "position" << "loop_input" << "d_model" << "vocab_size" << "max_seq_len"
              << "default_loops" << "max_loops" << "n_loop_layers" << "n_pre_blocks" << "tokenizer" << "back end"
              << "baseline" << "verify cycle" << "accepted length" << "KV bytes";
        QVERIFY(terms.size() > 80);
        QStringList missing;
        for (const QString& t : terms)
            if (!findGlossaryEntry(t)) missing << t;
        QVERIFY2(missing.isEmpty(), qPrintable("not in the glossary: " + missing.join(", ")));
        QVERIFY(!findGlossaryEntry("no such term at all"));
    }

    void glossaryIsSearchable() {
        GlossaryDialog g;
        const int all = static_cast<int>(glossaryEntries().size());
        QCOMPARE(g.visibleTerms().size(), all);
        g.setFilter("kl");
        QVERIFY(g.visibleTerms().contains("KL"));
        QVERIFY(g.visibleTerms().size() < all);
        g.setFilter("zzzz no such word");
        QVERIFY(g.visibleTerms().isEmpty());
        QVERIFY(g.showTerm("patience"));  // an alias: shown even though the search hid it
        QCOMPARE(g.currentTerm(), QString("early_exit_patience"));
        QVERIFY(g.currentText().contains("in a row"));
        QVERIFY(!g.showTerm("no such term"));
        QVERIFY(g.showTerm("predicted"));
        QVERIFY(g.currentText().contains("first wrong draft"));
    }

    void statusLinesInPlainWords() {
        tinyloop::GenerateConfig c;
        c.early_exit.criterion = tinyloop::EarlyExitCriterion::HiddenL2;
        c.early_exit.threshold = 0.05f;
        c.early_exit.patience = 2;
        c.early_exit.min_L = 2;
        const QString t = tokenExitText(2, 6, c);
        QVERIFY2(t.startsWith("exited at pass 2 of 6 because the hidden state changed less than 0.05 for 2 checks in a row"),
                 qPrintable(t));
        QVERIFY(tokenExitText(6, 6, c).startsWith("ran all 6 passes"));
        c.early_exit.criterion = tinyloop::EarlyExitCriterion::ArgmaxStable;
        c.early_exit.patience = 1;
        QVERIFY(exitRuleText(c).startsWith("its top guess stayed the same for 1 check "));

        std::vector<tinyloop::TokenEvent> ev(4);
        ev[0].depth = 2, ev[1].depth = 2, ev[2].depth = 3, ev[3].depth = 6;
        const QString sum = earlyExitSummary(ev, 6, c);
        QVERIFY2(sum.startsWith("3 of 4 tokens exited early") && sum.contains("most exited at pass 2;") &&
                     sum.contains("because its top guess"), qPrintable(sum));
        {  // the digit-sum answer: '=' then '3', then the end-of-text token, which settles at once
            std::vector<tinyloop::TokenEvent> answer(3);
            const char* pieces[] = {"=", "3", ""};  // assigned through one helper: GCC 12's -Wrestrict
            const int depths[] = {3, 8, 2};           // misfires on short literal assignments here
            for (size_t i = 0; i < answer.size(); ++i) answer[i].piece.assign(pieces[i]), answer[i].depth = depths[i];
            const QString said = earlyExitSummary(answer, 12, c, true);
            QVERIFY2(said.contains("'=' at pass 3, '3' at pass 8 exited") && said.contains("the end-of-text token exited at pass 2") &&
                         !said.contains("most exited at pass 2"),
                     qPrintable(said));
        }
        for (auto& e : ev) e.depth = 6;
        QVERIFY(earlyExitSummary(ev, 6, c).startsWith("no token exited early"));

        QCOMPARE(stopReasonWords("MAX_TOKENS"), QString("reached max_tokens"));
        QCOMPARE(stopReasonWords("CALLBACK_ABORT"), QString("stopped by you"));
        QCOMPARE(stopReasonWords("SOMETHING_NEW"), QString("SOMETHING_NEW"));
        QCOMPARE(memoryText(70 * 1024), QString("70 KB"));
        QCOMPARE(memoryText(3 * 1024 * 1024 / 2), QString("1.5 MB"));
        ScrubberAnswerFacts f;
        f.depth = 8, f.previousDepth = 4, f.tokens = 24, f.ms = 12.5;
        f.promptDepthBefore = 4, f.promptDepthAfter = 8, f.keptBytes = 70 * 1024;
        f.changedTokens = 3, f.firstChange = 4;
        const QString s = scrubberAnswerText(f);
        QVERIFY2(s.contains("only passes 5 to 8 were run on it") && s.contains("70 KB of memory") &&
                     s.contains("3 tokens changed from depth 4; the first change is token 5"),
                 qPrintable(s));
        QVERIFY(!s.contains("handle") && !s.contains("KiB") && !s.contains(".."));
        f.promptDepthBefore = 8, f.firstChange = -1;
        QVERIFY(scrubberAnswerText(f).contains("nothing was run on it again"));
    }
};

QTEST_MAIN(TestCaptionsGlossary)
#include "test_captions_glossary.moc"
