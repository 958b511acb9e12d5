#include "views/views_a.h"

#include <map>
#include <memory>

#include <QAction>
#include <QFile>
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
#include <QTableWidget>
#include <qcustomplot.h>

#include "main/main_window.h"
#include "main/prompt_editor.h"
#include "views/agreement_map_view.h"
#include "views/compare_modes_view.h"
#include "views/depth_scrubber_view.h"
#include "views/step_mode_view.h"
#include "views/speculation_sweep_view.h"

namespace tlui {

ViewA::ViewA(MainWindow* window, const QString& title, QWidget* parent)
    : QWidget(parent, Qt::Window), m_main(window), m_worker(new AnalysisWorker(this)) {
    setWindowTitle(title + " — TinyLoop Workbench");
    setAttribute(Qt::WA_DeleteOnClose, false);
    m_bar = new QWidget(this);
    m_barLayout = new QHBoxLayout(m_bar);
    m_barLayout->setContentsMargins(0, 0, 0, 0);
    m_run = new QPushButton("Run", m_bar);
    m_run->setObjectName("runButton");
    m_cancel = new QPushButton("Cancel", m_bar);
    m_cancel->setObjectName("cancelButton");
    m_cancel->setEnabled(false);
    m_progress = new QProgressBar(m_bar);
    m_progress->setObjectName("progress");
    m_progress->setMaximumWidth(220);
    m_progress->setRange(0, 1);
    m_progress->setValue(0);
    m_status = new QLabel(m_bar);
    m_status->setObjectName("status");
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* png = new QPushButton("Export image...", m_bar);
    auto* json = new QPushButton("Export JSON...", m_bar);
    m_barLayout->addWidget(m_run);
    m_barLayout->addWidget(m_cancel);
    m_barLayout->addWidget(m_progress);
    m_barLayout->addWidget(m_status, 1);
    m_barLayout->addWidget(png);
    m_barLayout->addWidget(json);
    connect(m_run, &QPushButton::clicked, this, [this] { run(); });
    connect(m_cancel, &QPushButton::clicked, this, [this] {
        m_worker->cancel();
        setStatus("cancelling...");
    });
    connect(png, &QPushButton::clicked, this, [this] {
        const QString p = QFileDialog::getSaveFileName(this, "Export view", objectName() + ".png", "PNG (*.png);;PDF (*.pdf)");
        QString err;
        if (!p.isEmpty() && !exportImage(p, &err)) setStatus(err, true);
    });
    connect(json, &QPushButton::clicked, this, [this] {
        const QString p = QFileDialog::getSaveFileName(this, "Export data", objectName() + ".json", "JSON (*.json)");
        QString err;
        if (!p.isEmpty() && !exportJson(p, &err)) setStatus(err, true);
    });

    connect(m_worker, &AnalysisWorker::progress, this, [this](quint64, int done, int total, const QString& what) {
        m_progress->setRange(0, std::max(1, total));
        m_progress->setValue(done);
        if (!what.isEmpty()) setStatus(what);
    });
    connect(m_worker, &AnalysisWorker::finished, this, [this](quint64 ticket, bool ok, const QString& error) {
        auto it = m_done.find(ticket);
        std::function<void(bool, const QString&)> cb;
        if (it != m_done.end()) {
            cb = std::move(it->second);
            m_done.erase(it);
        }
        m_pending = std::max(0, m_pending - 1);
        m_cancel->setEnabled(m_pending > 0);
        if (m_pending == 0) {
            m_progress->setRange(0, 1);
            m_progress->setValue(ok ? 1 : 0);
        }
        m_lastError = ok ? QString() : error;
        if (!ok) setStatus(error, true);
        if (cb) cb(ok, error);
        emit workFinished(ok);
    });
}

ViewA::~ViewA() = default;

QString ViewA::modelPath() const { return m_main ? m_main->modelPath() : m_worker->modelPath(); }

QString ViewA::promptFromWorkbench() const {
    if (!m_main) return QString();
    if (auto* p = m_main->findChild<PromptEditor*>()) return p->toPlainText();
    return QString();
}

QString ViewA::statusText() const { return m_status->text(); }

void ViewA::setStatus(const QString& text, bool error) {
    m_status->setText(text);
    m_status->setStyleSheet(error ? "color: #b00;" : "");
}

void ViewA::startJob(const QString& what, AnalysisWorker::Job job, std::function<void(bool, const QString&)> onDone) {
    if (!modelPath().isEmpty()) m_worker->setModelPath(modelPath());
    const quint64 t = m_worker->submit(std::move(job));
    m_done[t] = std::move(onDone);
    ++m_pending;
    m_cancel->setEnabled(true);
    m_progress->setRange(0, 0);  // busy until the job reports its own progress
    setStatus(what);
}

bool ViewA::exportJson(const QString& path, QString* error) const {
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
        if (error) *error = QString("could not write %1: %2").arg(path, f.errorString());
        return false;
    }
    const std::string s = data().dump(2);
    if (f.write(s.data(), static_cast<qint64>(s.size())) != static_cast<qint64>(s.size())) {
        if (error) *error = QString("could not write %1").arg(path);
        return false;
    }
    return true;
}

bool ViewA::exportImage(const QString& path, QString* error) {
    if (QFileInfo(path).suffix().compare("pdf", Qt::CaseInsensitive) == 0) {
        QPdfWriter pdf(path);
        pdf.setPageSize(QPageSize(QSizeF(width(), height()), QPageSize::Point));
        pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
        pdf.setResolution(72);
        QPainter painter;
        if (!painter.begin(&pdf)) {
            if (error) *error = QString("could not write %1").arg(path);
            return false;
        }
        render(&painter);
        painter.end();
        return QFileInfo(path).size() > 0;
    }
    if (!grab().save(path)) {
        if (error) *error = QString("could not write %1").arg(path);
        return false;
    }
    return true;
}

ViewA* openViewA(MainWindow* window, const QString& kind) {
    const QString name = "viewA_" + kind;
    ViewA* v = window->findChild<ViewA*>(name, Qt::FindDirectChildrenOnly);
    if (!v) {
        if (kind == "compare") v = new CompareView(window, window);
        else if (kind == "scrubber") v = new ScrubberView(window, window);
        else if (kind == "agreement") v = new AgreementView(window, window);
        else if (kind == "sweep") v = new SweepView(window, window);
        else if (kind == "step") v = new StepView(window, window);
        else return nullptr;
        v->setObjectName(name);
        v->resize(1200, 820);
    }
    v->show();
    v->raise();
    v->activateWindow();
    return v;
}

void install_views_a(MainWindow* window, QMenu* views) {
    struct Item {
        const char* kind;
        const char* text;
        const char* tip;
    };
    static const Item items[] = {
        {"compare", "&Compare decode modes...", "Several decode modes on one prompt: texts aligned, first divergence, speed, depth, acceptance, time split"},
        {"scrubber", "&Depth scrubber...", "Answer the prompt at any loop depth from one prefill (ResumeHandle), with the diff from the previous depth"},
        {"agreement", "Draft-&agreement map...", "Per position, the first depth whose argmax equals the final one; predicted vs measured acceptance"},
        {"sweep", "Speculation tuning s&weep...", "draft_loops x draft_ahead (x K) on a prompt set: measured and predicted speedup, acceptance, best preset"},
        {"step", "S&tep mode...", "One token at a time: the lens row of each step, take the sampled token or any candidate"},
    };
    for (const Item& it : items) {
        QAction* a = views->addAction(it.text);
        a->setObjectName(QString("viewA_%1_action").arg(it.kind));
        a->setToolTip(it.tip);
        a->setStatusTip(it.tip);
        const QString kind = it.kind;
        QObject::connect(a, &QAction::triggered, window, [window, kind] { openViewA(window, kind); });
    }
}

}  // namespace tlui

namespace tlui {

void drawCategoryBars(QCustomPlot* plot, const QStringList& labels, const std::vector<std::vector<double>>& series,
                      const QStringList& names, bool stacked, const QString& yLabel) {
    static const QColor palette[] = {QColor(70, 120, 230), QColor(60, 170, 90), QColor(230, 140, 40),
                                     QColor(200, 70, 70), QColor(140, 90, 200), QColor(120, 120, 120)};
    plot->clearPlottables();
    QVector<double> ticks;
    for (int i = 0; i < labels.size(); ++i) ticks << i + 1;
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    ticker->addTicks(ticks, QVector<QString>(labels.begin(), labels.end()));
    plot->xAxis->setTicker(ticker);
    plot->xAxis->setTickLabelRotation(labels.size() > 4 ? -30 : 0);  // anchored at the label's end: nothing runs off the right edge
    plot->yAxis->setLabel(yLabel);
    const int n = static_cast<int>(series.size());
    QCPBars* below = nullptr;
    QCPBarsGroup* group = (!stacked && n > 1) ? new QCPBarsGroup(plot) : nullptr;
    double ymax = 0;
    std::vector<double> sum(static_cast<size_t>(labels.size()), 0.0);
    for (int s = 0; s < n; ++s) {
        auto* bars = new QCPBars(plot->xAxis, plot->yAxis);
        bars->setName(s < names.size() ? names[s] : QString());
        const QColor c = palette[s % 6];
        bars->setBrush(QColor(c.red(), c.green(), c.blue(), 200));
        bars->setPen(QPen(c.darker(130)));
        bars->setWidth(stacked || n == 1 ? 0.6 : 0.8 / n);
        if (group) bars->setBarsGroup(group);
        if (stacked && below) bars->moveAbove(below);
        QVector<double> v;
        for (int i = 0; i < labels.size(); ++i) {
            const double x = i < static_cast<int>(series[static_cast<size_t>(s)].size()) ? series[static_cast<size_t>(s)][static_cast<size_t>(i)] : 0.0;
            v << x;
            sum[static_cast<size_t>(i)] += x;
            ymax = std::max(ymax, stacked ? sum[static_cast<size_t>(i)] : x);
        }
        bars->setData(ticks, v);
        below = bars;
    }
    plot->xAxis->setRange(0.3, labels.size() + 0.7);
    plot->yAxis->setRange(0, ymax > 0 ? ymax * (n > 1 ? 1.5 : 1.12) : 1.0);  // headroom for the legend
    plot->legend->setVisible(n > 1);
    QFont lf = plot->legend->font();
    lf.setPointSizeF(std::max(6.0, lf.pointSizeF() - 1.5));
    plot->legend->setFont(lf);
    plot->legend->setBrush(QColor(255, 255, 255, 190));
    plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
    plot->replot();
}

void fillTable(QTableWidget* table, const QStringList& headers, const std::vector<QStringList>& rows) {
    table->clear();
    table->setColumnCount(headers.size());
    table->setHorizontalHeaderLabels(headers);
    table->setRowCount(static_cast<int>(rows.size()));
    for (int r = 0; r < static_cast<int>(rows.size()); ++r)
        for (int c = 0; c < rows[static_cast<size_t>(r)].size() && c < headers.size(); ++c) {
            auto* item = new QTableWidgetItem(rows[static_cast<size_t>(r)][c]);
            item->setFlags(item->flags() & ~Qt::ItemIsEditable);
            table->setItem(r, c, item);
        }
    table->resizeColumnsToContents();
}

QString tokenHtml(const QString& piece) {
    QString s = piece.toHtmlEscaped();
    s.replace("\n", "<span style='color:#999'>&#8629;</span><br>");
    s.replace("\t", "<span style='color:#999'>&#8677;</span>");
    return s;
}

}  // namespace tlui

#include <QTimer>

namespace tlui {

void demoViewA(MainWindow* window, const QString& kind, const QString& prompt, int maxTokens, const QString& out,
               std::function<void(bool)> done) {
    ViewA* v = openViewA(window, kind);
    if (!v) return done(false);
    v->resize(1400, 900);
    auto finish = [v, out, done](bool ok) {
        QTimer::singleShot(400, v, [v, out, done, ok] {
            bool saved = true;
            if (!out.isEmpty()) {
                QString err;
                saved = v->exportImage(out, &err);
                if (!saved) qWarning("%s", qPrintable(err));
            }
            done(ok && saved);
        });
    };
    auto stage = std::make_shared<int>(0);
    QObject::connect(v, &ViewA::workFinished, v, [=](bool ok) {
        if (!ok) return finish(false);
        if (v->isBusy()) return;
        ++*stage;
        if (auto* s = qobject_cast<ScrubberView*>(v)) {
            // 1 -> 2 -> 4 -> 6: each move deeper runs only the new passes over the prompt
            static const int path[] = {1, 2, 4, 6};
            const size_t n = s->history().size();
            if (n >= 1 && n < 4) return s->setDepth(path[n]);
            if (n >= 4) return finish(true);
            return;  // the prefill; its answer comes next
        }
        if (auto* st = qobject_cast<StepView*>(v)) {
            // (the start job's end is busy: its first proposal is already queued)
            if (*stage == 1) return st->takeProposals(std::max(1, maxTokens / 2));
            return finish(true);
        }
        finish(true);
    });
    if (auto* c = qobject_cast<CompareView*>(v)) {
        c->setPrompt(prompt);
        c->setMaxTokens(maxTokens);
    } else if (auto* s = qobject_cast<ScrubberView*>(v)) {
        s->setPrompt(prompt);
        s->setMaxTokens(maxTokens);
        s->setDepth(1);
    } else if (auto* a = qobject_cast<AgreementView*>(v)) {
        a->setPrompt(prompt);
        a->setMaxTokens(maxTokens);
    } else if (auto* w = qobject_cast<SweepView*>(v)) {
        w->setMaxTokens(maxTokens);
    } else if (auto* st = qobject_cast<StepView*>(v)) {
        st->setPrompt(prompt);
        st->setConfig(0, 0.8, 7, maxTokens);
    }
    v->run();
}

}  // namespace tlui
