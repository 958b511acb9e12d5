// Which model the workbench opens at start.
#pragma once

#include <QString>
#include <QStringList>

namespace tlui {

struct StartupModel {
    QString path;           // empty when nothing was found
    bool randomFallback = false;  // the build's random demo model: its text is noise
    QStringList tried;      // every place looked at, for the message when nothing is found
};

// The command-line path when given; else resources/models/tinyloop-kjv/model-f32.tinyloop under
// the source tree (TL_SOURCE_DIR) and under the install prefix's share dir (also relative to
// the executable: ../share/tinyloop); else the build's random demo model.
StartupModel resolveStartupModel(const QString& commandLinePath);
QString bundledModelRelativePath();

}  // namespace tlui
