// Layout rules every plot follows so nothing covers the data: legends outside the axis rect,
// integer ticks on axes that count (loops, cycles, tokens), whiskers for repeated timings, and an
// empty-state message in place of empty axes before the first run.
#pragma once

#include <vector>

#include <QPointF>
#include <QRectF>
#include <QSizeF>
#include <QString>

class QCustomPlot;
class QCPAxis;
class QCPBars;
class QCPErrorBars;
class QCPItemText;

namespace tlui {

// Moves the plot's legend out of the axis rect into a row of its own under the plot (entries
// side by side, wrapping), so it can never cover a bar, a point or a curve's end. Idempotent.
void putLegendBelow(QCustomPlot* plot);

// Ticks at whole numbers only (1, 2, 3 or 2, 4, 6 ...): no "2.5 loops".
void useIntegerTicks(QCPAxis* axis);

// As many ticks on the horizontal `axis` as its numbers fit side by side in `lengthPx` (2 to 5,
// each label given twice its width): a narrow plot, or a big zoom, gets fewer, never overlapping.
void fitTickCount(QCPAxis* axis, double lengthPx);

// The same for a vertical `axis` `lengthPx` high: as many ticks as its labels fit one above the
// other with two labels' height between them (2 to 5), steps not restricted to 1-2-5 so that the
// count is met (a short plot in presentation mode got five stacked, overlapping labels).
void fitVerticalTickCount(QCPAxis* axis, double lengthPx);

// Whiskers on `bars` from lo[i] to hi[i] around the bar's value (the spread of repeats).
QCPErrorBars* addWhiskers(QCPBars* bars, const std::vector<double>& lo, const std::vector<double>& hi);

// Shows `message` in the middle of the plot instead of its axes (before a first run, or when a
// run produced nothing to draw); clearEmptyState brings the axes back. The message is a
// QCPItemText named "emptyState" (emptyStateItem finds it; null when none is shown).
void showEmptyState(QCustomPlot* plot, const QString& message);
void clearEmptyState(QCustomPlot* plot);
QCPItemText* emptyStateItem(const QCustomPlot* plot);

// Places a label of size sizes[i] beside each point (pixels) so that no two labels overlap, no
// label covers a point (a square of `markerPx` around it) and every label stays inside `bounds`:
// it tries right/left, above/below, straight above/below in turn. A label with no free spot gets
// an empty rect (leave it to the hover tooltip).
std::vector<QRectF> placeLabels(const std::vector<QPointF>& points, const std::vector<QSizeF>& sizes,
                                const QRectF& bounds, double markerPx = 10);

}  // namespace tlui
