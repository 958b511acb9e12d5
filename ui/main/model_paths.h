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

// A model file as people and presets name it: its folder and file name
// ("tinyloop-digitsum/model-f32.tinyloop"; the bundled models share their file names).
QString modelDisplayName(const QString& path);
// The SHA-256 of the file's bytes, hex; empty when it cannot be read. Remembered per path, size
// and modification time, so asking again for an open model costs nothing.
QString modelSha256(const QString& path);
// Where the model named `displayName` ("folder/file", modelDisplayName's form) is: beside the model
// at `near` (../folder/file), else among the bundled models. Empty when it is in neither place.
QString findModelFile(const QString& displayName, const QString& near);

}  // namespace tlui
