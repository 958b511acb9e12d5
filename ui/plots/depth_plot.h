// Loop depth used by each emitted token (bars), with the run's requested depth as a line.
// addToken appends; refresh() (window timer, ~30 Hz) redraws.
#pragma once

#include <QWidget>

class QCustomPlot;
class QCPBars;
class QCPGraph;

namespace tlui {

class DepthPlot : public QWidget {
    Q_OBJECT
public:
    explicit DepthPlot(QWidget* parent = nullptr);
    void clear(int loops);
    void addToken(int index, int depth);
    void refresh();
    int count() const { return static_cast<int>(m_depths.size()); }
    QCustomPlot* plot() const { return m_plot; }

private:
    QCustomPlot* m_plot = nullptr;
    QCPBars* m_bars = nullptr;
    QCPGraph* m_requested = nullptr;
    QVector<double> m_depths;
    int m_loops = 1;
    bool m_dirty = false;
};

}  // namespace tlui
