#include "views/compute_quality_view.h"

#include <algorithm>
#include <map>
#include <memory>

#include <QComboBox>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QSpinBox>
#include <QSplitter>
#include <QToolTip>
#include <QTableWidget>
#include <qcustomplot.h>

#include "plots/plot_caption.h"
#include "plots/plot_layout.h"
#include "plots/plot_utils.h"

namespace tlui {

namespace {

const char* kDefaultText =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
    "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.";

}  // namespace

ComputeQualityView::ComputeQualityView(WorkbenchAccess* workbench, QWidget* parent) : AnalysisWindow(workbench, "Compute against quality", parent) {
    m_axis = new QComboBox;
    m_axis->setObjectName("xAxis");
    m_axis->addItem("loop passes per token");
    m_axis->addItem("decode ms per token");
    m_decodeTokens = new QSpinBox;
    m_decodeTokens->setRange(2, 512);
    m_decodeTokens->setValue(32);
    addControl("X axis", m_axis);
    addControl("Decode tokens (time, speculation)", m_decodeTokens);
    controls()->addStretch(1);
    auto* split = new QSplitter(Qt::Vertical);
    m_text = new QPlainTextEdit(kDefaultText);
    m_text->setObjectName("text");
    m_text->setMaximumHeight(90);
    split->addWidget(m_text);
    m_plot = new QCustomPlot;
    m_plot->setObjectName("computePlot");
    stylePlot(m_plot);
    m_plot->yAxis->setLabel("mean NLL per token (nats)");
    putLegendBelow(m_plot);
    showEmptyState(m_plot, "Run to plot quality against compute for each setting");
    split->addWidget(withCaption(m_plot,
        "Each point is one setting (a fixed [[depth]], an [[early exit]] threshold, or [[self-speculation]]): "
        "across, the work per token (passes or ms); up, the [[NLL|mean NLL]] of the text (how surprised the "
        "model is). Lower is better and left is cheaper: the best settings sit bottom-left."));
    m_table = new QTableWidget;
    m_table->setObjectName("pointsTable");
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    split->addWidget(m_table);
    split->setStretchFactor(1, 3);
    split->setStretchFactor(2, 1);
    body()->addWidget(split);
    connect(m_axis, &QComboBox::currentIndexChanged, this, [this] { redraw(); });
    // Labels follow a drag, a zoom or a resize without piling up.
    connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] { layoutLabels(); });
    connect(m_plot->yAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] { layoutLabels(); });
    connect(m_plot, &QCustomPlot::afterLayout, this, [this] { layoutLabels(); });
    connect(m_plot, &QCustomPlot::mouseMove, this, &ComputeQualityView::onMouseMove);
}

void ComputeQualityView::setText(const QString& text) { m_text->setPlainText(text); }
void ComputeQualityView::setSettings(const ComputeSettings& s) {
    m_settings = s;
    m_customSettings = true;
}
void ComputeQualityView::setTimeAxis(bool time) { m_axis->setCurrentIndex(time ? 1 : 0); }

void ComputeQualityView::run() {
    const QString path = modelPath();
    const std::string text = m_text->toPlainText().toStdString();
    const bool custom = m_customSettings;
    ComputeSettings settings = m_settings;
    settings.decode_tokens = m_decodeTokens->value();
    auto out = std::make_shared<std::vector<ComputePoint>>();
    auto n = std::make_shared<int>(0);
    startJob("scoring", [path, text, custom, settings, out, n](AnalysisJobContext& ctx) mutable {
        tinyloop::Model* m = ctx.modelAt(path);
        const std::vector<int32_t> ids = tinyloop::tokenize(m, text);
        if (!custom) {
            const int dt = settings.decode_tokens;
            settings = default_compute_settings(tinyloop::model_hparams(m));
            settings.decode_tokens = dt;
        }
        *n = static_cast<int>(ids.size());
        *out = compute_vs_quality(m, ids, settings, [&ctx](int d, int t, const std::string& what) {
            ctx.progress(d, t, QString::fromStdString(what));
        }, ctx.cancel);
    }, [this, out, n](bool ok, const QString&) {
        if (!ok) return;
        showPoints(*out, *n);
    });
}

void ComputeQualityView::showPoints(const std::vector<ComputePoint>& points, int textTokens) {
    m_points = points;
    m_textTokens = textTokens;
    setStatus(QString("%1 settings on %2 tokens; times: median of %3 decodes each")
                  .arg(m_points.size())
                  .arg(m_textTokens)
                  .arg(m_points.empty() ? 0 : m_points.front().ms.samples.size()));
    redraw();
}

void ComputeQualityView::layoutLabels() {
    if (m_labels.size() != m_points.size() || m_labels.empty()) return;
    const bool time = m_axis->currentIndex() == 1;
    std::vector<QPointF> px;
    std::vector<QSizeF> sizes;
    for (size_t i = 0; i < m_points.size(); ++i) {
        const ComputePoint& p = m_points[i];
        px.emplace_back(m_plot->xAxis->coordToPixel(time ? p.ms_per_token : p.mean_depth), m_plot->yAxis->coordToPixel(p.nll));
        const QFontMetricsF fm(m_labels[i]->font());
        // a few pixels of slack around the text: rounding never makes two labels touch
        sizes.emplace_back(fm.horizontalAdvance(m_labels[i]->text()) + 6, fm.height() + 4);
    }
    const std::vector<QRectF> at = placeLabels(px, sizes, QRectF(m_plot->axisRect()->rect()), 10);
    for (size_t i = 0; i < m_labels.size(); ++i) {
        m_labels[i]->setVisible(!at[i].isEmpty());
        if (!at[i].isEmpty()) m_labels[i]->position->setPixelPosition(at[i].topLeft() + QPointF(3, 2));
    }
}

QString ComputeQualityView::hoverText(const QPointF& pixel) const {
    const bool time = m_axis->currentIndex() == 1;
    int best = -1;
    double bestD = 8.0 * 8.0;
    for (size_t i = 0; i < m_points.size(); ++i) {
        const ComputePoint& p = m_points[i];
        const double dx = m_plot->xAxis->coordToPixel(time ? p.ms_per_token : p.mean_depth) - pixel.x();
        const double dy = m_plot->yAxis->coordToPixel(p.nll) - pixel.y();
        if (dx * dx + dy * dy <= bestD) {
            bestD = dx * dx + dy * dy;
            best = static_cast<int>(i);
        }
    }
    if (best < 0) return QString();
    const ComputePoint& p = m_points[static_cast<size_t>(best)];
    return QString("%1 %2: %3 passes/token, NLL %4, %5 ms/token (%6..%7)")
        .arg(QString::fromStdString(p.series), QString::fromStdString(p.label))
        .arg(p.mean_depth, 0, 'f', 2)
        .arg(p.nll, 0, 'f', 3)
        .arg(p.ms_per_token, 0, 'f', 3)
        .arg(p.ms.min, 0, 'f', 3)
        .arg(p.ms.max, 0, 'f', 3);
}

void ComputeQualityView::onMouseMove(QMouseEvent* e) {
    const QString tip = hoverText(e->position());
    if (tip.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(e->globalPosition().toPoint(), tip, m_plot);
}

void ComputeQualityView::redraw() {
    clearEmptyState(m_plot);
    m_plot->clearPlottables();
    m_plot->clearItems();
    m_labels.clear();
    m_plot->legend->setVisible(true);
    const bool time = m_axis->currentIndex() == 1;
    m_plot->xAxis->setLabel(time ? "decode ms per token (after the first)" : "loop passes per token");
    std::map<std::string, QCPGraph*> series;
    const QColor palette[] = {QColor(40, 90, 200), QColor(220, 120, 20), QColor(30, 160, 80), QColor(170, 40, 170),
                              QColor(200, 40, 40), QColor(90, 90, 90)};
    double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    bool first = true;
    for (const ComputePoint& p : m_points) {
        auto it = series.find(p.series);
        if (it == series.end()) {
            QCPGraph* g = m_plot->addGraph();
            g->setName(QString::fromStdString(p.series));
            const QColor c = palette[series.size() % 6];
            g->setPen(QPen(c, 1.5));
            g->setScatterStyle(QCPScatterStyle(
                p.series == "speculative" ? QCPScatterStyle::ssDiamond : QCPScatterStyle::ssCircle, c, c, 8));
            if (p.series == "speculative") g->setLineStyle(QCPGraph::lsNone);
            it = series.emplace(p.series, g).first;
        }
        const double x = time ? p.ms_per_token : p.mean_depth;
        it->second->addData(x, p.nll);
        auto* label = new QCPItemText(m_plot);
        label->position->setType(QCPItemPosition::ptAbsolute);  // pixels: layoutLabels places it
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        label->setText(QString::fromStdString(p.label));
        QFont lf = font();
        lf.setPointSizeF(lf.pointSizeF() * 0.85);
        label->setFont(lf);
        label->setClipToAxisRect(true);
        m_labels.push_back(label);
        x0 = first ? x : std::min(x0, x);
        x1 = first ? x : std::max(x1, x);
        y0 = first ? p.nll : std::min(y0, p.nll);
        y1 = first ? p.nll : std::max(y1, p.nll);
        first = false;
    }
    if (time) {  // the repeats' range as horizontal whiskers
        for (const auto& [name, g] : series) {
            auto* err = new QCPErrorBars(m_plot->xAxis, m_plot->yAxis);
            err->setErrorType(QCPErrorBars::etKeyError);
            err->setDataPlottable(g);
            err->setPen(g->pen());
            err->removeFromLegend();
            // in the graph's own order (sorted by key), as QCPErrorBars pairs them
            std::vector<const ComputePoint*> pts;
            for (const ComputePoint& p : m_points)
                if (p.series == name) pts.push_back(&p);
            std::stable_sort(pts.begin(), pts.end(),
                             [](const ComputePoint* a, const ComputePoint* b) { return a->ms_per_token < b->ms_per_token; });
            QVector<double> lo, hi;
            for (const ComputePoint* p : pts) {
                lo << std::max(0.0, p->ms_per_token - p->ms.min);
                hi << std::max(0.0, p->ms.max - p->ms_per_token);
                x0 = std::min(x0, p->ms.min);
                x1 = std::max(x1, p->ms.max);
            }
            err->setData(lo, hi);
        }
    }
    const double px = (x1 - x0) * 0.08 + 0.1, py = (y1 - y0) * 0.08 + 0.01;
    m_plot->xAxis->setRange(x0 - px, x1 + px);
    m_plot->yAxis->setRange(y0 - py, y1 + py);
    m_plot->replot();
    layoutLabels();
    m_plot->replot();

    const QStringList headers = {"series", "setting", "passes/token", "NLL/token", "ms/token median (range)", "acceptance"};
    m_table->setColumnCount(static_cast<int>(headers.size()));
    m_table->setHorizontalHeaderLabels(headers);
    m_table->setRowCount(static_cast<int>(m_points.size()));
    for (int r = 0; r < static_cast<int>(m_points.size()); ++r) {
        const ComputePoint& p = m_points[static_cast<size_t>(r)];
        const QStringList cells = {QString::fromStdString(p.series), QString::fromStdString(p.label),
                                   QString::number(p.mean_depth, 'f', 3), QString::number(p.nll, 'f', 4),
                                   QString("%1 (%2..%3)").arg(p.ms_per_token, 0, 'f', 3).arg(p.ms.min, 0, 'f', 3).arg(p.ms.max, 0, 'f', 3),
                                   p.acceptance >= 0 ? QString::number(p.acceptance, 'f', 3) : QString("-")};
        for (int c = 0; c < static_cast<int>(cells.size()); ++c) m_table->setItem(r, c, new QTableWidgetItem(cells[c]));
    }
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
}

nlohmann::json ComputeQualityView::data() const { return compute_json(m_points, m_textTokens); }

}  // namespace tlui
