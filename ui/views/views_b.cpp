#include "views/views_b.h"

#include <algorithm>
#include <fstream>

#include <QAction>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QPainter>
#include <QPdfWriter>
#include <QPixmap>
#include <QProgressBar>
#include <QPushButton>
#include <QVBoxLayout>

#include "main/main_window.h"
#include "main/prompt_editor.h"
#include "views/exit_calibration_view.h"
#include "views/compute_quality_view.h"
#include "views/kv_provenance_view.h"
#include "views/quant_across_depth_view.h"

namespace tlui {

ViewB::ViewB(MainWindow* window, const QString& title) : QWidget(window, Qt::Window), m_main(window) {
    setWindowTitle(title + " - TinyLoop Workbench");
    resize(1100, 760);
    m_worker = new BWorker(this);
    auto* v = new QVBoxLayout(this);
    m_controls = new QHBoxLayout;
    v->addLayout(m_controls);
    m_body = new QVBoxLayout;
    v->addLayout(m_body, 1);
    auto* bar = new QHBoxLayout;
    m_run = new QPushButton("Run");
    m_run->setObjectName("runButton");
    m_cancel = new QPushButton("Cancel");
    m_cancel->setObjectName("cancelButton");
    m_cancel->setEnabled(false);
    m_progress = new QProgressBar;
    m_progress->setObjectName("progress");
    m_progress->setMaximumWidth(220);
    m_progress->setRange(0, 1);
    m_progress->setValue(0);
    m_status = new QLabel;
    m_status->setObjectName("status");
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* img = new QPushButton("Export image...");
    auto* js = new QPushButton("Export data (JSON)...");
    bar->addWidget(m_run);
    bar->addWidget(m_cancel);
    bar->addWidget(m_progress);
    bar->addWidget(m_status, 1);
    bar->addWidget(img);
    bar->addWidget(js);
    v->addLayout(bar);
    connect(m_run, &QPushButton::clicked, this, [this] { run(); });
    connect(m_cancel, &QPushButton::clicked, this, [this] {
        m_worker->cancel();
        setStatus("cancelling...");
    });
    connect(img, &QPushButton::clicked, this, [this] {
        const QString p = QFileDialog::getSaveFileName(this, "Export image", QString(), "PNG (*.png);;PDF (*.pdf)");
        QString err;
        if (!p.isEmpty() && !exportImage(p, &err)) setStatus(err, true);
    });
    connect(js, &QPushButton::clicked, this, [this] {
        const QString p = QFileDialog::getSaveFileName(this, "Export data", QString(), "JSON (*.json)");
        QString err;
        if (!p.isEmpty() && !exportJson(p, &err)) setStatus(err, true);
    });
    connect(m_worker, &BWorker::progress, this, [this](quint64, int done, int total, const QString& what) {
        m_progress->setRange(0, std::max(total, 1));
        m_progress->setValue(done);
        setStatus(what);
    }, Qt::QueuedConnection);
    connect(m_worker, &BWorker::finished, this, [this](quint64 ticket, bool ok, const QString& error) {
        --m_pending;
        auto it = m_done.find(ticket);
        if (it != m_done.end()) {
            auto f = std::move(it->second);
            m_done.erase(it);
            if (!ok) {
                m_lastError = error;
                setStatus(error, true);
            } else {
                m_lastError.clear();
            }
            f(ok, error);
        }
        m_progress->setRange(0, 1);
        m_progress->setValue(m_pending > 0 ? 0 : 1);
        m_cancel->setEnabled(m_pending > 0);
        m_run->setEnabled(m_pending == 0);
        emit workFinished(ok);
    }, Qt::QueuedConnection);
}

ViewB::~ViewB() = default;

QString ViewB::modelPath() const { return m_main ? m_main->modelPath() : QString(); }

QString ViewB::workbenchPrompt() const {
    if (m_main)
        if (auto* p = m_main->findChild<PromptEditor*>()) return p->toPlainText();
    return QString();
}

QString ViewB::statusText() const { return m_status->text(); }

void ViewB::setStatus(const QString& text, bool error) {
    m_status->setText(text);
    m_status->setStyleSheet(error ? "color: #b00020;" : "");
}

void ViewB::startJob(const QString& what, BWorker::Job job, std::function<void(bool, const QString&)> onDone) {
    ++m_pending;
    m_run->setEnabled(false);
    m_cancel->setEnabled(true);
    m_progress->setRange(0, 0);  // busy until the job reports steps
    setStatus(what + "...");
    m_done[m_worker->submit(std::move(job))] = std::move(onDone);
}

bool ViewB::exportJson(const QString& path, QString* error) const {
    std::ofstream f(path.toStdString());
    if (f) f << data().dump(2) << "\n";
    f.close();
    if (!f) {
        if (error) *error = QString("could not write %1").arg(path);
        return false;
    }
    return true;
}

bool ViewB::exportImage(const QString& path, QString* error) {
    const QSize sz = size().width() > 50 ? size() : QSize(1100, 760);
    bool ok = false;
    if (QFileInfo(path).suffix().compare("pdf", Qt::CaseInsensitive) == 0) {
        QPdfWriter pdf(path);
        pdf.setPageSize(QPageSize(QSizeF(sz.width(), sz.height()), QPageSize::Point));
        pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
        pdf.setResolution(72);
        QPainter painter;
        if (painter.begin(&pdf)) {
            render(&painter);
            ok = painter.end();
        }
    } else {
        ok = grab().save(path, "PNG");
    }
    if (!ok && error) *error = QString("could not write %1").arg(path);
    return ok;
}

ViewB* openViewB(MainWindow* window, const QString& kind) {
    const QString name = "viewB_" + kind;
    ViewB* v = window->findChild<ViewB*>(name, Qt::FindDirectChildrenOnly);
    if (!v) {
        if (kind == "calibration") v = new CalibView(window);
        else if (kind == "compute") v = new ComputeView(window);
        else if (kind == "kv") v = new KvView(window);
        else if (kind == "quant") v = new QuantView(window);
        else return nullptr;
        v->setObjectName(name);
    }
    v->show();
    v->raise();
    v->activateWindow();
    return v;
}

void install_views_b(MainWindow* window, QMenu* views) {
    if (!views->isEmpty()) views->addSeparator();
    struct Entry {
        const char* text;
        const char* kind;
    };
    const Entry entries[] = {{"Early-exit &calibration", "calibration"},
                             {"Compute against &quality", "compute"},
                             {"&KV provenance", "kv"},
                             {"Quantization across &depth", "quant"}};
    for (const Entry& e : entries) {
        QAction* a = views->addAction(e.text);
        a->setObjectName(QString("viewAction_") + e.kind);
        const QString kind = e.kind;
        QObject::connect(a, &QAction::triggered, window, [window, kind] { openViewB(window, kind); });
    }
}

}  // namespace tlui
