#include "views/agreement_map_view.h"

#include <cmath>

#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <tinyloop_analysis/compare_modes.h>
#include "plots/plot_caption.h"
#include "plots/plot_deck.h"
#include "plots/plot_layout.h"
#include "plots/plot_utils.h"
#include "plots/token_axis.h"

namespace tlui {

namespace {

const char* kMapCaption =
    "Each column is an emitted token, each row a [[depth]] (1 at the bottom). Green: at that depth the top "
    "guess already equals the final depth's. The red line is the first depth that agrees; a [[draft]] made "
    "at a depth on or above it would be accepted.";
const char* kBarsCaption =
    "For each [[draft depth|draft]] D, three acceptances: [[predicted vs measured acceptance|predicted]] "
    "(the share of green cells at D, each token judged alone), the map replayed as chain speculation, and "
    "measured in a real speculative run. Run to see why measured is lower.";

// Why the measured acceptance is below the predicted one, in the numbers of the row with the
// widest gap: on screen under the bars, so "predicted 51% vs measured 24.5%" explains itself.
QString acceptanceGapText(const AgreementData& d) {
    const AgreementRow* widest = nullptr;
    for (const AgreementRow& r : d.rows)
        if (!widest || r.predicted - r.measured.spec_acceptance_rate() >
                           widest->predicted - widest->measured.spec_acceptance_rate())
            widest = &r;
    if (!widest) return kBarsCaption;
    const double pred = 100.0 * widest->predicted, meas = 100.0 * widest->measured.spec_acceptance_rate();
    const double replay = 100.0 * widest->replay.acceptance();
    return QString("Draft depth %1: [[predicted vs measured acceptance|predicted]] %2% is the share of tokens whose "
                   "top guess at depth %1 already equals the final one, each judged alone with the right text "
                   "before it. Measured %3% is accepted / tested in a real run with [[draft_ahead]] %4: a "
                   "[[cycle]] stops at its first wrong draft, and the drafts after it, built on a wrong token, "
                   "count as tested but rejected. Replaying the map as chains gives %5%%6.")
        .arg(widest->draft_depth)
        .arg(pred, 0, 'f', 1)
        .arg(meas, 0, 'f', 1)
        .arg(d.draft_ahead)
        .arg(replay, 0, 'f', 1)
        .arg(std::abs(replay - meas) <= 10.0 ? ", close to measured: the chain rule explains the gap"
                                             : "; the rest of the gap is the draft reading keys and values "
                                               "from shallow passes");
}

}  // namespace

AgreementMapView::AgreementMapView(WorkbenchAccess* workbench, QWidget* parent) : AnalysisWindow(workbench, "Draft-agreement map", parent) {
    QVBoxLayout* v = body();
    auto* form = new QFormLayout;
    m_prompt = newPromptField();
    m_maxTokens = newCountField(2, 512, 48);
    m_final = new QSpinBox;
    m_final->setRange(2, 64);
    m_final->setValue(8);
    m_ahead = new QSpinBox;
    m_ahead->setRange(1, 32);
    m_ahead->setValue(4);
    form->addRow("Prompt", m_prompt);
    form->addRow("Max tokens (greedy)", m_maxTokens);
    form->addRow("Final (verify) depth", m_final);
    form->addRow("draft_ahead for the measured runs", m_ahead);
    v->addLayout(form);
    // the map above the acceptance plot and table; a tab each in a window under 860 px tall
    auto* deck = new PlotDeck(0, 860, Qt::Vertical);
    m_map = new QCustomPlot;
    m_map->setObjectName("agreementPlot");
    stylePlot(m_map);
    m_map->xAxis->setLabel("emitted position");
    m_map->yAxis->setLabel("depth");
    deck->addPage(withCaption(m_map, kMapCaption), "agreement map");
    auto* bottom = new QSplitter(Qt::Horizontal);
    m_bars = new QCustomPlot;
    m_bars->setObjectName("acceptancePlot");
    stylePlot(m_bars);
    m_table = new QTableWidget;
    m_table->setObjectName("table");
    showEmptyState(m_map, "Run to map where each depth already agrees with the final one");
    showEmptyState(m_bars, "Run to compare predicted and measured acceptance");
    bottom->addWidget(withCaption(m_bars, kBarsCaption));
    bottom->addWidget(m_table);
    deck->addPage(bottom, "acceptance");
    v->addWidget(deck, 1);
}

void AgreementMapView::setPrompt(const QString& text) { m_prompt->setText(text); }
void AgreementMapView::setMaxTokens(int n) { m_maxTokens->setValue(n); }
void AgreementMapView::setFinalDepth(int d) { m_final->setValue(d); }
void AgreementMapView::setDraftAhead(int k) { m_ahead->setValue(k); }

void AgreementMapView::run() {
    if (isBusy()) return;
    const std::string prompt = m_prompt->text().toStdString();
    const int max_tokens = m_maxTokens->value();
    const int V = m_final->value();
    const int K = m_ahead->value();
    auto out = std::make_shared<AgreementData>();
    startJob("greedy run, lens and speculation...", [=](AnalysisJobContext& ctx) {
        const std::vector<int32_t> ids = prompt_ids(ctx.model, prompt);
        ModeSpec g;
        g.run.mode = tinyloop::DecodeMode::Greedy;
        g.run.config.max_tokens = max_tokens;
        g.run.config.loops = V;
        const ModeRun greedy = run_mode(ctx.model, ids, g);
        if (greedy.tokens.size() < 2)
            throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument,
                                  "max_tokens: the greedy answer has fewer than 2 tokens; nothing to draft");
        out->map = build_agreement_map(ctx.model, ids, greedy.tokens, V);
        out->draft_ahead = K;
        out->max_tokens = max_tokens;
        for (int32_t t : greedy.tokens)
            out->pieces.push_back(QString::fromStdString(tinyloop::detokenize_text(ctx.model, &t, 1)));
        tinyloop::GenerateOptions opts;
        opts.observer = [&ctx](const tinyloop::TokenEvent&) { return !ctx.cancelled(); };
        for (int D = 1; D < V; ++D) {
            if (ctx.cancelled()) return;
            ctx.progress(D, V - 1, QString("speculating %1 -> %2...").arg(D).arg(V));
            AgreementRow row;
            row.draft_depth = D;
            row.predicted = predicted_acceptance(out->map, D);
            row.replay = replay_chain(out->map, D, K, max_tokens);
            ModeSpec s;
            s.run.mode = tinyloop::DecodeMode::Speculative;
            s.run.config.max_tokens = max_tokens;
            s.run.speculation.draft_loops = D;
            s.run.speculation.verify_loops = V;
            s.run.speculation.draft_ahead = K;
            const ModeRun spec = run_mode(ctx.model, ids, s, opts);
            row.measured = spec.stats;
            row.sameText = spec.tokens == greedy.tokens;
            out->rows.push_back(row);
        }
    }, [=, this](bool ok, const QString&) {
        if (!ok) return;
        m_data = out;
        show_();
        setStatus(QString("%1 positions at depth %2; measured speculation with draft_ahead %3")
                      .arg(out->map.positions()).arg(out->map.final_depth).arg(out->draft_ahead));
    });
}

void AgreementMapView::show_() {
    const AgreementData& d = *m_data;
    const AgreementMap& m = d.map;
    clearEmptyState(m_map);
    m_map->clearPlottables();
    m_map->clearGraphs();
    auto* cmap = new QCPColorMap(m_map->xAxis, m_map->yAxis);
    const int n = m.positions();
    cmap->data()->setSize(n, m.final_depth);
    cmap->data()->setRange(QCPRange(0, n - 1), QCPRange(1, m.final_depth));
    for (int j = 0; j < n; ++j)
        for (int depth = 1; depth <= m.final_depth; ++depth)
            cmap->data()->setCell(j, depth - 1, m.agrees(j, depth) ? 1.0 : 0.0);
    QCPColorGradient grad;
    grad.setColorStopAt(0, QColor(235, 235, 235));
    grad.setColorStopAt(1, QColor(60, 170, 90));
    grad.setLevelCount(2);
    cmap->setGradient(grad);
    cmap->setDataRange(QCPRange(0, 1));
    cmap->setInterpolate(false);
    // The map's own legend icon is empty until drawn; a green square says what green means.
    cmap->removeFromLegend();
    auto* swatch = m_map->addGraph();
    swatch->setName("argmax equals the final depth's");
    swatch->setLineStyle(QCPGraph::lsNone);
    swatch->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, QPen(QColor(60, 170, 90).darker(140)), QColor(60, 170, 90), 10));
    auto* first = m_map->addGraph();
    first->setName("first agreeing depth");
    first->setPen(QPen(QColor(200, 60, 60), 2));
    first->setLineStyle(QCPGraph::lsStepCenter);
    first->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, QColor(200, 60, 60), 5));
    QVector<double> xs, ys;
    for (int j = 0; j < n; ++j) {
        xs << j;
        ys << m.first_agree[static_cast<size_t>(j)];
    }
    first->setData(xs, ys, true);
    // The tokens as tick labels, thinned so none overlap (token_axis.h).
    auto ticker = QSharedPointer<TokenAxisTicker>::create(m_map->xAxis);
    QStringList tokens;
    for (int j = 0; j < n; ++j) tokens << TokenAxisTicker::displayText(d.pieces[static_cast<size_t>(j)]);
    ticker->setLabels(tokens);
    m_map->xAxis->setTicker(ticker);
    m_map->xAxis->setLabel("emitted token (labels thinned to fit)");
    useIntegerTicks(m_map->yAxis);
    m_map->xAxis->setRange(-0.5, n - 0.5);
    m_map->yAxis->setRange(0.5, m.final_depth + 0.5);
    putLegendBelow(m_map);
    m_map->legend->setVisible(true);
    m_map->replot();

    QStringList labels;
    std::vector<double> pred, replay, meas;
    std::vector<QStringList> rows;
    for (const AgreementRow& r : d.rows) {
        labels << QString("D=%1").arg(r.draft_depth);
        pred.push_back(100.0 * r.predicted);
        replay.push_back(100.0 * r.replay.acceptance());
        meas.push_back(100.0 * r.measured.spec_acceptance_rate());
        rows.push_back({QString::number(r.draft_depth), QString::number(100.0 * r.predicted, 'f', 1),
                        QString("%1/%2").arg(r.replay.accepted).arg(r.replay.drafted),
                        QString("%1/%2").arg(r.measured.spec_accepted).arg(r.measured.spec_tested),
                        QString::number(100.0 * r.measured.spec_acceptance_rate(), 'f', 1),
                        QString("%1 / %2").arg(r.replay.cycles).arg(r.measured.spec_cycles),
                        r.sameText ? "yes" : "NO"});
    }
    drawCategoryBars(m_bars, labels, {pred, replay, meas},
                     {"predicted per token (map)", "map replayed as speculation", "measured speculating"}, false,
                     "acceptance (%)");
    if (PlotCaption* c = captionOf(m_bars)) c->setCaption(acceptanceGapText(d));
    fillTable(m_table, {"draft depth", "predicted %", "replayed acc/drafted", "measured acc/tested", "measured %",
                        "cycles replay/measured", "text = greedy"},
              rows);
}

nlohmann::json AgreementMapView::data() const {
    if (!m_data) return {{"view", "agreement"}};
    nlohmann::json rows = nlohmann::json::array();
    for (const AgreementRow& r : m_data->rows)
        rows.push_back({{"draft_loops", r.draft_depth},
                        {"predicted_acceptance", r.predicted},
                        {"replay", {{"cycles", r.replay.cycles}, {"drafted", r.replay.drafted}, {"accepted", r.replay.accepted}}},
                        {"measured", {{"cycles", r.measured.spec_cycles}, {"drafted", r.measured.spec_drafted},
                                      {"tested", r.measured.spec_tested}, {"accepted", r.measured.spec_accepted},
                                      {"acceptance", r.measured.spec_acceptance_rate()}}},
                        {"text_equals_greedy", r.sameText}});
    return {{"view", "agreement"}, {"prompt", m_prompt->text().toStdString()}, {"draft_ahead", m_data->draft_ahead},
            {"max_tokens", m_data->max_tokens}, {"map", agreement_to_json(m_data->map)}, {"rows", rows}};
}

}  // namespace tlui
