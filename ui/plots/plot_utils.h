// Small helpers shared by the plots: saving as PNG/PDF and a common look.
#pragma once

#include <QString>

class QCustomPlot;

namespace tlui {

// Saves by suffix: .pdf -> savePdf, anything else -> savePng. False and a reason on failure.
bool savePlot(QCustomPlot* plot, const QString& path, QString* error = nullptr);
// The common look, zoom and theme included (plots/plot_look.h): call it right after making a plot.
void stylePlot(QCustomPlot* plot);

}  // namespace tlui
