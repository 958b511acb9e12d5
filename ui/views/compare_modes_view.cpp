#include "views/compare_modes_view.h"

#include <algorithm>

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <tuple>
#include <qcustomplot.h>

#include "plots/plot_caption.h"
#include "plots/plot_deck.h"
#include "plots/plot_layout.h"
#include "plots/plot_utils.h"

namespace tlui {

namespace {

QString times(double x) { return QString::number(x, 'f', x < 10 ? 2 : 1) + "x"; }

// A mode against the baseline: the median speedup (tokens/s over the baseline's, from the repeats'
// ms per token) and its range.
QString speedupText(const Speedup& s) {
    return QString("%1 (%2..%3)").arg(times(s.median), times(s.min), times(s.max));
}

}  // namespace

QString compareVerdict(const CompareResult& r) {
    if (r.baseline < 0 || r.baseline >= static_cast<int>(r.runs.size())) return QString();
    const ModeRun& base = r.runs[static_cast<size_t>(r.baseline)];
    if (!base.error.empty() || base.time.empty()) return QString();
    struct Entry { QString label; Speedup s; };
    std::vector<Entry> faster, close, slower;
    for (size_t i = 0; i < r.runs.size(); ++i) {
        const ModeRun& run = r.runs[i];
        if (static_cast<int>(i) == r.baseline || !run.error.empty() || run.time.empty()) continue;
        const Speedup s = speedup_over(base.ms_per_token(), run.ms_per_token());
        const Entry e{QString::fromStdString(run.spec.label), s};
        if (s.beyond_noise) faster.push_back(e);
        else if (faster_beyond_noise(base.ms_per_token(), run.ms_per_token())) slower.push_back(e);
        else close.push_back(e);
    }
    auto join = [](std::vector<Entry> v, const char* how) {
        std::sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) { return a.s.median > b.s.median; });
        QStringList parts;
        for (const Entry& e : v) parts << QString("%1 %2 %3").arg(e.label, speedupText(e.s), how);
        return parts.join(", ");
    };
    QString s = QString("Against the baseline %1: ").arg(QString::fromStdString(base.spec.label));
    if (!faster.empty()) {
        std::sort(faster.begin(), faster.end(), [](const Entry& a, const Entry& b) { return a.s.median > b.s.median; });
        s += QString("%1 won, %2 as fast beyond the noise").arg(faster[0].label, times(faster[0].s.median));
        if (faster.size() > 1) s += "; also faster: " + join({faster.begin() + 1, faster.end()}, "as fast");
    } else {
        s += "no mode was faster beyond the noise";
    }
    if (!close.empty()) s += "; too close to call: " + join(close, "as fast");
    if (!slower.empty()) s += "; slower: " + join(slower, "as fast");
    return s + ".";
}

CompareModesView::CompareModesView(WorkbenchAccess* workbench, QWidget* parent) : AnalysisWindow(workbench, "Compare decode modes", parent) {
    QVBoxLayout* v = body();
    auto* top = new QHBoxLayout;
    auto* form = new QFormLayout;
    m_prompt = newPromptField();
    m_maxTokens = newCountField(1, 512, 32);
    m_concurrent = new QCheckBox("Run concurrently (timings not comparable)");
    m_concurrent->setObjectName("concurrent");
    m_concurrent->setToolTip("All modes at the same time: quicker, but they share the processor's cores, so their "
                             "timings include each other's load and cannot be compared");
    m_concurrent->setChecked(false);
    m_repeats = newCountField(kMinRepeats, kMaxRepeats, kDefaultRepeats);
    m_repeats->setObjectName("repeats");
    m_repeats->setToolTip("each mode runs this many times; the plots show the median, whiskers the fastest and slowest run");
    m_baseline = new QComboBox;
    m_baseline->setObjectName("baseline");
    form->addRow("Prompt", m_prompt);
    form->addRow("Max tokens", m_maxTokens);
    form->addRow("Repeats", m_repeats);
    form->addRow("", m_concurrent);
    form->addRow("Baseline", m_baseline);
    top->addLayout(form, 2);
    auto* modesBox = new QVBoxLayout;
    m_modes = new QListWidget;
    m_modes->setObjectName("modes");
    m_modes->setMaximumHeight(150);
    auto* addCurrent = new QPushButton("Add the workbench's current config");
    modesBox->addWidget(new QLabel("Modes (checked ones run):"));
    modesBox->addWidget(m_modes);
    modesBox->addWidget(addCurrent);
    top->addLayout(modesBox, 2);
    v->addLayout(top);

    auto* split = new QSplitter(Qt::Vertical);
    m_texts = new QTextBrowser;
    m_texts->setObjectName("texts");
    split->addWidget(m_texts);
    m_table = new QTableWidget;
    m_table->setObjectName("table");
    split->addWidget(m_table);
    // side by side from 300 px a plot in a window 860 px tall; tabs on a smaller screen
    auto* plots = new PlotDeck(300, 860);
    m_speed = new QCustomPlot;
    m_speed->setObjectName("speedPlot");
    m_first = new QCustomPlot;
    m_first->setObjectName("firstTokenPlot");
    m_depth = new QCustomPlot;
    m_depth->setObjectName("meanDepthPlot");
    m_split = new QCustomPlot;
    m_split->setObjectName("splitPlot");
    const std::tuple<QCustomPlot*, const char*, const char*> titled[] = {
        {m_speed, "tokens/s",
         "How fast each mode was: [[tokens per second]] over the call, the median of the repeats; the whiskers "
         "reach from the slowest to the fastest run."},
        {m_first, "first token (ms)",
         "The wait for the [[first token]] in each mode, in ms: the median of the repeats and their range."},
        {m_depth, "depth, acceptance",
         "The mean [[depth]] each mode's tokens used and, for speculative modes, the [[acceptance]] of drafts. "
         "Less depth for the same text is work saved."},
        {m_split, "time split (ms)",
         "Where each mode's time went in its first repeat, in ms: [[prefill]], [[decode]] and, for "
         "[[self-speculation]], drafting and verifying."}};
    for (const auto& [p, title, caption] : titled) {
        stylePlot(p);
        // Room for the data under turned mode names in presentation mode (a plot to a tab there;
        // the view's body scrolls on a 720-px screen rather than crush the bars to a line).
        p->setMinimumHeight(320);
        p->setMinimumWidth(220);   // four side by side inside a 1280-px screen (stylePlot asks 300)
        p->plotLayout()->insertRow(0);
        p->plotLayout()->addElement(0, 0, new QCPTextElement(p, title));
        plots->addPage(withCaption(p, caption), title);
        showEmptyState(p, "Run to compare the modes");
    }
    split->addWidget(plots);
    split->setStretchFactor(0, 2);
    split->setStretchFactor(1, 2);
    split->setStretchFactor(2, 3);
    v->addWidget(split, 1);

    // The loaded model's modes as its file recommends them (default depth, draft, early-exit
    // policy) when it recommends any; else the generic set (before a model is open: clamped by the
    // engine's refusal if the model is shallower).
    const std::shared_ptr<tinyloop::Model> model = workbench->loadedModel();
    tinyloop::HParams hp;
    hp.max_loops = 16;
    for (const ModeSpec& m : model ? default_compare_modes(model.get(), m_maxTokens->value())
                                   : default_compare_modes(hp, m_maxTokens->value()))
        addMode(m, true);

    connect(addCurrent, &QPushButton::clicked, this, [this] {
        QString err;
        const std::optional<ModeSpec> m = this->workbench()->configuredRun(&err);
        if (!m) return setStatus("the workbench config is not valid: " + err, true);
        addMode(*m, true);
    });
    connect(m_baseline, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (m_result && i >= 0 && i < static_cast<int>(m_result->runs.size())) {
            set_baseline(*m_result, i);
            showResult();
        }
    });
}

void CompareModesView::addMode(const ModeSpec& m, bool checked) {
    m_specs.push_back(m);
    auto* item = new QListWidgetItem(QString::fromStdString(m.label), m_modes);
    item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
    item->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
    item->setToolTip(QString::fromStdString(mode_spec_to_json(m).dump()));
}

void CompareModesView::setPrompt(const QString& text) { m_prompt->setText(text); }
void CompareModesView::setMaxTokens(int n) { m_maxTokens->setValue(n); }
void CompareModesView::setConcurrent(bool on) { m_concurrent->setChecked(on); }
void CompareModesView::setRepeats(int n) { m_repeats->setValue(n); }
bool CompareModesView::concurrent() const { return m_concurrent->isChecked(); }
int CompareModesView::repeats() const { return m_repeats->value(); }
void CompareModesView::setBaseline(int index) { m_baseline->setCurrentIndex(index); }

void CompareModesView::setModes(const std::vector<ModeSpec>& modes) {
    m_specs.clear();
    m_modes->clear();
    for (const ModeSpec& m : modes) addMode(m, true);
}

std::vector<ModeSpec> CompareModesView::checkedModes() const {
    std::vector<ModeSpec> out;
    for (int i = 0; i < m_modes->count(); ++i)
        if (m_modes->item(i)->checkState() == Qt::Checked) {
            ModeSpec m = m_specs[static_cast<size_t>(i)];
            m.run.config.max_tokens = m_maxTokens->value();
            out.push_back(m);
        }
    return out;
}

void CompareModesView::run() {
    if (isBusy()) return;
    const std::vector<ModeSpec> modes = checkedModes();
    if (modes.empty()) return setStatus("check at least one mode", true);
    const std::string prompt = m_prompt->text().toStdString();
    const bool concurrent = m_concurrent->isChecked();
    const int repeats = m_repeats->value();
    // the baseline picked last time, else the second mode (greedy at the model's own depth by default)
    const int picked = m_baseline->currentIndex();
    const int baseline = picked >= 0 && picked < static_cast<int>(modes.size()) ? picked : (modes.size() > 1 ? 1 : 0);
    auto res = std::make_shared<CompareResult>();
    auto pieces = std::make_shared<std::vector<std::vector<QString>>>();
    startJob(QString("running %1 modes x %2 repeats%3...").arg(modes.size()).arg(repeats).arg(concurrent ? " concurrently" : ""),
             [=](AnalysisJobContext& ctx) {
                 const int total = static_cast<int>(modes.size()) * repeats;
                 std::atomic<int> done{0};
                 ctx.progress(0, total, QString());
                 *res = run_comparison(ctx.model, prompt, modes, baseline, concurrent, repeats, ctx.cancel, [&](int) {
                     ctx.progress(++done, total, QString());
                 });
                 for (const ModeRun& r : res->runs) {
                     std::vector<QString> p;
                     for (int32_t t : r.tokens)
                         p.push_back(QString::fromStdString(tinyloop::detokenize_text(ctx.model, &t, 1)));
                     pieces->push_back(std::move(p));
                 }
             },
             [=, this](bool ok, const QString&) {
                 if (!ok) return;
                 m_result = res;
                 m_pieces = *pieces;
                 m_baseline->blockSignals(true);
                 m_baseline->clear();
                 for (const ModeRun& r : res->runs) m_baseline->addItem(QString::fromStdString(r.spec.label));
                 m_baseline->setCurrentIndex(res->baseline);
                 m_baseline->blockSignals(false);
                 showResult();
                 QString st = QString("%1 %2 modes x %3 repeats in %4 ms by the clock, %5. %6")
                                  .arg(compareVerdict(*res))
                                  .arg(res->runs.size())
                                  .arg(res->repeats)
                                  .arg(res->wall_ms, 0, 'f', 0)
                                  .arg(res->concurrent ? "all at the same time (their speeds share the processor: "
                                                         "the timings include each other's load)"
                                                       : "one after another")
                                  .arg(QString::fromStdString(ranking_sentence(*res)));
                 setStatus(st.trimmed());
             });
}

void CompareModesView::showResult() {
    const CompareResult& r = *m_result;
    // Texts, aligned by token: the part shared with the baseline plain, from the first divergence on highlighted.
    QString html = "<table cellspacing='0' cellpadding='4' style='font-family:monospace'>";
    for (size_t i = 0; i < r.runs.size(); ++i) {
        const ModeRun& run = r.runs[i];
        const bool base = static_cast<int>(i) == r.baseline;
        html += QString("<tr><td valign='top' style='white-space:nowrap'>%1%2%3</td><td>")
                    .arg(base ? "<b>" : "", QString::fromStdString(run.spec.label).toHtmlEscaped(), base ? " (baseline)</b>" : "");
        if (!run.error.empty()) {
            html += "<span style='color:#b00'>" + QString::fromStdString(run.error).toHtmlEscaped() + "</span></td></tr>";
            continue;
        }
        const int div = r.divergence[i];
        const auto& pieces = m_pieces[i];
        for (int t = 0; t < static_cast<int>(pieces.size()); ++t) {
            if (t == div && !base) html += "<span style='color:#c00;font-weight:bold'>&#9646;</span>";
            const QString p = tokenHtml(pieces[static_cast<size_t>(t)]);
            html += (div >= 0 && t >= div && !base) ? "<span style='background:#ffd5c8;color:#000'>" + p + "</span>" : p;
        }
        if (!base)
            html += div < 0 ? "  <span style='color:#080'>[= baseline]</span>"
                            : QString("  <span style='color:#c00'>[diverges at token %1]</span>").arg(div);
        html += "</td></tr>";
    }
    html += "</table>";
    m_texts->setHtml(html);

    QStringList labels;
    std::vector<QStringList> rows;
    std::vector<double> tps, tpsLo, tpsHi, ttft, ttftLo, ttftHi, depth, acc, prefill, decode, draft, verify;
    const ModeRun& baseRun = r.runs[static_cast<size_t>(r.baseline)];
    for (size_t i = 0; i < r.runs.size(); ++i) {
        const ModeRun& run = r.runs[i];
        const auto& s = run.stats;
        labels << QString::fromStdString(run.spec.label);
        // x the baseline's speed (tokens/s ratio), with the range the repeats allow; * beyond the noise
        QString speedup = "-";
        if (static_cast<int>(i) == r.baseline) speedup = "1x (baseline)";
        else if (run.error.empty() && !run.time.empty() && baseRun.error.empty() && !baseRun.time.empty()) {
            const Speedup sp = speedup_over(baseRun.ms_per_token(), run.ms_per_token());
            speedup = speedupText(sp) + (sp.beyond_noise ? " *" : "");
        }
        const double other = std::max(0.0, s.total_ms - s.prefill_ms - s.draft_ms - s.verify_ms);
        rows.push_back({QString::fromStdString(run.spec.label),
                        run.error.empty() ? QString::number(s.tokens_emitted) : QString("error"),
                        speedup,
                        QString("%1 (%2..%3)")
                            .arg(run.tokens_per_second(), 0, 'f', 1)
                            .arg(run.tokens_per_second_range().min, 0, 'f', 1)
                            .arg(run.tokens_per_second_range().max, 0, 'f', 1),
                        QString("%1 (%2..%3)")
                            .arg(run.first_token.median, 0, 'f', 2)
                            .arg(run.first_token.min, 0, 'f', 2)
                            .arg(run.first_token.max, 0, 'f', 2),
                        QString::number(run.mean_depth(), 'f', 2),
                        run.speculative ? QString("%1/%2 (%3%)").arg(s.spec_accepted).arg(s.spec_tested).arg(100.0 * s.spec_acceptance_rate(), 0, 'f', 1) : QString("-"),
                        QString::number(s.prefill_ms, 'f', 2),
                        QString::number(s.decode_ms, 'f', 2),
                        run.speculative ? QString::number(s.draft_ms, 'f', 2) : QString("-"),
                        run.speculative ? QString::number(s.verify_ms, 'f', 2) : QString("-"),
                        QString::number(run.time.empty() ? s.total_ms : run.time.median, 'f', 2),
                        r.divergence[i] < 0 ? QString("same") : QString::number(r.divergence[i]),
                        QString::fromStdString(run.error)});
        const Rate rate = run.tokens_per_second_range();
        tps.push_back(run.tokens_per_second());
        tpsLo.push_back(rate.min);
        tpsHi.push_back(rate.max);
        ttft.push_back(run.first_token.median);
        ttftLo.push_back(run.first_token.min);
        ttftHi.push_back(run.first_token.max);
        depth.push_back(run.mean_depth());
        acc.push_back(run.speculative ? 100.0 * s.spec_acceptance_rate() : 0.0);
        prefill.push_back(s.prefill_ms);
        draft.push_back(s.draft_ms);
        verify.push_back(s.verify_ms);
        decode.push_back(other);
    }
    fillTable(m_table, {"mode", "tokens", "speedup vs baseline (range; * beyond the noise)", "tok/s median (range)", "first token ms median (range)", "mean depth", "accepted", "prefill ms",
                        "decode ms", "draft ms", "verify ms", "total ms (median)", "diverges at", "error"},
              rows);
    // Rates and milliseconds on separate plots, each with the spread of the repeats as whiskers.
    drawCategoryBars(m_speed, labels, {tps}, {"tokens/s"}, false, "tokens/s");
    addWhiskers(qobject_cast<QCPBars*>(m_speed->plottable(0)), tpsLo, tpsHi);
    m_speed->yAxis->setRange(0, std::max(1.0, *std::max_element(tpsHi.begin(), tpsHi.end()) * 1.1));
    m_speed->replot();
    drawCategoryBars(m_first, labels, {ttft}, {"first token ms"}, false, "ms");
    addWhiskers(qobject_cast<QCPBars*>(m_first->plottable(0)), ttftLo, ttftHi);
    m_first->yAxis->setRange(0, std::max(1.0, *std::max_element(ttftHi.begin(), ttftHi.end()) * 1.1));
    m_first->replot();
    // Mean depth on the left axis (loops), acceptance on its own right axis (percent).
    drawCategoryBars(m_depth, labels, {depth, acc}, {"mean depth (loops, left)", "acceptance (%, right)"}, false, "loops");
    if (auto* accBars = qobject_cast<QCPBars*>(m_depth->plottable(1))) accBars->setValueAxis(m_depth->yAxis2);
    m_depth->yAxis->setRange(0, std::max(1.0, *std::max_element(depth.begin(), depth.end()) * 1.12));
    useIntegerTicks(m_depth->yAxis);
    m_depth->yAxis2->setVisible(true);
    m_depth->yAxis2->setLabel("acceptance (%)");
    m_depth->yAxis2->setRange(0, 105);
    m_depth->replot();
    drawCategoryBars(m_split, labels, {prefill, draft, verify, decode}, {"prefill", "draft", "verify", "decode (rest)"},
                     true, "ms");
}

nlohmann::json CompareModesView::data() const {
    if (!m_result) return {{"view", "compare"}, {"runs", nlohmann::json::array()}};
    return compare_to_json(*m_result);
}

}  // namespace tlui
