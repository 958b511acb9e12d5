#include "main/model_paths.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>

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

}  // namespace tlui
