#include "plots/plot_layout.h"

#include <algorithm>
#include <cmath>

#include <QVariantList>
#include <qcustomplot.h>

namespace tlui {

void putLegendBelow(QCustomPlot* plot) {
    QCPLegend* legend = plot->legend;
    if (!legend || legend->layout() == plot->plotLayout()) return;
    if (auto* inset = qobject_cast<QCPLayoutInset*>(legend->layout())) inset->take(legend);
    QCPLayoutGrid* grid = plot->plotLayout();
    grid->simplify();
    const int row = grid->rowCount();
    grid->addElement(row, 0, legend);
    if (grid->columnCount() > 1) {
        // span the width: the legend sits in column 0, the other columns (a colour scale) stay empty
        grid->setColumnStretchFactor(0, 1);
    }
    grid->setRowStretchFactor(row, 0.001);
    legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    legend->setWrap(4);
    legend->setBorderPen(Qt::NoPen);
    legend->setBrush(Qt::NoBrush);
    legend->setMargins(QMargins(4, 0, 4, 2));
    // As many entries side by side as the plot's width holds, so none is cut on a narrow plot.
    QObject::connect(plot, &QCustomPlot::beforeReplot, plot, [plot] {
        QCPLegend* l = plot->legend;
        if (!l || l->layout() != plot->plotLayout() || l->itemCount() == 0) return;
        int widest = 1;
        for (int i = 0; i < l->itemCount(); ++i)
            if (QCPAbstractLegendItem* item = l->item(i)) widest = std::max(widest, item->minimumOuterSizeHint().width());
        const int columns = std::clamp((plot->viewport().width() - 8) / (widest + l->columnSpacing()), 1, 4);
        if (columns != l->wrap()) {
            l->setWrap(columns);
            l->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);  // re-flow the entries
        }
    });
}

void useIntegerTicks(QCPAxis* axis) {
    auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
    ticker->setTickStep(1.0);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);  // 1, 2, 5, 10 ... apart, never fractions
    axis->setTicker(ticker);
    axis->setNumberFormat("f");
    axis->setNumberPrecision(0);
}

void fitTickCount(QCPAxis* axis, double lengthPx) {
    const QFontMetrics fm(axis->tickLabelFont());
    // Decimals: the ticker's steps may be 2.5 apart, and "12.5" is wider than "13" (whole
    // numbers measured so gave labels overlapping by 2 px in presentation mode).
    // Below 10 the steps may be 0.25 apart: two decimals.
    const int decimals = std::max(std::fabs(axis->range().upper), std::fabs(axis->range().lower)) < 10 ? 2 : 1;
    const double widest = std::max(fm.horizontalAdvance(QString::number(axis->range().upper, 'f', decimals)),
                                   fm.horizontalAdvance(QString::number(axis->range().lower, 'f', decimals)));
    const int n = std::clamp(static_cast<int>(lengthPx / (2.0 * std::max(widest, 1.0))), 2, 5);
    if (axis->ticker()->tickCount() != n) axis->ticker()->setTickCount(n);
}

void fitVerticalTickCount(QCPAxis* axis, double lengthPx) {
    const QFontMetrics fm(axis->tickLabelFont());
    // Three label heights a tick: the height read before a replot can be the previous layout's
    // (a legend placed under the plot then takes some of it), and a tick count is approximate.
    const int n = std::clamp(static_cast<int>(lengthPx / (3.0 * std::max(fm.height(), 1))), 2, 5);
    if (axis->ticker()->tickStepStrategy() != QCPAxisTicker::tssMeetTickCount)
        axis->ticker()->setTickStepStrategy(QCPAxisTicker::tssMeetTickCount);
    if (axis->ticker()->tickCount() != n) axis->ticker()->setTickCount(n);
}

QCPErrorBars* addWhiskers(QCPBars* bars, const std::vector<double>& lo, const std::vector<double>& hi) {
    auto* err = new QCPErrorBars(bars->keyAxis(), bars->valueAxis());
    err->setDataPlottable(bars);
    QVector<double> minus, plus;
    int i = 0;
    for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it, ++i) {
        const size_t k = static_cast<size_t>(i);
        minus << (k < lo.size() ? std::max(0.0, it->value - lo[k]) : 0.0);
        plus << (k < hi.size() ? std::max(0.0, hi[k] - it->value) : 0.0);
    }
    err->setData(minus, plus);
    err->setPen(QPen(QColor(30, 30, 30), 1.5));
    err->setWhiskerWidth(8);
    err->removeFromLegend();
    return err;
}

QCPItemText* emptyStateItem(const QCustomPlot* plot) {
    for (int i = 0; i < plot->itemCount(); ++i)
        if (auto* t = qobject_cast<QCPItemText*>(plot->item(i)); t && t->objectName() == "emptyState") return t;
    return nullptr;
}

namespace {

// `message` broken into lines no wider than `width` px (a word longer than that keeps its own line).
QString wrapped(const QString& message, const QFontMetrics& fm, int width) {
    QStringList lines;
    QString line;
    for (const QString& word : message.split(' ', Qt::SkipEmptyParts)) {
        const QString longer = line.isEmpty() ? word : line + ' ' + word;
        if (!line.isEmpty() && fm.horizontalAdvance(longer) > width) {
            lines << line;
            line = word;
        } else {
            line = longer;
        }
    }
    if (!line.isEmpty()) lines << line;
    return lines.join('\n');
}

}  // namespace

void showEmptyState(QCustomPlot* plot, const QString& message) {
    QCPItemText* text = emptyStateItem(plot);
    if (!plot->property("tl_emptyWraps").toBool()) {
        // The message wraps to the plot's width after every layout (a narrow plot, a big zoom).
        plot->setProperty("tl_emptyWraps", true);
        QObject::connect(plot, &QCustomPlot::afterLayout, plot, [plot] {
            if (QCPItemText* t = emptyStateItem(plot))
                t->setText(wrapped(t->property("message").toString(), QFontMetrics(t->font()), std::max(40, plot->width() - 16)));
        });
    }
    if (!text) {
        text = new QCPItemText(plot);
        text->setObjectName("emptyState");
        // An item's parent layerable is the axis rect it was made for, and stays so: the axis
        // rect itself must stay visible for the message to draw, so its axes are hidden instead.
        text->setClipToAxisRect(false);
        text->position->setType(QCPItemPosition::ptViewportRatio);
        text->position->setCoords(0.5, 0.5);
        text->setPositionAlignment(Qt::AlignCenter);
        text->setColor(QColor(110, 110, 110));
        QFont f = plot->font();
        f.setPointSizeF(f.pointSizeF() * 1.2);
        text->setFont(f);
        // Hide what would draw empty axes; remember what was visible to bring it back.
        QVariantList hidden;
        QCPLayoutGrid* grid = plot->plotLayout();
        for (int i = 0; i < grid->elementCount(); ++i) {
            QCPLayoutElement* e = grid->elementAt(i);
            if (!e || qobject_cast<QCPTextElement*>(e) || !e->visible()) continue;
            if (auto* rect = qobject_cast<QCPAxisRect*>(e)) {
                for (QCPAxis* a : rect->axes())
                    if (a->visible()) {
                        a->setVisible(false);
                        hidden << QVariant::fromValue<QObject*>(a);
                    }
                continue;
            }
            e->setVisible(false);
            hidden << QVariant::fromValue<QObject*>(e);
        }
        plot->setProperty("tl_emptyHidden", hidden);
        plot->setProperty("tl_emptyLegend", plot->legend && plot->legend->visible());
        if (plot->legend) plot->legend->setVisible(false);
    }
    text->setProperty("message", message);
    text->setText(wrapped(message, QFontMetrics(text->font()), std::max(40, plot->width() - 16)));
    plot->replot();
}

void clearEmptyState(QCustomPlot* plot) {
    QCPItemText* text = emptyStateItem(plot);
    if (!text) return;
    plot->removeItem(text);
    for (const QVariant& v : plot->property("tl_emptyHidden").toList()) {
        QObject* o = v.value<QObject*>();
        if (auto* a = qobject_cast<QCPAxis*>(o)) a->setVisible(true);
        else if (auto* e = qobject_cast<QCPLayoutElement*>(o)) e->setVisible(true);
    }
    if (plot->legend && plot->property("tl_emptyLegend").toBool()) plot->legend->setVisible(true);
    plot->setProperty("tl_emptyHidden", QVariant());
}

std::vector<QRectF> placeLabels(const std::vector<QPointF>& points, const std::vector<QSizeF>& sizes,
                                const QRectF& bounds, double markerPx) {
    std::vector<QRectF> placed(points.size());
    std::vector<QRectF> markers;
    for (const QPointF& p : points)
        markers.emplace_back(p.x() - markerPx / 2, p.y() - markerPx / 2, markerPx, markerPx);
    const double gap = markerPx / 2 + 2;
    for (size_t i = 0; i < points.size() && i < sizes.size(); ++i) {
        const QPointF p = points[i];
        const double w = sizes[i].width(), h = sizes[i].height();
        const QRectF candidates[] = {
            {p.x() + gap, p.y() - h, w, h},         {p.x() + gap, p.y(), w, h},
            {p.x() - gap - w, p.y() - h, w, h},     {p.x() - gap - w, p.y(), w, h},
            {p.x() - w / 2, p.y() - gap - h, w, h}, {p.x() - w / 2, p.y() + gap, w, h},
        };
        for (const QRectF& c : candidates) {
            if (!bounds.contains(c)) continue;
            bool free = true;
            for (size_t j = 0; j < placed.size() && free; ++j)
                if (!placed[j].isEmpty() && placed[j].intersects(c)) free = false;
            for (size_t j = 0; j < markers.size() && free; ++j)
                if (markers[j].intersects(c)) free = false;
            if (free) {
                placed[i] = c;
                break;
            }
        }
    }
    return placed;
}

}  // namespace tlui
