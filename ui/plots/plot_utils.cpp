#include "plots/plot_utils.h"

#include <algorithm>

#include <QFileInfo>
#include <qcustomplot.h>

#include "plots/plot_look.h"

namespace tlui {

bool savePlot(QCustomPlot* plot, const QString& path, QString* error) {
    const int w = plot->width() > 50 ? plot->width() : 900;
    const int h = plot->height() > 50 ? plot->height() : 500;
    bool ok = false;
    if (QFileInfo(path).suffix().compare("pdf", Qt::CaseInsensitive) == 0)
        ok = plot->savePdf(path, w, h);
    else
        ok = plot->savePng(path, w, h, 2.0);
    if (!ok && error) *error = QString("could not write %1").arg(path);
    return ok;
}

namespace {

// Numbers on an axis get as many ticks as their labels fit along it, each label given twice its
// size (a short plot in presentation mode: 0, 500, 1000 rather than eight labels over each other).
// Named ticks (tokens, categories) are placed by their own tickers and left alone.
void fitNumberTicks(QCustomPlot* plot) {
    for (QCPAxisRect* rect : plot->axisRects())
        for (QCPAxis* axis : rect->axes()) {
            QSharedPointer<QCPAxisTicker> ticker = axis->ticker();
            if (!axis->visible() || !ticker || qSharedPointerDynamicCast<QCPAxisTickerText>(ticker)) continue;
            if (typeid(*ticker) != typeid(QCPAxisTicker) && !qSharedPointerDynamicCast<QCPAxisTickerFixed>(ticker)) continue;
            const QFontMetrics fm(axis->tickLabelFont());
            const bool across = axis->orientation() == Qt::Horizontal;
            const double length = across ? rect->width() : rect->height();
            if (length <= 0) continue;
            const double label = across ? std::max(fm.horizontalAdvance(QString::number(axis->range().upper, 'g', 4)),
                                                   fm.horizontalAdvance(QString::number(axis->range().lower, 'g', 4)))
                                        : fm.height();
            const int n = std::clamp(static_cast<int>(length / (2.0 * std::max(label, 1.0))), 1, 5);
            if (ticker->tickCount() != n) ticker->setTickCount(n);
        }
}

}  // namespace

void stylePlot(QCustomPlot* plot) {
    plot->setNoAntialiasingOnDrag(true);
    plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    plot->setMinimumSize(300, 200);
    trackPlotLook(plot);  // zoom and theme
    QObject::connect(plot, &QCustomPlot::beforeReplot, plot, [plot] { fitNumberTicks(plot); });
}

}  // namespace tlui
