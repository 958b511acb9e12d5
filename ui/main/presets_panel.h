// Named presets: a list with save, load, delete, import, export and "default for this model".
// Refusals (a malformed file, a missing name) are shown in the panel, naming the field.
#pragma once

#include <QWidget>

#include "main/preset_store.h"

class QListWidget;
class QLabel;
class QPushButton;

namespace tlui {

class ConfigPanel;

class PresetsPanel : public QWidget {
    Q_OBJECT
public:
    PresetsPanel(ConfigPanel* config, const QString& dir = QString(), QWidget* parent = nullptr);

    PresetStore& store() { return m_store; }
    void setModelPath(const QString& path) { m_modelPath = path; }

    Preset currentAsPreset(const QString& name, QString* error = nullptr) const;
    bool saveCurrent(const QString& name, QString* error = nullptr);
    bool applyPreset(const QString& name, QString* error = nullptr);
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

private:
    QString selected() const;
    void report(const QString& msg, bool error);

    ConfigPanel* m_config;
    PresetStore m_store;
    QString m_modelPath;
    QListWidget* m_list = nullptr;
    QLabel* m_status = nullptr;
};

}  // namespace tlui
