#include "plots/depth_plot.h"

#include <algorithm>
#include <cmath>

#include <QMouseEvent>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "plots/plot_layout.h"
#include "plots/plot_utils.h"

namespace tlui {

namespace {

const QColor kGateColour(230, 140, 30);

// A graph kept in the legend only while it draws something.
void showInLegend(QCPGraph* g, bool on) {
    g->setVisible(on);
    if (on) g->addToLegend();
    else g->removeFromLegend();
}

}  // namespace

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
    m_selectedBar = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    m_selectedBar->setName("gate shown below");
    m_selectedBar->setWidth(0.8);
    m_selectedBar->setBrush(kGateColour);
    m_selectedBar->setPen(Qt::NoPen);
    m_selectedBar->removeFromLegend();
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
    v->addWidget(m_plot, 1);

    // The exit gate of one token (a gated model only): hidden until a token carries it.
    m_gate = new QCustomPlot(this);
    m_gate->setObjectName("gatePlot");
    stylePlot(m_gate);
    m_gate->setInteractions(QCP::Interactions());  // a probability axis: nothing to drag
    m_gate->plotLayout()->insertRow(0);
    m_gateTitle = new QCPTextElement(m_gate, "exit gate");
    m_gate->plotLayout()->addElement(0, 0, m_gateTitle);
    m_lambda = new QCPBars(m_gate->xAxis, m_gate->yAxis);
    m_lambda->setName("exit probability λ per pass");
    m_lambda->setWidth(0.6);
    m_lambda->setBrush(QColor(kGateColour.red(), kGateColour.green(), kGateColour.blue(), 150));
    m_lambda->setPen(Qt::NoPen);
    m_cdf = m_gate->addGraph();
    m_cdf->setName("cumulative exit probability");
    m_cdf->setPen(QPen(QColor(40, 70, 160), 2));
    m_cdf->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 7));
    m_threshold = m_gate->addGraph();
    m_threshold->setName("threshold q");
    m_threshold->setPen(QPen(QColor(200, 60, 60), 1.5, Qt::DashLine));
    m_exit = m_gate->addGraph();
    m_exit->setName("exit pass");
    m_exit->setPen(QPen(QColor(30, 150, 70), 2, Qt::DashLine));
    m_gate->xAxis->setLabel("loop pass");
    m_gate->yAxis->setLabel("probability");
    useIntegerTicks(m_gate->xAxis);
    m_gate->yAxis->setRange(0, 1.05);
    putLegendBelow(m_gate);
    m_gate->legend->setVisible(true);
    m_gate->setVisible(false);
    v->addWidget(m_gate, 1);

    // Hovering a bar shows that token's gate.
    m_plot->setMouseTracking(true);
    connect(m_plot, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
        if (!hasGate() || m_depths.isEmpty()) return;
        const int i = static_cast<int>(std::lround(m_plot->xAxis->pixelToCoord(e->position().x())));
        if (i >= 0 && i < m_depths.size() && i != m_selected) selectToken(i);
    });
}

void DepthPlot::clear(int loops) {
    m_depths.clear();
    m_lambdas.clear();
    m_cdfs.clear();
    m_gateTokens = 0;
    m_selected = -1;
    m_loops = std::max(loops, 1);
    m_dirty = true;
    refresh();
}

void DepthPlot::addToken(int index, int depth) {
    if (index >= m_depths.size()) m_depths.resize(index + 1);
    m_depths[index] = depth;
    m_dirty = true;
}

void DepthPlot::addEvent(const tinyloop::TokenEvent& ev) {
    addToken(ev.index, ev.depth);
    if (ev.exit_gate.empty() || ev.index < 0) return;
    const size_t i = static_cast<size_t>(ev.index);
    if (i >= m_lambdas.size()) {
        m_lambdas.resize(i + 1);
        m_cdfs.resize(i + 1);
    }
    if (m_lambdas[i].empty()) ++m_gateTokens;
    m_lambdas[i] = ev.exit_gate;
    m_cdfs[i] = ev.exit_gate_cdf;
}

void DepthPlot::setGateThreshold(double q, const QString& criterion) {
    m_q = q;
    m_criterion = criterion;
    m_dirty = true;
}

int DepthPlot::gateToken() const {
    auto has = [this](int i) { return i >= 0 && i < static_cast<int>(m_lambdas.size()) && !m_lambdas[i].empty(); };
    if (has(m_selected)) return m_selected;
    for (int i = static_cast<int>(m_lambdas.size()) - 1; i >= 0; --i)
        if (has(i)) return i;
    return -1;
}

void DepthPlot::selectToken(int index) {
    m_selected = index;
    m_dirty = true;
    refresh();
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
    drawGate();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void DepthPlot::drawGate() {
    const int t = gateToken();
    const bool shown = t >= 0 && t < m_depths.size();
    if (m_gate->isVisible() != shown) m_gate->setVisible(shown);
    if (shown) m_selectedBar->addToLegend();
    else m_selectedBar->removeFromLegend();
    if (!shown) {
        m_selectedBar->data()->clear();
        return;
    }
    m_selectedBar->setData(QVector<double>{double(t)}, QVector<double>{m_depths[t]}, true);
    const std::vector<float>& lam = m_lambdas[static_cast<size_t>(t)];
    const std::vector<float>& cdf = m_cdfs[static_cast<size_t>(t)];
    QVector<double> passes, l, c;
    for (size_t p = 0; p < lam.size(); ++p) {
        passes << double(p + 1);
        l << lam[p];
        c << (p < cdf.size() ? cdf[p] : 0.0);
    }
    m_lambda->setData(passes, l, true);
    m_cdf->setData(passes, c, true);
    const int last = std::max(m_loops, static_cast<int>(lam.size()));
    const int exitPass = static_cast<int>(m_depths[t]);
    const bool gateRun = m_q > 0;
    showInLegend(m_threshold, gateRun);
    if (gateRun) m_threshold->setData(QVector<double>{0.5, last + 0.5}, QVector<double>{m_q, m_q});
    const bool exited = gateRun || exitPass < last;
    showInLegend(m_exit, exited);
    if (exited) m_exit->setData(QVector<double>{double(exitPass), double(exitPass)}, QVector<double>{0.0, 1.0}, true);
    m_gate->xAxis->setRange(0.5, last + 0.5);
    m_gate->yAxis->setRange(0, 1.05);
    QString title = exited ? QString("token %1: exit at pass %2 of %3").arg(t).arg(exitPass).arg(last)
                           : QString("token %1: ran all %2 passes").arg(t).arg(last);
    if (gateRun)
        title += QString(" (%1q = %2)").arg(m_criterion.isEmpty() ? QString() : m_criterion + ", ").arg(m_q, 0, 'g', 3);
    m_gateTitle->setText(title);
    m_gate->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace tlui
