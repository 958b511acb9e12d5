#include "plots/plot_look.h"

#include <algorithm>
#include <cmath>

#include <QEvent>
#include <QPalette>
#include <qcustomplot.h>

#include "base/zoom.h"

namespace tlui {

namespace {

// Remembers what the plot's code set under `name` and shows look(that): when the value found is
// still the one shown last, the code has not touched it and the remembered one stands; anything
// else is the code's new value.
template <class T, class Look, class Set>
void follow(QObject* o, const char* name, const T& current, Look look, Set set) {
    const QByteArray base = QByteArray("tlLookBase_") + name, shown = QByteArray("tlLookShown_") + name;
    const QVariant was = o->property(shown.constData());
    T authored = current;
    if (was.isValid() && was.value<T>() == current) authored = o->property(base.constData()).value<T>();
    else o->setProperty(base.constData(), QVariant::fromValue(current));
    const T next = look(authored);
    o->setProperty(shown.constData(), QVariant::fromValue(next));
    if (!(next == current)) set(next);
}

struct Look {
    double zoom;
    QPalette palette;

    QFont font(const QFont& f) const { return Zoom::instance().scaled(f); }
    QColor color(const QColor& c) const { return themedColor(c, palette); }
    QPen pen(const QPen& p) const {
        QPen out = p;
        if (zoom != 1.0 && p.style() != Qt::NoPen) out.setWidthF((p.widthF() > 0 ? p.widthF() : 1.0) * zoom);
        out.setColor(color(p.color()));
        return out;
    }
    QBrush brush(const QBrush& b) const {
        QBrush out = b;
        if (b.style() == Qt::SolidPattern) out.setColor(color(b.color()));
        return out;
    }
    int length(int n) const { return int(std::lround(n * zoom)); }
    QSize size(const QSize& s) const { return s * zoom; }
};

// The Q_PROPERTYs of QCustomPlot's layerables that carry a size or a neutral colour.
const char* const kFonts[] = {"font", "labelFont", "tickLabelFont"};
const char* const kPens[] = {"pen", "basePen", "tickPen", "subTickPen", "subGridPen", "zeroLinePen",
                             "borderPen", "iconBorderPen", "whiskerPen", "whiskerBarPen", "medianPen"};
const char* const kColors[] = {"textColor", "color", "labelColor", "tickLabelColor"};
const char* const kBrushes[] = {"brush"};
const char* const kLengths[] = {"tickLengthIn", "tickLengthOut", "subTickLengthIn", "subTickLengthOut", "barWidth"};
const char* const kSizes[] = {"iconSize"};

template <class T, size_t N, class Fn>
void followProperties(QObject* o, const char* const (&names)[N], Fn look) {
    const QMetaObject* mo = o->metaObject();
    for (const char* name : names) {
        const int i = mo->indexOfProperty(name);
        if (i < 0 || !mo->property(i).isWritable()) continue;
        const QVariant v = o->property(name);
        if (!v.canConvert<T>() || v.metaType() != QMetaType::fromType<T>()) continue;
        follow<T>(o, name, v.value<T>(), look, [o, name](const T& x) { o->setProperty(name, QVariant::fromValue(x)); });
    }
}

void followScatter(QObject* o, const Look& look) {
    auto scatter = [&](auto* p) {
        if (!p || p->scatterStyle().isNone()) return;
        follow<double>(p, "scatterSize", p->scatterStyle().size(), [&](double s) { return s * look.zoom; },
                       [p](double s) {
                           QCPScatterStyle st = p->scatterStyle();
                           st.setSize(s);
                           p->setScatterStyle(st);
                       });
    };
    scatter(qobject_cast<QCPGraph*>(o));
    scatter(qobject_cast<QCPCurve*>(o));
}

class PaletteWatch : public QObject {
public:
    using QObject::QObject;
    bool eventFilter(QObject* o, QEvent* e) override {
        if (e->type() == QEvent::PaletteChange)
            if (auto* plot = qobject_cast<QCustomPlot*>(o)) plot->replot(QCustomPlot::rpQueuedReplot);
        return QObject::eventFilter(o, e);
    }
};

}  // namespace

QColor themedColor(const QColor& c, const QPalette& palette) {
    const QColor hsl = c.toHsl();
    if (c.alpha() == 0 || hsl.hslSaturation() > 40) return c;
    const int lo = palette.color(QPalette::Base).lightness(), hi = palette.color(QPalette::Text).lightness();
    const int l = std::clamp(lo + (255 - hsl.lightness()) * (hi - lo) / 255, 0, 255);
    if (l == hsl.lightness()) return c;  // a light palette: as authored
    return QColor::fromHsl(hsl.hslHue(), hsl.hslSaturation(), l, c.alpha()).toRgb();
}

void applyPlotLook(QCustomPlot* plot) {
    const Look look{Zoom::instance().factor(), plot->palette()};
    plot->setBackground(plot->palette().brush(QPalette::Base));
    const auto layerables = plot->findChildren<QCPLayerable*>();
    for (QCPLayerable* o : layerables) {
        if (qobject_cast<QCPAbstractLegendItem*>(o)) continue;  // they follow their legend (below)
        followProperties<QFont>(o, kFonts, [&](const QFont& f) { return look.font(f); });
        followProperties<QPen>(o, kPens, [&](const QPen& p) { return look.pen(p); });
        followProperties<QColor>(o, kColors, [&](const QColor& c) { return look.color(c); });
        followProperties<QBrush>(o, kBrushes, [&](const QBrush& b) { return look.brush(b); });
        followProperties<int>(o, kLengths, [&](int n) { return look.length(n); });
        followProperties<QSize>(o, kSizes, [&](const QSize& s) { return look.size(s); });
        followScatter(o, look);
    }
    // A legend item takes its legend's font and colour when it is made, i.e. already zoomed.
    for (QCPLayerable* o : layerables)
        if (auto* item = qobject_cast<QCPAbstractLegendItem*>(o)) {
            item->setFont(item->parentLegend()->font());
            item->setTextColor(item->parentLegend()->textColor());
        }
}

void trackPlotLook(QCustomPlot* plot) {
    // The plot's own font is what new axes, labels and legends start from: the unzoomed one, so
    // that the code's values are all at zoom 1. The ones made with the plot get it too.
    const QFont base = Zoom::instance().baseFont();
    plot->setFont(base);
    for (QCPAxis* a : plot->findChildren<QCPAxis*>()) {
        a->setLabelFont(base);
        a->setTickLabelFont(base);
    }
    if (plot->legend) plot->legend->setFont(base);
    QObject::connect(plot, &QCustomPlot::beforeReplot, plot, [plot] { applyPlotLook(plot); });
    QObject::connect(&Zoom::instance(), &Zoom::factorChanged, plot, [plot] { plot->replot(QCustomPlot::rpQueuedReplot); });
    plot->installEventFilter(new PaletteWatch(plot));
}

}  // namespace tlui
