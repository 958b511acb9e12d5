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
#include <QTableWidget>
#include <qcustomplot.h>

#include "plots/plot_caption.h"
#include "plots/plot_utils.h"

namespace tlui {

namespace {

const char* kDefaultText =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
    "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.";

}  // namespace

ComputeView::ComputeView(WorkbenchAccess* workbench, QWidget* parent) : AnalysisWindow(workbench, "Compute against quality", parent) {
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
    m_plot->legend->setVisible(true);
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
}

void ComputeView::setText(const QString& text) { m_text->setPlainText(text); }
void ComputeView::setSettings(const ComputeSettings& s) {
    m_settings = s;
    m_customSettings = true;
}
void ComputeView::setTimeAxis(bool time) { m_axis->setCurrentIndex(time ? 1 : 0); }

void ComputeView::run() {
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
        m_points = *out;
        m_textTokens = *n;
        setStatus(QString("%1 settings on %2 tokens").arg(m_points.size()).arg(m_textTokens));
        redraw();
    });
}

void ComputeView::redraw() {
    m_plot->clearGraphs();
    m_plot->clearItems();
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
        label->position->setCoords(x, p.nll);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
        label->setText(QString::fromStdString(p.label));
        label->setFont(QFont(font().family(), 7));
        x0 = first ? x : std::min(x0, x);
        x1 = first ? x : std::max(x1, x);
        y0 = first ? p.nll : std::min(y0, p.nll);
        y1 = first ? p.nll : std::max(y1, p.nll);
        first = false;
    }
    const double px = (x1 - x0) * 0.08 + 0.1, py = (y1 - y0) * 0.08 + 0.01;
    m_plot->xAxis->setRange(x0 - px, x1 + px);
    m_plot->yAxis->setRange(y0 - py, y1 + py);
    m_plot->replot();

    const QStringList headers = {"series", "setting", "passes/token", "NLL/token", "ms/token", "acceptance"};
    m_table->setColumnCount(static_cast<int>(headers.size()));
    m_table->setHorizontalHeaderLabels(headers);
    m_table->setRowCount(static_cast<int>(m_points.size()));
    for (int r = 0; r < static_cast<int>(m_points.size()); ++r) {
        const ComputePoint& p = m_points[static_cast<size_t>(r)];
        const QStringList cells = {QString::fromStdString(p.series), QString::fromStdString(p.label),
                                   QString::number(p.mean_depth, 'f', 3), QString::number(p.nll, 'f', 4),
                                   QString::number(p.ms_per_token, 'f', 3),
                                   p.acceptance >= 0 ? QString::number(p.acceptance, 'f', 3) : QString("-")};
        for (int c = 0; c < static_cast<int>(cells.size()); ++c) m_table->setItem(r, c, new QTableWidgetItem(cells[c]));
    }
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
}

nlohmann::json ComputeView::data() const { return compute_json(m_points, m_textTokens); }

}  // namespace tlui
