#include "main/presets_panel.h"

#include <QFileDialog>
#include <QGridLayout>
#include <QInputDialog>
#include <QLabel>
#include <QListWidget>
#include <QMessageBox>
#include <QPushButton>
#include <QVBoxLayout>

#include "main/config_panel.h"
#include "main/model_paths.h"

namespace tlui {

PresetsPanel::PresetsPanel(ConfigPanel* config, const QString& dir, QWidget* parent)
    : QWidget(parent), m_config(config), m_store(dir) {
    m_store.installDefaults();
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(4, 4, 4, 4);
    m_list = new QListWidget;
    m_list->setObjectName("presetList");
    v->addWidget(m_list, 1);
    auto* grid = new QGridLayout;
    auto button = [&](const QString& text, int r, int c) {
        auto* b = new QPushButton(text);
        grid->addWidget(b, r, c);
        return b;
    };
    auto* load = button("Load", 0, 0);
    auto* save = button("Save as...", 0, 1);
    auto* del = button("Delete", 0, 2);
    auto* imp = button("Import...", 1, 0);
    auto* exp = button("Export...", 1, 1);
    auto* def = button("Default for model", 1, 2);
    def->setToolTip("Open this model with the selected preset from now on");
    v->addLayout(grid);
    m_status = new QLabel;
    m_status->setObjectName("presetStatus");
    m_status->setWordWrap(true);
    v->addWidget(m_status);

    connect(m_list, &QListWidget::itemDoubleClicked, this, [this] { applyPreset(selected()); });
    connect(load, &QPushButton::clicked, this, [this] { applyPreset(selected()); });
    connect(save, &QPushButton::clicked, this, [this] {
        bool ok = false;
        const QString name = QInputDialog::getText(this, "Save preset", "Preset name:", QLineEdit::Normal, selected(), &ok);
        if (ok) saveCurrent(name);
    });
    connect(del, &QPushButton::clicked, this, [this] { removePreset(selected()); });
    connect(imp, &QPushButton::clicked, this, [this] {
        const QString p = QFileDialog::getOpenFileName(this, "Import preset", QString(), "Presets (*.json)");
        if (!p.isEmpty()) importFrom(p);
    });
    connect(exp, &QPushButton::clicked, this, [this] {
        const QString name = selected();
        if (name.isEmpty()) return report("select a preset to export", true);
        const QString p = QFileDialog::getSaveFileName(this, "Export preset", name + ".json", "Presets (*.json)");
        if (!p.isEmpty()) exportTo(name, p);
    });
    connect(def, &QPushButton::clicked, this, [this] { setDefaultForModel(selected()); });
    reload();
}

QString PresetsPanel::selected() const {
    auto* it = m_list->currentItem();
    return it ? it->data(Qt::UserRole).toString() : QString();
}

void PresetsPanel::report(const QString& msg, bool error) {
    m_status->setText(msg);
    m_status->setStyleSheet(error ? "color: #b00; font-weight: bold;" : "color: #262;");
}

QString PresetsPanel::statusText() const { return m_status->text(); }

void PresetsPanel::reload() {
    const QString keep = selected();
    const QString def = m_modelPath.isEmpty() ? QString() : PresetStore::defaultPresetFor(m_modelPath);
    m_list->clear();
    for (const QString& n : m_store.names()) {
        auto* it = new QListWidgetItem(n == def ? n + "  (default for this model)" : n, m_list);
        it->setData(Qt::UserRole, n);
        if (auto p = m_store.load(n)) it->setToolTip(QString("%1: %2").arg(modeLabel(p->mode), p->description));
        if (n == keep) m_list->setCurrentItem(it);
    }
}

Preset PresetsPanel::currentAsPreset(const QString& name, QString* error) const {
    Preset p;
    p.name = name.trimmed();
    p.mode = m_config->mode();
    p.grammarFile = m_config->grammarFile();
    QString err;
    auto c = m_config->config(&err);
    auto k = m_config->knobs(err.isEmpty() ? &err : nullptr);
    if (c) p.config = *c;
    if (k) p.speculation = *k;
    if (!m_modelPath.isEmpty()) {  // the model it is made on: loading it elsewhere asks first
        p.modelFile = modelDisplayName(m_modelPath);
        p.modelSha256 = modelSha256(m_modelPath);
        if (p.modelSha256.isEmpty()) p.modelFile.clear();
    }
    if (error) *error = err;
    return p;
}

bool PresetsPanel::saveCurrent(const QString& name, QString* error) {
    QString err;
    Preset p = currentAsPreset(name, &err);
    if (err.isEmpty() && p.name.isEmpty()) err = "name: a preset needs a name";
    if (err.isEmpty()) {
        if (auto old = m_store.load(p.name)) p.description = old->description;
        m_store.save(p, &err);
    }
    if (!err.isEmpty()) {
        report("not saved: " + err, true);
        if (error) *error = err;
        return false;
    }
    report(QString("saved '%1'").arg(p.name), false);
    reload();
    return true;
}

bool PresetsPanel::applyPreset(const QString& name, QString* error) {
    QString err;
    if (name.isEmpty()) err = "select a preset first";
    std::optional<Preset> p;
    if (err.isEmpty()) p = PresetStore::readFile(m_store.findFile(name), &err, m_config->limits());
    if (!p) {
        report("not loaded: " + err, true);
        if (error) *error = err;
        return false;
    }
    QString note;
    if (!p->modelSha256.isEmpty() && !m_modelPath.isEmpty() && modelSha256(m_modelPath) != p->modelSha256) {
        ModelMismatch m{p->name, p->modelFile, modelDisplayName(m_modelPath), findModelFile(p->modelFile, m_modelPath)};
        const ModelChoice choice = m_chooser ? m_chooser(m) : askModel(m);
        if (choice == ModelChoice::OpenThatModel && !m.foundPath.isEmpty()) {
            report(QString("opening %1 for '%2'...").arg(m.wantedFile, p->name), false);
            emit modelRequested(m.foundPath, p->name);
            return true;
        }
        if (choice != ModelChoice::RunAnyway) {
            err = QString("'%1' was made for %2; %3 is open").arg(p->name, m.wantedFile, m.openFile);
            report("not loaded: " + err, true);
            if (error) *error = err;
            return false;
        }
        note = QString(" on %1, not the %2 it was made for").arg(m.openFile, m.wantedFile);
    }
    m_config->setMode(p->mode);
    m_config->setConfig(p->config);
    m_config->setKnobs(p->speculation);
    m_config->applyModelDefaults(p->namedKeys);  // what the preset leaves out: the model's recommendation
    m_config->setGrammarFile(p->grammarFile);
    if (!p->prompt.isEmpty()) emit promptRequested(p->prompt);
    report(QString("loaded '%1'%2").arg(p->name, note), false);
    emit presetApplied(p->name);
    return true;
}

QString PresetsPanel::mismatchText(const ModelMismatch& m) {
    QString t = QString("The preset '%1' was made for the model %2, but %3 is open (a different file).")
                    .arg(m.preset, m.wantedFile, m.openFile);
    t += m.foundPath.isEmpty() ? QString(" %1 was not found beside the open model or among the bundled models.").arg(m.wantedFile)
                               : QString(" Open %1 and load the preset there, or run it on %2 anyway?").arg(m.wantedFile, m.openFile);
    return t;
}

ModelChoice PresetsPanel::askModel(const ModelMismatch& m) {
    QMessageBox box(QMessageBox::Question, "Preset made for another model", mismatchText(m), QMessageBox::NoButton, this);
    QPushButton* open = m.foundPath.isEmpty() ? nullptr : box.addButton("Open " + m.wantedFile, QMessageBox::AcceptRole);
    QPushButton* anyway = box.addButton("Run on " + m.openFile + " anyway", QMessageBox::DestructiveRole);
    box.addButton(QMessageBox::Cancel);
    box.setDefaultButton(open ? open : anyway);
    box.exec();
    if (open && box.clickedButton() == open) return ModelChoice::OpenThatModel;
    if (box.clickedButton() == anyway) return ModelChoice::RunAnyway;
    return ModelChoice::Cancel;
}

bool PresetsPanel::removePreset(const QString& name, QString* error) {
    QString err;
    if (name.isEmpty() || !m_store.remove(name, &err)) {
        if (err.isEmpty()) err = "select a preset first";
        report("not deleted: " + err, true);
        if (error) *error = err;
        return false;
    }
    report(QString("deleted '%1'").arg(name), false);
    reload();
    return true;
}

bool PresetsPanel::importFrom(const QString& path, QString* error) {
    QString err;
    auto p = m_store.importFile(path, &err);
    if (!p) {
        report("refused: " + err, true);
        if (error) *error = err;
        return false;
    }
    report(QString("imported '%1'").arg(p->name), false);
    reload();
    return true;
}

bool PresetsPanel::exportTo(const QString& name, const QString& path, QString* error) {
    QString err;
    if (!m_store.exportFile(name, path, &err)) {
        report("not exported: " + err, true);
        if (error) *error = err;
        return false;
    }
    report(QString("exported '%1' to %2").arg(name, path), false);
    return true;
}

void PresetsPanel::setDefaultForModel(const QString& name) {
    if (m_modelPath.isEmpty()) return report("no model loaded", true);
    PresetStore::setDefaultPresetFor(m_modelPath, name);
    report(name.isEmpty() ? "no default preset for this model" : QString("'%1' opens with this model").arg(name), false);
    reload();
}

bool PresetsPanel::applyDefaultForModel() {
    if (m_modelPath.isEmpty()) return false;
    const QString name = PresetStore::defaultPresetFor(m_modelPath);
    reload();
    return !name.isEmpty() && applyPreset(name);
}

}  // namespace tlui
