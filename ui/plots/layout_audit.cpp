#include "plots/layout_audit.h"

#include <QComboBox>
#include <QFontMetrics>
#include <QLabel>
#include <QStyleOptionComboBox>
#include <qcustomplot.h>

#include "plots/plot_caption.h"

namespace tlui {

namespace {

QString nameOf(const QWidget* w) {
    QStringList path;
    for (const QWidget* p = w; p && !p->isWindow(); p = p->parentWidget())
        if (!p->objectName().isEmpty()) path.prepend(p->objectName());
    return path.isEmpty() ? QString(w->metaObject()->className()) : path.join('/');
}

// `w`'s rectangle in its window's coordinates.
QRect inWindow(const QWidget* w) { return QRect(w->mapTo(w->window(), QPoint(0, 0)), w->size()); }

bool shown(const QWidget* w) { return w->isVisibleTo(w->window()) && w->width() > 0 && w->height() > 0; }

void auditPlot(const QCustomPlot* plot, QStringList& out) {
    const QString name = nameOf(plot);
    const QRect whole = plot->rect();
    if (const QCPLegend* legend = plot->legend; legend && legend->visible() && legend->itemCount() > 0) {
        const QRect lr = legend->outerRect();
        if (!whole.contains(lr))
            out << QString("%1: the legend (%2x%3 at %4,%5) runs outside the plot (%6x%7)")
                       .arg(name).arg(lr.width()).arg(lr.height()).arg(lr.x()).arg(lr.y()).arg(whole.width()).arg(whole.height());
        for (const QCPAxisRect* r : plot->axisRects())
            if (r->rect().intersects(lr))
                out << QString("%1: the legend covers the data area").arg(name);
    }
    for (const QCPAxisRect* r : plot->axisRects()) {
        for (const QCPAxis* axis : r->axes()) {
            if (!axis->visible() || axis->label().isEmpty()) continue;
            const int need = QFontMetrics(axis->labelFont()).horizontalAdvance(axis->label());
            const int room = axis->orientation() == Qt::Vertical ? whole.height() : whole.width();
            if (need > room)
                out << QString("%1: the axis label \"%2\" (%3 px) is longer than the plot (%4 px): cut")
                           .arg(name, axis->label()).arg(need).arg(room);
        }
    }
    for (const QCPColorScale* scale : plot->findChildren<QCPColorScale*>()) {
        const QCPAxis* axis = scale->axis();
        if (!scale->visible() || !axis || axis->label().isEmpty()) continue;
        const int need = QFontMetrics(axis->labelFont()).horizontalAdvance(axis->label());
        const int room = scale->type() == QCPAxis::atLeft || scale->type() == QCPAxis::atRight ? scale->outerRect().height()
                                                                                               : scale->outerRect().width();
        if (need > room)
            out << QString("%1: the colour scale's label \"%2\" (%3 px) is longer than the scale (%4 px): cut")
                       .arg(name, axis->label()).arg(need).arg(room);
    }
    for (const QCPTextElement* title : plot->findChildren<QCPTextElement*>()) {
        if (!title->visible() || title->text().isEmpty()) continue;
        const int need = QFontMetrics(title->font()).horizontalAdvance(title->text());
        if (need > whole.width())
            out << QString("%1: the title \"%2\" (%3 px) is wider than the plot (%4 px)").arg(name, title->text()).arg(need).arg(whole.width());
    }
}

}  // namespace

QStringList layoutDefects(const QWidget* window) {
    QStringList out;
    const auto plots = window->findChildren<QCustomPlot*>();
    for (const PlotCaption* c : window->findChildren<PlotCaption*>()) {
        if (!shown(c)) continue;
        const int need = c->heightForWidth(c->width());
        if (c->height() + 1 < need)
            out << QString("%1: the caption \"%2\" is %3 px tall, its lines need %4")
                       .arg(nameOf(c), c->caption().left(40)).arg(c->height()).arg(need);
        for (const QCustomPlot* p : plots)
            if (shown(p) && inWindow(p).intersects(inWindow(c)))
                out << QString("%1: the caption \"%2\" lies over the plot %3").arg(nameOf(c), c->caption().left(40), nameOf(p));
    }
    for (const QLabel* l : window->findChildren<QLabel*>()) {
        if (!shown(l) || !l->wordWrap() || qobject_cast<const PlotCaption*>(l) || l->text().isEmpty()) continue;
        const int need = l->heightForWidth(l->width());
        if (l->height() + 1 < need)
            out << QString("%1: the label \"%2\" is %3 px tall, its lines need %4")
                       .arg(nameOf(l), l->text().left(40)).arg(l->height()).arg(need);
    }
    for (const QCustomPlot* p : plots)
        if (shown(p)) auditPlot(p, out);
    for (const QComboBox* box : window->findChildren<QComboBox*>()) {
        if (!shown(box) || box->currentText().isEmpty() || box->isEditable()) continue;
        QStyleOptionComboBox opt;
        opt.initFrom(box);
        const QFontMetrics fm(box->font());
        const QSize text(fm.horizontalAdvance(box->currentText()), fm.height());
        const int need = box->style()->sizeFromContents(QStyle::CT_ComboBox, &opt, text, box).width();
        if (box->width() + 4 < need)  // Qt's own size hint may round a pixel or two below this
            out << QString("%1: the combo box shows \"%2\" in %3 px, it needs %4")
                       .arg(nameOf(box), box->currentText()).arg(box->width()).arg(need);
    }
    return out;
}

}  // namespace tlui
