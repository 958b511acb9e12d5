#include "views/exit_calibration_view.h"

#include "base/config_json.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMouseEvent>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTextBrowser>
#include <qcustomplot.h>

#include "plots/plot_caption.h"
#include "plots/plot_layout.h"
#include "plots/plot_utils.h"
#include "views/recommendation_save.h"

namespace tlui {

namespace {

using C = tinyloop::EarlyExitCriterion;

QString esc(const std::string& s) {
    QString t = QString::fromStdString(s).toHtmlEscaped();
    t.replace("\n", "&#8629;");
    t.replace(" ", "&nbsp;");
    return t;
}

QSpinBox* spin(int lo, int hi, int v) {
    auto* s = new QSpinBox;
    s->setRange(lo, hi);
    s->setValue(v);
    return s;
}

// A starting threshold per criterion, in its display units, for a criterion neither the model nor
// the engine's built-in policy names (startThreshold below asks the engine first).
double default_threshold(C c) {
    switch (c) {
        case C::HiddenL2: return 0.2;
        case C::LogitMargin: return 2.0;
        case C::KL: return 0.1;
        case C::EntropyDelta: return 0.1;
        case C::ArgmaxStable: return 0.5;
        default: break;  // gate and Huginn's KLs: not among the calibration view's five signals
    }
    return 0.1;
}

// The engine's early-exit policy for `model` (the model's recommendation, else the built-in one),
// as the engine's resolver (resolve_run, early-exit mode) gives it to generate, Compare and the config panel; with `criterion`, the
// one the user picked.
tinyloop::GenerateConfig resolvedPolicy(const tinyloop::Model* model, std::optional<C> criterion = std::nullopt) {
    tinyloop::GenerateConfig c;
    std::vector<std::string> user;
    if (criterion) {
        c.early_exit.criterion = *criterion;
        user.push_back("early_exit_criterion");
    }
    if (model) return resolveRun(model, {.mode = DecodeMode::EarlyExit, .config = c}, user).spec.config;
    const tinyloop::Recommendation b = builtinEarlyExit();
    c.early_exit = b.early_exit;  // the engine's built-in policy, one value
    c.early_exit.criterion = criterion.value_or(b.early_exit.criterion);
    return c;
}

// The threshold the view starts `criterion` at: the engine's (the model's recommendation for its
// own criterion, the built-in one for the built-in criterion), else the view's starting value.
double startThreshold(const tinyloop::Model* model, C criterion) {
    tinyloop::GenerateConfig c;
    c.early_exit.criterion = criterion;
    if (model) {
        const tinyloop::ResolvedRun r =
            resolveRun(model, {.mode = DecodeMode::EarlyExit, .config = c}, {"early_exit_criterion"});
        for (const auto& [key, from] : r.source)
            if (key == "early_exit_threshold" && from == "model") return r.spec.config.early_exit.threshold;
    }
    if (criterion == builtinEarlyExit().early_exit.criterion) return builtinEarlyExit().early_exit.threshold;
    return default_threshold(criterion);
}

}  // namespace

ExitCalibrationView::ExitCalibrationView(WorkbenchAccess* workbench, QWidget* parent) : AnalysisWindow(workbench, "Early-exit calibration", parent) {
    m_criterion = new QComboBox;
    m_criterion->setObjectName("criterion");
    for (int c = 0; c < 5; ++c) m_criterion->addItem(criterion_label(static_cast<C>(c)), c);
    m_threshold = new QDoubleSpinBox;
    m_threshold->setObjectName("threshold");
    m_threshold->setDecimals(4);
    m_threshold->setRange(0.0001, 1000.0);
    m_threshold->setSingleStep(0.01);
    m_patience = spin(1, 16, 1);
    m_minL = spin(1, 64, 2);
    m_peek = spin(1, 16, 1);
    m_maxTokens = spin(2, 512, 48);
    m_loops = spin(0, 64, 8);
    m_loops->setSpecialValueText("default");
    addControl("Criterion", m_criterion);
    addControl("Threshold", m_threshold);
    addControl("Patience", m_patience);
    addControl("Min L", m_minL);
    addControl("Peek every", m_peek);
    addControl("Tokens", m_maxTokens);
    addControl("Depth", m_loops);
    controls()->addStretch(1);

    auto* split = new QSplitter(Qt::Vertical);
    m_plot = new QCustomPlot;
    m_plot->setObjectName("calibPlot");
    stylePlot(m_plot);
    m_plot->xAxis->setLabel("loop pass (depth)");
    useIntegerTicks(m_plot->xAxis);
    // The rule ("exit when ... < threshold") as the plot's title, so the y label stays short
    // enough to fit the axis.
    m_plot->plotLayout()->insertRow(0);
    m_rule = new QCPTextElement(m_plot, "");
    m_plot->plotLayout()->addElement(0, 0, m_rule);
    m_plot->setMinimumHeight(360);  // the plot is the point of this window: most of its height
    m_line = new QCPItemStraightLine(m_plot);
    m_line->setPen(QPen(QColor(200, 40, 40), 2, Qt::DashLine));
    m_line->setSelectable(false);
    m_line->setVisible(false);  // no threshold line over empty axes
    showEmptyState(m_plot, "Run to plot each token's exit signal across depth");
    split->addWidget(withCaption(m_plot,
        "One line per emitted token: the chosen [[early_exit_criterion|criterion]]'s signal after each "
        "[[loop pass]]. A token would [[early exit|exit]] at the first pass where its line crosses the red "
        "[[early_exit_threshold|threshold]] (drag it) and stays there for [[patience]] passes; tokens whose "
        "text would then change are flagged below."));
    auto* lower = new QWidget;
    auto* lv = new QVBoxLayout(lower);
    lv->setContentsMargins(0, 0, 0, 0);
    m_summary = new QLabel("Run to collect the per-depth data of a full-depth greedy run of the workbench prompt.");
    m_summary->setObjectName("summary");
    m_summary->setWordWrap(true);
    m_tokens = new QTextBrowser;
    m_tokens->setObjectName("tokens");
    m_save = new QPushButton("Save as the model's recommendation...");
    m_save->setObjectName("saveRecommendation");
    m_save->setToolTip("Writes this policy into the model file's metadata (\"recommended\"): the early-exit "
                       "default of generate, bench, the server and the config panel. Every tensor byte is kept.");
    m_save->setEnabled(false);  // once there is a run to judge the policy by
    connect(m_save, &QPushButton::clicked, this, [this] {
        if (!confirmRecommendationSave(this, modelPath(), "this early-exit policy")) return;
        QString error;
        if (!saveRecommendation(modelPath(), &error)) setStatus("not saved: " + error, true);
    });
    auto* summaryRow = new QHBoxLayout;
    summaryRow->addWidget(m_summary, 1);
    summaryRow->addWidget(m_save, 0, Qt::AlignTop);
    lv->addLayout(summaryRow);
    lv->addWidget(m_tokens, 1);
    m_tokens->setMinimumHeight(80);
    split->addWidget(lower);
    split->setStretchFactor(0, 4);
    split->setStretchFactor(1, 1);
    split->setChildrenCollapsible(false);
    body()->addWidget(split);

    // The policy the engine would run with (resolve_run): the model's recommendation, so
    // this view starts where Compare, generate and the config panel start.
    const tinyloop::GenerateConfig start = resolvedPolicy(workbench->loadedModel().get());
    m_criterion->setCurrentIndex(m_criterion->findData(static_cast<int>(start.early_exit.criterion)));
    m_threshold->setValue(start.early_exit.threshold);
    m_patience->setValue(std::max(1, start.early_exit.patience));
    m_minL->setValue(start.early_exit.min_L);
    m_peek->setValue(start.early_exit.peek_every);
    connect(m_criterion, &QComboBox::currentIndexChanged, this, [this] {
        m_threshold->blockSignals(true);
        m_threshold->setValue(startThreshold(this->workbench()->loadedModel().get(), static_cast<C>(m_criterion->currentData().toInt())));
        m_threshold->blockSignals(false);
        rescore();
    });
    for (QSpinBox* s : {m_patience, m_minL, m_peek}) connect(s, &QSpinBox::valueChanged, this, [this] { rescore(); });
    connect(m_threshold, &QDoubleSpinBox::valueChanged, this, [this] { rescore(); });
    connect(m_plot, &QCustomPlot::mousePress, this, &ExitCalibrationView::onMousePress);
    connect(m_plot, &QCustomPlot::mouseMove, this, &ExitCalibrationView::onMouseMove);
    connect(m_plot, &QCustomPlot::mouseRelease, this, &ExitCalibrationView::onMouseRelease);
}

EarlyExitPolicy ExitCalibrationView::policy() const {
    EarlyExitPolicy p;
    p.criterion = static_cast<C>(m_criterion->currentData().toInt());
    p.threshold = static_cast<float>(m_threshold->value());
    p.patience = m_patience->value();
    p.min_L = m_minL->value();
    p.peek_every = m_peek->value();
    return p;
}

void ExitCalibrationView::setCriterion(C c) { m_criterion->setCurrentIndex(m_criterion->findData(static_cast<int>(c))); }
void ExitCalibrationView::setThreshold(double t) { m_threshold->setValue(t); }
void ExitCalibrationView::setMaxTokens(int n) { m_maxTokens->setValue(n); }
void ExitCalibrationView::setLoops(int loops) { m_loops->setValue(loops); }

void ExitCalibrationView::run() {
    const QString path = modelPath();
    const std::string prompt = workbenchPrompt().toStdString();
    const int max_tokens = m_maxTokens->value();
    const int loops = m_loops->value();
    auto out = std::make_shared<CalibData>();
    startJob("full-depth run, signals and lens", [path, prompt, max_tokens, loops, out](AnalysisJobContext& ctx) {
        tinyloop::Model* m = ctx.modelAt(path);
        std::vector<int32_t> ids = tinyloop::tokenize(m, prompt);
        if (ids.empty())
            throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, "prompt: empty (type one in the workbench)");
        ctx.progress(0, 1, "collecting");
        *out = collect_calibration(m, ids, max_tokens, loops, ctx.cancel);
        ctx.progress(1, 1, "collected");
    }, [this, out](bool ok, const QString&) {
        if (!ok) return;
        m_data = out;
        m_minL->setMaximum(m_data->loops);
        m_save->setEnabled(true);
        rescore();
    });
}

bool ExitCalibrationView::saveRecommendation(const QString& outPath, QString* error) {
    QString why;
    if (!m_data) why = "run the calibration first: a policy is saved with the run it was judged on";
    else if (m_scored.empty()) why = "the run emitted no token to judge the policy by";
    if (why.isEmpty()) why = unwritableReason(outPath);
    if (!why.isEmpty()) {
        if (error) *error = why;
        return false;
    }
    const EarlyExitPolicy p = policy();
    tinyloop::Recommendation rec;
    rec.early_exit = p;  // the policy judged, one value (a recommendation has no logit_margin shorthand)
    rec.early_exit.logit_margin = 0.0f;
    rec.early_exit_loops = m_data->loops;
    int changed = 0, early = 0;
    for (const CalibToken& t : m_scored) {
        changed += t.flagged;
        early += t.exit_depth < m_data->loops;
    }
    const nlohmann::json measured = {{"found_by", "workbench: early-exit calibration view"},
                                     {"loops", m_data->loops},
                                     {"tokens_judged", m_scored.size()},
                                     {"tokens_exiting_early", early},
                                     {"tokens_changed", changed}};
    const QString model = modelPath();
    startJob("saving the recommendation", [model, outPath, rec, measured](AnalysisJobContext&) {
        writeRecommendation(model, outPath, RecommendationPart::EarlyExit, rec, measured);
    }, [this, outPath](bool ok, const QString&) {
        if (ok) setStatus(QString("saved as the model's early-exit recommendation in %1 (used from the next time "
                                  "it is opened)").arg(outPath));
    });
    return true;
}

void ExitCalibrationView::rescore() {
    if (!m_data) return;
    try {
        m_scored = rescore_calibration(*m_data, policy());
    } catch (const std::exception& e) {
        setStatus(e.what(), true);
        m_scored.clear();
    }
    redraw();
}

void ExitCalibrationView::redraw() {
    if (!m_data) return;
    const EarlyExitPolicy p = policy();
    clearEmptyState(m_plot);
    m_plot->clearGraphs();
    const QString crit = criterion_label(p.criterion);
    m_plot->yAxis->setLabel(crit);
    m_rule->setText(p.criterion == C::LogitMargin ? QString("exit when %1 >= threshold (dashed line)").arg(crit)
                                                  : QString("exit when %1 < threshold (dashed line)").arg(crit));
    const CalibData& d = *m_data;
    double lo = 0, hi = 0;
    bool first = true;
    for (const CalibToken& t : m_scored) {
        QCPGraph* g = m_plot->addGraph();
        QVector<double> xs, ys;
        for (int l = 1; l <= d.loops; ++l) {
            const double v = display_signal(p.criterion, d.exits.at(p.criterion, t.row, l));
            if (!std::isfinite(v)) continue;
            xs.push_back(l);
            ys.push_back(v);
            lo = first ? v : std::min(lo, v);
            hi = first ? v : std::max(hi, v);
            first = false;
        }
        g->setData(xs, ys, true);
        g->setPen(t.flagged ? QPen(QColor(210, 30, 30, 220), 2.0) : QPen(QColor(60, 100, 200, 90), 1.0));
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, t.flagged ? 5 : 3));
    }
    const double thr = p.criterion == C::ArgmaxStable ? 0.5 : p.threshold;
    m_line->point1->setCoords(0, thr);
    m_line->point2->setCoords(1, thr);
    m_line->setVisible(p.criterion != C::ArgmaxStable);
    m_plot->xAxis->setRange(0.5, d.loops + 0.5);
    const double top = std::max(hi, thr), bottom = std::min(lo, thr);
    const double pad = (top - bottom) * 0.05 + 1e-6;
    m_plot->yAxis->setRange(bottom - pad, top + pad);
    m_plot->replot();

    // The tokens: flagged ones red, early exits that keep their token blue, each with its depth.
    QString html = "<div style='font-family: monospace; line-height: 160%'>";
    for (int i = 0; i < d.prompt_len; ++i)
        html += "<span style='color:#777'>" + esc(d.pieces[static_cast<size_t>(i)]) + "</span>";
    if (d.emitted() > 0)
        html += QString("<span style='background:#ddd;color:#000'>%1<sub>%2</sub></span>")
                    .arg(esc(d.pieces[static_cast<size_t>(d.prompt_len)]))
                    .arg(d.loops);
    int flagged = 0;
    double depthSum = d.loops;  // the first token comes from the prompt, at full depth
    for (const CalibToken& t : m_scored) {
        const std::string& piece = d.pieces[static_cast<size_t>(d.prompt_len + t.index)];
        depthSum += t.exit_depth;
        const bool early = t.exit_depth < d.loops;
        const QString style = t.flagged ? "background:#f4a0a0;color:#000" : early ? "background:#cfe3ff;color:#000" : "";  // dark text on a light mark in either theme
        QString tip = QString("exit depth %1").arg(t.exit_depth);
        if (t.flagged) tip += QString(", would emit id %1 instead of %2").arg(t.exit_token).arg(t.full_token);
        html += QString("<span style='%1' title='%2'>%3<sub>%4</sub></span>")
                    .arg(style, tip.toHtmlEscaped(), esc(piece))
                    .arg(t.exit_depth);
        flagged += t.flagged;
    }
    html += "</div>";
    m_tokens->setHtml(html);
    const int emitted = d.emitted();
    m_summary->setText(QString("%1 of %2 tokens would change at this threshold (red); blue: exits early with the same "
                               "token; mean depth %3 of %4. Drag the dashed line or edit the threshold.")
                           .arg(flagged)
                           .arg(std::max(emitted - 1, 0))
                           .arg(emitted > 0 ? depthSum / emitted : 0.0, 0, 'f', 2)
                           .arg(d.loops));
}

void ExitCalibrationView::onMousePress(QMouseEvent* e) {
    if (!m_data || !m_line->visible()) return;
    const double y = m_plot->yAxis->coordToPixel(m_threshold->value());
    if (std::abs(e->position().y() - y) <= 6) {
        m_dragging = true;
        m_plot->setInteraction(QCP::iRangeDrag, false);
    }
}

void ExitCalibrationView::onMouseMove(QMouseEvent* e) {
    if (!m_dragging) return;
    const double v = m_plot->yAxis->pixelToCoord(e->position().y());
    m_threshold->setValue(std::max(v, m_threshold->minimum()));
}

void ExitCalibrationView::onMouseRelease(QMouseEvent*) {
    if (!m_dragging) return;
    m_dragging = false;
    m_plot->setInteraction(QCP::iRangeDrag, true);
}

nlohmann::json ExitCalibrationView::data() const {
    if (!m_data) return {{"view", "early-exit calibration"}, {"empty", true}};
    return calibration_json(*m_data, policy(), m_scored);
}

}  // namespace tlui
