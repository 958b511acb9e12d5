#include "plots/depth_plot.h"

#include <algorithm>

#include <QVBoxLayout>
#include <qcustomplot.h>

#include "plots/plot_layout.h"
#include "plots/plot_utils.h"

namespace tlui {

DepthPlot::DepthPlot(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(0, 0, 0, 0);
    m_plot = new QCustomPlot(this);
    m_plot->setObjectName("depthPlot");
    stylePlot(m_plot);
    m_bars = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    m_bars->setName("depth used");
    m_bars->setWidth(0.8);
    m_bars->setBrush(QColor(70, 120, 230, 170));
    m_bars->setPen(Qt::NoPen);
    m_requested = m_plot->addGraph();
    m_requested->setName("requested depth");
    m_requested->setPen(QPen(QColor(200, 60, 60), 1.5, Qt::DashLine));
    m_plot->xAxis->setLabel("emitted token");
    m_plot->yAxis->setLabel("loop depth used");
    useIntegerTicks(m_plot->xAxis);
    useIntegerTicks(m_plot->yAxis);
    putLegendBelow(m_plot);
    m_plot->legend->setVisible(true);
    showEmptyState(m_plot, "Generate to see the loop depth each token used");
    v->addWidget(m_plot);
}

void DepthPlot::clear(int loops) {
    m_depths.clear();
    m_loops = std::max(loops, 1);
    m_dirty = true;
    refresh();
}

void DepthPlot::addToken(int index, int depth) {
    if (index >= m_depths.size()) m_depths.resize(index + 1);
    m_depths[index] = depth;
    m_dirty = true;
}

void DepthPlot::refresh() {
    if (!m_dirty) return;
    m_dirty = false;
    QVector<double> xs(m_depths.size());
    double top = m_loops;
    for (int i = 0; i < m_depths.size(); ++i) {
        xs[i] = i;
        top = std::max(top, m_depths[i]);
    }
    m_bars->setData(xs, m_depths, true);
    const double n = std::max<double>(m_depths.size(), 1);
    m_requested->setData(QVector<double>{-0.5, n - 0.5}, QVector<double>{double(m_loops), double(m_loops)});
    m_plot->xAxis->setRange(-0.5, n - 0.5);
    m_plot->yAxis->setRange(0, top + 0.5);
    if (m_depths.isEmpty()) showEmptyState(m_plot, "Generate to see the loop depth each token used");
    else clearEmptyState(m_plot);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace tlui
