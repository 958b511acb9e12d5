// Speculative acceptance: accepted vs drafted tokens per verify cycle, the histogram of accepted
// lengths and the overall rate. Shows "run a speculative mode" until a run reports cycles.
#pragma once

#include <vector>

#include <QWidget>

#include "worker/engine_host.h"

class QCustomPlot;
class QCPBars;
class QLabel;
class QStackedWidget;

namespace tlui {

class SpeculativePlot : public QWidget {
    Q_OBJECT
public:
    explicit SpeculativePlot(QWidget* parent = nullptr);
    void clear();
    void setCycles(const std::vector<SpecCycle>& cycles);
    // The run's own counters: the histogram and the overall rate (accepted / tested) from stats.
    void setStats(const tinyloop::GenerateStats& s);
    bool hasData() const { return !m_cycles.empty(); }
    double overallRate() const;  // accepted / drafted over all cycles
    QString placeholderText() const;
    QCustomPlot* plot() const { return m_plot; }

private:
    QStackedWidget* m_stack = nullptr;
    QLabel* m_placeholder = nullptr;
    QLabel* m_rate = nullptr;
    QCustomPlot* m_plot = nullptr;
    QCPBars* m_drafted = nullptr;
    QCPBars* m_accepted = nullptr;
    QCPBars* m_hist = nullptr;
    std::vector<SpecCycle> m_cycles;
    bool m_haveStats = false;
    double m_statsRate = 0;
    int m_statsCycles = 0;
    std::vector<int> m_statsHist;  // from stats when present
};

}  // namespace tlui
