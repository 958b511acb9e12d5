#include "main/config_panel.h"

#include "plots/wrapped_label.h"

#include <algorithm>

#include <QCheckBox>
#include <QComboBox>
#include <QEvent>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QLineEdit>
#include <QScrollArea>
#include <QScrollBar>
#include <QVBoxLayout>

namespace tlui {

using nlohmann::json;

static const char* kBadStyle = "border: 2px solid #d33; background: #fff0f0; color: #000;";  // readable in the dark theme too

// A refused field gets a red border. A style sheet pins a widget's font and palette (and Qt keeps
// its WA_StyleSheet mark after the sheet is cleared), so once the field is accepted again both
// are inherited again: it follows the zoom and the theme.
static void showRefused(QWidget* editor, bool refused) {
    if (refused) return editor->setStyleSheet(kBadStyle);
    if (editor->styleSheet().isEmpty()) return;
    editor->setStyleSheet(QString());
    editor->setAttribute(Qt::WA_StyleSheet, false);
    editor->setFont(QFont());
    editor->setPalette(QPalette());
}

ConfigPanel::ConfigPanel(QWidget* parent) : QWidget(parent) {
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(4, 4, 4, 4);

    auto* modeRow = new QFormLayout;
    m_mode = new QComboBox;
    for (DecodeMode m : allModes()) m_mode->addItem(modeLabel(m), QString(modeName(m)));
    m_mode->setToolTip("Decode mode. Greedy and sampling use generate; early exit adapts the depth per "
                       "token; speculative (chain, tree, pipelined) drafts at draft_loops and verifies at "
                       "verify_loops; beam search needs beam_size >= 2.");
    m_mode->setObjectName("mode");
    modeRow->addRow("mode", m_mode);
    outer->addLayout(modeRow);

    // The refusal line keeps its place (two lines, always laid out) and never asks for width, so
    // the form below does not move while typing and the dock keeps its width; the whole message
    // is its tooltip when it needs more than two lines.
    m_message = new QLabel;
    m_message->setObjectName("configMessage");
    m_message->setWordWrap(true);
    m_message->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    m_message->setStyleSheet("color: #b00; font-weight: bold;");
    m_message->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
    m_message->setFixedHeight(2 * QFontMetrics(m_message->font()).lineSpacing() + 4);
    m_message->installEventFilter(this);  // its two lines grow with the zoom (eventFilter)
    outer->addWidget(m_message);

    auto* scroll = new QScrollArea;
    scroll->setObjectName("configScroll");
    scroll->setWidgetResizable(true);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);  // the rows wrap to the dock's width
    m_scroll = scroll;
    auto* inner = new QWidget;
    auto* innerLayout = new QVBoxLayout(inner);
    m_groups = innerLayout;
    auto* genBox = new QGroupBox("GenerateConfig");
    m_genBox = genBox;
    auto* genForm = new QFormLayout(genBox);
    genForm->setRowWrapPolicy(QFormLayout::WrapLongRows);
    m_specBox = new QGroupBox("Speculative / tree");  // short: a group's title sets its least width
    m_specBox->setToolTip("SpeculativeConfig, TreeSpeculativeConfig");
    auto* specForm = new QFormLayout(m_specBox);
    specForm->setRowWrapPolicy(QFormLayout::WrapLongRows);
    auto* specNote = new QLabel("max_tokens, temperature (tree: 0 only), sample_seed, top_k, top_p and "
                                "ignore_eos come from GenerateConfig above.");
    specNote->setWordWrap(true);
    specNote->setForegroundRole(QPalette::PlaceholderText);
    specForm->addRow(specNote);
    // The early-exit fields in a group of their own, so that the mode that uses them can show
    // them first (placeModeGroups) instead of ~40 rows down the GenerateConfig form.
    m_eeBox = new QGroupBox("Early exit");
    m_eeBox->setObjectName("earlyExitGroup");
    auto* eeForm = new QFormLayout(m_eeBox);
    eeForm->setRowWrapPolicy(QFormLayout::WrapLongRows);
    m_specBox->setObjectName("speculativeGroup");
    genBox->setObjectName("generateGroup");
    innerLayout->addWidget(genBox);
    innerLayout->addWidget(m_eeBox);
    innerLayout->addWidget(m_specBox);
    innerLayout->addStretch(1);
    scroll->setWidget(inner);
    outer->addWidget(scroll, 1);

    struct PendingRow { const FieldInfo* f; QLabel* label; QWidget* row; };
    std::vector<PendingRow> earlyExitRows;
    for (const FieldInfo& f : configFields()) {
        Row r;
        r.info = &f;
        const QString tip = QString("<b>%1</b> (%2)<br>%3").arg(f.key, f.range, QString(f.tooltip).toHtmlEscaped());
        switch (f.kind) {
        case FieldKind::Bool: {
            auto* cb = new QCheckBox;
            connect(cb, &QCheckBox::toggled, this, [this] { revalidate(); emit changed(); });
            r.editor = cb;
            break;
        }
        case FieldKind::Criterion: {
            auto* c = new QComboBox;
            for (int i = 0; i <= static_cast<int>(tinyloop::EarlyExitCriterion::MinPKL); ++i)
                c->addItem(criterionName(static_cast<tinyloop::EarlyExitCriterion>(i)));
            connect(c, &QComboBox::currentIndexChanged, this, [this] { revalidate(); emit changed(); });
            r.editor = c;
            break;
        }
        case FieldKind::KvCache:
        case FieldKind::EarlyStopping: {
            auto* c = new QComboBox;
            if (f.kind == FieldKind::KvCache) c->addItems({"f32", "int8"});
            else c->addItems({"false", "true", "never"});
            connect(c, &QComboBox::currentIndexChanged, this, [this] { revalidate(); emit changed(); });
            r.editor = c;
            break;
        }
        case FieldKind::KvSharing: {  // editable: compress-s{k} takes any k in 1 .. 1024
            auto* c = new QComboBox;
            c->setEditable(true);
            c->addItems({"per-pass", "last-pass", "latest-m4", "compress-s4", "compress-s8"});
            connect(c, &QComboBox::currentTextChanged, this, [this] { revalidate(); emit changed(); });
            r.editor = c;
            break;
        }
        case FieldKind::Grammar: {  // grammar: a .gbnf file the worker parses for the run
            auto* e = new QLineEdit;
            e->setPlaceholderText("no grammar (path to a .gbnf file)");
            connect(e, &QLineEdit::textChanged, this, [this] { revalidate(); emit changed(); });
            r.editor = e;
            break;
        }
        default: {
            auto* e = new QLineEdit;
            e->setPlaceholderText(f.range);
            connect(e, &QLineEdit::textChanged, this, [this] { revalidate(); emit changed(); });
            r.editor = e;
            break;
        }
        }
        r.editor->setObjectName(f.key);
        r.editor->setToolTip(tip);
        r.label = new QLabel(QString("%1").arg(f.key));
        r.label->setToolTip(tip);
        // The range under the editor, wrapped: a narrow dock (a 1280x720 screen, a big zoom)
        // shows all of it instead of cutting it off beside the field.
        auto* rowWidget = new QWidget;
        auto* col = new QVBoxLayout(rowWidget);
        col->setContentsMargins(0, 0, 0, 0);
        col->setSpacing(0);
        col->addWidget(r.editor);
        auto* range = new WrappedLabel(f.range);
        range->setObjectName(QString("range_") + f.key);
        range->setToolTip(tip);
        range->setForegroundRole(QPalette::PlaceholderText);  // dim in either theme
        col->addWidget(range);
        if (QString(f.key).startsWith("early_exit")) earlyExitRows.push_back({&f, r.label, rowWidget});
        else (f.speculative ? specForm : genForm)->addRow(r.label, rowWidget);
        m_rows[f.key] = r;
    }
    // Where the early-exit and speculation defaults come from: above the first early-exit row and
    // at the top of the speculative group.
    m_recNote = new WrappedLabel;
    m_recNote->setObjectName("recommendationNote");
    eeForm->addRow(m_recNote);
    // The criterion first: it is the switch a lesson on early exit turns (argmax vs logit margin).
    std::stable_partition(earlyExitRows.begin(), earlyExitRows.end(),
                          [](const PendingRow& p) { return QString(p.f->key) == "early_exit_criterion"; });
    for (const PendingRow& p : earlyExitRows) eeForm->addRow(p.label, p.row);
    m_recSpecNote = new WrappedLabel;
    m_recSpecNote->setObjectName("recommendationSpecNote");
    specForm->insertRow(1, m_recSpecNote);
    showRecommendation();
    connect(m_mode, &QComboBox::activated, this, [this](int) {
        applyModeDefaults(mode());
        emit modeChanged(mode());
        emit changed();
    });
    connect(m_mode, &QComboBox::currentIndexChanged, this, [this](int) {
        m_specBox->setEnabled(tinyloop::self_speculative(mode()));
        placeModeGroups();
        revalidate();
    });
    setConfig(tinyloop::GenerateConfig{});
    setKnobs(tinyloop::SpeculationPolicy{});
    setMode(DecodeMode::Greedy);
    m_specBox->setEnabled(false);
}

bool ConfigPanel::eventFilter(QObject* watched, QEvent* e) {
    // Presentation mode and the zoom change the font after construction: the refusal line keeps
    // room for two whole lines of the font it has now.
    if (watched == m_message && (e->type() == QEvent::FontChange || e->type() == QEvent::StyleChange))
        m_message->setFixedHeight(2 * QFontMetrics(m_message->font()).lineSpacing() + 4);
    return QWidget::eventFilter(watched, e);
}

void ConfigPanel::placeModeGroups() {
    // The chosen mode's own group first (early exit, speculative / tree), then GenerateConfig, then
    // the other group; the panel scrolls back to the top, where the mode's switches now are.
    const bool spec = tinyloop::self_speculative(mode());
    const bool ee = mode() == DecodeMode::EarlyExit;
    QList<QWidget*> order = {m_genBox, m_eeBox, m_specBox};
    if (ee) order = {m_eeBox, m_genBox, m_specBox};
    if (spec) order = {m_specBox, m_genBox, m_eeBox};
    for (int i = 0; i < order.size(); ++i) {
        if (m_groups->indexOf(order[i]) == i) continue;
        m_groups->removeWidget(order[i]);
        m_groups->insertWidget(i, order[i]);
    }
    m_scroll->verticalScrollBar()->setValue(0);
}

QWidget* ConfigPanel::firstGroup() const { return m_groups->itemAt(0)->widget(); }

QWidget* ConfigPanel::editor(const QString& key) const {
    auto it = m_rows.find(key.toStdString());
    return it == m_rows.end() ? nullptr : it->second.editor;
}

void ConfigPanel::setFieldText(const std::string& key, const QString& text) {
    if (auto* e = qobject_cast<QLineEdit*>(m_rows.at(key).editor)) e->setText(text);
}


void ConfigPanel::setConfig(const tinyloop::GenerateConfig& c) {
    const json j = configToJson(c);
    for (auto& [key, r] : m_rows) {
        if (r.info->speculative || !j.contains(key)) continue;
        const json& v = j.at(key);
        switch (r.info->kind) {
        case FieldKind::Int: setFieldText(key, QString::number(v.get<long long>())); break;
        case FieldKind::U64: setFieldText(key, QString::number(v.get<unsigned long long>())); break;
        case FieldKind::Float: setFieldText(key, QString::fromStdString(floatText(v.get<float>()))); break;
        case FieldKind::Bool: qobject_cast<QCheckBox*>(r.editor)->setChecked(v.get<bool>()); break;
        case FieldKind::Criterion:
        case FieldKind::KvCache:
        case FieldKind::KvSharing:
            qobject_cast<QComboBox*>(r.editor)->setCurrentText(QString::fromStdString(v.get<std::string>()));
            break;
        case FieldKind::EarlyStopping:  // true / false / "never", shown as their JSON spelling
            qobject_cast<QComboBox*>(r.editor)->setCurrentText(QString::fromStdString(v.is_string() ? v.get<std::string>() : v.dump()));
            break;
        case FieldKind::IdLists:
            setFieldText(key, QString::fromStdString(idListsToText(key == "bad_words" ? c.bad_words : c.stop_sequences)));
            break;
        case FieldKind::WordLists: setFieldText(key, QString::fromStdString(wordListsToText(c.force_words))); break;
        case FieldKind::Bias: setFieldText(key, QString::fromStdString(biasToText(c.logit_bias))); break;
        case FieldKind::Strings: setFieldText(key, QString::fromStdString(stringsToText(c.stop_strings))); break;
        case FieldKind::Ids: setFieldText(key, QString::fromStdString(idsToText(v))); break;
        case FieldKind::LengthDecay: setFieldText(key, QString::fromStdString(lengthDecayToText(v))); break;
        case FieldKind::Grammar: break;
        }
    }
    revalidate();
}

void ConfigPanel::setKnobs(const tinyloop::SpeculationPolicy& k) {
    setFieldText("draft_loops", QString::number(k.draft_loops));
    setFieldText("verify_loops", QString::number(k.verify_loops));
    setFieldText("draft_ahead", QString::number(k.draft_ahead));
    setFieldText("branches", QString::number(k.branches));
    revalidate();
}

void ConfigPanel::setMode(DecodeMode m) {
    const int i = m_mode->findData(QString(modeName(m)));
    if (i >= 0) m_mode->setCurrentIndex(i);
}

DecodeMode ConfigPanel::mode() const {
    DecodeMode m = DecodeMode::Greedy;
    parseMode(m_mode->currentData().toString().toStdString(), &m);
    return m;
}

tinyloop::GenerateConfig ConfigPanel::modeFieldsFor(DecodeMode m) const {
    auto text = [&](const char* k) { return qobject_cast<QLineEdit*>(m_rows.at(k).editor)->text(); };
    tinyloop::GenerateConfig now;
    now.temperature = text("temperature").toFloat();
    now.beam_size = text("beam_size").toInt();
    now.early_exit.patience = text("early_exit_patience").toInt();
    return modeConfig(m, now, m_rec);
}

void ConfigPanel::applyModeDefaults(DecodeMode m) {
    // Picking a mode puts the fields it depends on into a state where it can run: the engine's
    // mode rules (tinyloop::mode_config), only the fields they change rewritten.
    const tinyloop::GenerateConfig want = modeFieldsFor(m);
    auto text = [&](const char* k) { return qobject_cast<QLineEdit*>(m_rows.at(k).editor)->text(); };
    if (want.temperature != text("temperature").toFloat())
        setFieldText("temperature", QString::fromStdString(floatText(want.temperature)));
    if (want.beam_size != text("beam_size").toInt()) setFieldText("beam_size", QString::number(want.beam_size));
    if (want.early_exit.patience != text("early_exit_patience").toInt())
        setFieldText("early_exit_patience", QString::number(want.early_exit.patience));
}

void ConfigPanel::setModelDefaults(const tinyloop::GenerateConfig& defaults, const tinyloop::Recommendation& rec) {
    m_modelDefaults = defaults;
    m_rec = rec;
    m_haveModelDefaults = true;
    showRecommendation();
    applyModelDefaults();
}

void ConfigPanel::applyModelDefaults(const QStringList& keep) {
    // Early-exit mode needs a patience: the model's, else the built-in one (modeConfig).
    auto* patience = qobject_cast<QLineEdit*>(m_rows.at("early_exit_patience").editor);
    if (mode() == DecodeMode::EarlyExit && !keep.contains("early_exit_patience") && patience->text().toInt() < 1)
        patience->setText(QString::number(modeConfig(DecodeMode::EarlyExit, {}, m_rec).early_exit.patience));
    if (!m_haveModelDefaults) return revalidate();
    const tinyloop::GenerateConfig& d = m_modelDefaults;
    auto* criterion = qobject_cast<QComboBox*>(m_rows.at("early_exit_criterion").editor);
    const bool ownCriterion = keep.contains("early_exit_criterion");
    if (!ownCriterion) criterion->setCurrentText(criterionName(d.early_exit.criterion));
    // The model's threshold means something for its own criterion only.
    if (!ownCriterion || criterion->currentText() == criterionName(d.early_exit.criterion)) {
        auto set = [&](const char* key, const QString& text) {
            if (!keep.contains(key)) setFieldText(key, text);
        };
        set("early_exit_threshold", QString::fromStdString(floatText(d.early_exit.threshold)));
        set("early_exit_min_L", QString::number(d.early_exit.min_L));
        set("early_exit_peek_every", QString::number(d.early_exit.peek_every));
        if (mode() == DecodeMode::EarlyExit)
            set("early_exit_patience", QString::number(modeConfig(DecodeMode::EarlyExit, {}, m_rec).early_exit.patience));
    }
    revalidate();
}

void ConfigPanel::showRecommendation() {
    const tinyloop::Recommendation& r = m_rec;
    if (!m_haveModelDefaults) {
        m_recNote->setText("Early exit: the built-in defaults until a model is open.");
    } else if (r.has_early_exit()) {
        QString where = QString("first probe at depth %1").arg(r.early_exit.min_L);
        if (r.early_exit_loops > 0) where += QString(", measured at depth %1").arg(r.early_exit_loops);
        m_recNote->setText(QString("Early exit recommended by the model: %1 %2 %3, patience %4, %5.")
                               .arg(criterionName(r.early_exit.criterion),
                                    r.early_exit.criterion == tinyloop::EarlyExitCriterion::LogitMargin ? ">=" : "<",
                                    QString::fromStdString(floatText(r.early_exit.threshold)))
                               .arg(r.early_exit.patience)
                               .arg(where));
    } else {
        m_recNote->setText("Early exit: this model recommends no policy; the fields show the built-in defaults.");
    }
    QStringList spec;
    if (r.chain.draft_loops > 0) spec << QString("draft_loops %1").arg(r.chain.draft_loops);
    if (r.chain.draft_ahead > 0) spec << QString("draft_ahead %1 (chain)").arg(r.chain.draft_ahead);
    if (r.tree.draft_ahead > 0) spec << QString("draft_ahead %1 (tree)").arg(r.tree.draft_ahead);
    if (r.tree.branches > 0) spec << QString("branches %1").arg(r.tree.branches);
    m_recSpecNote->setText(spec.isEmpty() ? QString("This model recommends no speculation setting: a knob at 0 is the built-in default.")
                                          : "Recommended by the model (a knob at 0 takes it): " + spec.join(", ") + ".");
    m_recSpecNote->setVisible(m_haveModelDefaults);
}

QString ConfigPanel::recommendationNote() const { return m_recNote->text(); }

json ConfigPanel::fieldValue(const Row& r, std::string* why) const {
    const std::string key = r.info->key;
    try {
        switch (r.info->kind) {
        case FieldKind::Bool: return qobject_cast<QCheckBox*>(r.editor)->isChecked();
        case FieldKind::Criterion:
        case FieldKind::KvCache:
        case FieldKind::KvSharing: return qobject_cast<QComboBox*>(r.editor)->currentText().trimmed().toStdString();
        case FieldKind::EarlyStopping: {
            const QString t = qobject_cast<QComboBox*>(r.editor)->currentText();
            return t == "never" ? json("never") : json(t == "true");
        }
        case FieldKind::Grammar: return nullptr;
        default: break;
        }
        const QString t = qobject_cast<QLineEdit*>(r.editor)->text().trimmed();
        bool ok = false;
        switch (r.info->kind) {
        case FieldKind::Int: {
            const qlonglong v = t.toLongLong(&ok);
            if (!ok) {
                *why = t.isEmpty() ? "a value is required" : std::string("'") + t.toStdString() + "' is not an integer";
                return json();
            }
            return static_cast<long long>(v);
        }
        case FieldKind::U64: {
            const qulonglong v = t.toULongLong(&ok);
            if (!ok) {
                *why = std::string("'") + t.toStdString() + "' is not an integer in [0, 2^64-1]";
                return json();
            }
            return static_cast<unsigned long long>(v);
        }
        case FieldKind::Float: {
            const double v = t.toDouble(&ok);
            if (!ok) {
                *why = t.isEmpty() ? "a value is required" : std::string("'") + t.toStdString() + "' is not a number";
                return json();
            }
            return static_cast<double>(static_cast<float>(v));
        }
        case FieldKind::IdLists: return idListsFromText(key, t.toStdString());
        case FieldKind::WordLists: return wordListsFromText(key, t.toStdString());
        case FieldKind::Bias: return biasFromText(key, t.toStdString());
        case FieldKind::Strings: return stringsFromText(key, t.toStdString());
        case FieldKind::Ids: return idsFromText(key, t.toStdString());
        case FieldKind::LengthDecay: return lengthDecayFromText(key, t.toStdString());
        default: return json();
        }
    } catch (const ConfigError& e) {
        *why = std::string(e.what()).substr(key.size() + 2);
        return json();
    }
}

namespace {

// The part of an engine message after the field it names: "logit_bias[0]: bias 150 ..." ->
// "[0]: bias 150 ..." for the key "logit_bias".
std::string reasonAfter(const std::string& key, const std::string& message) {
    std::string rest = message.compare(0, key.size(), key) == 0 ? message.substr(key.size()) : message;
    if (rest.compare(0, 2, ": ") == 0) rest = rest.substr(2);
    return rest;
}

// The knobs as the codec reads them: a knob at 0 in the panel is "the default", which a file
// says by leaving the knob out (the codec refuses a written draft_ahead or branches of 0).
json withoutDefaults(json knobs) {
    for (const char* k : {"draft_ahead", "branches"})
        if (knobs.contains(k) && knobs[k].is_number_integer() && knobs[k].get<long long>() == 0) knobs.erase(k);
    return knobs;
}

// The field an engine message names ("logit_bias[0]: ..." -> "logit_bias").
std::string fieldOf(const std::string& message) {
    const std::string head = message.substr(0, message.find(':'));
    return head.substr(0, head.find('['));
}

}  // namespace

// Each field's text is parsed and type-checked into a GenerateConfig by the engine's codec, then
// the whole config goes through the engine's validate_config_fields (and the knobs through its
// validate_speculation): the panel keeps no copy of the ranges.
void ConfigPanel::revalidate() {
    m_invalid.clear();
    QString first;
    auto mark = [&](const std::string& key, const std::string& why) {
        auto it = m_rows.find(key);
        if (it == m_rows.end() || m_invalid.contains(QString::fromStdString(key))) return;
        showRefused(it->second.editor, true);
        it->second.editor->setProperty("invalid", true);
        m_invalid << QString::fromStdString(key);
        if (first.isEmpty()) first = QString("%1: %2").arg(QString::fromStdString(key), QString::fromStdString(why));
    };
    tinyloop::GenerateConfig c;
    json knobs = json::object();
    for (auto& [key, r] : m_rows) {
        showRefused(r.editor, false);
        r.editor->setProperty("invalid", false);
        if (r.info->kind == FieldKind::Grammar) {
            const QString g = grammarFile();
            if (!g.isEmpty() && !QFileInfo(g).isFile()) mark(key, "no such file: " + g.toStdString());
            continue;
        }
        std::string why;
        json v = fieldValue(r, &why);
        if (why.empty() && r.info->speculative) knobs[key] = v;
        else if (why.empty()) {
            try {
                tinyloop::set_config_field(c, key, v);
            } catch (const tinyloop::Error& e) {
                why = reasonAfter(key, e.what());
            }
        }
        if (!why.empty()) mark(key, why);
    }
    if (m_invalid.isEmpty()) {
        try {
            tinyloop::validate_config_fields(c, m_limits);
        } catch (const tinyloop::Error& e) {
            mark(fieldOf(e.what()), reasonAfter(fieldOf(e.what()), e.what()));
        }
        try {
            knobsFromJson(withoutDefaults(knobs), m_limits);
        } catch (const ConfigError& e) {
            mark(e.field(), reasonAfter(e.field(), e.what()));
        }
    }
    // The speculative modes' cross-field rules, the engine's (validate_mode_speculation), checked
    // before a run (run_decode refuses them too).
    if (m_invalid.isEmpty()) {
        try {
            tinyloop::RunSpec spec{mode(), c, knobsFromJson(withoutDefaults(knobs), m_limits)};
            validateModeSpeculation(spec);
        } catch (const ConfigError& e) {
            mark(e.field(), reasonAfter(e.field(), e.what()));
        }
    }
    if (!first.isEmpty() && m_invalid.size() > 1) first += QString("  (and %1 more)").arg(m_invalid.size() - 1);
    m_localError = first;
    m_engineError.clear();  // a new edit needs a new engine verdict
    showMessage();
}

void ConfigPanel::setEngineVerdict(const QString& error) {
    m_engineError = error;
    showMessage();
    // mark the field the engine names ("max_tokens: ..." / "logit_bias[0]: ...")
    if (!error.isEmpty()) {
        QString key = error.section(':', 0, 0);
        key = key.section('[', 0, 0).trimmed();
        if (auto it = m_rows.find(key.toStdString()); it != m_rows.end())
            showRefused(it->second.editor, true);
    }
}

void ConfigPanel::showMessage() {
    const QString msg = message();
    m_message->setText(msg);
    m_message->setToolTip(msg);
}

QString ConfigPanel::message() const {
    if (!m_localError.isEmpty()) return m_localError;
    if (!m_engineError.isEmpty()) return "engine: " + m_engineError;
    return QString();
}

QStringList ConfigPanel::invalidFields() const { return m_invalid; }

QString ConfigPanel::grammarFile() const {
    return qobject_cast<QLineEdit*>(m_rows.at("grammar").editor)->text().trimmed();
}

void ConfigPanel::setGrammarFile(const QString& path) { setFieldText("grammar", path); }

bool ConfigPanel::isValid() const { return m_localError.isEmpty(); }

// The rows of one kind (the GenerateConfig fields or the speculative knobs) as one JSON object,
// read by `parse` (the codec); the first refusal goes to *error.
template <class T, class Parse>
std::optional<T> ConfigPanel::fromRows(bool speculative, QString* error, Parse parse) const {
    json j = json::object();
    for (const auto& [key, r] : m_rows) {
        if (r.info->speculative != speculative || r.info->kind == FieldKind::Grammar) continue;
        std::string why;
        json v = fieldValue(r, &why);
        if (!why.empty()) {
            if (error) *error = QString("%1: %2").arg(QString::fromStdString(key), QString::fromStdString(why));
            return std::nullopt;
        }
        j[key] = v;
    }
    try {
        return parse(j);
    } catch (const ConfigError& e) {
        if (error) *error = QString::fromStdString(e.what());
        return std::nullopt;
    }
}

std::optional<tinyloop::GenerateConfig> ConfigPanel::config(QString* error) const {
    if (!m_localError.isEmpty()) {  // a refused field, including the cross-field rules
        if (error) *error = m_localError;
        return std::nullopt;
    }
    const QString g = grammarFile();
    if (!g.isEmpty() && !QFileInfo(g).isFile()) {
        if (error) *error = QString("grammar: no such file: %1").arg(g);
        return std::nullopt;
    }
    return fromRows<tinyloop::GenerateConfig>(false, error, [this](const json& j) { return configFromJson(j, m_limits); });
}

std::optional<tinyloop::SpeculationPolicy> ConfigPanel::knobs(QString* error) const {
    return fromRows<tinyloop::SpeculationPolicy>(true, error, [this](const json& j) { return knobsFromJson(withoutDefaults(j), m_limits); });
}

void ConfigPanel::setLimits(const ConfigLimits& lim) {
    m_limits = lim;
    revalidate();
}

}  // namespace tlui
