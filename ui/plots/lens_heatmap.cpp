#include "plots/lens_heatmap.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "plots/plot_layout.h"
#include "plots/plot_utils.h"
#include "plots/token_axis.h"

namespace tlui {

static const double kNaN = std::numeric_limits<double>::quiet_NaN();

LensHeatmap::LensHeatmap(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(0, 0, 0, 0);
    auto* bar = new QHBoxLayout;
    m_metricBox = new QComboBox;
    m_metricBox->setObjectName("lensMetric");
    m_metricBox->addItem("probability of the final token", int(LensMetric::ProbFinal));
    m_metricBox->addItem("probability of the emitted token", int(LensMetric::ProbEmitted));
    m_metricBox->addItem("entropy (nats)", int(LensMetric::Entropy));
    m_metricBox->addItem("KL to the final depth (nats)", int(LensMetric::KLToFinal));
    m_metricBox->setCurrentIndex(int(m_metric));
    m_note = new QLabel;
    m_note->setForegroundRole(QPalette::PlaceholderText);  // dim in either theme
    m_note->setWordWrap(true);  // a long note wraps instead of widening the window past the screen
    m_metricBox->setSizeAdjustPolicy(QComboBox::AdjustToContents);  // the chosen metric is never cut
    bar->addWidget(new QLabel("metric:"));
    bar->addWidget(m_metricBox);
    bar->addStretch(1);
    v->addLayout(bar);
    v->addWidget(m_note);  // a line of its own: beside the combo it squeezed both on a small screen

    m_plot = new QCustomPlot(this);
    m_plot->setObjectName("lensPlot");
    stylePlot(m_plot);
    m_plot->xAxis->setLabel("emitted token (labels thinned to fit)");
    auto ticker = QSharedPointer<TokenAxisTicker>::create(m_plot->xAxis);
    m_ticker = ticker.data();
    m_plot->xAxis->setTicker(ticker);
    useIntegerTicks(m_plot->yAxis);
    m_plot->yAxis->setLabel("loop depth");
    m_map = new QCPColorMap(m_plot->xAxis, m_plot->yAxis);
    m_scale = new QCPColorScale(m_plot);
    m_plot->plotLayout()->addElement(0, 1, m_scale);
    m_map->setColorScale(m_scale);
    QCPColorGradient g(QCPColorGradient::gpThermal);
    g.setNanHandling(QCPColorGradient::nhTransparent);
    m_map->setGradient(g);
    m_map->setInterpolate(false);
    auto* group = new QCPMarginGroup(m_plot);
    m_plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, group);
    m_scale->setMarginGroup(QCP::msBottom | QCP::msTop, group);
    // The exit depth as a step line through the exit cells: a dark outline under a light core
    // reads on every colour of the map, and a line cannot merge into a band however many tokens.
    m_exitsOutline = m_plot->addGraph();
    m_exitsOutline->setLineStyle(QCPGraph::lsStepCenter);
    m_exitsOutline->setPen(QPen(QColor(0, 0, 0, 200), 4));
    m_exitsOutline->removeFromLegend();
    m_exits = m_plot->addGraph();
    m_exits->setLineStyle(QCPGraph::lsStepCenter);
    m_exits->setPen(QPen(QColor(80, 230, 255), 2));
    m_exits->setName("exit depth");
    connect(m_plot, &QCustomPlot::beforeReplot, this, &LensHeatmap::fitExitMarkers);
    v->addWidget(m_plot, 1);

    connect(m_metricBox, &QComboBox::currentIndexChanged, this,
            [this](int) { setMetric(static_cast<LensMetric>(m_metricBox->currentData().toInt())); });
    connect(m_plot, &QCustomPlot::mouseMove, this, &LensHeatmap::onMouseMove);
    clear(1);
}

void LensHeatmap::clear(int loops) {
    m_loops = loops > 0 ? loops : 1;
    m_exact = false;
    for (auto& m : m_values) m.clear();
    m_top.clear();
    m_exitDepth.clear();
    m_tokens.clear();
    m_dirty = true;
    refresh();
}

void LensHeatmap::ensureDepth(int d) {
    if (d <= m_loops) return;
    m_loops = d;
    for (auto& m : m_values)
        for (auto& row : m) row.resize(static_cast<size_t>(m_loops), kNaN);
    for (auto& row : m_top) row.resize(static_cast<size_t>(m_loops));
}

void LensHeatmap::addEvent(const tinyloop::TokenEvent& ev) {
    int deepest = ev.depth;
    for (const auto& d : ev.lens) deepest = std::max(deepest, d.depth);
    ensureDepth(deepest);
    for (auto& m : m_values) m.emplace_back(static_cast<size_t>(m_loops), kNaN);
    m_top.emplace_back(static_cast<size_t>(m_loops));
    const size_t k = m_exitDepth.size();
    m_exitDepth.push_back(ev.depth);
    m_tokens.push_back(ev.token);
    const int32_t finalTop = ev.lens.empty() || ev.lens.back().top_ids.empty() ? -1 : ev.lens.back().top_ids[0];
    for (const auto& d : ev.lens) {
        if (d.depth < 1 || d.depth > m_loops) continue;
        const size_t di = static_cast<size_t>(d.depth - 1);
        m_values[int(LensMetric::ProbEmitted)][k][di] = d.p_emitted;
        m_values[int(LensMetric::Entropy)][k][di] = d.entropy;
        // the final token's probability is known when it is in this depth's top-k
        for (size_t i = 0; i < d.top_ids.size(); ++i)
            if (d.top_ids[i] == finalTop) m_values[int(LensMetric::ProbFinal)][k][di] = d.top_probs[i];
        m_top[k][di] = TopK{d.top_ids, d.top_probs};
    }
    m_dirty = true;
}

void LensHeatmap::setExactLens(const tinyloop::LensResult& lens, int promptLen) {
    ensureDepth(lens.loops);
    for (size_t k = 0; k < m_exitDepth.size(); ++k) {
        const int pos = promptLen + static_cast<int>(k) - 1;
        if (pos < 0 || pos >= lens.n_positions) continue;
        for (int d = 1; d <= lens.loops; ++d) {
            const auto& c = lens.at(pos, d);
            const size_t di = static_cast<size_t>(d - 1);
            m_values[int(LensMetric::ProbFinal)][k][di] = c.p_final_argmax;
            m_values[int(LensMetric::ProbEmitted)][k][di] = c.p_next;
            m_values[int(LensMetric::Entropy)][k][di] = c.entropy;
            m_values[int(LensMetric::KLToFinal)][k][di] = c.kl_to_final;
            m_top[k][di] = TopK{c.top_ids, c.top_probs};
        }
    }
    m_exact = true;
    m_dirty = true;
}

void LensHeatmap::setMetric(LensMetric m) {
    m_metric = m;
    if (m_metricBox->currentData().toInt() != int(m)) m_metricBox->setCurrentIndex(m_metricBox->findData(int(m)));
    m_dirty = true;
    refresh();
}

double LensHeatmap::value(LensMetric m, int token, int depth) const {
    const auto& v = m_values[int(m)];
    if (token < 0 || token >= static_cast<int>(v.size()) || depth < 1 || depth > m_loops) return kNaN;
    return v[static_cast<size_t>(token)][static_cast<size_t>(depth - 1)];
}

void LensHeatmap::refresh() {
    if (!m_dirty) return;
    m_dirty = false;
    const int n = tokenCount();
    auto* data = m_map->data();
    data->setSize(std::max(n, 1), m_loops);
    data->setRange(QCPRange(0, std::max(n - 1, 0)), QCPRange(1, m_loops));
    data->fill(kNaN);
    const auto& v = m_values[int(m_metric)];
    for (int k = 0; k < n; ++k)
        for (int d = 0; d < m_loops; ++d) data->setCell(k, d, v[static_cast<size_t>(k)][static_cast<size_t>(d)]);
    QVector<double> xs, ys;
    for (int k = 0; k < n; ++k) {
        xs << k;
        ys << m_exitDepth[static_cast<size_t>(k)];
    }
    m_exits->setData(xs, ys, true);
    m_exitsOutline->setData(xs, ys, true);
    QStringList labels;
    for (int32_t id : m_tokens)
        labels << TokenAxisTicker::displayText(id >= 0 && id < m_vocab.size() ? m_vocab[id] : QString("<%1>").arg(id));
    m_ticker->setLabels(labels);
    const bool prob = m_metric == LensMetric::ProbFinal || m_metric == LensMetric::ProbEmitted;
    if (prob) {
        m_map->setDataRange(QCPRange(0, 1));
    } else {  // NaN cells (unknown yet) do not count
        double lo = 0, hi = 0;
        bool any = false;
        for (const auto& row : v)
            for (double x : row)
                if (!std::isnan(x)) {
                    lo = any ? std::min(lo, x) : x;
                    hi = any ? std::max(hi, x) : x;
                    any = true;
                }
        if (!any || hi <= lo) hi = lo + 1.0;
        m_map->setDataRange(QCPRange(lo, hi));
    }
    // the colour scale runs along the plot's height: a short name that fits it (the combo says it in full)
    static const char* const kScaleLabel[] = {"p(final token)", "p(emitted token)", "entropy (nats)", "KL (nats)"};
    m_scale->axis()->setLabel(kScaleLabel[std::clamp(int(m_metric), 0, 3)]);
    m_plot->xAxis->setRange(-0.5, std::max(n, 1) - 0.5);
    m_plot->yAxis->setRange(0.5, m_loops + 0.5);
    if (n == 0) showEmptyState(m_plot, "Generate to see what each loop pass predicts for each token");
    else clearEmptyState(m_plot);
    QString note = m_exact ? "exact (score_logit_lens over prompt + output)"
                           : "streaming from the token events' top-k rows";
    if (!m_exact && m_metric == LensMetric::KLToFinal) note = "KL needs full distributions: shown when the run ends";
    if (!m_exact && m_metric == LensMetric::ProbFinal) note = "known only where the final token is in a depth's top-k until the run ends";
    m_note->setText(QString("%1 tokens x %2 depths - %3; cyan line = exit depth").arg(n).arg(m_loops).arg(note));
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void LensHeatmap::fitExitMarkers() {
    // A square outline around each exit cell while the cells are big enough to show one apart
    // from its neighbours; below that the step line alone marks the exits.
    const double colPx = std::abs(m_plot->xAxis->coordToPixel(1) - m_plot->xAxis->coordToPixel(0));
    const double rowPx = std::abs(m_plot->yAxis->coordToPixel(2) - m_plot->yAxis->coordToPixel(1));
    const int px = static_cast<int>(std::min({colPx, rowPx, 16.0})) - 2;
    m_markerPx = px >= 5 ? px : 0;
    m_exits->setScatterStyle(m_markerPx > 0 ? QCPScatterStyle(QCPScatterStyle::ssSquare, QPen(QColor(80, 230, 255), 2),
                                                              Qt::NoBrush, m_markerPx)
                                            : QCPScatterStyle(QCPScatterStyle::ssNone));
}

QString LensHeatmap::cellTooltip(int token, int depth) const {
    if (token < 0 || token >= tokenCount() || depth < 1 || depth > m_loops) return QString();
    auto txt = [&](int32_t id) {
        QString s = id >= 0 && id < m_vocab.size() ? m_vocab[id] : QString("<%1>").arg(id);
        return s.replace("\n", "\\n").replace(' ', QChar(0x00A0)).toHtmlEscaped();  // no break inside a token
    };
    QString h = QString("<b>token %1</b> '%2', depth %3 (exit %4)<br>").arg(token).arg(txt(m_tokens[size_t(token)]))
                    .arg(depth).arg(m_exitDepth[size_t(token)]);
    const double val = value(m_metric, token, depth);
    h += QString("%1: %2<br>").arg(m_metricBox->currentText(), std::isnan(val) ? QString("unknown") : QString::number(val, 'f', 4));
    const TopK& t = m_top[size_t(token)][size_t(depth - 1)];
    for (size_t i = 0; i < t.ids.size(); ++i) h += QString("<nobr>'%1'&nbsp;%2</nobr><br>").arg(txt(t.ids[i])).arg(t.probs[i], 0, 'f', 3);
    return "<div style=\"white-space:nowrap\">" + h + "</div>";  // one line per entry, never wrapped
}

void LensHeatmap::onMouseMove(QMouseEvent* e) {
    const int k = static_cast<int>(std::lround(m_plot->xAxis->pixelToCoord(e->pos().x())));
    const int d = static_cast<int>(std::lround(m_plot->yAxis->pixelToCoord(e->pos().y())));
    const QString tip = cellTooltip(k, d);
    if (tip.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(e->globalPosition().toPoint(), tip, m_plot);
}

}  // namespace tlui
