// The output's shading and the lens tooltips: beam search (which reports no probability per
// token) is shaded by the model's probability of each token once the exact lens is in, and a
// top-k entry of a tooltip ('token text' and its probability) never wraps inside itself, in the
// output's tooltip and in the heatmap's.
#include <QAbstractTextDocumentLayout>
#include <QComboBox>
#include <QSignalSpy>
#include <QTest>
#include <QTextBlock>
#include <QTextDocument>
#include <QTextLayout>

#include "main/config_panel.h"
#include "main/main_window.h"
#include "main/token_view.h"
#include "plots/lens_heatmap.h"
#include "window_test_util.h"

using namespace tlui;

namespace {

// A lens row whose candidates have long texts with spaces, so a narrow tooltip must wrap.
tinyloop::TokenEvent eventWithLongCandidates() {
    tinyloop::TokenEvent ev;
    ev.token = 1;
    ev.index = 0;
    ev.depth = 2;
    ev.prob = 0.5f;
    ev.piece = " in";
    for (int d = 1; d <= 2; ++d) {
        tinyloop::LensDepth row;
        row.depth = d;
        row.top_ids = {1, 2, 3, 4, 5};
        row.top_probs = {0.4f, 0.2f, 0.1f, 0.05f, 0.01f};
        row.p_emitted = 0.4f;
        ev.lens.push_back(row);
    }
    return ev;
}

QStringList longVocab() {
    return {"<s>", " in the beginning", " and the earth was", " without form and", " void and darkness", " was upon the face"};
}

// Every "'text' p" entry of `html`, laid out `width` px wide (narrower than an entry: the text
// engine would break a word anywhere), sits on one line.
void entriesStayWhole(const QString& html, const QStringList& vocab, int width) {
    QTextDocument doc;
    doc.setHtml(html);
    doc.setTextWidth(width);
    doc.documentLayout()->documentSize();  // lays it out
    int checked = 0;
    for (int id = 1; id < vocab.size(); ++id) {
        const QString quoted = "'" + vocab[id] + "'";  // (find() reads a no-break space as a space)
        QTextCursor c = doc.find(quoted);
        while (!c.isNull()) {
            const QTextBlock b = c.block();
            QTextLayout* lay = b.layout();
            const int start = c.selectionStart() - b.position();
            const QString after = b.text().mid(c.selectionEnd() - b.position(), 2);
            if (after.size() < 2 || after[0] != QChar(0x00A0) || !after[1].isDigit()) {  // a heading, not an entry
                c = doc.find(quoted, c);
                continue;
            }
            // the entry ends after the probability that follows the quoted text (" 0.400")
            const int end = std::min(c.selectionEnd() - b.position() + 6, b.length() - 1);
            QVERIFY2(lay->lineForTextPosition(start).lineNumber() == lay->lineForTextPosition(end).lineNumber(),
                     qPrintable(QString("'%1' wraps inside its entry at %2 px").arg(vocab[id]).arg(width)));
            ++checked;
            c = doc.find(quoted, c);
        }
    }
    QVERIFY(checked >= 5);
}

}  // namespace

class TestTokenShading : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private slots:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY(m_dir.isValid());
    }

    void tooltipEntriesDoNotWrapInside() {
        TokenView view;
        view.setVocab(longVocab());
        view.clearTokens("prompt");
        view.addToken(eventWithLongCandidates());
        view.flush();
        for (int width : {160, 240, 320}) entriesStayWhole(view.lensTooltip(0), longVocab(), width);

        LensHeatmap map;
        map.setVocab(longVocab());
        map.clear(2);
        map.addEvent(eventWithLongCandidates());
        map.refresh();
        QVERIFY(!map.cellTooltip(0, 1).isEmpty());
        for (int width : {120, 200}) entriesStayWhole(map.cellTooltip(0, 1), longVocab(), width);
    }

    void beamIsShadedByProbability() {
        MainWindow w(tltest::quietWindow(m_dir));
        QVERIFY(tltest::loadModel(w, tltest::writeTinyModel(m_dir.path())));
        auto c = *w.configPanel()->config();
        c.max_tokens = 6;
        c.ignore_eos = true;
        c.beam_size = 3;
        w.configPanel()->setMode(DecodeMode::Beam);
        w.configPanel()->setConfig(c);
        auto* shade = w.findChild<QComboBox*>("shadeMeasure");
        shade->setCurrentIndex(shade->findData(int(ShadeMeasure::Probability)));
        QCOMPARE(w.tokenView()->measure(), ShadeMeasure::Probability);
        QSignalSpy settled(&w, &MainWindow::sessionSettled);
        QVERIFY(w.generate());
        QVERIFY(tltest::waitFor([&] { return settled.count() == 1; }));
        const auto& events = w.tokenView()->events();
        QCOMPARE(int(events.size()), 6);
        const Session& s = w.session();
        QVERIFY(s.lens);
        tinyloop::TokenEvent none = events[0];
        none.prob = 0;
        const QColor blank = w.tokenView()->shade(none);
        for (size_t k = 0; k < events.size(); ++k) {
            const float want = s.lens->at(s.run.promptLen - 1 + int(k), s.lens->loops).p_next;
            QVERIFY(want > 0);
            QCOMPARE(events[k].prob, want);
            QCOMPARE(s.events[k].prob, want);  // the saved session has them too
            QVERIFY(w.tokenView()->shade(events[k]) != blank);
        }
    }
};

QTEST_MAIN(TestTokenShading)
#include "test_token_shading.moc"
