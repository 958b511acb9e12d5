// Every plot follows the workbench's zoom (base/zoom.h: fonts, pen widths, markers, tick lengths,
// legend icons) and theme (base/theme.h: neutral colours, i.e. axes, grid, text, legend and the
// background, are mapped to the palette). The plot code keeps setting values as drawn at zoom 1
// on a light background; before each replot the look is laid over what it set, so a plot rebuilt
// after a change, or one opened later, looks the same as the ones already open.
#pragma once

class QColor;
class QCustomPlot;
class QPalette;

namespace tlui {

// Called once per plot, right after it is made (stylePlot does): pins the plot's base font to
// the unzoomed one, restyles before every replot and replots on a zoom or palette change.
void trackPlotLook(QCustomPlot* plot);
// Lays the current zoom and the plot's palette over the values the plot's code set.
// Idempotent: what the code set is remembered apart from what is shown.
void applyPlotLook(QCustomPlot* plot);
// A colour authored for a light background, for `palette`: a neutral (grey) colour keeps its
// place between the background and the text; a coloured one is kept.
QColor themedColor(const QColor& c, const QPalette& palette);

}  // namespace tlui
