// The guided tour (Help -> Tour, tinyloop-workbench --tour / --tour-step N): a scripted sequence
// on the bundled models, each step running for real (it loads the model it needs, sets the
// config, generates or fills a view) and a dock panel saying what to look at, with Back / Next /
// Close. The steps themselves: tour_steps.cpp.
#pragma once

#include <functional>
#include <vector>

#include <QByteArray>
#include <QDockWidget>
#include <QList>
#include <QObject>
#include <QPointer>
#include <QRect>
#include <QString>

class QLabel;
class QPushButton;

namespace tlui {

class MainWindow;
class PlotCaption;

struct TourStep {
    QString title;
    QString look;       // what to look at; [[term]] links to the glossary (plots/plot_caption.h)
    QString modelDir;   // the bundled model it runs on: "tinyloop-kjv" or "tinyloop-digitsum"
    // Sets the prompt, mode, config and the tab or view to look at; then runs the step's work and
    // calls done(ok, error) when what the step points at is on screen.
    std::function<void(MainWindow& w, std::function<void(bool, QString)> done)> run;
    // Empty when the step produced what it points at; else what is missing (for the panel and tests).
    std::function<QString(MainWindow& w)> check;
};
const std::vector<TourStep>& tourSteps();
// The bundled model `dir` ("tinyloop-kjv", ...) next to the one the workbench finds at start;
// empty when it is not there.
QString bundledModelPath(const QString& dir);

class Tour : public QObject {
    Q_OBJECT
public:
    explicit Tour(MainWindow* window);

    int count() const { return static_cast<int>(tourSteps().size()); }
    int current() const { return m_index; }  // 0-based; -1 before the first step
    bool isBusy() const { return m_busy; }
    QString stepError() const { return m_error; }  // why the current step failed; empty when it worked
    QDockWidget* panel() const { return m_dock; }
    // The window the current step points at: the main window, or an analysis view.
    QWidget* stepWindow() const;

    void goTo(int index);  // shows the panel and runs step `index` (0-based, clamped)
    void next();
    void back();
    // Hides the panel and gives the window back the size and docks it had before the tour.
    void close();
    // The keys for Next, Back and Close, for the panel and the README.
    static QString shortcutHint();

signals:
    void stepStarted(int index);
    void stepFinished(int index, bool ok);

private:
    void runCurrent();
    void finish(quint64 ticket, bool ok, const QString& error);
    void updatePanel();
    // Moves `other` (a step's own window) into the screen above the panel, so it does not cover it.
    void keepClearOfPanel(QWidget* other) const;

    MainWindow* m_window;
    QDockWidget* m_dock = nullptr;
    QLabel* m_heading = nullptr;
    PlotCaption* m_text = nullptr;
    QLabel* m_state = nullptr;
    QPushButton* m_back = nullptr;
    QPushButton* m_next = nullptr;
    int m_index = -1;
    int m_pending = -1;     // a step asked for while one was running
    quint64 m_ticket = 0;   // the run of the current step; older completions are ignored
    bool m_busy = false;
    QString m_error;
    QRect m_savedGeometry;  // the window before the tour (close() restores it)
    QByteArray m_savedState;
    QList<QPointer<PlotCaption>> m_hiddenCaptions;  // the plots' captions, hidden while the panel shows
};

}  // namespace tlui
