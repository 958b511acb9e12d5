#include "views/quant_across_depth_view.h"

#include <algorithm>
#include <memory>

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <qcustomplot.h>
#include <tinyloop_analysis/quant_continuation.h>

#include "plots/layout_audit.h"
#include "plots/plot_caption.h"
#include "plots/plot_layout.h"
#include "plots/plot_utils.h"

namespace tlui {

QString suggestedSecondModel(const QString& path) {
    const QFileInfo fi(path);
    const QString base = fi.fileName();
    QStringList candidates;
    if (base.contains("f32")) candidates << QString(base).replace("f32", "q4") << QString(base).replace("f32", "q8");
    else if (base.contains("q4")) candidates << QString(base).replace("q4", "f32");
    else if (base.contains("q8")) candidates << QString(base).replace("q8", "f32");
    for (const QString& c : candidates) {
        const QString p = fi.dir().filePath(c);
        if (QFileInfo::exists(p)) return p;
    }
    return QString();
}

QuantAcrossDepthView::QuantAcrossDepthView(WorkbenchAccess* workbench, QWidget* parent) : AnalysisWindow(workbench, "Quantization across depth", parent) {
    m_second = new QLineEdit(suggestedSecondModel(modelPath()));
    m_second->setObjectName("secondModel");
    m_second->setPlaceholderText("second file of the same model (e.g. model-q4.tinyloop)");
    auto* browse = new QPushButton("Browse...");
    m_maxTokens = newCountField(0, 512, 32);
    m_loops = new QSpinBox;
    m_loops->setRange(0, 64);
    m_loops->setValue(8);
    m_loops->setSpecialValueText("default");
    addControl("Second model", m_second, 1);
    controls()->addWidget(browse);
    addControl("Continuation tokens", m_maxTokens);
    addControl("Depth", m_loops);
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString p = QFileDialog::getOpenFileName(this, "Second model file", QFileInfo(modelPath()).path(),
                                                       "TinyLoop models (*.tinyloop)");
        if (!p.isEmpty()) m_second->setText(p);
    });
    auto* split = new QSplitter(Qt::Vertical);
    auto* top = new QSplitter(Qt::Horizontal);
    m_traj = new QCustomPlot;
    m_traj->setObjectName("trajectories");
    stylePlot(m_traj);
    m_traj->xAxis->setLabel("depth");
    m_traj->yAxis->setLabel("mean over tokens");
    m_traj->legend->setVisible(true);
    m_div = new QCustomPlot;
    m_div->setObjectName("divergence");
    stylePlot(m_div);
    m_div->xAxis->setLabel("depth");
    m_div->yAxis->setLabel("mean KL(A || B), nats");
    m_div->yAxis2->setVisible(true);
    m_div->yAxis2->setLabel("mean max |logit diff|");
    m_div->legend->setVisible(true);
    top->addWidget(withCaption(m_traj,
        "Both files (A and B, e.g. f32 and [[q8/q4|q4]]) at every [[depth]]: their mean lens measures over the "
        "tokens. Lines that lie on each other mean quantization changes little at that pass."));
    top->addWidget(withCaption(m_div,
        "How far B's guess is from A's at every [[depth]]: the mean [[KL]] (0 = identical) and the largest "
        "[[logit]] difference. Rising with depth means the error grows pass by pass."));
    m_heat = new QCustomPlot;
    m_heat->setObjectName("klHeatmap");
    stylePlot(m_heat);
    m_heat->xAxis->setLabel("position");
    m_heat->yAxis->setLabel("depth");
    m_heatScale = new QCPColorScale(m_heat);
    m_heatScale->setObjectName("klScale");
    m_heatScale->axis()->setLabel("KL(A || B), nats");
    m_heatScale->setGradient(QCPColorGradient::gpHot);  // the one gradient: the caption's words come from it
    m_heat->plotLayout()->addElement(0, 1, m_heatScale);
    auto* margins = new QCPMarginGroup(m_heat);
    m_heat->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    m_heatScale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    for (QCustomPlot* p : {m_traj, m_div}) {
        useIntegerTicks(p->xAxis);
        putLegendBelow(p);
    }
    useIntegerTicks(m_heat->xAxis);
    useIntegerTicks(m_heat->yAxis);
    showEmptyState(m_traj, "Run to compare the two files' lens across depth");
    showEmptyState(m_div, "Run to see how far the two files' predictions differ per depth");
    showEmptyState(m_heat, "Run to see KL(A || B) per position and depth");
    split->addWidget(top);
    // The colour words are read off the scale, so the caption cannot contradict it.
    QString high = scaleEndLook(m_heatScale->gradient(), true), low = scaleEndLook(m_heatScale->gradient(), false);
    high[0] = high[0].toUpper();
    split->addWidget(withCaption(m_heat,
        QString("Each column a position, each row a [[depth]]; the colour is the [[KL]] between the two files' guesses "
                "there. %1 (high KL) is where quantization changed the model's mind; %2 (KL near 0) is where "
                "the two files agree.").arg(high, low)));
    body()->addWidget(split);
}

void QuantAcrossDepthView::setSecondPath(const QString& path) { m_second->setText(path); }
QString QuantAcrossDepthView::secondPath() const { return m_second->text(); }
void QuantAcrossDepthView::setMaxTokens(int n) { m_maxTokens->setValue(n); }
void QuantAcrossDepthView::setLoops(int loops) { m_loops->setValue(loops); }

void QuantAcrossDepthView::run() {
    const QString pathA = modelPath();
    if (m_second->text().isEmpty()) m_second->setText(suggestedSecondModel(pathA));
    const QString pathB = m_second->text();
    const std::string prompt = workbenchPrompt().toStdString();
    const int max_tokens = m_maxTokens->value();
    const int loops = m_loops->value();
    auto out = std::make_shared<QuantData>();
    startJob("two lenses", [pathA, pathB, prompt, max_tokens, loops, out](AnalysisJobContext& ctx) {
        if (pathB.isEmpty())
            throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, "second model: choose a file");
        tinyloop::Model* a = ctx.modelAt(pathA);
        ctx.progress(0, 3, "loading the second model");
        tinyloop::Model* b = ctx.modelAt(pathB);
        check_same_model(a, b);
        ctx.checkCancel();
        if (max_tokens > 0) ctx.progress(1, 3, "continuation");
        // The first model's greedy continuation (through run_decode), read by both.
        const std::vector<int32_t> ids = quant_comparison_tokens(a, prompt, max_tokens, loops);
        ctx.checkCancel();
        ctx.progress(2, 3, "lens of both");
        *out = compare_quantized(a, b, ids, loops);
        ctx.progress(3, 3, "done");
    }, [this, out](bool ok, const QString&) {
        if (!ok) return clearPlots();  // the error is in the status line; no plot of another file stays
        m_data = std::move(*out);
        m_has = true;
        setStatus(QString("A = %1, B = %2").arg(QFileInfo(QString::fromStdString(m_data.name_a)).fileName(),
                                                QFileInfo(QString::fromStdString(m_data.name_b)).fileName()));
        redraw();
    });
}

void QuantAcrossDepthView::clearPlots() {
    m_has = false;
    m_data = QuantData{};
    for (QCustomPlot* p : {m_traj, m_div, m_heat}) {
        p->clearPlottables();
        p->replot();
    }
}

void QuantAcrossDepthView::redraw() {
    const QuantData& q = m_data;
    QVector<double> xs, pa, pb, agree, kl, diff;
    for (int l = 1; l <= q.loops; ++l) {
        xs.push_back(l);
        pa.push_back(q.mean_p_final_a(l));
        pb.push_back(q.mean_p_final_b(l));
        agree.push_back(q.top1_agreement(l));
        kl.push_back(q.mean_kl(l));
        diff.push_back(q.mean_max_abs_diff(l));
    }
    auto line = [](QCustomPlot* plot, QCPAxis* y, const QString& name, const QVector<double>& x,
                   const QVector<double>& v, QColor c, Qt::PenStyle style) {
        QCPGraph* g = plot->addGraph(plot->xAxis, y);
        g->setName(name);
        g->setData(x, v, true);
        g->setPen(QPen(c, 2, style));
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
    };
    for (QCustomPlot* p : {m_traj, m_div, m_heat}) clearEmptyState(p);
    m_traj->clearGraphs();
    line(m_traj, m_traj->yAxis, "A: p(A's final argmax)", xs, pa, QColor(40, 90, 200), Qt::SolidLine);
    line(m_traj, m_traj->yAxis, "B: p(B's final argmax)", xs, pb, QColor(220, 120, 20), Qt::SolidLine);
    line(m_traj, m_traj->yAxis, "top-1 agreement A/B", xs, agree, QColor(30, 150, 70), Qt::DashLine);
    m_traj->xAxis->setRange(0.5, q.loops + 0.5);
    m_traj->yAxis->setRange(0, 1.05);
    m_traj->replot();
    m_div->clearGraphs();
    line(m_div, m_div->yAxis, "mean KL(A || B)", xs, kl, QColor(190, 40, 40), Qt::SolidLine);
    line(m_div, m_div->yAxis2, "mean max |logit diff|", xs, diff, QColor(110, 60, 170), Qt::DashLine);
    m_div->xAxis->setRange(0.5, q.loops + 0.5);
    m_div->yAxis->rescale();
    m_div->yAxis->setRangeLower(0);
    m_div->yAxis2->rescale();
    m_div->yAxis2->setRangeLower(0);
    m_div->replot();
    m_heat->clearPlottables();
    auto* cmap = new QCPColorMap(m_heat->xAxis, m_heat->yAxis);
    cmap->data()->setSize(q.n, q.loops);
    cmap->data()->setRange(QCPRange(0, std::max(q.n - 1, 1)), QCPRange(1, std::max(q.loops, 2)));
    for (int l = 1; l <= q.loops; ++l)
        for (int p = 0; p < q.n; ++p) cmap->data()->setCell(p, l - 1, q.kl[q.at(l, p)]);
    cmap->setGradient(m_heatScale->gradient());
    cmap->setInterpolate(false);
    cmap->setColorScale(m_heatScale);
    cmap->rescaleDataRange(true);
    m_heat->xAxis->setRange(-0.5, q.n - 0.5);
    m_heat->yAxis->setRange(0.5, q.loops + 0.5);
    m_heat->replot();
}

nlohmann::json QuantAcrossDepthView::data() const {
    if (!m_has) return {{"view", "quantization across depth"}, {"empty", true}};
    return quant_json(m_data);
}

}  // namespace tlui
