// BWorker: the engine thread of the views in the Views menu built by views_b (early-exit
// calibration, compute against quality, KV provenance, quantization across depth). Like
// EngineWorker it keeps the engine off the GUI thread: a QThread of its own that loads and owns
// its models (its own copies, opened by path, so a view's long work never blocks or races the
// main window's runs). Work goes in as jobs; progress, the end and errors come back as queued
// signals; Cancel sets an atomic the jobs poll between engine calls. QtCore only.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>

#include <QObject>
#include <QString>

#include <tinyloop/tinyloop.h>

class QThread;

namespace tlui {

// What a job sees on the worker thread.
class BJobContext {
public:
    // The model at `path`, loaded on first use and kept for later jobs (throws the loader's
    // tinyloop::Error for a file it refuses).
    tinyloop::Model* model(const QString& path);
    bool cancelled() const { return m_cancel->load(); }
    // Throws "cancelled" when Cancel was pressed (call between engine calls).
    void checkCancel() const;
    void progress(int done, int total, const QString& what) const { m_progress(done, total, what); }
    // The cancel flag, for code that knows no Qt.
    const std::atomic<bool>* cancelFlag() const { return m_cancel; }

private:
    friend class BWorker;
    std::map<QString, tinyloop::Model*>* m_models = nullptr;
    const std::atomic<bool>* m_cancel = nullptr;
    std::function<void(int, int, const QString&)> m_progress;
};

class BWorker : public QObject {
    Q_OBJECT
public:
    using Job = std::function<void(BJobContext&)>;  // throws to report an error

    explicit BWorker(QObject* parent = nullptr);
    ~BWorker() override;  // cancels, joins the thread, frees the models

    // Queues a job; returns its ticket. Jobs run one at a time, in order. A job's results travel
    // through state it captures: finished() is emitted after the job has returned.
    quint64 submit(Job job);
    // Ends the running job at its next check and drops the queued ones.
    void cancel();
    bool busy() const { return m_running.load() > 0; }

signals:
    void progress(quint64 ticket, int done, int total, const QString& what);
    // ok = false: `error` says why (the engine's message, or "cancelled").
    void finished(quint64 ticket, bool ok, const QString& error);

private:
    QThread* m_thread = nullptr;
    QObject* m_context = nullptr;                  // lives on m_thread; jobs run on it
    std::map<QString, tinyloop::Model*> m_models;  // worker thread only (and the destructor)
    std::atomic<bool> m_cancel{false};
    std::atomic<quint64> m_cancelBefore{0};
    std::atomic<int> m_running{0};
    quint64 m_nextTicket = 1;
};

}  // namespace tlui
