// AnalysisViews: the analysis windows of the Analysis menu, by kind: "compare" (decode modes),
// "scrubber" (depth), "agreement" (draft-agreement map), "sweep" (speculation tuning), "step"
// (step mode), "calibration" (early exit), "compute" (against quality), "kv" (provenance),
// "quant" (quantization across depth). It puts them in the menu, opens each once (a window is
// kept, hidden when closed) and drives one for screenshots.
#pragma once

#include <functional>
#include <map>

#include <QObject>
#include <QPointer>
#include <QString>
#include <QStringList>

class QMenu;
class QWidget;

namespace tlui {

class AnalysisWindow;
class WorkbenchAccess;

class AnalysisViews : public QObject {
    Q_OBJECT
public:
    // Windows are parented to `parent` (the main window) and ask `workbench` for what they need.
    AnalysisViews(WorkbenchAccess* workbench, QWidget* parent);

    static const QStringList& kinds();
    // Adds one action per kind to `menu` (object name "viewAction_<kind>").
    void install(QMenu* menu);
    // Opens (creating it the first time) the window of that kind; nullptr for an unknown kind.
    AnalysisWindow* open(const QString& kind);
    AnalysisWindow* window(const QString& kind) const;  // nullptr when not opened yet
    void closeAll();  // hides every open window (the workbench is closing)

    // For screenshots and demos: opens `kind`, fills it by a run on `prompt` with `max_tokens`
    // (scrubber: depth 1, then 2, 4, 6, so each diff shows), saves it as PNG at `out` when not
    // empty, and calls `done(ok)`.
    void demo(const QString& kind, const QString& prompt, int max_tokens, const QString& out,
              std::function<void(bool)> done);

private:
    WorkbenchAccess* m_workbench;
    QWidget* m_parent;
    std::map<QString, QPointer<AnalysisWindow>> m_windows;
};

}  // namespace tlui
