#include "views/speculation_sweep_view.h"

#include <algorithm>
#include <limits>
#include <set>

#include <QComboBox>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "base/preset_store.h"
#include "worker/engine_host.h"
#include "plots/plot_caption.h"
#include "plots/plot_deck.h"
#include "plots/plot_layout.h"
#include "plots/plot_utils.h"
#include "views/recommendation_save.h"

namespace tlui {

Preset bestPreset(const SweepResult& r) {
    Preset p;
    const int b = r.best_cell();
    if (b < 0) return p;
    const SweepCell& c = r.cells[static_cast<size_t>(b)];
    const ModeSpec best = r.best_spec();
    static_cast<tinyloop::RunSpec&>(p) = best.run;
    p.name = QString::fromStdString(best.label);
    p.name[0] = p.name[0].toUpper();
    const Speedup sp = c.speedup();
    p.description = QString("From the speculation sweep over %1 prompt(s), %2 tokens each, %3 repeats: median %4x "
                            "(%5x..%6x) over greedy at depth %7, faster beyond the noise; acceptance %8%.")
                        .arg(r.spec.prompts.size())
                        .arg(r.spec.max_tokens)
                        .arg(c.time.samples.size())
                        .arg(sp.median, 0, 'f', 2)
                        .arg(sp.min, 0, 'f', 2)
                        .arg(sp.max, 0, 'f', 2)
                        .arg(r.verify_loops)
                        .arg(100.0 * c.acceptance(), 0, 'f', 1);
    return p;
}

namespace {

std::optional<std::vector<int>> parseList(const QString& field, const QString& text, QString* error) {
    std::vector<int> out;
    for (const QString& part : text.split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const int v = part.trimmed().toInt(&ok);
        if (!ok) {
            if (error) *error = QString("%1: '%2' is not an integer (a comma-separated list, e.g. 1,2,3)").arg(field, part.trimmed());
            return std::nullopt;
        }
        if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
    if (out.empty()) {
        if (error) *error = QString("%1: empty (a comma-separated list, e.g. 1,2,3)").arg(field);
        return std::nullopt;
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

SpeculationSweepView::SpeculationSweepView(WorkbenchAccess* workbench, QWidget* parent) : AnalysisWindow(workbench, "Speculation tuning sweep", parent) {
    QVBoxLayout* v = body();
    auto* top = new QHBoxLayout;
    m_prompts = new QPlainTextEdit;
    m_prompts->setObjectName("prompts");
    m_prompts->setPlainText("In the beginning\nAnd God said, Let there be light\nThe LORD is my shepherd");
    m_prompts->setMaximumHeight(90);
    auto* pv = new QVBoxLayout;
    pv->addWidget(new QLabel("Prompts (one per line)"));
    pv->addWidget(m_prompts);
    top->addLayout(pv, 2);
    auto* form = new QFormLayout;
    m_maxTokens = newCountField(1, 4096, 32);
    m_verify = new QSpinBox;
    m_verify->setRange(0, 64);
    m_verify->setValue(8);
    m_verify->setSpecialValueText("model default");
    m_draftLoops = new QLineEdit("1,2,3,4");
    m_draftAhead = new QLineEdit("2,4,6,8");
    m_branches = new QLineEdit("0");
    m_branches->setToolTip("0 = chain speculation; K >= 1 = tree speculation with K branches (draft_ahead <= 8)");
    m_repeats = newCountField(kMinRepeats, kMaxRepeats, kDefaultRepeats);
    m_repeats->setObjectName("repeats");
    m_repeats->setToolTip("the whole grid and greedy run this many times, one run at a time; a cell is best only "
                          "when every repeat beats every repeat of greedy");
    form->addRow("Max tokens", m_maxTokens);
    form->addRow("Verify depth", m_verify);
    form->addRow("draft_loops", m_draftLoops);
    form->addRow("draft_ahead", m_draftAhead);
    form->addRow("Branches (0 = chain)", m_branches);
    form->addRow("Repeats", m_repeats);
    top->addLayout(form, 1);
    v->addLayout(top);

    auto* bestRow = new QHBoxLayout;
    m_best = new QLabel("Run the sweep to find the best setting.");
    m_best->setObjectName("best");
    m_best->setWordWrap(true);
    m_saveBest = new QPushButton("Save best as preset");
    m_saveBest->setObjectName("saveBest");
    m_saveBest->setEnabled(false);
    m_saveRecommendation = new QPushButton("Save as the model's recommendation...");
    m_saveRecommendation->setObjectName("saveRecommendation");
    m_saveRecommendation->setToolTip("Writes the best cell's knobs into the model file's metadata (\"recommended\"): "
                                     "the speculation default of generate, bench, the server and the config panel. "
                                     "Only a cell faster than greedy beyond the noise is saved.");
    m_saveRecommendation->setEnabled(false);
    connect(m_saveRecommendation, &QPushButton::clicked, this, [this] {
        QString error;
        if (!m_result || m_result->best_cell() < 0) {  // the refusal needs no confirmation
            saveRecommendation(modelPath(), &error);
            return setStatus("not saved: " + error, true);
        }
        if (!confirmRecommendationSave(this, modelPath(), "the best cell's speculation knobs")) return;
        if (!saveRecommendation(modelPath(), &error)) setStatus("not saved: " + error, true);
    });
    m_kPick = new QComboBox;
    bestRow->addWidget(new QLabel("Heatmaps for"));
    bestRow->addWidget(m_kPick);
    bestRow->addWidget(m_best, 1);
    bestRow->addWidget(m_saveBest);
    bestRow->addWidget(m_saveRecommendation);
    v->addLayout(bestRow);

    auto* split = new QSplitter(Qt::Vertical);
    auto* maps = new PlotDeck(300, 0);  // side by side unless each would get under 300 px
    m_speedMap = new QCustomPlot;
    m_speedMap->setObjectName("speedupMap");
    m_accMap = new QCustomPlot;
    m_accMap->setObjectName("acceptanceMap");
    m_scatter = new QCustomPlot;
    m_scatter->setObjectName("predictedVsMeasured");
    const char* captions[] = {
        "Measured [[speedup]] over greedy for each [[draft_loops]] (rows) x [[draft_ahead]] (columns); "
        "above 1 is faster than greedy. A cell reads the median of the repeats, * when it beats greedy beyond "
        "the noise, and under it the range of the repeats when the cell is wide enough.",
        "The [[acceptance]] of each cell: the share of drafted tokens the full depth kept.",
        "Each cell as a dot: the speedup its acceptance predicts (across) against the median measured (up), "
        "whiskers from the slowest to the fastest repeat. Dots on the diagonal mean the prediction holds."};
    const char* titles[] = {"speedup", "acceptance", "predicted vs measured"};
    int at = 0;
    for (QCustomPlot* p : {m_speedMap, m_accMap})
        connect(p, &QCustomPlot::afterLayout, this, [this, p] { fitCellLabels(p); });
    for (QCustomPlot* p : {m_speedMap, m_accMap, m_scatter}) {
        stylePlot(p);
        p->setMinimumHeight(200);
        maps->addPage(withCaption(p, captions[at]), titles[at]);
        ++at;
        showEmptyState(p, "Run the sweep to fill this plot");
    }
    split->addWidget(maps);
    m_table = new QTableWidget;
    m_table->setObjectName("table");
    split->addWidget(m_table);
    v->addWidget(split, 1);

    connect(m_kPick, &QComboBox::currentIndexChanged, this, [this] {
        if (m_result) showResult();
    });
    connect(m_saveBest, &QPushButton::clicked, this, [this] {
        QString err;
        const QString name = saveBestPreset(&err);
        setStatus(name.isEmpty() ? err : QString("saved preset \"%1\"").arg(name), name.isEmpty());
    });
}

void SpeculationSweepView::setPrompts(const QStringList& prompts) { m_prompts->setPlainText(prompts.join('\n')); }
void SpeculationSweepView::setMaxTokens(int n) { m_maxTokens->setValue(n); }
void SpeculationSweepView::setVerifyLoops(int v) { m_verify->setValue(v); }
void SpeculationSweepView::setRepeats(int n) { m_repeats->setValue(n); }

void SpeculationSweepView::setGrid(const QString& d, const QString& k, const QString& b) {
    m_draftLoops->setText(d);
    m_draftAhead->setText(k);
    m_branches->setText(b);
}

std::optional<SweepSpec> SpeculationSweepView::spec(QString* error) const {
    SweepSpec s;
    for (const QString& line : m_prompts->toPlainText().split('\n'))
        if (!line.trimmed().isEmpty()) s.prompts.push_back(line.toStdString());
    if (s.prompts.empty()) {
        if (error) *error = "prompts: at least one non-empty line";
        return std::nullopt;
    }
    s.max_tokens = m_maxTokens->value();
    s.verify_loops = m_verify->value();
    s.repeats = m_repeats->value();
    auto d = parseList("draft_loops", m_draftLoops->text(), error);
    auto k = parseList("draft_ahead", m_draftAhead->text(), error);
    auto b = parseList("branches", m_branches->text(), error);
    if (!d || !k || !b) return std::nullopt;
    s.draft_loops = *d;
    s.draft_ahead = *k;
    s.branches = *b;
    return s;
}

void SpeculationSweepView::run() {
    if (isBusy()) return;
    QString err;
    const auto sp = spec(&err);
    if (!sp) return setStatus(err, true);
    auto out = std::make_shared<SweepResult>();
    const SweepSpec s = *sp;
    startJob("sweeping...", [=](AnalysisJobContext& ctx) {
        *out = run_sweep(ctx.model, s, ctx.cancel, [&ctx](int done, int total) {
            ctx.progress(done, total, QString("run %1 of %2").arg(done).arg(total));
        });
    }, [=, this](bool, const QString& error) {
        // A cancelled sweep still shows the cells it finished.
        if (out->cells.empty()) return;
        showSweep(*out);
        if (!error.isEmpty()) setStatus(QString("%1: showing the cells finished").arg(error), true);
        else setStatus(QString("%1 cells x %2 prompts x %3 repeats, one run at a time, verify depth %4")
                           .arg(out->cells.size())
                           .arg(out->spec.prompts.size())
                           .arg(out->spec.repeats)
                           .arg(out->verify_loops));
    });
}

void SpeculationSweepView::showSweep(const SweepResult& r) {
    m_result = std::make_shared<SweepResult>(r);
    std::set<int> ks;
    for (const SweepCell& c : r.cells) ks.insert(c.branches);
    m_kPick->blockSignals(true);
    m_kPick->clear();
    for (int k : ks) m_kPick->addItem(k == 0 ? QString("chain") : QString("tree K=%1").arg(k), k);
    m_kPick->blockSignals(false);
    showResult();
}

QString SpeculationSweepView::bestText() const { return m_best->text(); }

void SpeculationSweepView::fitCellLabels(QCustomPlot* plot) {
    // A cell's words stay inside the cell: all its lines when they fit, else the first (the
    // median), else none (the colour and the table still say it). Called after each layout, before
    // drawing, so a resized window refits them.
    for (int i = 0; i < plot->itemCount(); ++i) {
        auto* label = qobject_cast<QCPItemText*>(plot->item(i));
        if (!label || !label->property("fullText").isValid()) continue;
        const QCPAxis* x = label->position->keyAxis();
        const QCPAxis* y = label->position->valueAxis();
        const double w = std::abs(x->coordToPixel(1) - x->coordToPixel(0)) - 4;
        const double h = std::abs(y->coordToPixel(1) - y->coordToPixel(0)) - 2;
        const QFontMetrics fm(label->font());
        const QString full = label->property("fullText").toString();
        QString shown;
        for (const QString& candidate : {full, full.section('\n', 0, 0)}) {
            const QRect r = fm.boundingRect(QRect(), Qt::TextDontClip, candidate);
            if (r.width() <= w && r.height() <= h) {
                shown = candidate;
                break;
            }
        }
        label->setText(shown);
        label->setVisible(!shown.isEmpty());
    }
}

void SpeculationSweepView::showResult() {
    const SweepResult& r = *m_result;
    const int K = m_kPick->currentData().toInt();
    // Rows only for draft depths below the verify depth: the others are not valid settings.
    std::vector<int> dl;
    for (int d : r.spec.draft_loops)
        if (d < r.verify_loops) dl.push_back(d);
    const auto& da = r.spec.draft_ahead;
    auto drawMap = [&](QCustomPlot* plot, const QString& title, auto value, auto labelOf, double lo, double hi) {
        clearEmptyState(plot);
        plot->clearItems();
        plot->clearPlottables();
        plot->plotLayout()->clear();
        auto* rect = new QCPAxisRect(plot);
        plot->plotLayout()->addElement(0, 0, new QCPTextElement(plot, title));
        plot->plotLayout()->addElement(1, 0, rect);
        auto* scale = new QCPColorScale(plot);
        plot->plotLayout()->addElement(1, 1, scale);
        auto* cmap = new QCPColorMap(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        const int nx = static_cast<int>(da.size()), ny = static_cast<int>(dl.size());
        cmap->data()->setSize(nx, ny);
        cmap->data()->setRange(QCPRange(0, nx - 1), QCPRange(0, ny - 1));
        for (int x = 0; x < nx; ++x)
            for (int y = 0; y < ny; ++y) cmap->data()->setCell(x, y, std::numeric_limits<double>::quiet_NaN());
        for (const SweepCell& c : r.cells) {
            if (c.branches != K || c.runs == 0) continue;
            const int x = static_cast<int>(std::find(da.begin(), da.end(), c.draft_ahead) - da.begin());
            const int y = static_cast<int>(std::find(dl.begin(), dl.end(), c.draft_loops) - dl.begin());
            if (x >= nx || y >= ny) continue;
            const double val = value(c);
            cmap->data()->setCell(x, y, val);
            auto* label = new QCPItemText(plot);
            label->setClipAxisRect(rect);
            label->position->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
            label->position->setCoords(x, y);
            label->setText(labelOf(c));
            label->setProperty("fullText", labelOf(c));
            label->setColor(Qt::black);
        }
        cmap->setColorScale(scale);
        cmap->setGradient(QCPColorGradient::gpThermal);
        cmap->setInterpolate(false);
        cmap->setDataRange(QCPRange(lo, hi > lo ? hi : lo + 1));
        auto tx = QSharedPointer<QCPAxisTickerText>::create();
        for (int x = 0; x < nx; ++x) tx->addTick(x, QString::number(da[static_cast<size_t>(x)]));
        auto ty = QSharedPointer<QCPAxisTickerText>::create();
        for (int y = 0; y < ny; ++y) ty->addTick(y, QString::number(dl[static_cast<size_t>(y)]));
        rect->axis(QCPAxis::atBottom)->setTicker(tx);
        rect->axis(QCPAxis::atLeft)->setTicker(ty);
        rect->axis(QCPAxis::atBottom)->setLabel("draft_ahead");
        rect->axis(QCPAxis::atLeft)->setLabel("draft_loops");
        rect->axis(QCPAxis::atBottom)->setRange(-0.5, nx - 0.5);
        rect->axis(QCPAxis::atLeft)->setRange(-0.5, ny - 0.5);
        plot->replot();
    };
    double smax = 0;
    for (const SweepCell& c : r.cells) smax = std::max(smax, c.measured_speedup());
    // Speedup cells read "median" over "min..max" of the repeats; "*" marks beyond the noise.
    auto speedLabel = [](const SweepCell& c) {
        const Speedup sp = c.speedup();
        return QString("%1x%2\n%3..%4").arg(sp.median, 0, 'f', 2).arg(sp.beyond_noise ? "*" : "").arg(sp.min, 0, 'f', 2).arg(sp.max, 0, 'f', 2);
    };
    drawMap(m_speedMap, "speedup over greedy (x)",
            [](const SweepCell& c) { return c.measured_speedup(); }, speedLabel, 0.0, std::max(1.0, smax));
    drawMap(m_accMap, "measured acceptance", [](const SweepCell& c) { return c.acceptance(); },
            [](const SweepCell& c) { return QString::number(c.acceptance(), 'f', 2); }, 0.0, 1.0);

    clearEmptyState(m_scatter);
    m_scatter->clearGraphs();
    m_scatter->clearPlottables();
    m_scatter->clearItems();
    auto* g = m_scatter->addGraph();
    g->setName("cells");
    g->setLineStyle(QCPGraph::lsNone);
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, QColor(70, 120, 230), 7));
    QVector<double> px, my, myLo, myHi;
    double hi = 1.0;
    std::vector<QStringList> rows;
    for (const SweepCell& c : r.cells) {
        if (c.runs == 0) continue;
        const Speedup sp = c.speedup();
        px << c.predicted_speedup(r.verify_loops);
        my << sp.median;
        myLo << std::max(0.0, sp.median - sp.min);
        myHi << std::max(0.0, sp.max - sp.median);
        hi = std::max({hi, c.predicted_speedup(r.verify_loops), sp.max});
        rows.push_back({c.branches ? QString("tree K=%1").arg(c.branches) : QString("chain"), QString::number(c.draft_loops),
                        QString::number(c.draft_ahead), QString::number(c.runs), QString::number(c.tokens),
                        QString("%1/%2").arg(c.accepted).arg(c.tested), QString::number(100.0 * c.acceptance(), 'f', 1),
                        QString::number(100.0 * c.predicted_acceptance, 'f', 1),
                        QString::number(sp.median, 'f', 2),
                        QString("%1..%2").arg(sp.min, 0, 'f', 2).arg(sp.max, 0, 'f', 2), sp.beyond_noise ? "yes" : "no",
                        QString::number(c.predicted_speedup(r.verify_loops), 'f', 2),
                        c.equals_greedy ? "yes" : "NO", QString::fromStdString(c.error)});
    }
    g->setData(px, my);
    auto* whiskers = new QCPErrorBars(m_scatter->xAxis, m_scatter->yAxis);
    whiskers->setDataPlottable(g);
    whiskers->setData(myLo, myHi);
    whiskers->removeFromLegend();
    auto* diag = m_scatter->addGraph();
    diag->setName("measured = predicted");
    diag->setPen(QPen(Qt::gray, 1, Qt::DashLine));
    diag->setData({0, hi * 1.1}, {0, hi * 1.1});
    m_scatter->xAxis->setLabel("predicted speedup");
    m_scatter->yAxis->setLabel("measured speedup");
    m_scatter->xAxis->setRange(0, hi * 1.1);
    m_scatter->yAxis->setRange(0, hi * 1.1);
    putLegendBelow(m_scatter);
    m_scatter->legend->setVisible(true);
    m_scatter->replot();
    fillTable(m_table, {"mode", "draft_loops", "draft_ahead", "prompts", "tokens", "accepted/tested", "acceptance %",
                        "predicted acc. %", "median x", "range x", "beyond noise", "predicted x", "text = greedy", "error"},
              rows);
    const int b = r.best_cell();
    // Enabled once there is a result: without a best cell it explains why it will not save one.
    m_saveBest->setEnabled(true);
    m_saveRecommendation->setEnabled(true);
    if (b >= 0) {
        const Preset p = bestPreset(r);
        const Speedup sp = r.cells[static_cast<size_t>(b)].speedup();
        m_best->setText(QString("Best: %1 (median %2x, %3x..%4x over %5 repeats: faster than greedy beyond the noise; "
                                "acceptance %6%)")
                            .arg(p.name)
                            .arg(sp.median, 0, 'f', 2)
                            .arg(sp.min, 0, 'f', 2)
                            .arg(sp.max, 0, 'f', 2)
                            .arg(r.cells[static_cast<size_t>(b)].time.samples.size())
                            .arg(100.0 * r.cells[static_cast<size_t>(b)].acceptance(), 0, 'f', 1));
    } else {
        m_best->setText("No best setting: " + QString::fromStdString(r.no_best_reason()) + ".");
    }
}

QString SpeculationSweepView::saveBestPreset(QString* error) {
    if (!m_result) {
        if (error) *error = "run the sweep first: there is no result to save";
        return QString();
    }
    if (m_result->best_cell() < 0) {
        if (error) *error = "not saved: " + QString::fromStdString(m_result->no_best_reason());
        return QString();
    }
    const Preset p = bestPreset(*m_result);
    if (!workbench()->savePreset(p, error)) return QString();
    return p.name;
}

bool SpeculationSweepView::saveRecommendation(const QString& outPath, QString* error) {
    QString why;
    if (!m_result) why = "run the sweep first: there is no result to save";
    else if (m_result->best_cell() < 0)
        why = "no setting is faster than greedy beyond the noise (" + QString::fromStdString(m_result->no_best_reason()) + ")";
    if (why.isEmpty()) why = unwritableReason(outPath);
    if (!why.isEmpty()) {
        if (error) *error = why;
        return false;
    }
    const SweepResult& r = *m_result;
    const SweepCell& c = r.cells[static_cast<size_t>(r.best_cell())];
    tinyloop::Recommendation rec;
    rec.set_draft_loops(c.draft_loops);
    if (c.branches > 0) {
        rec.tree.draft_ahead = c.draft_ahead;
        rec.tree.branches = c.branches;
    } else {
        rec.chain.draft_ahead = c.draft_ahead;
    }
    const Speedup sp = c.speedup();
    const nlohmann::json measured = {{"found_by", "workbench: speculation sweep view"},
                                     {"verify_loops", r.verify_loops},
                                     {"prompts", r.spec.prompts.size()},
                                     {"max_tokens", r.spec.max_tokens},
                                     {"repeats", c.time.samples.size()},
                                     {"speedup_median", sp.median},
                                     {"speedup_min", sp.min},
                                     {"speedup_max", sp.max},
                                     {"acceptance", c.acceptance()}};
    const QString model = modelPath();
    startJob("saving the recommendation", [model, outPath, rec, measured](AnalysisJobContext&) {
        writeRecommendation(model, outPath, RecommendationPart::Speculation, rec, measured);
    }, [this, outPath](bool ok, const QString&) {
        if (ok) setStatus(QString("saved as the model's speculation recommendation in %1 (used from the next time "
                                  "it is opened)").arg(outPath));
    });
    return true;
}

nlohmann::json SpeculationSweepView::data() const {
    if (!m_result) return {{"view", "sweep"}};
    nlohmann::json j = sweep_to_json(*m_result);
    if (m_result->best_cell() >= 0) j["best_preset"] = presetToJson(bestPreset(*m_result));
    return j;
}

}  // namespace tlui
