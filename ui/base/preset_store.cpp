#include "base/preset_store.h"

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>
#include <QSaveFile>
#include <QSettings>
#include <QStandardPaths>

namespace tlui {

using nlohmann::json;

bool presetsEqual(const Preset& a, const Preset& b) {
    return a.name == b.name && a.description == b.description && a.mode == b.mode &&
           configsEqual(a.config, b.config) && knobsEqual(a.speculation, b.speculation) && a.grammarFile == b.grammarFile &&
           a.prompt == b.prompt && a.modelFile == b.modelFile && a.modelSha256 == b.modelSha256;
}

json presetToJson(const Preset& p) {
    json j{{"format", "tinyloop-preset"},
                {"version", 1},
                {"name", p.name.toStdString()},
                {"description", p.description.toStdString()},
                {"mode", modeName(p.mode)},
                {"config", configToJson(p.config)},
                {"speculation", knobsToJson(p.speculation)},
                {"grammar_file", p.grammarFile.toStdString()}};
    if (!p.prompt.isEmpty()) j["prompt"] = p.prompt.toStdString();
    if (!p.modelSha256.isEmpty())
        j["model"] = {{"file", p.modelFile.toStdString()}, {"sha256", p.modelSha256.toStdString()}};
    return j;
}

Preset presetFromJson(const json& j, const ConfigLimits& lim) {
    if (!j.is_object()) throw ConfigError("preset", "expected a JSON object");
    Preset p;
    bool haveName = false;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& k = it.key();
        const json& v = it.value();
        if (k == "format") {
            if (!v.is_string() || v.get<std::string>() != "tinyloop-preset")
                throw ConfigError("format", "expected \"tinyloop-preset\"");
        } else if (k == "version") {
            if (!v.is_number_integer() || v.get<long long>() != 1) throw ConfigError("version", "expected 1");
        } else if (k == "name") {
            if (!v.is_string() || v.get<std::string>().empty())
                throw ConfigError("name", "expected a non-empty string");
            p.name = QString::fromStdString(v.get<std::string>()).trimmed();
            if (p.name.isEmpty()) throw ConfigError("name", "expected a non-empty string");
            haveName = true;
        } else if (k == "description") {
            if (!v.is_string()) throw ConfigError("description", "expected a string");
            p.description = QString::fromStdString(v.get<std::string>());
        } else if (k == "mode") {
            if (!v.is_string() || !parseMode(v.get<std::string>(), &p.mode))
                throw ConfigError("mode", "expected one of greedy, sample, speculative, tree, pipelined, beam, early-exit");
        } else if (k == "config") {
            p.config = configFromJson(v, lim, "config.");
            for (auto f = v.begin(); f != v.end(); ++f) p.namedKeys << QString::fromStdString(f.key());
        } else if (k == "grammar_file") {
            if (!v.is_string()) throw ConfigError("grammar_file", "expected a string (a .gbnf path, or \"\" for none)");
            p.grammarFile = QString::fromStdString(v.get<std::string>());
        } else if (k == "prompt") {
            if (!v.is_string()) throw ConfigError("prompt", "expected a string (the prompt the preset opens on)");
            p.prompt = QString::fromStdString(v.get<std::string>());
        } else if (k == "model") {
            if (!v.is_object()) throw ConfigError("model", "expected an object {\"file\": ..., \"sha256\": ...}");
            for (auto f = v.begin(); f != v.end(); ++f) {
                if (f.key() == "file") {
                    if (!f->is_string() || f->get<std::string>().empty())
                        throw ConfigError("model.file", "expected the model's folder and file name, e.g. \"tinyloop-kjv/model-f32.tinyloop\"");
                    p.modelFile = QString::fromStdString(f->get<std::string>());
                } else if (f.key() == "sha256") {
                    const QString hex = f->is_string() ? QString::fromStdString(f->get<std::string>()).toLower() : QString();
                    static const QRegularExpression sha("^[0-9a-f]{64}$");
                    if (!sha.match(hex).hasMatch())
                        throw ConfigError("model.sha256", "expected 64 hexadecimal digits (the SHA-256 of the model file)");
                    p.modelSha256 = hex;
                } else {
                    throw ConfigError("model." + f.key(), "unknown field; allowed: file, sha256");
                }
            }
            if (p.modelFile.isEmpty() || p.modelSha256.isEmpty())
                throw ConfigError(p.modelFile.isEmpty() ? "model.file" : "model.sha256", "missing");
        } else if (k == "speculation" || k == "speculative") {  // "speculative": files written before the codec's name
            p.speculation = knobsFromJson(v, lim, k + ".");
            for (auto f = v.begin(); f != v.end(); ++f) p.namedKeys << QString::fromStdString(f.key());
        } else {
            throw ConfigError(k, "unknown field");
        }
    }
    if (!haveName) throw ConfigError("name", "missing");
    return p;
}

static QString fileStem(const QString& name) {
    QString s;
    for (QChar c : name) s += (c.isLetterOrNumber() || c == '-' || c == '_' || c == '.') ? c : QChar('_');
    if (s.isEmpty() || s.startsWith('.')) s.prepend("preset");
    return s;
}

PresetStore::PresetStore(const QString& dir) : m_dir(dir.isEmpty() ? defaultDir() : dir) {
    QDir().mkpath(m_dir);
}

QString PresetStore::defaultDir() {
    return QStandardPaths::writableLocation(QStandardPaths::AppConfigLocation) + "/presets";
}

QString PresetStore::pathFor(const QString& name) const { return m_dir + "/" + fileStem(name) + ".json"; }

QString PresetStore::findFile(const QString& name) const {
    const QString direct = pathFor(name);
    if (QFile::exists(direct)) return direct;
    for (const QFileInfo& fi : QDir(m_dir).entryInfoList({"*.json"}, QDir::Files, QDir::Name)) {
        QFile f(fi.absoluteFilePath());
        if (!f.open(QIODevice::ReadOnly)) continue;
        const QByteArray bytes = f.readAll();
        json j = json::parse(bytes.constData(), bytes.constData() + bytes.size(), nullptr, false);
        if (j.is_object() && j.contains("name") && j["name"].is_string() &&
            QString::fromStdString(j["name"].get<std::string>()).trimmed() == name)
            return fi.absoluteFilePath();
    }
    return direct;
}

QStringList PresetStore::names() const {
    QStringList out;
    for (const QFileInfo& fi : QDir(m_dir).entryInfoList({"*.json"}, QDir::Files, QDir::Name)) {
        if (auto p = readFile(fi.absoluteFilePath())) out << p->name;
    }
    out.sort(Qt::CaseInsensitive);
    out.removeDuplicates();
    return out;
}

bool PresetStore::writeFile(const Preset& p, const QString& path, QString* error) {
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly)) {
        if (error) *error = QString("cannot write %1: %2").arg(path, f.errorString());
        return false;
    }
    const std::string text = presetToJson(p).dump(2) + "\n";
    f.write(text.data(), static_cast<qint64>(text.size()));
    if (!f.commit()) {
        if (error) *error = QString("cannot write %1: %2").arg(path, f.errorString());
        return false;
    }
    return true;
}

bool PresetStore::save(const Preset& p, QString* error) {
    if (p.name.trimmed().isEmpty()) {
        if (error) *error = "name: a preset needs a name";
        return false;
    }
    QDir().mkpath(m_dir);
    return writeFile(p, pathFor(p.name), error);
}

std::optional<Preset> PresetStore::readFile(const QString& path, QString* error, const ConfigLimits& lim) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        if (error) *error = QString("cannot read %1: %2").arg(path, f.errorString());
        return std::nullopt;
    }
    const QByteArray bytes = f.readAll();
    json j = json::parse(bytes.constData(), bytes.constData() + bytes.size(), nullptr, false);
    if (j.is_discarded()) {
        if (error) *error = QString("%1: not valid JSON").arg(QFileInfo(path).fileName());
        return std::nullopt;
    }
    try {
        return presetFromJson(j, lim);
    } catch (const ConfigError& e) {
        if (error) *error = QString("%1: field %2").arg(QFileInfo(path).fileName(), QString::fromStdString(e.what()));
        return std::nullopt;
    }
}

std::optional<Preset> PresetStore::load(const QString& name, QString* error) const {
    return readFile(findFile(name), error);
}

bool PresetStore::remove(const QString& name, QString* error) {
    QFile f(findFile(name));
    if (!f.exists()) {
        if (error) *error = QString("no preset named '%1'").arg(name);
        return false;
    }
    if (!f.remove()) {
        if (error) *error = f.errorString();
        return false;
    }
    return true;
}

std::optional<Preset> PresetStore::importFile(const QString& path, QString* error) {
    auto p = readFile(path, error);
    if (!p) return std::nullopt;
    if (!save(*p, error)) return std::nullopt;
    return p;
}

bool PresetStore::exportFile(const QString& name, const QString& path, QString* error) const {
    auto p = load(name, error);
    if (!p) return false;
    return writeFile(*p, path, error);
}

void PresetStore::installDefaults() {
    // Each shipped preset is copied in once per directory, so one the user deleted stays deleted.
    QDir().mkpath(m_dir);
    QSettings settings;
    const QString key = "presets/installed/" +
                        QString::fromLatin1(QCryptographicHash::hash(QDir(m_dir).absolutePath().toUtf8(),
                                                                     QCryptographicHash::Sha1).toHex().left(16));
    QStringList done = settings.value(key).toStringList();
    for (const QFileInfo& fi : QDir(":/presets").entryInfoList({"*.json"}, QDir::Files)) {
        auto p = readFile(fi.absoluteFilePath());
        if (!p || done.contains(p->name)) continue;
        // Copied verbatim: the fields a shipped preset leaves out stay out, so the loaded model's
        // recommendation fills them when it is applied (Preset::namedKeys). A file from the
        // resources is read-only; the user's copy is not.
        const QString to = pathFor(p->name);
        if (!QFile::exists(findFile(p->name)) && QFile::copy(fi.absoluteFilePath(), to))
            QFile::setPermissions(to, QFile::ReadOwner | QFile::WriteOwner | QFile::ReadGroup | QFile::ReadOther);
        done << p->name;
    }
    settings.setValue(key, done);
}

static QString modelKey(const QString& modelPath) {
    const QByteArray h = QCryptographicHash::hash(QFileInfo(modelPath).absoluteFilePath().toUtf8(),
                                                  QCryptographicHash::Sha1).toHex().left(16);
    return "defaultPreset/" + QString::fromLatin1(h);
}

QString PresetStore::defaultPresetFor(const QString& modelPath) {
    return QSettings().value(modelKey(modelPath)).toString();
}

void PresetStore::setDefaultPresetFor(const QString& modelPath, const QString& presetName) {
    QSettings s;
    if (presetName.isEmpty()) s.remove(modelKey(modelPath));
    else s.setValue(modelKey(modelPath), presetName);
}

}  // namespace tlui
