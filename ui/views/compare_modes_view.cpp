#include "views/compare_modes_view.h"

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
#include <qcustomplot.h>

#include "plots/plot_caption.h"
#include "plots/plot_utils.h"

namespace tlui {

CompareView::CompareView(WorkbenchAccess* workbench, QWidget* parent) : AnalysisWindow(workbench, "Compare decode modes", parent) {
    QVBoxLayout* v = body();
    auto* top = new QHBoxLayout;
    auto* form = new QFormLayout;
    m_prompt = newPromptField();
    m_maxTokens = newCountField(1, 512, 32);
    m_concurrent = new QCheckBox("run the modes concurrently on the one model");
    m_concurrent->setChecked(true);
    m_baseline = new QComboBox;
    m_baseline->setObjectName("baseline");
    form->addRow("Prompt", m_prompt);
    form->addRow("Max tokens", m_maxTokens);
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
    auto* plots = new QWidget;
    auto* ph = new QHBoxLayout(plots);
    ph->setContentsMargins(0, 0, 0, 0);
    m_speed = new QCustomPlot;
    m_depth = new QCustomPlot;
    m_split = new QCustomPlot;
    const char* captions[] = {
        "How fast each mode was: [[tokens per second]] over the call, and the wait for the [[first token]].",
        "The mean [[depth]] each mode's tokens used and, for speculative modes, the [[acceptance]] of drafts. "
        "Less depth for the same text is work saved.",
        "Where each mode's time went, in ms: [[prefill]], [[decode]] and, for [[self-speculation]], drafting "
        "and verifying."};
    int at = 0;
    for (QCustomPlot* p : {m_speed, m_depth, m_split}) {
        stylePlot(p);
        p->setMinimumHeight(240);
        ph->addWidget(withCaption(p, captions[at++]));
    }
    m_speed->plotLayout()->insertRow(0);
    m_speed->plotLayout()->addElement(0, 0, new QCPTextElement(m_speed, "tokens/s (total) and first token (ms)"));
    m_depth->plotLayout()->insertRow(0);
    m_depth->plotLayout()->addElement(0, 0, new QCPTextElement(m_depth, "mean depth and acceptance (%)"));
    m_split->plotLayout()->insertRow(0);
    m_split->plotLayout()->addElement(0, 0, new QCPTextElement(m_split, "time split (ms)"));
    split->addWidget(plots);
    split->setStretchFactor(0, 2);
    split->setStretchFactor(1, 2);
    split->setStretchFactor(2, 3);
    v->addWidget(split, 1);

    tinyloop::HParams hp;  // the defaults are clamped by the engine's refusal if the model is shallower
    hp.max_loops = 16;
    for (const ModeSpec& m : default_compare_modes(hp, m_maxTokens->value())) addMode(m, true);

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

void CompareView::addMode(const ModeSpec& m, bool checked) {
    m_specs.push_back(m);
    auto* item = new QListWidgetItem(QString::fromStdString(m.label), m_modes);
    item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
    item->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
    item->setToolTip(QString::fromStdString(mode_spec_to_json(m).dump()));
}

void CompareView::setPrompt(const QString& text) { m_prompt->setText(text); }
void CompareView::setMaxTokens(int n) { m_maxTokens->setValue(n); }
void CompareView::setConcurrent(bool on) { m_concurrent->setChecked(on); }
void CompareView::setBaseline(int index) { m_baseline->setCurrentIndex(index); }

void CompareView::setModes(const std::vector<ModeSpec>& modes) {
    m_specs.clear();
    m_modes->clear();
    for (const ModeSpec& m : modes) addMode(m, true);
}

std::vector<ModeSpec> CompareView::checkedModes() const {
    std::vector<ModeSpec> out;
    for (int i = 0; i < m_modes->count(); ++i)
        if (m_modes->item(i)->checkState() == Qt::Checked) {
            ModeSpec m = m_specs[static_cast<size_t>(i)];
            m.run.config.max_tokens = m_maxTokens->value();
            out.push_back(m);
        }
    return out;
}

void CompareView::run() {
    if (isBusy()) return;
    const std::vector<ModeSpec> modes = checkedModes();
    if (modes.empty()) return setStatus("check at least one mode", true);
    const std::string prompt = m_prompt->text().toStdString();
    const bool concurrent = m_concurrent->isChecked();
    // the baseline picked last time, else the second mode (greedy at the deeper depth by default)
    const int picked = m_baseline->currentIndex();
    const int baseline = picked >= 0 && picked < static_cast<int>(modes.size()) ? picked : (modes.size() > 1 ? 1 : 0);
    auto res = std::make_shared<CompareResult>();
    auto pieces = std::make_shared<std::vector<std::vector<QString>>>();
    startJob(QString("running %1 modes%2...").arg(modes.size()).arg(concurrent ? " concurrently" : ""),
             [=](AnalysisJobContext& ctx) {
                 const int total = static_cast<int>(modes.size());
                 std::atomic<int> done{0};
                 ctx.progress(0, total, QString());
                 *res = run_comparison(ctx.model, prompt, modes, baseline, concurrent, ctx.cancel, [&](int) {
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
                 setStatus(QString("%1 modes in %2 ms by the clock, %3")
                               .arg(res->runs.size())
                               .arg(res->wall_ms, 0, 'f', 0)
                               .arg(res->concurrent ? "all at the same time (their speeds share the processor)"
                                                    : "one after another"));
             });
}

void CompareView::showResult() {
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
    std::vector<double> tps, ttft, depth, acc, prefill, decode, draft, verify;
    for (size_t i = 0; i < r.runs.size(); ++i) {
        const ModeRun& run = r.runs[i];
        const auto& s = run.stats;
        labels << QString::fromStdString(run.spec.label);
        const double other = std::max(0.0, s.total_ms - s.prefill_ms - s.draft_ms - s.verify_ms);
        rows.push_back({QString::fromStdString(run.spec.label),
                        run.error.empty() ? QString::number(s.tokens_emitted) : QString("error"),
                        QString::number(run.tokens_per_second(), 'f', 1),
                        QString::number(s.first_token_ms, 'f', 2),
                        QString::number(run.mean_depth(), 'f', 2),
                        run.speculative ? QString("%1/%2 (%3%)").arg(s.spec_accepted).arg(s.spec_tested).arg(100.0 * s.spec_acceptance_rate(), 0, 'f', 1) : QString("-"),
                        QString::number(s.prefill_ms, 'f', 2),
                        QString::number(s.decode_ms, 'f', 2),
                        run.speculative ? QString::number(s.draft_ms, 'f', 2) : QString("-"),
                        run.speculative ? QString::number(s.verify_ms, 'f', 2) : QString("-"),
                        QString::number(s.total_ms, 'f', 2),
                        r.divergence[i] < 0 ? QString("same") : QString::number(r.divergence[i]),
                        QString::fromStdString(run.error)});
        tps.push_back(run.tokens_per_second());
        ttft.push_back(s.first_token_ms);
        depth.push_back(run.mean_depth());
        acc.push_back(run.speculative ? 100.0 * s.spec_acceptance_rate() : 0.0);
        prefill.push_back(s.prefill_ms);
        draft.push_back(s.draft_ms);
        verify.push_back(s.verify_ms);
        decode.push_back(other);
    }
    fillTable(m_table, {"mode", "tokens", "tok/s", "first token ms", "mean depth", "accepted", "prefill ms",
                        "decode ms", "draft ms", "verify ms", "total ms", "diverges at", "error"},
              rows);
    drawCategoryBars(m_speed, labels, {tps, ttft}, {"tokens/s", "first token ms"}, false, "");
    // Mean depth and acceptance share one axis: depth in loops, acceptance scaled to percent / 10.
    std::vector<double> acc10;
    for (double a : acc) acc10.push_back(a / 10.0);
    drawCategoryBars(m_depth, labels, {depth, acc10}, {"mean depth (loops)", "acceptance (% / 10)"}, false, "");
    drawCategoryBars(m_split, labels, {prefill, draft, verify, decode}, {"prefill", "draft", "verify", "decode (rest)"},
                     true, "ms");
}

nlohmann::json CompareView::data() const {
    if (!m_result) return {{"view", "compare"}, {"runs", nlohmann::json::array()}};
    return compare_to_json(*m_result);
}

}  // namespace tlui
