// GenerateStats timing for the last run (prefill, first token, decode) and the decode rate of
// every run in the session.
#pragma once

#include <vector>

#include <QWidget>

#include "record/session.h"

class QCustomPlot;
class QCPBars;
class QCPGraph;
class QLabel;

namespace tlui {

class TimingPlot : public QWidget {
    Q_OBJECT
public:
    explicit TimingPlot(QWidget* parent = nullptr);
    void setRuns(const std::vector<RunSummary>& runs);
    QCustomPlot* plot() const { return m_plot; }

private:
    QCustomPlot* m_plot = nullptr;
    QCPBars* m_phases = nullptr;
    QCPGraph* m_rate = nullptr;
    QLabel* m_summary = nullptr;
};

}  // namespace tlui
