#include "views/kv_provenance_view.h"

#include <algorithm>
#include <iterator>
#include <memory>

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QSpinBox>
#include <QSplitter>
#include <qcustomplot.h>

#include "record/plain_status.h"
#include "plots/plot_caption.h"
#include "plots/plot_layout.h"
#include "plots/plot_utils.h"

namespace tlui {

KvProvenanceView::KvProvenanceView(WorkbenchAccess* workbench, QWidget* parent) : AnalysisWindow(workbench, "KV provenance", parent) {
    m_setup = new QComboBox;
    m_setup->setObjectName("setup");
    for (KvSetup s : {KvSetup::Plain, KvSetup::EarlyExit, KvSetup::PrefixCache})
        m_setup->addItem(kv_setup_name(s), static_cast<int>(s));
    m_maxTokens = newCountField(1, 512, 32);
    m_loops = new QSpinBox;
    m_loops->setRange(0, 64);
    // "default": the model's own depth (Ouro's 4 steps, Huginn's 32), so the map opens at the
    // shape the model runs at rather than a fixed 8.
    m_loops->setValue(0);
    m_loops->setSpecialValueText("default");
    m_threshold = new QDoubleSpinBox;
    m_threshold->setDecimals(3);
    m_threshold->setRange(0.001, 10.0);
    m_threshold->setSingleStep(0.05);
    m_threshold->setValue(0.2);
    m_prefix = new QSpinBox;
    m_prefix->setRange(1, 4096);
    m_prefix->setValue(4);
    addControl("Set-up", m_setup);
    addControl("Tokens", m_maxTokens);
    addControl("Depth", m_loops);
    addControl("Exit threshold (hidden_l2)", m_threshold);
    addControl("Cached prefix tokens", m_prefix);
    controls()->addStretch(1);

    auto* split = new QSplitter(Qt::Vertical);
    m_map = new QCustomPlot;
    m_map->setObjectName("kvMap");
    stylePlot(m_map);
    m_map->xAxis->setLabel("position");
    m_map->yAxis->setLabel("execution layer");
    split->addWidget(withCaption(m_map,
        "Each column is a position, each row an execution layer ([[prelude]] first, then every [[loop pass]]'s "
        "layers). The colour says who wrote that [[KV cache]] entry: a normal pass, [[propagated keys/values|"
        "propagated]] from a token's early exit, or the [[prefix cache]]."));
    m_mem = new QCustomPlot;
    m_mem->setObjectName("kvMemory");
    stylePlot(m_mem);
    m_mem->xAxis->setLabel("position");
    m_mem->yAxis->setLabel("KV cache (KiB)");
    useIntegerTicks(m_map->xAxis);
    useIntegerTicks(m_map->yAxis);
    useIntegerTicks(m_mem->xAxis);
    putLegendBelow(m_map);
    putLegendBelow(m_mem);
    showEmptyState(m_map, "Run to see where each key/value row came from");
    showEmptyState(m_mem, "Run to see the KV memory per position");
    split->addWidget(withCaption(m_mem,
        "Memory of the [[KV cache]] as the text grows, position by position: what was written so far and "
        "what the call set aside."));
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    m_summary = new QLabel("Run to decode the workbench prompt and record where each key/value row came from.");
    m_summary->setObjectName("summary");
    m_summary->setWordWrap(true);
    body()->addWidget(m_summary);
    m_sharingLabel = new QLabel;
    m_sharingLabel->setObjectName("kvSharing");
    m_sharingLabel->setWordWrap(true);
    body()->addWidget(m_sharingLabel);
    body()->addWidget(split, 1);
}

void KvProvenanceView::setSetup(KvSetup s) { m_setup->setCurrentIndex(m_setup->findData(static_cast<int>(s))); }
void KvProvenanceView::setMaxTokens(int n) { m_maxTokens->setValue(n); }
void KvProvenanceView::setLoops(int loops) { m_loops->setValue(loops); }
void KvProvenanceView::setThreshold(double t) { m_threshold->setValue(t); }
void KvProvenanceView::setPrefixLen(int n) { m_prefix->setValue(n); }

void KvProvenanceView::run() {
    const QString path = modelPath();
    const std::string prompt = workbenchPrompt().toStdString();
    const KvSetup setup = static_cast<KvSetup>(m_setup->currentData().toInt());
    tinyloop::GenerateConfig c;
    c.max_tokens = m_maxTokens->value();
    c.loops = m_loops->value();
    c.early_exit.patience = setup == KvSetup::EarlyExit ? 1 : 0;
    c.early_exit.criterion = tinyloop::EarlyExitCriterion::HiddenL2;
    c.early_exit.threshold = static_cast<float>(m_threshold->value());
    const int prefix = m_prefix->value();
    auto out = std::make_shared<KvRun>();
    auto sharing = std::make_shared<std::vector<tinyloop::KVSharingScore>>();
    startJob("decoding with provenance", [path, prompt, setup, c, prefix, out, sharing](AnalysisJobContext& ctx) {
        tinyloop::Model* m = ctx.modelAt(path);
        const std::vector<int32_t> ids = tinyloop::tokenize(m, prompt);
        const char* modes[] = {"last-pass", "latest-m4", "compress-s4", "compress-s8"};
        const int steps = 1 + static_cast<int>(std::size(modes));
        ctx.progress(0, steps, "decoding");
        *out = run_kv_provenance(m, ids, c, setup, std::min(prefix, static_cast<int>(ids.size())));
        // Each kv_sharing mode on the same tokens and policy, against per-pass in the same call.
        const int n = static_cast<int>(out->tokens.size());
        if (out->prompt_len >= 1 && n > out->prompt_len)
            for (int i = 0; i < static_cast<int>(std::size(modes)); ++i) {
                ctx.checkCancel();
                ctx.progress(1 + i, steps, QString("kv_sharing %1").arg(modes[i]));
                tinyloop::GenerateConfig sc = c;
                sc.kv_sharing = tinyloop::parse_kv_sharing(modes[i]);
                sharing->push_back(tinyloop::score_kv_sharing(m, out->tokens.data(), n, sc, out->prompt_len));
            }
        ctx.progress(steps, steps, "done");
    }, [this, out, sharing](bool ok, const QString&) {
        if (!ok) return;
        m_run = std::move(*out);
        m_sharing = std::move(*sharing);
        m_has = true;
        redraw();
    });
}

void KvProvenanceView::redraw() {
    const tinyloop::KVProvenance& p = m_run.prov;
    clearEmptyState(m_map);
    clearEmptyState(m_mem);
    m_map->clearPlottables();
    auto* cmap = new QCPColorMap(m_map->xAxis, m_map->yAxis);
    cmap->data()->setSize(p.n_positions, p.n_layers);
    cmap->data()->setRange(QCPRange(0, std::max(p.n_positions - 1, 1)), QCPRange(0, std::max(p.n_layers - 1, 1)));
    for (int e = 0; e < p.n_layers; ++e)
        for (int pos = 0; pos < p.n_positions; ++pos) cmap->data()->setCell(pos, e, static_cast<int>(p.at(e, pos)));
    QCPColorGradient g;
    g.setLevelCount(4);
    g.setColorStopAt(0.0, QColor(235, 235, 235));  // none
    g.setColorStopAt(0.33, QColor(60, 110, 210));  // computed
    g.setColorStopAt(0.67, QColor(240, 150, 30));  // propagated
    g.setColorStopAt(1.0, QColor(40, 170, 90));    // reused
    cmap->setGradient(g);
    cmap->setDataRange(QCPRange(0, 3));
    cmap->setInterpolate(false);
    cmap->removeFromLegend();
    // The legend names the map's four colours (one empty entry per origin, drawn as a swatch).
    const std::pair<const char*, QColor> origins[] = {{"computed", QColor(60, 110, 210)},
                                                      {"propagated", QColor(240, 150, 30)},
                                                      {"reused", QColor(40, 170, 90)},
                                                      {"never written", QColor(235, 235, 235)}};
    for (const auto& [name, colour] : origins) {
        QCPGraph* swatch = m_map->addGraph();
        swatch->setName(name);
        swatch->setLineStyle(QCPGraph::lsNone);
        swatch->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, QPen(colour.darker(140)), colour, 10));
    }
    m_map->legend->setVisible(true);
    m_map->xAxis->setRange(-0.5, p.n_positions - 0.5);
    m_map->yAxis->setRange(-0.5, p.n_layers - 0.5);
    m_map->replot();

    m_mem->clearGraphs();
    QVector<double> xs, live, alloc;
    for (int pos = 0; pos < p.n_positions; ++pos) {
        xs.push_back(pos);
        live.push_back(static_cast<double>(m_run.live_bytes[static_cast<size_t>(pos)]) / 1024.0);
        alloc.push_back(static_cast<double>(p.kv_bytes_allocated) / 1024.0);
    }
    QCPGraph* gl = m_mem->addGraph();
    gl->setName("written (live)");
    gl->setData(xs, live, true);
    gl->setPen(QPen(QColor(60, 110, 210), 2));
    QCPGraph* ga = m_mem->addGraph();
    ga->setName("allocated by the call");
    ga->setData(xs, alloc, true);
    ga->setPen(QPen(QColor(120, 120, 120), 1.5, Qt::DashLine));
    m_mem->rescaleAxes();
    m_mem->yAxis->setRangeLower(0);
    m_mem->yAxis->setRangeUpper(m_mem->yAxis->range().upper * 1.08);
    m_mem->legend->setVisible(true);
    m_mem->replot();

    QString text = QString("%1: %2 positions x %3 execution layers (%4 prelude + %5 per pass). Rows: "
                           "<span style='color:#3c6ed2'>computed %6</span>, "
                           "<span style='color:#f0961e'>propagated %7</span>, "
                           "<span style='color:#28aa5a'>reused %8</span>, never written %9. "
                           "The cache holds %10 written of %11 set aside.")
                       .arg(kv_setup_name(m_run.setup))
                       .arg(p.n_positions)
                       .arg(p.n_layers)
                       .arg(p.n_pre_blocks)
                       .arg(p.n_loop_layers)
                       .arg(m_run.count(tinyloop::KVOrigin::Computed))
                       .arg(m_run.count(tinyloop::KVOrigin::Propagated))
                       .arg(m_run.count(tinyloop::KVOrigin::Reused))
                       .arg(m_run.count(tinyloop::KVOrigin::None))
                       .arg(memoryText(p.kv_bytes_written))
                       .arg(memoryText(p.kv_bytes_allocated));
    if (m_run.setup == KvSetup::PrefixCache)
        text += QString(" The prefix cache (%1 tokens) holds %2.").arg(m_run.prefix_len).arg(memoryText(m_run.prefix_cache_bytes));
    m_summary->setText(text);

    QString rows;
    for (const tinyloop::KVSharingScore& s : m_sharing)
        rows += QString("<tr><td>%1</td><td align='right'>%2</td><td align='right'>%3</td><td align='right'>%4</td></tr>")
                    .arg(QString::fromStdString(s.kv_sharing))
                    .arg(s.bytes_per_token, 0, 'f', 0)
                    .arg(s.exact_bytes_per_token / std::max(1.0, s.bytes_per_token), 0, 'f', 2)
                    .arg(s.delta_nll, 0, 'f', 4);
    m_sharingLabel->setText(
        m_sharing.empty()
            ? QString("KV sharing across passes: nothing was generated to measure it on.")
            : QString("<b>KV sharing across passes</b> on these %1 tokens (the prompt prefilled, the output fed "
                      "one at a time), against per-pass (%2 bytes/token):<table cellspacing='6'><tr><th>mode</th>"
                      "<th>bytes/token</th><th>x less</th><th>NLL change (nats/token)</th></tr>%3</table>")
                  .arg(m_run.tokens.size())
                  .arg(m_sharing.front().exact_bytes_per_token, 0, 'f', 0)
                  .arg(rows));
}

nlohmann::json KvProvenanceView::data() const {
    if (!m_has) return {{"view", "kv provenance"}, {"empty", true}};
    nlohmann::json j = kv_json(m_run);
    j["kv_sharing"] = nlohmann::json::array();
    for (const tinyloop::KVSharingScore& s : m_sharing)
        j["kv_sharing"].push_back({{"mode", s.kv_sharing},
                                   {"bytes_per_token", s.bytes_per_token},
                                   {"exact_bytes_per_token", s.exact_bytes_per_token},
                                   {"delta_nll", s.delta_nll},
                                   {"total_nll", s.score.total_nll},
                                   {"exact_total_nll", s.exact_total_nll}});
    return j;
}

}  // namespace tlui
