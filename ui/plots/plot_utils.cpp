#include "plots/plot_utils.h"

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

void stylePlot(QCustomPlot* plot) {
    plot->setNoAntialiasingOnDrag(true);
    plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    plot->setMinimumSize(300, 200);
    trackPlotLook(plot);  // zoom and theme
}

}  // namespace tlui
