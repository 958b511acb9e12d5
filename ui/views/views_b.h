// The issue-8 views of the "Views" menu built here (early-exit calibration, compute against
// quality, KV provenance, quantization across depth), their shared frame, and the one function
// the main window calls to put them in its menu.
//
// Each view is a window of its own (parented to the main window) whose engine work runs on a
// BWorker (own thread, own copies of the models opened by path: the GUI thread never calls the
// engine) with a progress bar and Cancel; each exports itself as PNG or PDF and its data as JSON.
// The computation lives in analysis_b_* (no widgets), so the tests check data, not pixels.
#pragma once

#include <functional>
#include <map>

#include <QString>
#include <QWidget>
#include <nlohmann/json.hpp>

#include "worker/analysis_b_worker.h"

class QHBoxLayout;
class QLabel;
class QMenu;
class QProgressBar;
class QPushButton;
class QVBoxLayout;

namespace tlui {

class MainWindow;

// Adds the four views to `views` (the main window's "Views" menu).
void install_views_b(MainWindow* window, QMenu* views);

class ViewB : public QWidget {
    Q_OBJECT
public:
    ViewB(MainWindow* window, const QString& title);
    ~ViewB() override;

    virtual nlohmann::json data() const = 0;  // what is shown, for the JSON export and tests
    virtual void run() = 0;                   // the Run button

    bool exportJson(const QString& path, QString* error = nullptr) const;
    // PDF for a .pdf suffix, else PNG: the whole view as drawn.
    bool exportImage(const QString& path, QString* error = nullptr);

    bool isBusy() const { return m_pending > 0; }
    QString lastError() const { return m_lastError; }
    QString statusText() const;
    BWorker* worker() const { return m_worker; }
    QString modelPath() const;     // the workbench's model file
    QString workbenchPrompt() const;

signals:
    void workFinished(bool ok);  // a job ended; its results are already shown

protected:
    // Runs `job` on the worker; `onDone(ok, error)` runs on the GUI thread after it ends.
    void startJob(const QString& what, BWorker::Job job, std::function<void(bool, const QString&)> onDone);
    void setStatus(const QString& text, bool error = false);
    QVBoxLayout* body() const { return m_body; }         // the view's own widgets go here
    QHBoxLayout* controls() const { return m_controls; } // its inputs, above them

private:
    MainWindow* m_main;
    BWorker* m_worker;
    QVBoxLayout* m_body;
    QHBoxLayout* m_controls;
    QPushButton* m_run;
    QPushButton* m_cancel;
    QProgressBar* m_progress;
    QLabel* m_status;
    std::map<quint64, std::function<void(bool, const QString&)>> m_done;
    int m_pending = 0;
    QString m_lastError;
};

// Opens (creating it the first time) the view of that kind on `window`: "calibration",
// "compute", "kv", "quant". nullptr for an unknown kind.
ViewB* openViewB(MainWindow* window, const QString& kind);

}  // namespace tlui
