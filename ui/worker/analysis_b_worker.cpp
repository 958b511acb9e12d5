#include "worker/analysis_b_worker.h"

#include <exception>
#include <stdexcept>

#include <QMetaObject>
#include <QThread>

namespace tlui {

tinyloop::Model* BJobContext::model(const QString& path) {
    if (path.isEmpty())
        throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, "model: no model file (open one first)");
    auto it = m_models->find(path);
    if (it != m_models->end()) return it->second;
    tinyloop::Model* m = tinyloop::load_model(path.toStdString());
    (*m_models)[path] = m;
    return m;
}

void BJobContext::checkCancel() const {
    if (cancelled()) throw std::runtime_error("cancelled");
}

BWorker::BWorker(QObject* parent) : QObject(parent) {
    m_thread = new QThread(this);
    m_thread->setObjectName("ViewsBWorkerThread");
    m_context = new QObject;  // no parent: moved, deleted on its own thread when it finishes
    m_context->moveToThread(m_thread);
    connect(m_thread, &QThread::finished, m_context, &QObject::deleteLater);
    m_thread->start();
}

BWorker::~BWorker() {
    m_cancel.store(true);
    m_cancelBefore.store(~quint64(0));
    m_thread->quit();
    m_thread->wait();
    for (auto& [path, m] : m_models) tinyloop::free_model(m);
}

void BWorker::cancel() {
    m_cancelBefore.store(m_nextTicket - 1);
    m_cancel.store(true);
}

quint64 BWorker::submit(Job job) {
    const quint64 ticket = m_nextTicket++;
    m_running.fetch_add(1);
    QMetaObject::invokeMethod(m_context, [this, ticket, job = std::move(job)] {
        // On the worker thread; signals reach GUI-thread receivers queued.
        struct Done {
            std::atomic<int>& n;
            ~Done() { n.fetch_sub(1); }
        } done{m_running};
        if (ticket <= m_cancelBefore.load()) {
            emit finished(ticket, false, QStringLiteral("cancelled"));
            return;
        }
        m_cancel.store(false);
        try {
            BJobContext ctx;
            ctx.m_models = &m_models;
            ctx.m_cancel = &m_cancel;
            ctx.m_progress = [this, ticket](int d, int t, const QString& what) { emit progress(ticket, d, t, what); };
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
