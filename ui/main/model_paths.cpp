#include "main/model_paths.h"

#include <QCoreApplication>
#include <QCryptographicHash>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHash>

namespace tlui {

QString bundledModelRelativePath() { return "models/tinyloop-kjv/model-f32.tinyloop"; }

StartupModel resolveStartupModel(const QString& commandLinePath) {
    StartupModel s;
    if (!commandLinePath.isEmpty()) {
        s.path = commandLinePath;
        s.tried << commandLinePath;
        return s;
    }
    const QString appDir = QCoreApplication::applicationDirPath();
    const QStringList bundled = {
        QString(TL_SOURCE_DIR) + "/resources/" + bundledModelRelativePath(),
        QString(TL_INSTALL_DATADIR) + "/" + bundledModelRelativePath(),
        QDir(appDir).filePath("../share/tinyloop/" + bundledModelRelativePath()),
    };
    for (const QString& p : bundled) {
        s.tried << p;
        if (QFileInfo(p).isFile()) {
            s.path = QFileInfo(p).absoluteFilePath();
            return s;
        }
    }
    const QStringList random = {
        QString(TL_BINARY_DIR) + "/models/random-demo.tinyloop",
        QDir(appDir).filePath("../models/random-demo.tinyloop"),
        QDir(appDir).filePath("../share/tinyloop/models/random-demo.tinyloop"),
    };
    for (const QString& p : random) {
        s.tried << p;
        if (QFileInfo(p).isFile()) {
            s.path = QFileInfo(p).absoluteFilePath();
            s.randomFallback = true;
            return s;
        }
    }
    return s;
}

QString modelDisplayName(const QString& path) {
    const QFileInfo fi(path);
    const QString folder = fi.absoluteDir().dirName();
    return folder.isEmpty() ? fi.fileName() : folder + "/" + fi.fileName();
}

QString modelSha256(const QString& path) {
    static QHash<QString, QPair<QString, QString>> known;  // path -> (size and time, hash)
    const QFileInfo fi(path);
    const QString key = fi.absoluteFilePath();
    const QString stamp = QString("%1 %2").arg(fi.size()).arg(fi.lastModified().toMSecsSinceEpoch());
    if (auto it = known.find(key); it != known.end() && it->first == stamp) return it->second;
    QFile f(key);
    if (!f.open(QIODevice::ReadOnly)) return QString();
    QCryptographicHash h(QCryptographicHash::Sha256);
    if (!h.addData(&f)) return QString();
    const QString hex = QString::fromLatin1(h.result().toHex());
    known.insert(key, {stamp, hex});
    return hex;
}

QString findModelFile(const QString& displayName, const QString& near) {
    if (displayName.isEmpty()) return QString();
    QStringList places;
    if (!near.isEmpty()) places << QFileInfo(near).absoluteDir().filePath("../" + displayName);
    const StartupModel sm = resolveStartupModel(QString());
    if (!sm.path.isEmpty() && !sm.randomFallback) places << QFileInfo(sm.path).absoluteDir().filePath("../" + displayName);
    for (const QString& p : places)
        if (QFileInfo(p).isFile()) return QFileInfo(p).canonicalFilePath();
    return QString();
}

}  // namespace tlui
