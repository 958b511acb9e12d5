#include "views/depth_scrubber_view.h"

#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSlider>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <tinyloop_analysis/compare_modes.h>
#include <tinyloop/json.h>
#include "record/plain_status.h"
#include "plots/plot_caption.h"
#include "plots/plot_layout.h"
#include "plots/plot_utils.h"

namespace tlui {

struct DepthScrubberView::State {
    std::unique_ptr<DepthScrubber> scrubber;
    tinyloop::Model* model = nullptr;
    std::string prompt;
    int max_tokens = 0;
    std::vector<int32_t> previous;
    bool hasPrevious = false;
};

DepthScrubberView::DepthScrubberView(WorkbenchAccess* workbench, QWidget* parent)
    : AnalysisWindow(workbench, "Depth scrubber", parent), m_state(std::make_shared<State>()) {
    QVBoxLayout* v = body();
    auto* form = new QFormLayout;
    m_prompt = newPromptField();
    m_maxTokens = newCountField(1, 512, 32);
    form->addRow("Prompt", m_prompt);
    form->addRow("Max tokens (greedy)", m_maxTokens);
    v->addLayout(form);
    auto* sh = new QHBoxLayout;
    m_slider = new QSlider(Qt::Horizontal);
    m_slider->setObjectName("depthSlider");
    m_slider->setRange(1, 16);
    m_slider->setValue(4);
    m_slider->setTickPosition(QSlider::TicksBelow);
    m_slider->setTickInterval(1);
    m_slider->setPageStep(1);
    m_depthLabel = new QLabel("depth 4");
    m_depthLabel->setMinimumWidth(80);
    sh->addWidget(new QLabel("Loop depth"));
    sh->addWidget(m_slider, 1);
    sh->addWidget(m_depthLabel);
    v->addLayout(sh);
    runButton()->setText("Prefill prompt");
    m_info = new QLabel;
    m_info->setObjectName("info");
    m_info->setWordWrap(true);
    v->addWidget(m_info);

    auto* split = new QSplitter(Qt::Vertical);
    auto* texts = new QSplitter(Qt::Horizontal);
    auto* left = new QWidget;
    auto* lv = new QVBoxLayout(left);
    lv->setContentsMargins(0, 0, 0, 0);
    lv->addWidget(new QLabel("Answer at this depth"));
    m_answer = new QTextBrowser;
    m_answer->setObjectName("answer");
    lv->addWidget(m_answer);
    auto* right = new QWidget;
    auto* rv = new QVBoxLayout(right);
    rv->setContentsMargins(0, 0, 0, 0);
    rv->addWidget(new QLabel("Diff from the previous depth (removed struck red, added green)"));
    m_diff = new QTextBrowser;
    m_diff->setObjectName("diff");
    rv->addWidget(m_diff);
    texts->addWidget(left);
    texts->addWidget(right);
    split->addWidget(texts);
    m_table = new QTableWidget;
    m_table->setObjectName("history");
    m_plot = new QCustomPlot;
    m_plot->setObjectName("answerTimes");
    stylePlot(m_plot);
    m_plot->xAxis->setLabel("loop depth");
    // one run per move of the slider (a resume depends on the depth before it, so it is not
    // repeated): a single reading, and the label says so
    m_plot->yAxis->setLabel("answer time (ms)");
    showEmptyState(m_plot, "Run, then move the depth slider to time each answer");
    auto* bottom = new QSplitter(Qt::Horizontal);
    bottom->addWidget(m_table);
    bottom->addWidget(withCaption(m_plot,
        "How long each answer took (one run each), by the [[depth]] asked. Going deeper runs only the new [[loop pass|passes]] "
        "over the prompt, so a step up costs less than starting again."));
    split->addWidget(bottom);
    v->addWidget(split, 1);

    connect(m_slider, &QSlider::valueChanged, this, [this](int d) {
        m_depthLabel->setText(QString("depth %1").arg(d));
        if (m_prefilled) answer(d);
    });
}

DepthScrubberView::~DepthScrubberView() = default;

void DepthScrubberView::setPrompt(const QString& text) { m_prompt->setText(text); }
void DepthScrubberView::setMaxTokens(int n) { m_maxTokens->setValue(n); }
void DepthScrubberView::setDepth(int depth) { m_slider->setValue(depth); }
void DepthScrubberView::setStartDepth(int depth) {
    m_prefilled = false;
    m_slider->setValue(depth);
}
int DepthScrubberView::depth() const { return m_slider->value(); }

void DepthScrubberView::run() {
    if (isBusy()) return;
    m_history.clear();
    m_prefilled = false;
    auto st = m_state;
    const std::string prompt = m_prompt->text().toStdString();
    const int max_tokens = m_maxTokens->value();
    const int d = m_slider->value();
    auto maxLoops = std::make_shared<int>(0);
    startJob("prefilling the prompt...", [=](AnalysisJobContext& ctx) {
        const auto& hp = tinyloop::model_hparams(ctx.model);
        *maxLoops = hp.max_loops;
        tinyloop::GenerateConfig cfg;
        cfg.max_tokens = max_tokens;
        st->scrubber = std::make_unique<DepthScrubber>(ctx.model, prompt_ids(ctx.model, prompt), cfg,
                                                       std::clamp(d, 1, hp.max_loops));
        st->model = ctx.model;
        st->prompt = prompt;
        st->max_tokens = max_tokens;
        st->hasPrevious = false;
    }, [=, this](bool ok, const QString&) {
        if (!ok) return;
        m_slider->blockSignals(true);
        m_slider->setRange(1, *maxLoops);
        m_slider->blockSignals(false);
        m_inFlight = false;
        m_prefilled = true;
        answer(std::clamp(d, 1, *maxLoops));
    });
}

void DepthScrubberView::answer(int depth) {
    if (m_inFlight) {  // coalesce moves made while an answer is being computed
        m_pendingDepth = depth;
        return;
    }
    m_inFlight = true;
    auto st = m_state;
    auto step = std::make_shared<Step>();
    startJob(QString("answering at depth %1...").arg(depth), [=](AnalysisJobContext& ctx) {
        if (!st->scrubber || st->model != ctx.model)
            throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, "scrubber: prefill the prompt first");
        step->previousDepth = 0;
        step->answer = st->scrubber->answer(depth);
        step->handle_bytes = st->scrubber->handle_bytes();
        step->diff = diff_tokens(st->hasPrevious ? st->previous : std::vector<int32_t>{}, step->answer.tokens);
        for (const DiffOp& op : step->diff)
            step->diffPieces.push_back(QString::fromStdString(tinyloop::detokenize_text(ctx.model, &op.token, 1)));
        st->previous = step->answer.tokens;
        st->hasPrevious = true;
    }, [=, this](bool ok, const QString&) {
        m_inFlight = false;
        if (ok) {
            step->previousDepth = m_history.empty() ? 0 : m_history.back().answer.depth;
            m_history.push_back(*step);
            showStep(m_history.back());
            setStatus(QString("answered at depth %1").arg(step->answer.depth));
        }
        if (m_pendingDepth > 0) {
            const int next = m_pendingDepth;
            m_pendingDepth = 0;
            if (ok && next != m_history.back().answer.depth) answer(next);
        }
    });
}

void DepthScrubberView::showStep(const Step& s) {
    const ScrubAnswer& a = s.answer;
    m_answer->setPlainText(QString::fromStdString(a.text));
    QString html = "<div style='font-family:monospace'>";
    int changed = 0;
    for (size_t i = 0; i < s.diff.size(); ++i) {
        const QString p = tokenHtml(s.diffPieces[i]);
        switch (s.diff[i].kind) {
        case DiffOp::Same: html += p; break;
        case DiffOp::Removed:
            ++changed;
            html += "<span style='background:#ffd0d0;color:#900;text-decoration:line-through'>" + p + "</span>";
            break;
        case DiffOp::Added:
            ++changed;
            html += "<span style='background:#d0f5d0;color:#060'>" + p + "</span>";
            break;
        }
    }
    html += "</div>";
    m_diff->setHtml(s.previousDepth == 0 ? "<i>first answer: nothing to compare with yet</i><br>" + html : html);
    const int fd = s.previousDepth == 0 ? -1 : [&] {
        int k = 0;
        for (const DiffOp& op : s.diff) {
            if (op.kind != DiffOp::Same) return k;
            ++k;
        }
        return -1;
    }();
    ScrubberAnswerFacts facts;
    facts.depth = a.depth;
    facts.previousDepth = s.previousDepth;
    facts.tokens = a.stats.tokens_emitted;
    facts.ms = a.ms;
    facts.promptDepthBefore = a.handle_loops_before;
    facts.promptDepthAfter = a.handle_loops_after;
    facts.keptBytes = s.handle_bytes;
    facts.changedTokens = changed;
    facts.firstChange = fd;
    m_info->setText(scrubberAnswerText(facts));
    std::vector<QStringList> rows;
    QVector<double> xs, ys;
    for (const Step& h : m_history) {
        int edits = 0;
        for (const DiffOp& op : h.diff) edits += op.kind != DiffOp::Same;
        rows.push_back({QString::number(h.answer.depth), h.previousDepth ? QString::number(h.previousDepth) : "-",
                        QString::number(h.answer.ms, 'f', 2),
                        QString("%1 -> %2").arg(h.answer.handle_loops_before).arg(h.answer.handle_loops_after),
                        h.previousDepth ? QString::number(edits) : "-",
                        QString::fromStdString(h.answer.text).left(60)});
        xs << h.answer.depth;
        ys << h.answer.ms;
    }
    fillTable(m_table, {"depth", "from", "ms", "prompt depth", "token edits", "answer"}, rows);
    m_table->scrollToBottom();
    clearEmptyState(m_plot);
    m_plot->clearGraphs();
    auto* g = m_plot->addGraph();
    g->setLineStyle(QCPGraph::lsNone);
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QColor(70, 120, 230), 7));
    g->setData(xs, ys, false);
    double ymax = 0;
    for (double y : ys) ymax = std::max(ymax, y);
    useIntegerTicks(m_plot->xAxis);
    m_plot->xAxis->setRange(0.5, m_slider->maximum() + 0.5);
    m_plot->yAxis->setRange(0, ymax > 0 ? ymax * 1.25 : 1.0);
    m_plot->replot();
}

nlohmann::json DepthScrubberView::data() const {
    nlohmann::json steps = nlohmann::json::array();
    for (const Step& s : m_history) {
        nlohmann::json diff = nlohmann::json::array();
        for (size_t i = 0; i < s.diff.size(); ++i)
            diff.push_back({{"op", s.diff[i].kind == DiffOp::Same ? "same" : s.diff[i].kind == DiffOp::Removed ? "removed" : "added"},
                            {"token", s.diff[i].token},
                            {"text", s.diffPieces[i].toStdString()}});
        steps.push_back({{"depth", s.answer.depth},
                         {"previous_depth", s.previousDepth},
                         {"output_ids", s.answer.tokens},
                         {"text", s.answer.text},
                         {"ms", s.answer.ms},
                         {"prompt_depth_before", s.answer.handle_loops_before},
                         {"prompt_depth_after", s.answer.handle_loops_after},
                         {"handle_bytes", s.handle_bytes},
                         {"stats", tinyloop::stats_to_json(s.answer.stats)},
                         {"diff", diff}});
    }
    return {{"view", "scrubber"}, {"prompt", m_prompt->text().toStdString()}, {"max_tokens", m_maxTokens->value()},
            {"steps", steps}};
}

}  // namespace tlui
