// Named presets: a list with save, load, delete, import, export and "default for this model".
// Refusals (a malformed file, a missing name) are shown in the panel, naming the field.
#pragma once

#include <functional>

#include <QWidget>

#include "base/preset_store.h"

class QListWidget;
class QLabel;
class QPushButton;

namespace tlui {

class ConfigPanel;

// A preset made for another model than the open one (Preset::modelFile / modelSha256), and what
// to do about it.
struct ModelMismatch {
    QString preset;      // the preset's name
    QString wantedFile;  // the model it was made for, "folder/file"
    QString openFile;    // the open model, "folder/file"
    QString foundPath;   // where the wanted model is on this machine; empty when not found
};
enum class ModelChoice { OpenThatModel, RunAnyway, Cancel };

class PresetsPanel : public QWidget {
    Q_OBJECT
public:
    PresetsPanel(ConfigPanel* config, const QString& dir = QString(), QWidget* parent = nullptr);

    PresetStore& store() { return m_store; }
    void setModelPath(const QString& path) { m_modelPath = path; }

    Preset currentAsPreset(const QString& name, QString* error = nullptr) const;
    bool saveCurrent(const QString& name, QString* error = nullptr);
    // Applies preset `name`. One made for another model than the open one asks first (the model
    // chooser): open that model and apply it there (modelRequested), run it here anyway, or not.
    bool applyPreset(const QString& name, QString* error = nullptr);
    // Who answers the question above; the default asks in a dialog. Tests and runs without dialogs set their own.
    void setModelChooser(std::function<ModelChoice(const ModelMismatch&)> chooser) { m_chooser = std::move(chooser); }
    static QString mismatchText(const ModelMismatch& m);
    bool removePreset(const QString& name, QString* error = nullptr);
    bool importFrom(const QString& path, QString* error = nullptr);
    bool exportTo(const QString& name, const QString& path, QString* error = nullptr);
    void setDefaultForModel(const QString& name);
    bool applyDefaultForModel();  // when the model has a default preset
    void reload();
    QString statusText() const;
    QStringList names() const { return m_store.names(); }

signals:
    void presetApplied(const QString& name);
    void promptRequested(const QString& prompt);  // a preset that carries a prompt was applied
    // The chooser said "open that model": the window opens `path`, then applies `preset` again.
    void modelRequested(const QString& path, const QString& preset);

private:
    QString selected() const;
    void report(const QString& msg, bool error);
    ModelChoice askModel(const ModelMismatch& m);  // the default chooser: a dialog

    ConfigPanel* m_config;
    PresetStore m_store;
    QString m_modelPath;
    std::function<ModelChoice(const ModelMismatch&)> m_chooser;
    QListWidget* m_list = nullptr;
    QLabel* m_status = nullptr;
};

}  // namespace tlui
