// "Save as the model's recommendation" of the exit calibration and speculation sweep views: one
// part of the model's recommended settings (docs/FORMAT.md §2, metadata "recommended") written
// into the model file through the engine's write_model_metadata, the same code as
// `tinyloop recommend --write`: only the metadata changes, every tensor byte is kept, and the
// part not measured here (speculation for the calibration view, early exit for the sweep) stays
// as the file had it.
#pragma once

#include <QString>
#include <nlohmann/json.hpp>
#include <tinyloop/tinyloop.h>

class QWidget;

namespace tlui {

enum class RecommendationPart { EarlyExit, Speculation };

// Runs on the analysis lane (the engine reads the file): `part` of `measured_rec` over the
// recommendation the file at `modelPath` holds now (read again: an earlier save may have changed
// it since the workbench opened it), written from `modelPath` to `outPath` (the same path replaces
// the file in place). Throws tinyloop::Error naming the file when it cannot be read or written
// ("<path>: cannot open for writing").
void writeRecommendation(const QString& modelPath, const QString& outPath, RecommendationPart part,
                         const tinyloop::Recommendation& measured_rec, const nlohmann::json& measured);

// Refuses before any work a target the workbench cannot write (a folder that does not exist or
// is read-only, a read-only file): the reason, or "" when it looks writable.
QString unwritableReason(const QString& outPath);

// The confirmation dialog of the views' save button: what will be written where. true = go on.
bool confirmRecommendationSave(QWidget* parent, const QString& modelPath, const QString& what);

}  // namespace tlui
