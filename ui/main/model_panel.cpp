#include "main/model_panel.h"

#include <algorithm>
#include <map>
#include <set>

#include <QComboBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QSplitter>
#include <QTableWidget>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <nlohmann/json.hpp>
#include <tinyloop/json.h>

namespace tlui {

using nlohmann::json;

ModelPanel::ModelPanel(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(4, 4, 4, 4);
    m_banner = new QLabel("No model loaded.");
    m_banner->setObjectName("modelBanner");
    m_banner->setWordWrap(true);
    v->addWidget(m_banner);
    auto* backendRow = new QHBoxLayout;
    auto* backendLabel = new QLabel("Back end:");
    m_backend = new QComboBox;
    m_backend->setObjectName("backendChoice");
    m_backend->addItem("auto", "auto");
    m_backend->addItem("cpu", "cpu");
    m_backend->addItem("cuda", "cuda");
    m_backend->setItemData(0, "the GPU when a usable one exists, else the CPU", Qt::ToolTipRole);
    m_backend->setItemData(1, "the CPU, whatever GPU there is", Qt::ToolTipRole);
    m_backend->setItemData(2, "an NVIDIA GPU; refused with the reason where none is usable", Qt::ToolTipRole);
    m_backend->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_backend->setMinimumContentsLength(6);
    m_backend->setToolTip("Where the engine runs this model. Choosing one reloads the model on it; a back end "
                          "that cannot run here (no usable GPU) is refused with the reason, and the model stays "
                          "where it was. The 'back end' row below says which one runs it and why.");
    backendLabel->setBuddy(m_backend);
    backendRow->addWidget(backendLabel);
    backendRow->addWidget(m_backend, 1);
    v->addLayout(backendRow);
    connect(m_backend, &QComboBox::activated, this, [this](int i) { emit backendChosen(m_backend->itemData(i).toString()); });
    auto* split = new QSplitter(Qt::Vertical);
    m_tree = new QTreeWidget;
    m_tree->setObjectName("modelTree");
    m_tree->setColumnCount(2);
    m_tree->setHeaderLabels({"property", "value"});
    m_tree->header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    split->addWidget(m_tree);
    auto* depthBox = new QWidget;
    auto* dv = new QVBoxLayout(depthBox);
    dv->setContentsMargins(0, 0, 0, 0);
    m_depthLabel = new QLabel;
    m_depthLabel->setWordWrap(true);  // wraps instead of widening the window past the screen
    dv->addWidget(m_depthLabel);
    m_depthTable = new QTableWidget;
    m_depthTable->setObjectName("depthTable");
    m_depthTable->setEditTriggers(QAbstractItemView::NoEditTriggers);
    dv->addWidget(m_depthTable);
    split->addWidget(depthBox);
    depthBox->hide();
    m_metadata = new QPlainTextEdit;
    m_metadata->setObjectName("metadata");
    m_metadata->setReadOnly(true);
    m_metadata->setLineWrapMode(QPlainTextEdit::NoWrap);
    m_metadata->setFont(QFont("monospace"));
    split->addWidget(m_metadata);
    v->addWidget(split, 1);
}

QString ModelPanel::backendChoiceName() const { return m_backend->currentData().toString(); }

void ModelPanel::setBackendChoice(const QString& name) {
    const int i = m_backend->findData(name);
    if (i >= 0) m_backend->setCurrentIndex(i);  // setCurrentIndex does not emit activated
}

QString ModelPanel::humanBytes(quint64 b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = double(b);
    int u = 0;
    while (x >= 1024.0 && u < 4) {
        x /= 1024.0;
        ++u;
    }
    return u == 0 ? QString("%1 B").arg(b) : QString("%1 %2").arg(x, 0, 'f', 2).arg(units[u]);
}

bool ModelPanel::isRandomModel(const tinyloop::ModelInfo& info) {
    json meta = json::parse(info.metadata_json, nullptr, false);
    return meta.is_object() && meta.value("generator", std::string()) == "random_model_spec";
}

static QTreeWidgetItem* group(QTreeWidget* t, const QString& name) {
    auto* g = new QTreeWidgetItem(t, {name});
    g->setFirstColumnSpanned(true);
    QFont f = g->font(0);
    f.setBold(true);
    g->setFont(0, f);
    return g;
}

static void row(QTreeWidgetItem* g, const QString& k, const QString& v) { new QTreeWidgetItem(g, {k, v}); }

void ModelPanel::setModel(const ModelLoaded& m, bool randomFallback) {
    const auto& i = m.info;
    const auto& hp = i.hparams;
    m_tree->clear();
    auto* file = group(m_tree, "File");
    row(file, "path", QString::fromStdString(i.path));
    row(file, "size", humanBytes(i.file_bytes));
    row(file, "back end", QString::fromStdString(i.backend) + (i.backend_note.empty() ? "" : " (" + QString::fromStdString(i.backend_note) + ")"));
    row(file, "threads", QString::number(i.threads));
    auto* h = group(m_tree, "Hyperparameters");
    row(h, "vocab_size", QString::number(hp.vocab_size));
    row(h, "d_model", QString::number(hp.d_model));
    row(h, "n_heads / n_kv_heads", QString("%1 / %2").arg(hp.n_heads).arg(hp.n_kv_heads));
    row(h, "head_dim", QString::number(hp.head_dim));
    row(h, "d_ff", QString::number(hp.d_ff));
    row(h, "n_pre_blocks", QString::number(hp.n_pre_blocks));
    row(h, "n_loop_layers", QString::number(hp.n_loop_layers));
    row(h, "default_loops / max_loops", QString("%1 / %2").arg(hp.default_loops).arg(hp.max_loops));
    row(h, "max_seq_len", QString::number(hp.max_seq_len));
    row(h, "rope_theta", QString::number(hp.rope_theta));
    row(h, "norm_eps", QString::number(hp.norm_eps));
    row(h, "tie_embeddings", hp.tie_embeddings ? "yes" : "no");
    // FORMAT.md §1a: "add" re-injects the prelude output before every pass after the first.
    row(h, "loop_input", hp.loop_input == tinyloop::LoopInput::Add       ? "add (input injection)"
                          : hp.loop_input == tinyloop::LoopInput::Adapter ? "adapter (W·[state; prelude output])"
                                                                           : "none");
    if (tinyloop::hparams_need_v3(hp)) {  // FORMAT.md §1b: a published looped architecture (file version 3)
        row(h, "architecture", QString::fromStdString(hp.architecture));
        row(h, "block", tinyloop::block_kind_name(hp.block));
        row(h, "qk_bias / pass_norm / exit_gate", QString("%1 / %2 / %3")
                                                      .arg(hp.qk_bias ? "yes" : "no")
                                                      .arg(hp.pass_norm ? "yes" : "no")
                                                      .arg(hp.exit_gate ? "yes" : "no"));
        row(h, "embed_scale", QString::number(hp.embed_scale));
        row(h, "n_coda_blocks", QString::number(hp.n_coda_blocks));
        row(h, "state_init", hp.state_init.kind == tinyloop::StateInit::Kind::Zeros
                                 ? QString("zeros")
                                 : QString("truncnormal std %1, scale %2, seed %3")
                                       .arg(hp.state_init.std)
                                       .arg(hp.state_init.scale)
                                       .arg(hp.state_init.seed));
    }
    row(h, "parameters", QString("%L1").arg(i.parameter_count));
    auto* d = group(m_tree, "Dtypes");
    std::map<std::string, std::pair<int, quint64>> byType;
    for (const auto& t : i.tensors) {
        auto& e = byType[tinyloop::dtype_name(t.dtype)];
        ++e.first;
        e.second += t.bytes;
    }
    for (const auto& [name, e] : byType)
        row(d, QString::fromStdString(name), QString("%1 tensors, %2").arg(e.first).arg(humanBytes(e.second)));
    auto* tensors = new QTreeWidgetItem(d, {"tensors", QString::number(i.tensors.size())});
    for (const auto& t : i.tensors) {
        QStringList dims;
        for (auto s : t.shape) dims << QString::number(s);
        QString v = QString("%1 [%2]").arg(tinyloop::dtype_name(t.dtype), dims.join(" x "));
        if (t.group_size) v += QString(" g%1").arg(t.group_size);
        new QTreeWidgetItem(tensors, {QString::fromStdString(t.name), v + ", " + humanBytes(t.bytes)});
    }
    auto* tk = group(m_tree, "Tokenizer");
    row(tk, "type", QString::fromStdString(i.tokenizer.type));
    row(tk, "pretokenizer", QString::fromStdString(i.tokenizer.pretokenizer));
    row(tk, "merges", QString::number(i.tokenizer.merges.size()));
    row(tk, "ids it can produce", QString::number(i.tokenizer_vocab));
    QStringList specials;
    for (const auto& [s, id] : i.tokenizer.special_tokens) specials << QString("%1=%2").arg(QString::fromStdString(s)).arg(id);
    row(tk, "special tokens", specials.join(", "));
    row(tk, "eos_id / bos_id", QString("%1 / %2").arg(i.tokenizer.eos_id).arg(i.tokenizer.bos_id));
    // metadata "recommended" (FORMAT.md §2): the defaults of early exit and speculation.
    auto* rec = group(m_tree, "Recommended settings");
    const tinyloop::Recommendation& r = m.recommended;
    if (r.has_early_exit())
        row(rec, "early exit", QString("%1 %2 %3, patience %4, first probe at depth %5, every %6%7")
                                   .arg(tinyloop::criterion_name(r.early_exit.criterion),
                                        r.early_exit.criterion == tinyloop::EarlyExitCriterion::LogitMargin ? ">=" : "<")
                                   .arg(r.early_exit.threshold)
                                   .arg(r.early_exit.patience)
                                   .arg(r.early_exit.min_L)
                                   .arg(r.early_exit.peek_every)
                                   .arg(r.early_exit_loops > 0 ? QString(" (measured at depth %1)").arg(r.early_exit_loops)
                                                               : QString()));
    else
        row(rec, "early exit", "none (built-in defaults)");
    if (r.has_speculation())
        row(rec, "speculation", QString("draft_loops %1, draft_ahead %2 (chain) / %3 (tree), branches %4 (0 = built-in)")
                                    .arg(r.chain.draft_loops).arg(r.chain.draft_ahead).arg(r.tree.draft_ahead).arg(r.tree.branches));
    else
        row(rec, "speculation", "none (built-in defaults)");
    auto* mem = group(m_tree, "Memory");
    row(mem, "resident weights", humanBytes(i.weight_bytes));
    row(mem, "file", humanBytes(i.file_bytes));
    row(mem, "device (VRAM)", humanBytes(m.vramBytes));
    const quint64 kvPerToken = quint64(hp.n_kv_heads) * hp.head_dim * 2 * 4 * quint64(hp.n_pre_blocks + hp.n_coda_blocks + hp.n_loop_layers * hp.default_loops);
    row(mem, "KV cache at max_seq_len (f32, default depth)", humanBytes(kvPerToken * quint64(hp.max_seq_len)));
    {  // kv_sharing (FORMAT.md §1c): f32 rows a generated token keeps at the default depth
        const quint64 rowBytes = quint64(hp.n_kv_heads) * hp.head_dim * 2 * 4;
        const quint64 fixed = quint64(hp.n_pre_blocks + hp.n_coda_blocks);
        const quint64 entries = quint64(hp.n_loop_layers) * quint64(hp.default_loops);
        auto* share = new QTreeWidgetItem(mem, {"KV per generated token, by kv_sharing",
                                                "the NLL change of each: the KV view (Analysis), tinyloop score --kv-sharing all"});
        row(share, "per-pass (exact), latest-m4", humanBytes(rowBytes * (fixed + entries)));
        row(share, "last-pass", humanBytes(rowBytes * (fixed + quint64(hp.n_loop_layers))));
        for (quint64 k : {4ull, 8ull})
            row(share, QString("compress-s%1").arg(k), humanBytes(rowBytes * (fixed + std::min(k, entries))));
    }
    m_tree->expandAll();
    tensors->setExpanded(false);

    json meta = json::parse(i.metadata_json, nullptr, false);
    m_metadata->setPlainText(meta.is_discarded() ? QString::fromStdString(i.metadata_json)
                                                 : QString::fromStdString(meta.dump(2)));
    // A per-depth table: the first member whose name mentions depth and holds an array of objects.
    QWidget* depthBox = m_depthTable->parentWidget();
    depthBox->hide();
    if (meta.is_object()) {
        for (auto it = meta.begin(); it != meta.end(); ++it) {
            const json& v = it.value();
            if (it.key().find("depth") == std::string::npos || !v.is_array() || v.empty() || !v[0].is_object()) continue;
            std::vector<std::string> cols;
            std::set<std::string> seen;
            for (const auto& r : v)
                if (r.is_object())
                    for (auto c = r.begin(); c != r.end(); ++c)
                        if (seen.insert(c.key()).second) cols.push_back(c.key());
            m_depthTable->clear();
            m_depthTable->setColumnCount(int(cols.size()));
            m_depthTable->setRowCount(int(v.size()));
            QStringList headers;
            for (const auto& c : cols) headers << QString::fromStdString(c);
            m_depthTable->setHorizontalHeaderLabels(headers);
            for (size_t r = 0; r < v.size(); ++r)
                for (size_t c = 0; c < cols.size(); ++c) {
                    const json cell = v[r].is_object() && v[r].contains(cols[c]) ? v[r][cols[c]] : json();
                    QString s = cell.is_string() ? QString::fromStdString(cell.get<std::string>())
                                                 : cell.is_null() ? QString() : QString::fromStdString(cell.dump());
                    m_depthTable->setItem(int(r), int(c), new QTableWidgetItem(s));
                }
            m_depthTable->resizeColumnsToContents();
            // the key alone (one line in a narrow dock, in presentation mode too); where it is from in the tooltip
            m_depthLabel->setText(QString("<b>%1</b>").arg(QString::fromStdString(it.key())));
            m_depthLabel->setToolTip("The per-depth table the model's metadata carries under this key.");
            depthBox->show();
            break;
        }
    }

    const bool random = randomFallback || isRandomModel(i);
    QString name = QFileInfo(QString::fromStdString(i.path)).fileName();
    if (meta.is_object() && meta.contains("name") && meta["name"].is_string())
        name = QString::fromStdString(meta["name"].get<std::string>());
    // The dtype holding most of the weights: a q4 file's last tensor is a norm, kept in f32.
    std::map<std::string, uint64_t> elements;
    for (const auto& t : i.tensors) {
        uint64_t n = 1;
        for (auto s : t.shape) n *= static_cast<uint64_t>(std::max<int64_t>(s, 0));
        elements[tinyloop::dtype_name(t.dtype)] += n;
    }
    std::string dtype = "?";
    uint64_t most = 0;
    for (const auto& [name, n] : elements)
        if (n > most) {
            most = n;
            dtype = name;
        }
    if (elements.size() > 1) dtype += " weights";
    QString where = QString::fromStdString(i.backend);
    if (m.vramBytes > 0) {
        // "cuda: requested, <the device and its memory>; ..." (the engine's note): the device named
        const QString device = QString::fromStdString(i.backend_note).section(", ", 1, -1).section(";", 0, 0);
        where += QString(" (%1%2 on the device)").arg(device.isEmpty() ? QString() : device + ", ", humanBytes(m.vramBytes));
    }
    m_summary = QString("%1: %2 parameters, %3, %4 loops by default, %5")
                    .arg(name).arg(QString("%L1").arg(i.parameter_count)).arg(QString::fromStdString(dtype))
                    .arg(hp.default_loops).arg(where);
    m_banner->setText(random ? "<b style='color:#b00'>random model: text is noise</b><br>" + m_summary : m_summary);
}

}  // namespace tlui
