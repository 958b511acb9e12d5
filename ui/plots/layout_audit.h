// What a person would see as a layout defect in a window as it is now laid out: a caption or a
// wrapped label shorter than its lines (the lines drawn over their neighbours), a caption lying
// over a plot, a plot's legend over its data or outside the plot, an axis label or a plot title
// longer than the plot, tick labels over each other or past the plot's edge, a caption that names
// a colour ("dark is ...") for the end of the colour scale not drawn that way (or without saying
// which end), a combo box too narrow for its current text. One line per defect, naming
// the widget; empty when there is none. The screenshot runs of the workbench print these and fail
// on any, and the screen-fit test checks every view filled by a real run at 1280x720.
#pragma once

#include <QStringList>

class QCPColorGradient;
class QWidget;

namespace tlui {

QStringList layoutDefects(const QWidget* window);

// How the high (or low) end of `gradient` looks: "bright" or "dark". Captions that name a colour
// take their word from here, and the audit checks captions against it.
QString scaleEndLook(const QCPColorGradient& gradient, bool highEnd);

}  // namespace tlui
