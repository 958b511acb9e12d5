// AnalysisWorker: the engine thread of the issue-8 views (compare, scrubber, agreement map,
// sweep, step mode). Like EngineWorker it keeps the engine off the GUI thread: a QThread of its
// own that owns a Model loaded from the workbench's model path (its own copy, so a view's long
// sweep never blocks or races the main window's runs and model switches). Work goes in as jobs;
// progress, the end and errors come back as queued signals; cancel sets an atomic the jobs poll
// (and pass to the engine through the token observer), so it lands within one token.
#pragma once

#include <atomic>
#include <functional>

#include <QObject>
#include <QString>

#include <tinyloop/tinyloop.h>

class QThread;

namespace tlui {

// What a job sees: the model, the cancel flag, and a progress reporter (any number of calls).
struct JobContext {
    tinyloop::Model* model = nullptr;
    const std::atomic<bool>* cancel = nullptr;
    std::function<void(int done, int total, const QString& what)> progress;
    bool cancelled() const { return cancel && cancel->load(); }
};

class AnalysisWorker : public QObject {
    Q_OBJECT
public:
    using Job = std::function<void(JobContext&)>;  // throws to report an error

    explicit AnalysisWorker(QObject* parent = nullptr);
    ~AnalysisWorker() override;  // cancels, then joins the thread

    // The model jobs run on; loaded (on the worker thread) before the next job when it changed.
    void setModelPath(const QString& path);
    QString modelPath() const { return m_path; }

    // Queues a job; returns its ticket. Jobs run one at a time, in order. A job's results travel
    // through state it captures: finished() is emitted after the job returns.
    quint64 submit(Job job);
    // Ends the running job at its next check and drops the queued ones.
    void cancel();
    bool busy() const { return m_running.load() > 0; }

signals:
    void started(quint64 ticket);
    void progress(quint64 ticket, int done, int total, const QString& what);
    // ok = false: `error` says why (the engine's message, or "cancelled").
    void finished(quint64 ticket, bool ok, const QString& error);

private:
    QThread* m_thread = nullptr;
    QObject* m_context = nullptr;  // lives on m_thread; jobs are invoked on it
    QString m_path;
    QString m_loadedPath;          // touched on the worker thread only
    tinyloop::Model* m_model = nullptr;  // owned; used on the worker thread only
    std::atomic<bool> m_cancel{false};
    std::atomic<quint64> m_cancelBefore{0};  // tickets <= this are dropped
    std::atomic<int> m_running{0};
    quint64 m_nextTicket = 1;
};

}  // namespace tlui
