#include "worker/analysis_jobs.h"

#include <exception>
#include <stdexcept>

#include <QMetaObject>
#include <QThread>

#include "worker/engine_host.h"

namespace tlui {

void AnalysisJobContext::checkCancel() const {
    if (cancelled()) throw std::runtime_error("cancelled");
}

tinyloop::Model* AnalysisJobContext::modelAt(const QString& path) {
    if (path.isEmpty())
        throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, "model: no model file (open one first)");
    if (path == m_modelPath && model) return model;
    return m_lane->extraModel(path);
}

AnalysisJobs::AnalysisJobs(const EngineHost* host, QObject* parent) : QObject(parent), m_host(host) {
    m_thread = new QThread(this);
    m_thread->setObjectName("AnalysisJobsThread");
    m_context = new QObject;  // no parent: moved, deleted on its own thread when it finishes
    m_context->moveToThread(m_thread);
    connect(m_thread, &QThread::finished, m_context, &QObject::deleteLater);
    m_thread->start();
}

AnalysisJobs::~AnalysisJobs() {
    m_shutdown.store(true);
    {
        std::lock_guard<std::mutex> lock(m_flagsMutex);
        for (auto& [owner, flag] : m_flags) flag->store(true);
    }
    m_thread->quit();
    m_thread->wait();
}

tinyloop::Model* AnalysisJobs::extraModel(const QString& path) {
    auto it = m_extraModels.find(path);
    if (it != m_extraModels.end()) return it->second.get();
    std::shared_ptr<tinyloop::Model> m(tinyloop::load_model(path.toStdString()), tinyloop::free_model);
    m_extraModels[path] = m;
    return m.get();
}

void AnalysisJobs::cancel(const QObject* owner) {
    std::lock_guard<std::mutex> lock(m_flagsMutex);
    auto [lo, hi] = m_flags.equal_range(owner);
    for (auto it = lo; it != hi; ++it) it->second->store(true);
}

quint64 AnalysisJobs::submit(const QObject* owner, Job job) {
    const quint64 ticket = m_nextTicket++;
    auto flag = std::make_shared<std::atomic<bool>>(false);
    {
        std::lock_guard<std::mutex> lock(m_flagsMutex);
        m_flags.emplace(owner, flag);
    }
    m_running.fetch_add(1);
    QMetaObject::invokeMethod(m_context, [this, ticket, owner, flag, job = std::move(job)] {
        // On the lane's thread; signals reach GUI-thread receivers queued.
        struct Done {
            AnalysisJobs* lane;
            const QObject* owner;
            std::shared_ptr<std::atomic<bool>> flag;
            ~Done() {
                std::lock_guard<std::mutex> lock(lane->m_flagsMutex);
                auto [lo, hi] = lane->m_flags.equal_range(owner);
                for (auto it = lo; it != hi; ++it)
                    if (it->second == flag) {
                        lane->m_flags.erase(it);
                        break;
                    }
                lane->m_running.fetch_sub(1);
            }
        } done{this, owner, flag};
        if (flag->load() || m_shutdown.load()) {
            emit finished(ticket, false, QStringLiteral("cancelled"));
            return;
        }
        try {
            // The host's model as it is now; holding it keeps it alive should the host load another.
            const std::shared_ptr<tinyloop::Model> model = m_host->sharedModel();
            if (!model) throw std::runtime_error("no model: open one in the workbench first");
            AnalysisJobContext ctx;
            ctx.model = model.get();
            ctx.cancel = flag.get();
            ctx.progress = [this, ticket](int d, int t, const QString& what) { emit progress(ticket, d, t, what); };
            ctx.m_lane = this;
            ctx.m_modelPath = m_host->modelPath();
            job(ctx);
            if (flag->load())
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
