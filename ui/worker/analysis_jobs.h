// AnalysisJobs: the one job lane of the analysis views (compare, scrubber, agreement map, sweep,
// step mode, exit calibration, compute against quality, KV provenance, quantization across
// depth). A QThread of its own runs the views' jobs one at a time on the EngineHost's model (the
// one loaded copy, shared: the engine is thread-safe, so a long sweep runs beside the main
// window's generation without loading another model). Progress and the end come back as queued
// signals; each window cancels its own jobs (an atomic the jobs poll between and inside engine
// calls). QtCore only.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include <QObject>
#include <QString>

#include <tinyloop/tinyloop.h>

class QThread;

namespace tlui {

class EngineHost;
class AnalysisJobs;

// What a job sees on the lane's thread.
class AnalysisJobContext {
public:
    tinyloop::Model* model = nullptr;           // the workbench's model (the EngineHost's; not owned)
    const std::atomic<bool>* cancel = nullptr;  // set when the job's window cancels
    std::function<void(int done, int total, const QString& what)> progress;

    bool cancelled() const { return cancel->load(); }
    void checkCancel() const;  // throws "cancelled"
    // Another model file (the quantization view's second model), loaded once and kept by the
    // lane; the workbench's own file gives `model`. Throws the loader's tinyloop::Error.
    tinyloop::Model* modelAt(const QString& path);

private:
    friend class AnalysisJobs;
    AnalysisJobs* m_lane = nullptr;
    QString m_modelPath;
};

class AnalysisJobs : public QObject {
    Q_OBJECT
public:
    using Job = std::function<void(AnalysisJobContext&)>;  // throws to report an error

    // `host` lends its model to every job (it must outlive this lane's jobs: the main window
    // owns both and ends this lane first).
    explicit AnalysisJobs(const EngineHost* host, QObject* parent = nullptr);
    ~AnalysisJobs() override;  // cancels every job, joins the thread, frees the extra models

    // Queues a job for `owner` (a window); returns its ticket. Jobs run one at a time, in order.
    // A job's results travel through state it captures: finished() comes after it returned.
    quint64 submit(const QObject* owner, Job job);
    // Ends `owner`'s running job at its next check and drops its queued ones.
    void cancel(const QObject* owner);
    bool busy() const { return m_running.load() > 0; }

signals:
    void progress(quint64 ticket, int done, int total, const QString& what);
    // ok = false: `error` says why (the engine's message, "cancelled", or "no model").
    void finished(quint64 ticket, bool ok, const QString& error);

private:
    friend class AnalysisJobContext;
    tinyloop::Model* extraModel(const QString& path);  // lane thread only

    const EngineHost* m_host;
    QThread* m_thread = nullptr;
    QObject* m_context = nullptr;  // lives on m_thread; jobs run on it
    std::map<QString, std::shared_ptr<tinyloop::Model>> m_extraModels;  // lane thread (and destructor)
    std::mutex m_flagsMutex;
    std::multimap<const QObject*, std::shared_ptr<std::atomic<bool>>> m_flags;  // per owner, pending jobs
    std::atomic<bool> m_shutdown{false};
    std::atomic<int> m_running{0};
    quint64 m_nextTicket = 1;
};

}  // namespace tlui
