// Windows that fit the screen they open on: a wanted size is shrunk to the screen's available
// geometry (less the window frame) and the window is placed inside it. The geometry is a
// parameter, so a test can ask for any screen size.
#pragma once

#include <QRect>
#include <QSize>

class QWidget;

namespace tlui {

// The available geometry (without task bars) of the screen `w` is on, or of the primary screen.
QRect availableGeometry(const QWidget* w);

// The frame rectangle (decorations included) for a window of client size `wanted` inside
// `available`: at most the available size, centred on `near` when it lies inside, else in the
// middle. `frame` is the decorations' extra width and height.
QRect fittedFrame(QSize wanted, QSize frame, const QRect& available, QPoint near = {});

// Resizes and moves the top-level `w` so that its frame lies inside `available` (the screen it is
// on when `available` is empty) and its client area is at most `wanted`.
void fitToScreen(QWidget* w, QSize wanted, QRect available = {});

}  // namespace tlui
