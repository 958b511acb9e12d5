#include "plots/speculative_plot.h"

#include <algorithm>
#include <map>

#include <QLabel>
#include <QStackedWidget>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "plots/plot_layout.h"
#include "plots/plot_utils.h"

namespace tlui {

SpeculativePlot::SpeculativePlot(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(0, 0, 0, 0);
    m_stack = new QStackedWidget;
    m_placeholder = new QLabel(
        "Run a speculative mode (chain or tree) to see its acceptance per cycle, the histogram of "
        "accepted lengths and the overall rate.");
    m_placeholder->setObjectName("specPlaceholder");
    m_placeholder->setAlignment(Qt::AlignCenter);
    m_placeholder->setWordWrap(true);
    m_stack->addWidget(m_placeholder);

    auto* page = new QWidget;
    auto* pv = new QVBoxLayout(page);
    pv->setContentsMargins(0, 0, 0, 0);
    m_rate = new QLabel;
    m_rate->setObjectName("specRate");
    // Wrapped: one unbroken line set the window's least width (wider than a 1280-px screen in
    // presentation mode, for good once the Speculative tab had shown it).
    m_rate->setWordWrap(true);
    pv->addWidget(m_rate);
    m_plot = new QCustomPlot(page);
    m_plot->setObjectName("speculativePlot");
    stylePlot(m_plot);
    m_drafted = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    m_drafted->setName("drafted");
    m_drafted->setBrush(QColor(180, 180, 180, 150));
    m_accepted = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    m_accepted->setName("accepted");
    m_accepted->setBrush(QColor(60, 170, 90, 200));
    m_plot->xAxis->setLabel("verify cycle");
    m_plot->yAxis->setLabel("tokens");
    m_plot->legend->setVisible(true);
    auto* histRect = new QCPAxisRect(m_plot);
    m_plot->plotLayout()->addElement(0, 1, histRect);
    m_hist = new QCPBars(histRect->axis(QCPAxis::atBottom), histRect->axis(QCPAxis::atLeft));
    m_hist->setBrush(QColor(70, 120, 230, 180));
    m_hist->setName("cycles by accepted length");
    m_hist->removeFromLegend();
    histRect->axis(QCPAxis::atBottom)->setLabel("accepted length");
    histRect->axis(QCPAxis::atLeft)->setLabel("cycles");
    // counts on every axis: whole-number ticks only
    for (QCPAxis* a : {m_plot->xAxis, m_plot->yAxis, histRect->axis(QCPAxis::atBottom), histRect->axis(QCPAxis::atLeft)})
        useIntegerTicks(a);
    putLegendBelow(m_plot);
    pv->addWidget(m_plot, 1);
    m_stack->addWidget(page);
    v->addWidget(m_stack);
}

QString SpeculativePlot::placeholderText() const { return m_placeholder->text(); }

void SpeculativePlot::clear() {
    m_cycles.clear();
    m_haveStats = false;
    m_statsHist.clear();
    m_stack->setCurrentIndex(0);
}

double SpeculativePlot::overallRate() const {
    if (m_haveStats) return m_statsRate;
    long long d = 0, a = 0;
    for (const auto& c : m_cycles) {
        d += c.drafted;
        a += c.accepted;
    }
    return d > 0 ? double(a) / double(d) : 0.0;
}

void SpeculativePlot::setCycles(const std::vector<SpecCycle>& cycles) {
    m_cycles = cycles;
    if (cycles.empty()) {
        clear();
        return;
    }
    QVector<double> x, dr, ac;
    std::map<int, int> hist;
    if (m_haveStats)
        for (size_t k = 0; k < m_statsHist.size(); ++k)
            if (m_statsHist[k] > 0) hist[int(k)] = m_statsHist[k];
    int maxDraft = 1;
    for (size_t i = 0; i < cycles.size(); ++i) {
        x << double(i);
        dr << cycles[i].drafted;
        ac << cycles[i].accepted;
        if (!m_haveStats) ++hist[cycles[i].accepted];
        maxDraft = std::max(maxDraft, cycles[i].drafted);
    }
    m_drafted->setData(x, dr, true);
    m_accepted->setData(x, ac, true);
    m_plot->xAxis->setRange(-0.5, double(cycles.size()) - 0.5);
    m_plot->yAxis->setRange(0, maxDraft + 0.5);
    QVector<double> hx, hy;
    int hmax = 1;
    for (const auto& [len, n] : hist) {
        hx << len;
        hy << n;
        hmax = std::max(hmax, n);
    }
    m_hist->setData(hx, hy, true);
    m_hist->keyAxis()->setRange(-0.5, maxDraft + 0.5);
    m_hist->valueAxis()->setRange(0, hmax + 0.5);
    m_rate->setText(QString("overall acceptance: %1% over %2 cycles%3")
                        .arg(overallRate() * 100.0, 0, 'f', 1)
                        .arg(m_haveStats ? m_statsCycles : int(cycles.size()))
                        .arg(m_haveStats ? " (engine counters: accepted / tested)" : " (live)"));
    m_stack->setCurrentIndex(1);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void SpeculativePlot::setStats(const tinyloop::GenerateStats& s) {
    if (s.spec_cycles <= 0) return;
    m_haveStats = true;
    m_statsRate = s.spec_acceptance_rate();
    m_statsCycles = s.spec_cycles;
    m_statsHist = s.spec_accept_hist;
    setCycles(std::vector<SpecCycle>(m_cycles));
}

}  // namespace tlui
