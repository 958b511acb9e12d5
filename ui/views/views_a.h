// The issue-8 views of the "Views" menu built here (compare decode modes, depth scrubber,
// draft-agreement map, speculation sweep, step mode), their shared frame, and the one function
// the main window calls to put them in its menu.
//
// Each view is a window of its own (parented to the main window), runs its engine work on an
// AnalysisWorker (own thread, own copy of the workbench's model: the GUI thread never calls the
// engine) with a progress bar and Cancel, and exports itself as PNG or PDF and its data as JSON.
#pragma once

#include <functional>
#include <map>

#include <QString>
#include <QWidget>
#include <nlohmann/json.hpp>

#include "worker/analysis_a_worker.h"

class QLabel;
class QMenu;
class QProgressBar;
class QPushButton;
class QHBoxLayout;

namespace tlui {

class MainWindow;

// Adds the five views to `views` (the main window's "Views" menu).
void install_views_a(MainWindow* window, QMenu* views);

class ViewA : public QWidget {
    Q_OBJECT
public:
    ViewA(MainWindow* window, const QString& title, QWidget* parent = nullptr);
    ~ViewA() override;

    // The view's data as shown, for the JSON export (and the tests).
    virtual nlohmann::json data() const = 0;
    // Starts the view's main computation with its current inputs (the Run button).
    virtual void run() = 0;

    bool exportJson(const QString& path, QString* error = nullptr) const;
    // PNG (any suffix but .pdf) or PDF of the whole view as drawn.
    bool exportImage(const QString& path, QString* error = nullptr);

    bool isBusy() const { return m_pending > 0; }
    QString lastError() const { return m_lastError; }
    QString statusText() const;
    AnalysisWorker* worker() const { return m_worker; }
    MainWindow* mainWindow() const { return m_main; }
    QString promptFromWorkbench() const;

signals:
    void workFinished(bool ok);  // a job ended (results already shown)

protected:
    // Runs `job` on the worker; `onDone(ok, error)` runs on the GUI thread after it ends.
    void startJob(const QString& what, AnalysisWorker::Job job, std::function<void(bool, const QString&)> onDone);
    void setStatus(const QString& text, bool error = false);
    // The row with progress, Cancel and the export buttons; add it to the view's layout.
    QWidget* controlBar() const { return m_bar; }
    QHBoxLayout* controlLayout() const { return m_barLayout; }
    QPushButton* runButton() const { return m_run; }
    QString modelPath() const;

private:
    MainWindow* m_main;
    AnalysisWorker* m_worker;
    QWidget* m_bar;
    QHBoxLayout* m_barLayout;
    QPushButton* m_run;
    QPushButton* m_cancel;
    QProgressBar* m_progress;
    QLabel* m_status;
    std::map<quint64, std::function<void(bool, const QString&)>> m_done;  // per ticket, GUI thread only
    int m_pending = 0;
    QString m_lastError;
};

// Opens (creating it the first time) the view of that kind on `window`: "compare", "scrubber",
// "agreement", "sweep", "step". Returns it (nullptr for an unknown name).
ViewA* openViewA(MainWindow* window, const QString& kind);

}  // namespace tlui

class QCustomPlot;
class QTableWidget;

namespace tlui {

// Shared drawing helpers of these views.
// Bars of `values` (one series per entry of `series`, stacked when `stacked`), one category per
// label on the x axis; `names` label the series in the legend.
void drawCategoryBars(QCustomPlot* plot, const QStringList& labels, const std::vector<std::vector<double>>& series,
                      const QStringList& names, bool stacked, const QString& yLabel);
// Fills a table from rows of strings (headers first).
void fillTable(QTableWidget* table, const QStringList& headers, const std::vector<QStringList>& rows);
// HTML-escaped token text, with newlines and tabs shown as visible marks.
QString tokenHtml(const QString& piece);

}  // namespace tlui

namespace tlui {

// For screenshots and demos: opens the view `kind` on `window` (its model loaded), fills it by a
// run on `prompt` with `maxTokens` (scrubber: depth 1, then 2, 4, 6, so each diff shows), saves the view
// as PNG at `out` when not empty, and calls `done(ok)`.
void demoViewA(MainWindow* window, const QString& kind, const QString& prompt, int maxTokens, const QString& out,
               std::function<void(bool)> done);

}  // namespace tlui
