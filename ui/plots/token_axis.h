// A token axis: the tick labels are the tokens' text, thinned to every n-th token so that no two
// labels overlap at the axis's current width (n recomputed on every replot, so a resize or a
// longer run re-thins it). Used by the lens heatmap's x axis.
#pragma once

#include <QStringList>
#include <qcustomplot.h>

namespace tlui {

class TokenAxisTicker : public QCPAxisTicker {
public:
    explicit TokenAxisTicker(QCPAxis* axis) : m_axis(axis) {}

    // One label per token position 0..n-1 (already display text: spaces and newlines made visible).
    void setLabels(const QStringList& labels) { m_labels = labels; }
    const QStringList& labels() const { return m_labels; }
    // Tokens between two labels at the axis's current width (1 = every token labelled).
    int labelStep() const;

    // A token's text as a tick label: surrounding spaces trimmed, a newline as a visible mark,
    // an empty piece as a middle dot, cut to 10 characters.
    static QString displayText(const QString& piece);

protected:
    double getTickStep(const QCPRange& range) override;
    int getSubTickCount(double tickStep) override;
    QString getTickLabel(double tick, const QLocale& locale, QChar formatChar, int precision) override;
    QVector<double> createTickVector(double tickStep, const QCPRange& range) override;

private:
    QCPAxis* m_axis;
    QStringList m_labels;
};

}  // namespace tlui
