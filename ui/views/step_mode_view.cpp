#include "views/step_mode_view.h"

#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>

#include <tinyloop_analysis/compare_modes.h>

#include "record/plain_status.h"
#include "plots/plot_caption.h"

namespace tlui {

struct StepModeView::State {
    std::unique_ptr<Stepper> stepper;
    tinyloop::Model* model = nullptr;
};

StepModeView::StepModeView(WorkbenchAccess* workbench, QWidget* parent)
    : AnalysisWindow(workbench, "Step mode", parent), m_state(std::make_shared<State>()) {
    QVBoxLayout* v = body();
    auto* form = new QFormLayout;
    m_prompt = newPromptField();
    auto* knobs = new QHBoxLayout;
    m_loops = new QSpinBox;
    m_loops->setRange(0, 64);
    m_loops->setSpecialValueText("default");
    m_loops->setValue(0);
    m_temp = new QDoubleSpinBox;
    m_temp->setRange(0.0, 5.0);
    m_temp->setSingleStep(0.1);
    m_temp->setValue(0.0);
    m_seed = new QSpinBox;
    m_seed->setRange(0, 1 << 30);
    m_seed->setValue(1);
    m_maxTokens = newCountField(1, 512, 64);
    for (auto [label, w] : std::initializer_list<std::pair<const char*, QWidget*>>{
             {"Loops", m_loops}, {"Temperature (0 = greedy)", m_temp}, {"Seed", m_seed}, {"Max tokens", m_maxTokens}}) {
        knobs->addWidget(new QLabel(label));
        knobs->addWidget(w);
    }
    knobs->addStretch(1);
    form->addRow("Prompt", m_prompt);
    form->addRow("Decoder", knobs);
    v->addLayout(form);
    runButton()->setText("Start");
    auto* acts = new QHBoxLayout;
    m_accept = new QPushButton("Take the proposal (Enter)");
    m_accept->setObjectName("acceptButton");
    m_accept->setShortcut(QKeySequence(Qt::Key_Return));
    m_takeSel = new QPushButton("Take the selected candidate");
    m_run10 = new QPushButton("Take 10 proposals");
    m_tokenId = new QLineEdit;
    m_tokenId->setPlaceholderText("or a token id");
    m_tokenId->setMaximumWidth(120);
    m_takeId = new QPushButton("Take id");
    m_takeId->setObjectName("takeIdButton");
    for (QWidget* w : {static_cast<QWidget*>(m_accept), static_cast<QWidget*>(m_takeSel), static_cast<QWidget*>(m_run10),
                       static_cast<QWidget*>(m_tokenId), static_cast<QWidget*>(m_takeId)})
        acts->addWidget(w);
    acts->addStretch(1);
    v->addLayout(acts);
    auto* split = new QSplitter(Qt::Vertical);
    m_text = new QTextBrowser;
    m_text->setObjectName("text");
    split->addWidget(m_text);
    m_lens = new QTableWidget;
    m_lens->setObjectName("lensRow");
    m_lens->setSelectionMode(QAbstractItemView::SingleSelection);
    m_lens->setSelectionBehavior(QAbstractItemView::SelectItems);
    split->addWidget(withCaption(m_lens,
        "The [[lens row]] of the next token: one row per [[loop pass]], its top guesses with their "
        "[[probability|probabilities]]. Select any cell and take that token instead of the proposal to steer "
        "the text by hand."));
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 2);
    v->addWidget(split, 1);

    connect(m_accept, &QPushButton::clicked, this, [this] { take(-1); });
    connect(m_run10, &QPushButton::clicked, this, [this] { takeProposals(10); });
    connect(m_takeSel, &QPushButton::clicked, this, [this] {
        auto* item = m_lens->currentItem();
        if (!item || !item->data(Qt::UserRole).isValid()) return setStatus("select a candidate cell first", true);
        take(item->data(Qt::UserRole).toInt());
    });
    connect(m_lens, &QTableWidget::cellDoubleClicked, this, [this](int r, int c) {
        auto* item = m_lens->item(r, c);
        if (item && item->data(Qt::UserRole).isValid()) take(item->data(Qt::UserRole).toInt());
    });
    connect(m_takeId, &QPushButton::clicked, this, [this] {
        bool ok = false;
        const int id = m_tokenId->text().trimmed().toInt(&ok);
        if (!ok) return setStatus("token id: not an integer", true);
        take(id);
    });
    for (QPushButton* b : {m_accept, m_takeSel, m_run10, m_takeId}) b->setEnabled(false);
}

void StepModeView::setPrompt(const QString& text) { m_prompt->setText(text); }
void StepModeView::setConfig(int loops, double temperature, quint64 seed, int max_tokens) {
    m_loops->setValue(loops);
    m_temp->setValue(temperature);
    m_seed->setValue(static_cast<int>(seed));
    m_maxTokens->setValue(max_tokens);
}

void StepModeView::run() {
    if (isBusy()) return;
    auto st = m_state;
    const std::string prompt = m_prompt->text().toStdString();
    tinyloop::GenerateConfig cfg;
    cfg.loops = m_loops->value();
    cfg.temperature = static_cast<float>(m_temp->value());
    cfg.sample_seed = static_cast<uint64_t>(m_seed->value());
    cfg.max_tokens = m_maxTokens->value();
    auto snap = std::make_shared<Snapshot>();
    startJob("starting...", [=](AnalysisJobContext& ctx) {
        st->stepper = std::make_unique<Stepper>(ctx.model, prompt_ids(ctx.model, prompt), cfg, 8);
        st->model = ctx.model;
    }, [=, this](bool ok, const QString&) {
        if (ok) submitSteps({}, 0);
    });
}

void StepModeView::take(int32_t token) {
    if (token < 0) return submitSteps({}, 1);
    submitSteps({token}, 0);
}

void StepModeView::takeProposals(int n) { submitSteps({}, n); }

void StepModeView::submitSteps(std::vector<int32_t> tokens, int proposals) {
    if (isBusy()) return;
    auto st = m_state;
    auto snap = std::make_shared<Snapshot>();
    startJob("stepping...", [=](AnalysisJobContext& ctx) {
        if (!st->stepper || st->model != ctx.model)
            throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, "step mode: press Start first");
        Stepper& s = *st->stepper;
        for (int32_t t : tokens)
            if (!s.finished()) s.commit(t);
        for (int i = 0; i < proposals && !s.finished() && !ctx.cancelled(); ++i) {
            s.accept_proposal();
            ctx.progress(i + 1, proposals, QString());
        }
        snap->prompt = s.prompt();
        snap->steps = s.steps();
        snap->finished = s.finished();
        snap->stop_reason = stopReasonWords(s.stop_reason());
        for (const StepRecord& r : s.steps())
            snap->stepPieces.push_back(QString::fromStdString(tinyloop::detokenize_text(ctx.model, &r.chosen, 1)));
        snap->text = QString::fromStdString(s.text());
        if (!s.finished()) {
            snap->proposal = s.propose();
            snap->proposalText = QString::fromStdString(tinyloop::detokenize_text(ctx.model, &snap->proposal->token, 1));
            for (const tinyloop::LensDepth& d : snap->proposal->lens) {
                std::vector<QString> row;
                for (int32_t id : d.top_ids) row.push_back(QString::fromStdString(tinyloop::detokenize_text(ctx.model, &id, 1)));
                snap->lensText.push_back(std::move(row));
            }
        }
        snap->json = steps_to_json(s, ctx.model);
    }, [=, this](bool ok, const QString&) {
        if (!ok) return;
        m_snap = *snap;
        showSnapshot();
    });
}

void StepModeView::showSnapshot() {
    const Snapshot& s = m_snap;
    QString html = "<div style='font-family:monospace'><span style='color:#666'>" +
                   tokenHtml(QString::fromStdString(s.json.value("prompt_text", std::string()))) + "</span>";
    for (size_t i = 0; i < s.steps.size(); ++i) {
        const StepRecord& r = s.steps[i];
        const QString p = tokenHtml(s.stepPieces[i]);
        html += r.overridden()
                    ? QString("<span style='background:#ffe08a;color:#000' title='proposed %1'>%2</span>").arg(r.proposal.token).arg(p)
                    : QString("<span title='p=%1 depth %2'>%3</span>").arg(r.proposal.prob, 0, 'f', 3).arg(r.proposal.depth).arg(p);
    }
    if (s.proposal)
        html += "<span style='background:#cfe3ff;color:#124'>" + tokenHtml(s.proposalText) + "</span><span style='color:#999'>?</span>";
    html += "</div>";
    if (s.finished) html += QString("<p><i>finished: %1</i></p>").arg(s.stop_reason);
    m_text->setHtml(html);

    m_lens->clear();
    if (s.proposal) {
        const auto& lens = s.proposal->lens;
        const int topk = lens.empty() ? 0 : static_cast<int>(lens.front().top_ids.size());
        m_lens->setRowCount(static_cast<int>(lens.size()));
        m_lens->setColumnCount(topk + 2);
        QStringList headers{"p(proposal)", "entropy"};
        for (int k = 0; k < topk; ++k) headers << QString("#%1").arg(k + 1);
        m_lens->setHorizontalHeaderLabels(headers);
        QStringList vlabels;
        for (size_t r = 0; r < lens.size(); ++r) {
            const tinyloop::LensDepth& d = lens[r];
            vlabels << QString("depth %1").arg(d.depth);
            m_lens->setItem(static_cast<int>(r), 0, new QTableWidgetItem(QString::number(d.p_emitted, 'f', 3)));
            m_lens->setItem(static_cast<int>(r), 1, new QTableWidgetItem(QString::number(d.entropy, 'f', 2)));
            for (int k = 0; k < static_cast<int>(d.top_ids.size()) && k < topk; ++k) {
                QString t = s.lensText[r][static_cast<size_t>(k)];
                t.replace("\n", "\\n");
                auto* item = new QTableWidgetItem(QString("'%1' %2").arg(t).arg(d.top_probs[static_cast<size_t>(k)], 0, 'f', 3));
                item->setData(Qt::UserRole, d.top_ids[static_cast<size_t>(k)]);
                item->setToolTip(QString("id %1; double-click to take it").arg(d.top_ids[static_cast<size_t>(k)]));
                if (d.top_ids[static_cast<size_t>(k)] == s.proposal->token) item->setBackground(QColor(207, 227, 255));
                item->setFlags(item->flags() & ~Qt::ItemIsEditable);
                m_lens->setItem(static_cast<int>(r), k + 2, item);
            }
        }
        m_lens->setVerticalHeaderLabels(vlabels);
        m_lens->resizeColumnsToContents();
        setStatus(QString("step %1: proposal '%2' (id %3, p=%4, depth %5)")
                      .arg(s.steps.size() + 1)
                      .arg(s.proposalText)
                      .arg(s.proposal->token)
                      .arg(s.proposal->prob, 0, 'f', 3)
                      .arg(s.proposal->depth));
    } else {
        setStatus(QString("finished after %1 steps (%2)").arg(s.steps.size()).arg(s.stop_reason));
    }
    for (QPushButton* b : {m_accept, m_takeSel, m_run10, m_takeId}) b->setEnabled(!s.finished);
}

nlohmann::json StepModeView::data() const {
    if (m_snap.json.is_null()) return {{"view", "step"}};
    nlohmann::json j = m_snap.json;
    j["prompt"] = m_prompt->text().toStdString();
    return j;
}

}  // namespace tlui
