// AnalysisWindow: the one base of the analysis windows (the Analysis menu). Each view is a window of
// its own (parented to the main window) laid out as: its inputs (controls()), its plots and
// tables (body()), then the bar with Run, Cancel, progress, status and the exports. Its engine
// work runs as jobs on the workbench's AnalysisJobs lane (own thread, the workbench's one model:
// the GUI thread never calls the engine); it exports itself as PNG or PDF and its data as JSON.
// The computation lives in tinyloop_analysis (engine/analysis/), so tests check data, not pixels.
#pragma once

#include <functional>
#include <map>
#include <vector>

#include <QString>
#include <QStringList>
#include <QWidget>
#include <nlohmann/json.hpp>

#include "views/workbench_access.h"
#include "worker/analysis_jobs.h"

class QCustomPlot;
class QHBoxLayout;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QVBoxLayout;

namespace tlui {

class WrappedLabel;

// The analysis library's names (ModeSpec, run_comparison, DepthScrubber, ...) read unqualified in
// the views, which draw what it computes.
using namespace tinyloop::analysis;

class AnalysisWindow : public QWidget {
    Q_OBJECT
public:
    AnalysisWindow(WorkbenchAccess* workbench, const QString& title, QWidget* parent);
    ~AnalysisWindow() override;

    virtual nlohmann::json data() const = 0;  // what is shown, for the JSON export and the tests
    virtual void run() = 0;                   // the Run button: the main computation, current inputs

    bool exportJson(const QString& path, QString* error = nullptr) const;
    // PDF for a .pdf suffix, else PNG: the whole view as drawn.
    bool exportImage(const QString& path, QString* error = nullptr);

    bool isBusy() const { return m_pending > 0; }
    QString lastError() const { return m_lastError; }
    QString statusText() const;
    AnalysisJobs* jobs() const { return m_workbench->analysisJobs(); }  // null once the workbench shut down
    WorkbenchAccess* workbench() const { return m_workbench; }
    void cancel();  // the Cancel button: this window's jobs end at their next check

signals:
    void workFinished(bool ok);  // a job ended; its results are already shown
    void jobProgress(int done, int total, const QString& what);

protected:
    // Runs `job` on the lane; `on_done(ok, error)` runs on the GUI thread after it ends.
    void startJob(const QString& what, AnalysisJobs::Job job, std::function<void(bool, const QString&)> on_done);
    void setStatus(const QString& text, bool error = false);
    QString modelPath() const { return m_workbench->modelPath(); }
    QString workbenchPrompt() const { return m_workbench->promptText(); }
    QHBoxLayout* controls() const { return m_controls; }  // the view's inputs, above its body
    // One input in the inputs row: its label (sentence case, like the form rows of the other
    // views: "Max tokens", "Depth") and its field.
    void addControl(const QString& label, QWidget* field, int stretch = 0);
    QVBoxLayout* body() const { return m_body; }          // the view's plots and tables
    QPushButton* runButton() const { return m_run; }
    // The prompt field most views start with (object name "prompt"): the workbench's prompt, else
    // "In the beginning".
    QLineEdit* newPromptField() const;
    // A spin box for a count (max tokens, ...) in [lo, hi] starting at `value`.
    static QSpinBox* newCountField(int lo, int hi, int value);

private:
    void onFinished(quint64 ticket, bool ok, const QString& error);

    WorkbenchAccess* m_workbench;
    QHBoxLayout* m_controls;
    QVBoxLayout* m_body;
    QPushButton* m_run;
    QPushButton* m_cancel;
    QProgressBar* m_progress;
    WrappedLabel* m_status;
    std::map<quint64, std::function<void(bool, const QString&)>> m_done;  // this window's tickets, GUI thread
    int m_pending = 0;
    QString m_lastError;
};

// Drawing helpers the views share.
// Bars of `values` (one series per entry of `series`, stacked when `stacked`), one category per
// label on the x axis; `names` label the series in the legend.
void drawCategoryBars(QCustomPlot* plot, const QStringList& labels, const std::vector<std::vector<double>>& series,
                      const QStringList& names, bool stacked, const QString& yLabel);
// Fills a table from rows of strings (headers first).
void fillTable(QTableWidget* table, const QStringList& headers, const std::vector<QStringList>& rows);
// HTML-escaped token text, with newlines and tabs shown as visible marks.
QString tokenHtml(const QString& piece);

}  // namespace tlui
