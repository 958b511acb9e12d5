// A main window for a test: test-mode settings under the test's own application name, presets in
// a temporary folder, errors in the status bar instead of dialogs, shown.
#pragma once

#include <memory>

#include <QCoreApplication>
#include <QStandardPaths>
#include <QTemporaryDir>

#include "main/main_window.h"

namespace tltest {

inline std::unique_ptr<tlui::MainWindow> openTestWorkbench(const char* appName, const QTemporaryDir& dir) {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName("TinyLoopTest");
    QCoreApplication::setApplicationName(appName);
    tlui::WindowOptions o;
    o.presetDir = dir.filePath("presets");
    o.errorDialogs = false;
    auto w = std::make_unique<tlui::MainWindow>(o);
    w->show();
    return w;
}

}  // namespace tltest
