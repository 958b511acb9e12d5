#include "plots/timing_plot.h"

#include <algorithm>

#include <QLabel>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "plots/plot_layout.h"
#include "plots/plot_utils.h"

namespace tlui {

TimingPlot::TimingPlot(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(0, 0, 0, 0);
    m_summary = new QLabel("No run yet.");
    m_summary->setObjectName("timingSummary");
    m_summary->setWordWrap(true);  // a long summary wraps instead of widening the window past the screen
    v->addWidget(m_summary);
    m_plot = new QCustomPlot(this);
    m_plot->setObjectName("timingPlot");
    stylePlot(m_plot);
    // Lying bars, the phases named down the left: the names sit one per line, so they never run
    // into each other however narrow the tab (standing bars put four names side by side in half
    // the tab's width, and they overlapped at every size).
    m_phases = new QCPBars(m_plot->yAxis, m_plot->xAxis);
    m_phases->setBrush(QColor(235, 140, 40, 190));
    QSharedPointer<QCPAxisTickerText> ticks(new QCPAxisTickerText);
    ticks->addTick(0, "prefill");
    ticks->addTick(1, "first token");
    ticks->addTick(2, "decode");
    ticks->addTick(3, "total");
    m_plot->yAxis->setTicker(ticks);
    m_plot->yAxis->setRange(-0.6, 3.6);
    m_plot->yAxis->setRangeReversed(true);  // prefill on top, in the order they happen
    m_plot->xAxis->setLabel("ms (last run)");
    auto* rateRect = new QCPAxisRect(m_plot);
    m_plot->plotLayout()->addElement(0, 1, rateRect);
    m_rate = m_plot->addGraph(rateRect->axis(QCPAxis::atBottom), rateRect->axis(QCPAxis::atLeft));
    m_rate->setPen(QPen(QColor(70, 120, 230), 2));
    m_rate->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 6));
    rateRect->axis(QCPAxis::atBottom)->setLabel("run");
    useIntegerTicks(rateRect->axis(QCPAxis::atBottom));
    rateRect->axis(QCPAxis::atLeft)->setLabel("decode tokens/s");
    // The two charts share the width: their numbers get as many ticks as fit half of it (less
    // the axes' margins), so they never run into each other on a narrow tab or a big zoom.
    connect(m_plot, &QCustomPlot::beforeReplot, this, [this, rateRect] {
        const double half = m_plot->width() / 2.0 - 80;
        fitTickCount(m_plot->xAxis, half);
        fitTickCount(rateRect->axis(QCPAxis::atBottom), half);
    });
    showEmptyState(m_plot, "Generate to see where the time went");
    v->addWidget(m_plot, 1);
}

void TimingPlot::setRuns(const std::vector<RunSummary>& runs) {
    if (runs.empty()) return;
    const RunSummary& r = runs.back();
    clearEmptyState(m_plot);
    m_phases->setData(QVector<double>{0, 1, 2, 3},
                      QVector<double>{r.prefillMs, r.firstTokenMs, r.decodeMs, r.totalMs}, true);
    m_plot->xAxis->setRange(0, std::max({r.prefillMs, r.firstTokenMs, r.decodeMs, r.totalMs, 1.0}) * 1.1);
    QVector<double> x, y;
    double top = 1;
    for (size_t i = 0; i < runs.size(); ++i) {
        x << double(i + 1);
        y << runs[i].tokensPerSecond;
        top = std::max(top, runs[i].tokensPerSecond);
    }
    m_rate->setData(x, y, true);
    m_rate->keyAxis()->setRange(0.5, runs.size() + 0.5);
    m_rate->valueAxis()->setRange(0, top * 1.15);
    m_summary->setText(QString("run %1 (%2): prefill %3 ms, first token %4 ms, decode %5 ms, %6 tokens, %7 tok/s")
                           .arg(r.id).arg(r.mode).arg(r.prefillMs, 0, 'f', 1).arg(r.firstTokenMs, 0, 'f', 1)
                           .arg(r.decodeMs, 0, 'f', 1).arg(r.tokens).arg(r.tokensPerSecond, 0, 'f', 1));
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace tlui
