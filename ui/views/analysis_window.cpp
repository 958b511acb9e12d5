#include "views/analysis_window.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QPdfWriter>
#include <QPixmap>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "views/input_strip.h"
#include "plots/plot_layout.h"
#include "plots/wrapped_label.h"

namespace tlui {

AnalysisWindow::AnalysisWindow(WorkbenchAccess* workbench, const QString& title, QWidget* parent)
    : QWidget(parent, Qt::Window), m_workbench(workbench) {
    setWindowTitle(title + " - TinyLoop Workbench");
    setAttribute(Qt::WA_DeleteOnClose, false);
    resize(1100, 760);
    auto* v = new QVBoxLayout(this);
    auto* inputs = new InputStrip;  // scrolls sideways on a small screen instead of widening the window
    m_controls = inputs->row();
    v->addWidget(inputs);
    // The view's content scrolls where the screen is too small for it (a 1280x720 screen in
    // presentation mode): the window stays inside the screen and nothing in it is squeezed below
    // the height its labels and captions need. Where it fits, no scroll bar shows.
    auto* scroll = new QScrollArea;
    scroll->setObjectName("bodyScroll");
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    auto* content = new QWidget;
    content->setObjectName("body");
    m_body = new QVBoxLayout(content);
    m_body->setContentsMargins(0, 0, 0, 0);
    scroll->setWidget(content);
    v->addWidget(scroll, 1);
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
    m_status = new WrappedLabel;  // a long message wraps instead of widening the window
    m_status->setObjectName("status");
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    // the main window's wording: "Export <what> (<formats>)...", "..." where a dialog opens
    auto* img = new QPushButton("Export image (PNG/PDF)...");
    img->setObjectName("exportImageButton");
    auto* js = new QPushButton("Export data (JSON)...");
    js->setObjectName("exportDataButton");
    bar->addWidget(m_run);
    bar->addWidget(m_cancel);
    bar->addWidget(m_progress);
    bar->addStretch(1);
    bar->addWidget(img);
    bar->addWidget(js);
    // the status on a line of its own, the window's full width: beside the buttons a long verdict
    // took five lines in presentation mode
    v->addWidget(m_status);
    v->addLayout(bar);
    connect(m_run, &QPushButton::clicked, this, [this] { run(); });
    connect(m_cancel, &QPushButton::clicked, this, &AnalysisWindow::cancel);
    connect(img, &QPushButton::clicked, this, [this] {
        const QString p = QFileDialog::getSaveFileName(this, "Export image", objectName() + ".png", "PNG (*.png);;PDF (*.pdf)");
        QString err;
        if (!p.isEmpty() && !exportImage(p, &err)) setStatus(err, true);
    });
    connect(js, &QPushButton::clicked, this, [this] {
        const QString p = QFileDialog::getSaveFileName(this, "Export data", objectName() + ".json", "JSON (*.json)");
        QString err;
        if (!p.isEmpty() && !exportJson(p, &err)) setStatus(err, true);
    });
    // The lane is shared: a window listens for its own tickets only.
    connect(jobs(), &AnalysisJobs::progress, this, [this](quint64 ticket, int done, int total, const QString& what) {
        if (!m_done.count(ticket)) return;
        m_progress->setRange(0, std::max(1, total));
        m_progress->setValue(done);
        if (!what.isEmpty()) setStatus(what);
        emit jobProgress(done, total, what);
    }, Qt::QueuedConnection);
    connect(jobs(), &AnalysisJobs::finished, this, &AnalysisWindow::onFinished, Qt::QueuedConnection);
}

AnalysisWindow::~AnalysisWindow() = default;

void AnalysisWindow::cancel() {
    if (!jobs()) return;  // the workbench has shut its engine down: nothing runs
    jobs()->cancel(this);
    setStatus("cancelling...");
}

void AnalysisWindow::onFinished(quint64 ticket, bool ok, const QString& error) {
    auto it = m_done.find(ticket);
    if (it == m_done.end()) return;  // another window's job
    std::function<void(bool, const QString&)> cb = std::move(it->second);
    m_done.erase(it);
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
}

QString AnalysisWindow::statusText() const { return m_status->text(); }

void AnalysisWindow::addControl(const QString& label, QWidget* field, int stretch) {
    auto* l = new QLabel(label);
    l->setBuddy(field);
    m_controls->addWidget(l);
    m_controls->addWidget(field, stretch);
}

QLineEdit* AnalysisWindow::newPromptField() const {
    auto* e = new QLineEdit(workbenchPrompt().isEmpty() ? QString("In the beginning") : workbenchPrompt());
    e->setObjectName("prompt");
    return e;
}

QSpinBox* AnalysisWindow::newCountField(int lo, int hi, int value) {
    auto* b = new QSpinBox;
    b->setRange(lo, hi);
    b->setValue(value);
    return b;
}

void AnalysisWindow::setStatus(const QString& text, bool error) {
    m_status->setText(text);
    m_status->setStyleSheet(error ? "color: #b00020;" : "");
}

void AnalysisWindow::startJob(const QString& what, AnalysisJobs::Job job,
                              std::function<void(bool, const QString&)> on_done) {
    if (!jobs()) return setStatus("the workbench has shut its engine down", true);
    m_done[jobs()->submit(this, std::move(job))] = std::move(on_done);
    ++m_pending;
    m_cancel->setEnabled(true);
    m_progress->setRange(0, 0);  // busy until the job reports its own progress
    setStatus(what);
}

bool AnalysisWindow::exportJson(const QString& path, QString* error) const {
    std::ofstream f(path.toStdString());
    if (f) f << data().dump(2) << "\n";
    f.close();
    if (!f) {
        if (error) *error = QString("could not write %1").arg(path);
        return false;
    }
    return true;
}

bool AnalysisWindow::exportImage(const QString& path, QString* error) {
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
        ok = ok && QFileInfo(path).size() > 0;
    } else {
        ok = grab().save(path, "PNG", 0);  // quality 0: PNG's strongest compression
    }
    if (!ok && error) *error = QString("could not write %1").arg(path);
    return ok;
}

namespace {

// `label` broken at the space nearest its middle (unchanged when it has none).
QString onTwoLines(const QString& label) {
    int best = -1;
    for (int i = 0; i < label.size(); ++i)
        if (label[i] == ' ' && (best < 0 || std::abs(i - label.size() / 2) < std::abs(best - label.size() / 2))) best = i;
    return best < 0 ? label : label.left(best) + "\n" + label.mid(best + 1);
}

void fitCategoryLabels(QCustomPlot* plot) {
    auto text = qSharedPointerDynamicCast<QCPAxisTickerText>(plot->xAxis->ticker());
    const QStringList labels = plot->property("tl_categoryLabels").toStringList();
    if (!text || labels.isEmpty() || text->ticks().size() != labels.size()) return;
    const QFontMetrics fm(plot->xAxis->tickLabelFont());
    const int room = plot->viewport().width() - 90;  // less the value axes and margins
    auto fits = [&](const QStringList& shown) {
        int widest = 0;
        for (const QString& l : shown)
            for (const QString& line : l.split('\n')) widest = std::max(widest, fm.horizontalAdvance(line));
        return (widest + fm.averageCharWidth() * 2) * static_cast<int>(shown.size()) <= room;
    };
    QStringList shown = labels;
    double rotation = 0;
    if (!fits(labels)) {
        QStringList two;
        for (const QString& l : labels) two << onTwoLines(l);
        if (fits(two)) shown = two;
        else {
            // Slanted labels clear each other when their ticks are a line height / sin(angle)
            // apart: the flattest of 30, 45, 60 and 90 degrees that the spacing allows (many
            // modes in a narrow plot need steeper labels).
            // The axis rect's width as this replot will lay it out: the last layout may predate an
            // axis shown since (the depth plot's right axis, shown after its bars are drawn), and
            // the layout audit measures the final one. The line height as the audit measures it.
            QCPLayout* layout = plot->plotLayout();
            for (auto phase : {QCPLayoutElement::upPreparation, QCPLayoutElement::upMargins, QCPLayoutElement::upLayout})
                layout->update(phase);
            const double spacing = plot->axisRect()->width() / (labels.size() + 0.4);
            int line = fm.height();
            for (const QString& l : labels) line = std::max(line, fm.boundingRect(QRect(), Qt::TextDontClip, l).height());
            for (double degrees : {30.0, 45.0, 60.0, 90.0}) {
                rotation = -degrees;
                if (line / std::sin(degrees * M_PI / 180.0) <= spacing - 1.0) break;
            }
        }
    }
    if (QStringList(text->ticks().values()) != shown) {
        QVector<double> ticks;
        for (int i = 0; i < labels.size(); ++i) ticks << i + 1;
        text->setTicks(ticks, QVector<QString>(shown.begin(), shown.end()));
    }
    if (plot->xAxis->tickLabelRotation() != rotation) plot->xAxis->setTickLabelRotation(rotation);
}

}  // namespace

void drawCategoryBars(QCustomPlot* plot, const QStringList& labels, const std::vector<std::vector<double>>& series,
                      const QStringList& names, bool stacked, const QString& yLabel) {
    static const QColor palette[] = {QColor(70, 120, 230), QColor(60, 170, 90), QColor(230, 140, 40),
                                     QColor(200, 70, 70), QColor(140, 90, 200), QColor(120, 120, 120)};
    clearEmptyState(plot);
    plot->clearPlottables();
    QVector<double> ticks;
    for (int i = 0; i < labels.size(); ++i) ticks << i + 1;
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    ticker->addTicks(ticks, QVector<QString>(labels.begin(), labels.end()));
    plot->xAxis->setTicker(ticker);
    // Upright on one line while the labels fit side by side (a plot given a tab of its own), else
    // upright on two lines, else slanted, anchored at the label's end so nothing runs off the
    // right edge; decided at each replot, as the plot's width and the zoom change.
    plot->setProperty("tl_categoryLabels", labels);
    if (!plot->property("tl_fitCategoryLabels").toBool()) {
        plot->setProperty("tl_fitCategoryLabels", true);
        QObject::connect(plot, &QCustomPlot::beforeReplot, plot, [plot] {
            fitCategoryLabels(plot);
            fitVerticalTickCount(plot->yAxis, plot->axisRect()->height());
        });
    }
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
    plot->yAxis->setRange(0, ymax > 0 ? ymax * 1.12 : 1.0);
    // The legend sits under the plot, never over a bar.
    putLegendBelow(plot);
    plot->legend->setVisible(n > 1);
    QFont lf = plot->font();  // the plot's unzoomed font: the legend's own is zoomed (plots/plot_look.h)
    lf.setPointSizeF(std::max(6.0, lf.pointSizeF() - 1.5));
    plot->legend->setFont(lf);
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
