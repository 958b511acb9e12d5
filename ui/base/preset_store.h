// Named presets: a mode, a GenerateConfig and the speculative knobs, stored as JSON files under
// QStandardPaths::AppConfigLocation/presets. Malformed files are refused with the field named.
#pragma once

#include <optional>

#include <QString>
#include <QStringList>
#include <nlohmann/json.hpp>

#include "base/config_json.h"

namespace tlui {

// A preset is the engine's RunSpec (mode, config, speculation knobs), named, written in the
// engine codec's names ({"mode": "sample", "speculation": {"branches"}}); files written before
// ("sampling", "speculative": {"K_branches"}) still read.
struct Preset : tinyloop::RunSpec {
    QString name;
    QString description;
    QString grammarFile;  // "" = none
    QString prompt;       // "" = leave the editor's prompt; else the prompt the preset opens on
    // The model it was made for ("model": {"file", "sha256"}): its folder and file name
    // (model_paths.h modelDisplayName) and the SHA-256 of its bytes; both empty = any model.
    QString modelFile;
    QString modelSha256;
    // The "config" and "speculation" keys the file names. Applying a preset, the early-exit and
    // speculation fields it leaves out take the loaded model's recommendation (the bundled
    // "Early exit" and "Speculative" presets leave them out); a preset saved from the panel names
    // every field, so its own values hold. Not part of presetsEqual.
    QStringList namedKeys;
};

bool presetsEqual(const Preset& a, const Preset& b);
nlohmann::json presetToJson(const Preset& p);
// Throws ConfigError naming the field ("config.top_p", "mode", "name") on anything malformed.
Preset presetFromJson(const nlohmann::json& j, const ConfigLimits& lim = {});

class PresetStore {
public:
    explicit PresetStore(const QString& dir = QString());  // empty: the default directory
    static QString defaultDir();
    QString dir() const { return m_dir; }
    QString pathFor(const QString& name) const;  // where save() writes `name`
    // The file that holds preset `name`: pathFor(name), else any *.json in the directory whose
    // "name" is `name` (a file placed there by hand); pathFor(name) when there is none.
    QString findFile(const QString& name) const;

    QStringList names() const;  // sorted
    bool save(const Preset& p, QString* error = nullptr);
    std::optional<Preset> load(const QString& name, QString* error = nullptr) const;
    bool remove(const QString& name, QString* error = nullptr);
    // Validates the file, then stores it under the name it carries; returns it.
    std::optional<Preset> importFile(const QString& path, QString* error = nullptr);
    bool exportFile(const QString& name, const QString& path, QString* error = nullptr) const;
    static std::optional<Preset> readFile(const QString& path, QString* error = nullptr,
                                          const ConfigLimits& lim = {});
    static bool writeFile(const Preset& p, const QString& path, QString* error = nullptr);
    // Copies the shipped presets (Qt resources :/presets) in when the directory has none of that name.
    void installDefaults();

    // The preset a model opens with (QSettings), keyed by the model file's absolute path.
    static QString defaultPresetFor(const QString& modelPath);
    static void setDefaultPresetFor(const QString& modelPath, const QString& presetName);

private:
    QString m_dir;
};

}  // namespace tlui
