// WorkbenchAccess: what an analysis window may ask of the workbench, and all it may ask. The
// main window implements it; a window gets it at construction and never looks the main window's
// widgets up itself.
#pragma once

#include <memory>
#include <optional>

#include <QString>
#include <tinyloop_analysis/compare_modes.h>

namespace tlui {

class AnalysisJobs;
struct Preset;

class WorkbenchAccess {
public:
    virtual ~WorkbenchAccess() = default;

    virtual QString promptText() const = 0;  // the prompt editor's text
    virtual QString modelPath() const = 0;   // the loaded model's file ("" before one is open)
    // The loaded model (null before one is open), for reading its hyperparameters and recommended
    // settings on the GUI thread (a loaded model is immutable; the holder keeps it alive).
    virtual std::shared_ptr<tinyloop::Model> loadedModel() const = 0;
    // The job lane every analysis window runs on, with the workbench's one model.
    virtual AnalysisJobs* analysisJobs() const = 0;
    // The run the config panel describes (mode, config, knobs), labelled "workbench: <mode>";
    // nullopt with the panel's reason in *error when it is not valid.
    virtual std::optional<tinyloop::analysis::ModeSpec> configuredRun(QString* error) const = 0;
    // Stores `preset` in the workbench's preset store and shows it in the presets panel.
    virtual bool savePreset(const Preset& preset, QString* error) = 0;
};

}  // namespace tlui
