#include "worker/analysis_a_worker.h"

#include <exception>

#include <QMetaObject>
#include <QThread>

namespace tlui {

AnalysisWorker::AnalysisWorker(QObject* parent) : QObject(parent) {
    m_thread = new QThread(this);
    m_thread->setObjectName("AnalysisWorkerThread");
    m_context = new QObject;  // no parent: moved, deleted on its own thread when it finishes
    m_context->moveToThread(m_thread);
    connect(m_thread, &QThread::finished, m_context, &QObject::deleteLater);
    m_thread->start();
}

AnalysisWorker::~AnalysisWorker() {
    m_cancel.store(true);
    m_cancelBefore.store(~quint64(0));
    m_thread->quit();
    m_thread->wait();
    tinyloop::free_model(m_model);
}

void AnalysisWorker::setModelPath(const QString& path) { m_path = path; }

void AnalysisWorker::cancel() {
    m_cancelBefore.store(m_nextTicket - 1);
    m_cancel.store(true);
}

quint64 AnalysisWorker::submit(Job job) {
    const quint64 ticket = m_nextTicket++;
    const QString path = m_path;
    m_running.fetch_add(1);
    QMetaObject::invokeMethod(m_context, [this, ticket, path, job = std::move(job)] {
        // Runs on the worker thread. Signals emitted here reach GUI-thread receivers queued.
        struct Done {
            std::atomic<int>& n;
            ~Done() { n.fetch_sub(1); }
        } done{m_running};
        if (ticket <= m_cancelBefore.load()) {
            emit finished(ticket, false, QStringLiteral("cancelled"));
            return;
        }
        m_cancel.store(false);
        emit started(ticket);
        try {
            if (path.isEmpty()) throw std::runtime_error("no model: open one in the workbench first");
            if (!m_model || path != m_loadedPath) {
                tinyloop::Model* fresh = tinyloop::load_model(path.toStdString());
                tinyloop::free_model(m_model);
                m_model = fresh;
                m_loadedPath = path;
            }
            JobContext ctx;
            ctx.model = m_model;
            ctx.cancel = &m_cancel;
            ctx.progress = [this, ticket](int d, int t, const QString& what) { emit progress(ticket, d, t, what); };
            job(ctx);
            if (m_cancel.load())
                emit finished(ticket, false, QStringLiteral("cancelled"));
            else
                emit finished(ticket, true, QString());
        } catch (const std::exception& e) {
            emit finished(ticket, false, QString::fromStdString(e.what()));
        }
    }, Qt::QueuedConnection);
    return ticket;
}

}  // namespace tlui
