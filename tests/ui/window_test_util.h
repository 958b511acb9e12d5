// For the tests that drive a whole main window: the options every such test uses (presets in its
// temporary folder, refusals in the status bar instead of dialogs) and loading a model into it.
#pragma once

#include <QSignalSpy>
#include <QString>

#include "main/main_window.h"
#include "ui_test_util.h"

namespace tltest {

inline tlui::WindowOptions quietWindow(const QTemporaryDir& dir) {
    tlui::WindowOptions o;
    o.presetDir = dir.filePath("presets");
    o.errorDialogs = false;
    return o;
}

// Opens `model` in `w` and waits until it is loaded; false when it did not load.
inline bool loadModel(tlui::MainWindow& w, const QString& model) {
    QSignalSpy ready(&w, &tlui::MainWindow::modelReady);
    w.openModel(model);
    return waitFor([&] { return ready.count() == 1; }) && ready.at(0).at(0).toBool();
}

}  // namespace tltest
