#include "plots/token_axis.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tlui {

namespace {
constexpr int kGapPx = 8;  // at least this much space between two labels
}

QString TokenAxisTicker::displayText(const QString& piece) {
    QString s = piece;
    s.replace("\n", QString::fromUtf8("\u21b5"));
    s.replace("\t", QString::fromUtf8("\u21e5"));
    s = s.trimmed();
    if (s.isEmpty()) return QString::fromUtf8("\u00b7");
    if (s.size() > 10) s = s.left(9) + QString::fromUtf8("\u2026");
    return s;
}

int TokenAxisTicker::labelStep() const {
    const int n = static_cast<int>(m_labels.size());
    if (n <= 1 || !m_axis) return 1;
    // The axis rect's width as the coming layout will make it: the last layout's width, moved by
    // however much the viewport changed since (a resize), so the first frame after it is right.
    const QCustomPlot* plot = m_axis->parentPlot();
    const double lastOuter = plot->plotLayout()->outerRect().width();
    const double width = m_axis->axisRect()->width() + (plot->viewport().width() - lastOuter);
    const QCPRange r = m_axis->range();
    const double pxPerToken = width > 0 && r.size() > 0 ? width / r.size() : 1.0;
    const QFontMetrics fm(m_axis->tickLabelFont());
    std::vector<int> w;
    w.reserve(static_cast<size_t>(n));
    for (const QString& l : m_labels) w.push_back(fm.horizontalAdvance(l));
    // The smallest step at which every pair of neighbouring labels (0, s, 2s, ...) has room for
    // both half-widths and a gap: one long token does not thin a short run more than it needs.
    for (int step = 1; step < n; ++step) {
        bool fits = true;
        for (int i = 0; i + step < n && fits; i += step)
            fits = (w[static_cast<size_t>(i)] + w[static_cast<size_t>(i + step)]) / 2.0 + kGapPx <= step * pxPerToken;
        if (fits) return step;
    }
    return n;
}

double TokenAxisTicker::getTickStep(const QCPRange&) { return labelStep(); }

int TokenAxisTicker::getSubTickCount(double) { return 0; }

QString TokenAxisTicker::getTickLabel(double tick, const QLocale&, QChar, int) {
    const int i = static_cast<int>(std::lround(tick));
    return i >= 0 && i < m_labels.size() ? m_labels[i] : QString();
}

QVector<double> TokenAxisTicker::createTickVector(double tickStep, const QCPRange& range) {
    QVector<double> ticks;
    const int step = std::max(1, static_cast<int>(std::lround(tickStep)));
    const int n = static_cast<int>(m_labels.size());
    const int first = std::max(0, static_cast<int>(std::ceil(range.lower / step)) * step);
    for (int i = first; i < n && i <= range.upper; i += step) ticks << i;
    return ticks;
}

}  // namespace tlui
