#include "plots/layout_audit.h"

#include <algorithm>
#include <cmath>

#include <QComboBox>
#include <QRegularExpression>
#include <QFontMetrics>
#include <QLabel>
#include <QStyleOptionComboBox>
#include <qcustomplot.h>

#include "plots/plot_caption.h"
#include "plots/plot_layout.h"

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

QString sideOf(const QCPAxis* a) {
    switch (a->axisType()) {
    case QCPAxis::atLeft: return "left";
    case QCPAxis::atRight: return "right";
    case QCPAxis::atTop: return "top";
    default: return "bottom";
    }
}

// Tick labels drawn over each other, or past the plot's edge (cut): each label's box where QCP
// puts it (centred on its tick, beyond the tick marks and the label padding), turned by the
// axis's label rotation.
void auditTickLabels(const QCustomPlot* plot, const QCPAxis* axis, QStringList& out) {
    if (!axis->visible() || !axis->tickLabels()) return;
    const QVector<double> ticks = axis->tickVector();
    const QVector<QString> labels = axis->tickVectorLabels();
    const QFontMetrics fm(axis->tickLabelFont());
    const double turn = axis->tickLabelRotation() * M_PI / 180.0;
    const bool horizontal = axis->orientation() == Qt::Horizontal;
    const QRect ar = axis->axisRect()->rect();
    const int away = axis->offset() + axis->tickLengthOut() + axis->tickLabelPadding();
    struct Box { QString text; double from, to; QRectF r; };
    std::vector<Box> boxes;
    for (int i = 0; i < ticks.size() && i < labels.size(); ++i) {
        if (labels[i].isEmpty() || !axis->range().contains(ticks[i])) continue;
        const QSize t = fm.boundingRect(QRect(), Qt::TextDontClip, labels[i]).size();
        const double w = std::abs(t.width() * std::cos(turn)) + std::abs(t.height() * std::sin(turn));
        const double h = std::abs(t.width() * std::sin(turn)) + std::abs(t.height() * std::cos(turn));
        const double c = axis->coordToPixel(ticks[i]);
        QRectF r;
        switch (axis->axisType()) {
        case QCPAxis::atBottom: r = QRectF(c - w / 2, ar.bottom() + away, w, h); break;
        case QCPAxis::atTop: r = QRectF(c - w / 2, ar.top() - away - h, w, h); break;
        case QCPAxis::atLeft: r = QRectF(ar.left() - away - w, c - h / 2, w, h); break;
        default: r = QRectF(ar.right() + away, c - h / 2, w, h); break;
        }
        if (turn == 0) {
            boxes.push_back({labels[i], horizontal ? r.left() : r.top(), horizontal ? r.right() : r.bottom(), r});
        } else {
            // Turned labels lie side by side like slanted lines: they clear each other when their
            // ticks are a line height / sin(angle) apart. QCP anchors them at one end, so their
            // box is not centred: only the spacing is checked.
            const double pitch = t.height() / std::abs(horizontal ? std::sin(turn) : std::cos(turn));
            boxes.push_back({labels[i], c - pitch / 2, c + pitch / 2, QRectF()});
        }
    }
    std::sort(boxes.begin(), boxes.end(), [](const Box& a, const Box& b) { return a.from < b.from; });
    const QString name = nameOf(plot);
    for (size_t i = 1; i < boxes.size(); ++i)
        if (boxes[i].from < boxes[i - 1].to - 0.5)
            out << QString("%1: the %2 axis's tick labels \"%3\" and \"%4\" overlap (%5 px)")
                       .arg(name, sideOf(axis), boxes[i - 1].text, boxes[i].text)
                       .arg(boxes[i - 1].to - boxes[i].from, 0, 'f', 0);
    const QRectF whole = plot->rect();
    for (const Box& b : boxes)
        if (!b.r.isNull() && (b.r.left() < whole.left() - 0.5 || b.r.right() > whole.right() + 1.5 || b.r.top() < whole.top() - 0.5 ||
            b.r.bottom() > whole.bottom() + 1.5))
            out << QString("%1: the %2 axis's tick label \"%3\" runs past the plot's edge: cut").arg(name, sideOf(axis), b.text);
}

// A caption that says what a colour means must say it for the end of the scale drawn that way:
// each clause naming a lightness ("dark", "bright", "black", "white") also names the end it
// stands for ("high", "low", "0", ...), and the colour scale draws that end that light.
void auditColourWords(const QCustomPlot* plot, const QCPColorScale* scale, QStringList& out) {
    const PlotCaption* caption = captionOf(plot);
    if (!caption || scale->gradient().colorStops().isEmpty()) return;
    static const QRegularExpression darkWords(R"(\b(dark|darker|darkest|black)\b)", QRegularExpression::CaseInsensitiveOption);
    static const QRegularExpression brightWords(R"(\b(bright|brighter|brightest|light|lighter|white|pale)\b)",
                                                QRegularExpression::CaseInsensitiveOption);
    static const QRegularExpression highWords(R"(\b(high|higher|highest|large|larger|largest|most|max|maximum)\b)",
                                              QRegularExpression::CaseInsensitiveOption);
    static const QRegularExpression lowWords(R"(\b(low|lower|lowest|small|smaller|smallest|least|min|minimum|zero|0)\b)",
                                             QRegularExpression::CaseInsensitiveOption);
    for (const QString& clause : caption->caption().split(QRegularExpression("[.;,:]"), Qt::SkipEmptyParts)) {
        const bool dark = clause.contains(darkWords), bright = clause.contains(brightWords);
        if (dark == bright) continue;  // no colour named (or both: a range, "dark to bright")
        const bool high = clause.contains(highWords), low = clause.contains(lowWords);
        const QString said = dark ? "dark" : "bright";
        if (high == low) {
            out << QString("%1: the caption says what %2 means without the end of the colour scale it stands for: \"%3\"")
                       .arg(nameOf(plot), said, clause.trimmed());
            continue;
        }
        const QString drawn = scaleEndLook(scale->gradient(), high);
        if (drawn != said)
            out << QString("%1: the caption calls the %2 end %3, the colour scale draws it %4: \"%5\"")
                       .arg(nameOf(plot), high ? "high" : "low", said, drawn, clause.trimmed());
    }
}

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
        for (const QCPAxis* axis : r->axes()) auditTickLabels(plot, axis, out);
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
        if (scale->visible()) auditColourWords(plot, scale, out);
        const QCPAxis* axis = scale->axis();
        if (!scale->visible() || !axis || axis->label().isEmpty()) continue;
        const int need = QFontMetrics(axis->labelFont()).horizontalAdvance(axis->label());
        const int room = scale->type() == QCPAxis::atLeft || scale->type() == QCPAxis::atRight ? scale->outerRect().height()
                                                                                               : scale->outerRect().width();
        if (need > room)
            out << QString("%1: the colour scale's label \"%2\" (%3 px) is longer than the scale (%4 px): cut")
                       .arg(name, axis->label()).arg(need).arg(room);
    }
    if (const QCPItemText* empty = emptyStateItem(plot); empty && empty->visible()) {
        const QRect need = QFontMetrics(empty->font()).boundingRect(QRect(), Qt::TextDontClip, empty->text());
        if (need.width() > whole.width() || need.height() > whole.height())
            out << QString("%1: the message \"%2\" (%3x%4 px) does not fit the plot (%5x%6 px)")
                       .arg(name, empty->text().left(40)).arg(need.width()).arg(need.height()).arg(whole.width()).arg(whole.height());
    }
    for (const QCPTextElement* title : plot->findChildren<QCPTextElement*>()) {
        if (!title->visible() || title->text().isEmpty()) continue;
        const int need = QFontMetrics(title->font()).horizontalAdvance(title->text());
        if (need > whole.width())
            out << QString("%1: the title \"%2\" (%3 px) is wider than the plot (%4 px)").arg(name, title->text()).arg(need).arg(whole.width());
    }
}

}  // namespace

QString scaleEndLook(const QCPColorGradient& gradient, bool highEnd) {
    QCPColorGradient g = gradient;  // color() fills the gradient's colour buffer: not const
    const QColor c = QColor::fromRgb(g.color(highEnd ? 1.0 : 0.0, QCPRange(0, 1)));
    return c.lightnessF() >= 0.5 ? "bright" : "dark";
}

QStringList layoutDefects(const QWidget* window) {
    QStringList out;
    // Only this window's widgets: an analysis window is a child of the main window, but a window of its own.
    QList<QCustomPlot*> plots;
    for (QCustomPlot* p : window->findChildren<QCustomPlot*>())
        if (p->window() == window) plots << p;
    for (const PlotCaption* c : window->findChildren<PlotCaption*>()) {
        if (!shown(c) || c->window() != window) continue;
        const int need = c->heightForWidth(c->width());
        if (c->height() + 1 < need)
            out << QString("%1: the caption \"%2\" is %3 px tall, its lines need %4")
                       .arg(nameOf(c), c->caption().left(40)).arg(c->height()).arg(need);
        for (const QCustomPlot* p : plots)
            if (shown(p) && inWindow(p).intersects(inWindow(c)))
                out << QString("%1: the caption \"%2\" lies over the plot %3").arg(nameOf(c), c->caption().left(40), nameOf(p));
    }
    for (const QLabel* l : window->findChildren<QLabel*>()) {
        if (!shown(l) || l->window() != window || !l->wordWrap() || qobject_cast<const PlotCaption*>(l) || l->text().isEmpty()) continue;
        const int need = l->heightForWidth(l->width());
        if (l->height() + 1 < need)
            out << QString("%1: the label \"%2\" is %3 px tall, its lines need %4")
                       .arg(nameOf(l), l->text().left(40)).arg(l->height()).arg(need);
    }
    for (const QCustomPlot* p : plots)
        if (shown(p)) auditPlot(p, out);
    for (const QComboBox* box : window->findChildren<QComboBox*>()) {
        if (!shown(box) || box->window() != window || box->currentText().isEmpty() || box->isEditable()) continue;
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
