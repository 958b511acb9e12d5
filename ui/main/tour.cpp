#include "main/tour.h"

#include <QDir>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QShortcut>
#include <QTabWidget>
#include <QVBoxLayout>

#include "main/main_window.h"
#include "main/model_paths.h"
#include "base/screen_fit.h"
#include "plots/plot_caption.h"
#include "views/analysis_views.h"
#include "views/analysis_window.h"

namespace tlui {

QString bundledModelPath(const QString& dir) {
    const StartupModel sm = resolveStartupModel(QString());
    if (sm.path.isEmpty() || sm.randomFallback) return QString();
    // resolveStartupModel finds models/tinyloop-kjv/model-f32.tinyloop; its siblings sit beside it
    const QFileInfo kjv(sm.path);
    const QString p = kjv.dir().absoluteFilePath("../" + dir + "/model-f32.tinyloop");
    return QFileInfo::exists(p) ? QFileInfo(p).canonicalFilePath() : QString();
}

Tour::Tour(MainWindow* window) : QObject(window), m_window(window) {
    setObjectName("tour");
    m_dock = new QDockWidget("Tour", window);
    m_dock->setObjectName("tourDock");
    auto* box = new QWidget;
    auto* v = new QHBoxLayout(box);
    v->setContentsMargins(8, 2, 8, 2);  // every pixel of height counts on a 720-px projector
    v->setSpacing(8);
    m_heading = new QLabel;
    m_heading->setObjectName("tourHeading");
    m_heading->setWordWrap(true);
    QFont f = m_heading->font();
    f.setBold(true);
    f.setPointSizeF(f.pointSizeF() * 1.2);
    m_heading->setFont(f);
    m_text = new PlotCaption(QString());
    m_text->setObjectName("tourText");
    m_text->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    m_text->setMinimumHeight(m_text->fontMetrics().lineSpacing() * 4 + 8);  // a step's paragraph, never cut
    m_state = new QLabel;
    m_state->setObjectName("tourState");
    m_state->setWordWrap(true);
    auto* buttons = new QHBoxLayout;
    m_back = new QPushButton("< Back");
    m_back->setObjectName("tourBack");
    m_next = new QPushButton("Next >");
    m_next->setObjectName("tourNext");
    auto* closeButton = new QPushButton("Close");
    closeButton->setObjectName("tourClose");
    buttons->addWidget(m_back);
    buttons->addWidget(m_next);
    buttons->addWidget(closeButton);
    // A strip along the bottom: it takes height, never width, so the window still fits a
    // 1280-px projector with the config dock open.
    auto* words = new QVBoxLayout;
    words->setSpacing(2);
    words->addWidget(m_heading);
    words->addWidget(m_text, 1);
    auto* side = new QVBoxLayout;
    side->setSpacing(2);
    side->addWidget(m_state, 1);
    side->addLayout(buttons);
    m_state->setMaximumWidth(320);
    v->addLayout(words, 1);
    v->addLayout(side);
    m_dock->setWidget(box);
    window->addDockWidget(Qt::BottomDockWidgetArea, m_dock);
    m_dock->hide();
    connect(m_back, &QPushButton::clicked, this, &Tour::back);
    connect(m_next, &QPushButton::clicked, this, &Tour::next);
    connect(closeButton, &QPushButton::clicked, this, &Tour::close);
    // Keys a presenter can press whichever window has the focus (step 5 points at the scrubber's
    // window); Esc is taken by Stop. Each works only while the panel is shown and its button is on.
    auto key = [this, window](QPushButton* b, const QKeySequence& k, const QString& what) {
        auto* s = new QShortcut(k, window);
        s->setContext(Qt::ApplicationShortcut);
        connect(s, &QShortcut::activated, b, [this, b] {
            if (m_dock->isVisible() && b->isEnabled()) b->click();
        });
        b->setToolTip(QString("%1 (%2)").arg(what, k.toString(QKeySequence::NativeText)));
    };
    key(m_back, QKeySequence(Qt::ALT | Qt::Key_Left), "The previous step");
    key(m_next, QKeySequence(Qt::ALT | Qt::Key_Right), "The next step");
    key(closeButton, QKeySequence(Qt::CTRL | Qt::Key_W), "Close the tour; the window returns to its size before it");
}

QString Tour::shortcutHint() {
    return QString("Keys: %1 next, %2 back, %3 close")
        .arg(QKeySequence(Qt::ALT | Qt::Key_Right).toString(QKeySequence::NativeText),
             QKeySequence(Qt::ALT | Qt::Key_Left).toString(QKeySequence::NativeText),
             QKeySequence(Qt::CTRL | Qt::Key_W).toString(QKeySequence::NativeText));
}

QWidget* Tour::stepWindow() const {
    if (m_index == count() - 1)
        if (AnalysisWindow* v = m_window->analysisViews()->window("scrubber")) return v;
    return m_window;
}

void Tour::goTo(int index) {
    index = std::clamp(index, 0, count() - 1);
    if (!m_dock->isVisible()) {
        // What the window was before the tour, restored by close(): its size and its docks.
        m_savedGeometry = m_window->geometry();
        m_savedState = m_window->saveState();
        // The steps never use the presets or the model panel: their height goes to the panel, so
        // window, status bar and buttons stay on a 1280x720 screen (close() brings them back).
        for (const char* name : {"presetDock", "modelDock"})
            if (auto* d = m_window->findChild<QDockWidget*>(name)) d->hide();
        // The panel says what to look at in each plot: the plots' own captions give it their
        // height while it is open (presentation mode: five lines under the lens).
        for (PlotCaption* c : m_window->plotTabs()->findChildren<PlotCaption*>())
            if (!c->isHidden()) {
                c->hide();
                m_hiddenCaptions << c;
            }
        m_dock->show();
        m_window->resizeDocks({m_dock}, {m_dock->widget()->minimumSizeHint().height()}, Qt::Vertical);
    }
    m_dock->raise();
    if (m_busy) {  // end the current step's run (within one token) and go on from its end
        m_pending = index;
        m_window->stop();
        m_state->setText(QString("going to step %1 once this one has stopped...").arg(index + 1));
        return;
    }
    m_index = index;
    runCurrent();
}

void Tour::next() { goTo((m_pending >= 0 ? m_pending : m_index) + 1); }
void Tour::back() { goTo((m_pending >= 0 ? m_pending : m_index) - 1); }

void Tour::close() {
    m_pending = -1;
    m_dock->hide();
    if (!m_savedState.isEmpty()) m_window->restoreState(m_savedState);
    for (const QPointer<PlotCaption>& c : std::as_const(m_hiddenCaptions))
        if (c) c->show();
    m_hiddenCaptions.clear();
    // The client rectangle as it was (restoreGeometry would also re-place the frame, off by the
    // title bar on some platforms).
    if (m_savedGeometry.isValid()) m_window->setGeometry(m_savedGeometry);
    m_savedState.clear();
    m_savedGeometry = QRect();
}

void Tour::keepClearOfPanel(QWidget* other) const {
    if (!other || other == m_window || !other->isVisible() || !m_dock->isVisible()) return;
    // The screen above the panel: the other window there leaves the step's words and buttons in view.
    QRect above = availableGeometry(m_window);
    const int panelTop = m_dock->mapToGlobal(QPoint(0, 0)).y();
    if (panelTop - above.top() < above.height() / 3) return;  // too little room: leave it where it is
    above.setBottom(panelTop - 1);
    fitToScreen(other, other->size(), above);
}

void Tour::runCurrent() {
    m_busy = true;
    m_error.clear();
    const quint64 ticket = ++m_ticket;
    updatePanel();
    emit stepStarted(m_index);
    const TourStep& step = tourSteps()[static_cast<size_t>(m_index)];
    const QString path = bundledModelPath(step.modelDir);
    if (path.isEmpty())
        return finish(ticket, false, QString("the tour needs the bundled model %1, which is not there").arg(step.modelDir));
    auto go = [this, ticket, &step] {
        step.run(*m_window, [this, ticket](bool ok, const QString& error) { finish(ticket, ok, error); });
    };
    if (m_window->hasModel() && !m_window->isLoading() &&
        QFileInfo(m_window->modelPath()).canonicalFilePath() == path)
        return go();
    auto conn = std::make_shared<QMetaObject::Connection>();
    *conn = connect(m_window, &MainWindow::modelReady, this, [this, conn, ticket, go](bool ok) {
        disconnect(*conn);
        if (ok) go();
        else finish(ticket, false, m_window->lastError());
    });
    m_state->setText("loading " + step.modelDir + "...");
    m_window->openModel(path);
}

void Tour::finish(quint64 ticket, bool ok, const QString& error) {
    if (ticket != m_ticket || !m_busy) return;
    m_busy = false;
    const TourStep& step = tourSteps()[static_cast<size_t>(m_index)];
    if (ok && step.check) {
        const QString missing = step.check(*m_window);
        if (!missing.isEmpty()) {
            ok = false;
            m_error = missing;
        }
    } else if (!ok) {
        m_error = error.isEmpty() ? QString("the step did not complete") : error;
    }
    keepClearOfPanel(stepWindow());
    updatePanel();
    emit stepFinished(m_index, ok);
    if (m_pending >= 0) {
        const int p = m_pending;
        m_pending = -1;
        goTo(p);
    }
}

void Tour::updatePanel() {
    const TourStep& step = tourSteps()[static_cast<size_t>(m_index)];
    m_heading->setText(QString("Step %1 of %2: %3").arg(m_index + 1).arg(count()).arg(step.title));
    m_text->setCaption(step.look);
    m_back->setEnabled(m_index > 0);
    m_next->setEnabled(m_index < count() - 1);
    if (m_busy) m_state->setText("running this step on the model...");
    else if (!m_error.isEmpty()) m_state->setText("This step did not work: " + m_error);
    else m_state->setText((m_index < count() - 1 ? "Ready. Press Next for the next step." : "Ready. This is the last step.") +
                          QString("\n") + shortcutHint());
    m_state->setStyleSheet(m_error.isEmpty() ? QString() : QString("color: #b00020;"));
}

}  // namespace tlui
